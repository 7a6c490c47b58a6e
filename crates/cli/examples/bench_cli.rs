//! Whole-process wall time of the release `hermes` binary, and the
//! `fdatasync`s each command makes. Prints one JSON object on stdout. Run with
//! `cargo run --release -p hermes-cli --example bench_cli` (what `cargo xtask bench` does).
//!
//! Syncs are counted by the `hermes` process itself: with `HERMES_DEBUG_SYNC_COUNT=FILE` it
//! appends its pid and the ledger storage layer's counts (every `sync_data` redb issued, the
//! file's open and close included) to FILE when it exits.
//!
//! `pg_drain_empty_ms_p50` and `pg_delegate_ms_p50` time the same binary with
//! `HERMES_LEDGER_URL` naming a fresh database of the PostgreSQL server whose admin URL is in
//! `HERMES_BENCH_PG_URL` (`cargo xtask bench` starts one and sets it; without it this example
//! stops with a message before measuring anything).
//!
//! `pg_cli_statements_per_event`: the product path on PostgreSQL with hermes' defaults, in a
//! fresh home on a fresh database: `hermes delegate` of `CLI_UNITS` units of `true` into one
//! session (the first starts its headless host, which runs them), then `hermes drain --wait`
//! until all of them were delivered, then no command until the headless host's idle exit;
//! every statement the server ran in that database from before the first `delegate` until no
//! hermes process is connected to it any more (connections' set-up, the host's sweeps, lease
//! renewals and heartbeats while it runs and idles, the drains, `LISTEN`s, `SET`s, `BEGIN` and
//! `COMMIT`), as `pg_stat_statements` counts them, per unit. The most frequent statements go
//! to stderr.

mod support;

use support::release_binary;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use hermes_ledger::{
    Capacity, Channel, ChildOutcome, ChildStatus, DispatchSpec, Ledger, LedgerConfig,
    NewDelegation, TaskSpec, Timestamp,
};
use serde_json::{Value, json};

/// The admin URL of the PostgreSQL server the `pg_*` figures create their database on.
const PG_URL_VAR: &str = "HERMES_BENCH_PG_URL";
/// The `-z` runs whose syncs `syncs_per_oneshot` is the median of.
const ONESHOT_RUNS: usize = 5;
/// The units `pg_cli_statements_per_event` delegates and drains.
const CLI_UNITS: usize = 20;
/// How long `pg_cli_statements_per_event` waits for the headless host to exit after the last
/// drain (its idle exit is 60 s by default).
const HOST_EXIT_LIMIT: Duration = Duration::from_secs(180);

fn main() -> Result<()> {
    // Checked first: a missing server stops the run before it measures anything.
    let admin = match std::env::var(PG_URL_VAR) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => bail!(
            "{PG_URL_VAR} is unset: pg_drain_empty_ms_p50 and pg_delegate_ms_p50 need a \
             PostgreSQL server to create their database on. Run `cargo xtask bench`, which \
             starts one, or start one with `eval \"$(cargo xtask pg start)\"` and run with \
             {PG_URL_VAR}=\"$HERMES_TEST_PG_URL\""
        ),
    };
    let exe = release_binary()?;
    let home = support::private_home()?;
    let h = Bench {
        exe: exe.clone(),
        home: home.path().to_owned(),
        ledger_url: None,
        fast_sweeps: true,
    };
    let mut figures = serde_json::Map::new();

    // A session with a running host.
    h.ok(&["delegate", "--session", "B", "--", "true"])?;
    wait(|| Ok(h.pending("B")? == 1))?;
    h.ok(&["drain", "--session", "B"])?;
    figures.insert(
        "drain_empty_ms_p50".into(),
        p50(30, || h.timed(&["drain", "--session", "B"]))?,
    );
    figures.insert(
        "delegate_dispatch_ms_p50".into(),
        p50(20, || {
            h.timed(&["delegate", "--session", "B", "--", "true"])
        })?,
    );
    wait(|| Ok(h.pending("B")? == 20))?;
    h.ok(&["drain", "--session", "B"])?;
    for n in [1usize, 8] {
        let mut samples = Vec::new();
        for _ in 0..if n == 1 { 15 } else { 8 } {
            for _ in 0..n {
                h.ok(&["delegate", "--session", "B", "--", "true"])?;
            }
            wait(|| Ok(h.pending("B")? == n))?;
            samples.push(h.timed(&["drain", "--session", "B"])?);
            if h.pending("B")? != 0 {
                bail!("drain left events pending");
            }
        }
        figures.insert(format!("drain_{n}_ready_ms_p50"), median(samples));
    }

    // Syncs per command, in this warm home with a running host.
    h.ok(&["drain", "--session", "B"])?;
    figures.insert(
        "syncs_per_drain_empty".into(),
        json!(h.syncs(&["drain", "--session", "B"])?),
    );
    figures.insert(
        "syncs_per_list".into(),
        json!(h.syncs(&["delegation", "list", "--json"])?),
    );
    figures.insert(
        "syncs_per_session_list".into(),
        json!(h.syncs(&["session", "list", "--json"])?),
    );
    figures.insert(
        "syncs_per_delegate".into(),
        json!(h.syncs(&["delegate", "--session", "B", "--", "true"])?),
    );
    wait(|| Ok(h.pending("B")? == 1))?;
    h.ok(&["delegate", "--session", "B", "--", "true"])?;
    wait(|| Ok(h.pending("B")? == 2))?;
    figures.insert(
        "syncs_per_drain_2_ready".into(),
        json!(h.syncs(&["drain", "--session", "B"])?),
    );
    // A `-z` shares the file with that host, and what redb syncs depends on the moment: opening
    // while the host is between a commit's header write and its flush costs one more, and so
    // does growing a file that the last close trimmed. The median of `ONESHOT_RUNS` runs, each
    // run's count beside it.
    let oneshots = (0..ONESHOT_RUNS)
        .map(|_| h.syncs(&["-z", "--", "true"]))
        .collect::<Result<Vec<_>>>()?;
    let mut sorted = oneshots.clone();
    sorted.sort_unstable();
    figures.insert("syncs_per_oneshot".into(), json!(sorted[sorted.len() / 2]));
    figures.insert("syncs_per_oneshot_runs".into(), json!(oneshots));

    // Listing and status against 100 and then 10,000 delegations.
    let mut last = None;
    for total in [100usize, 10_000] {
        last = Some(seed(&h.home.join("ledger.redb"), total)?);
        figures.insert(
            format!("list_json_ms_{total}"),
            p50(10, || h.timed(&["delegation", "list", "--json"]))?,
        );
        figures.insert(
            format!("list_all_json_ms_{total}"),
            p50(10, || h.timed(&["delegation", "list", "--all", "--json"]))?,
        );
    }
    let id = last.context("seeded")?;
    figures.insert(
        "status_ms_10000".into(),
        p50(10, || h.timed(&["delegation", "status", &id, "--json"]))?,
    );
    drop(h);

    // The same commands on PostgreSQL: a home of its own whose ledger is a fresh database
    // (`HERMES_LEDGER_URL`), with a running host for the session.
    let pg_home = support::private_home()?;
    let pg = Bench {
        exe: exe.clone(),
        home: pg_home.path().to_owned(),
        ledger_url: Some(hermes_testkit::fresh_database(&admin)),
        fast_sweeps: true,
    };
    pg.ok(&["delegate", "--session", "B", "--", "true"])?;
    wait(|| Ok(pg.pending("B")? == 1))?;
    pg.ok(&["drain", "--session", "B"])?;
    figures.insert(
        "pg_drain_empty_ms_p50".into(),
        p50(30, || pg.timed(&["drain", "--session", "B"]))?,
    );
    figures.insert(
        "pg_delegate_ms_p50".into(),
        p50(20, || {
            pg.timed(&["delegate", "--session", "B", "--", "true"])
        })?,
    );
    wait(|| Ok(pg.pending("B")? == 20))?;
    pg.ok(&["drain", "--session", "B"])?;
    if pg.pending("B")? != 0 {
        bail!("drain left events pending on PostgreSQL");
    }
    drop(pg);
    figures.insert(
        "pg_cli_statements_per_event".into(),
        json!(statements_per_event(&exe, &admin)?),
    );
    println!("{}", Value::Object(figures));
    Ok(())
}

/// `pg_cli_statements_per_event` (see the module docs).
fn statements_per_event(exe: &Path, admin: &str) -> Result<f64> {
    let home = support::private_home()?;
    let url = hermes_testkit::fresh_database(admin);
    let bench = Bench {
        exe: exe.to_owned(),
        home: home.path().to_owned(),
        ledger_url: Some(url.clone()),
        fast_sweeps: false,
    };
    hermes_testkit::reset_statements(admin, &url);
    for _ in 0..CLI_UNITS {
        bench.ok(&["delegate", "--session", "B", "--", "true"])?;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut delivered, mut drains) = (0, 0);
    while delivered < CLI_UNITS {
        if Instant::now() > deadline {
            bail!("only {delivered} of {CLI_UNITS} units were delivered");
        }
        let out: Value = serde_json::from_slice(&bench.ok(&[
            "drain",
            "--session",
            "B",
            "--json",
            "--wait",
            "10",
        ])?)?;
        drains += 1;
        delivered += out["envelopes"].as_array().map_or(0, Vec::len);
    }
    if delivered != CLI_UNITS {
        bail!("{delivered} envelopes delivered for {CLI_UNITS} units");
    }
    let at_last_drain = hermes_testkit::statements_run(admin, &url);
    // The headless host stays until its idle exit (hermes' default): the count ends when the
    // last hermes process has left the server, seen from the admin database (asking runs no
    // statement in the one counted).
    let idle_from = Instant::now();
    let deadline = idle_from + HOST_EXIT_LIMIT;
    while hermes_testkit::backends_of(admin, &url) > 0 {
        if Instant::now() > deadline {
            bail!(
                "hermes processes were still connected {} s after the last drain",
                HOST_EXIT_LIMIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let statements = hermes_testkit::statements_run(admin, &url);
    eprintln!(
        "bench_cli: {CLI_UNITS} units delegated and delivered in {drains} drains: {statements} \
         statements ({at_last_drain} by the last drain's exit, the rest while the host idled \
         {:.0} s until it exited); the most frequent:",
        idle_from.elapsed().as_secs_f64()
    );
    for (calls, text) in hermes_testkit::top_statements(admin, &url, 25) {
        let text: String = text.chars().take(150).collect();
        eprintln!("  {calls:>5}  {text}");
    }
    Ok((statements as f64 / CLI_UNITS as f64 * 100.0).round() / 100.0)
}

struct Bench {
    exe: PathBuf,
    home: PathBuf,
    /// `HERMES_LEDGER_URL`: `None` → the home's redb file.
    ledger_url: Option<String>,
    /// The host sweeps every 50 ms and runs up to 16 children (the timed figures), or keeps
    /// hermes' defaults (the statement count).
    fast_sweeps: bool,
}

impl Bench {
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.exe);
        c.args(args).env("HERMES_HOME", &self.home);
        if self.fast_sweeps {
            c.env("HERMES_HOST_SWEEP_INTERVAL_MS", "50")
                .env("HERMES_HOST_IDLE_EXIT_SECONDS", "600")
                .env("HERMES_DELEGATION_MAX_CONCURRENT_CHILDREN", "16");
        }
        c.env_remove("HERMES_SESSION_ID")
            .env_remove("HERMES_LEDGER_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(url) = &self.ledger_url {
            c.env("HERMES_LEDGER_URL", url);
        }
        c
    }

    fn ok(&self, args: &[&str]) -> Result<Vec<u8>> {
        let out = self.command(args).output().context("running hermes")?;
        if !out.status.success() {
            bail!(
                "hermes {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(out.stdout)
    }

    fn timed(&self, args: &[&str]) -> Result<f64> {
        let start = Instant::now();
        self.ok(args)?;
        Ok(start.elapsed().as_secs_f64() * 1000.0)
    }

    /// Runs `hermes args` and returns the `fdatasync`s it counted itself.
    fn syncs(&self, args: &[&str]) -> Result<u64> {
        let log = self.home.join("sync-counts.jsonl");
        let mut command = self.command(args);
        command.env("HERMES_DEBUG_SYNC_COUNT", &log);
        let child = command.spawn().context("running hermes")?;
        let pid = u64::from(child.id());
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "hermes {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let text = std::fs::read_to_string(&log).context("reading the sync counts")?;
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["pid"].as_u64() == Some(pid))
            .and_then(|v| v["syncs"].as_u64())
            .with_context(|| format!("hermes {args:?} recorded no sync count"))
    }

    fn pending(&self, session: &str) -> Result<usize> {
        let out: Value = serde_json::from_slice(&self.ok(&["session", "list", "--json"])?)?;
        Ok(out["sessions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["id"] == session)
            .filter_map(|s| s["pending"].as_u64())
            .sum::<u64>() as usize)
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = self.ok(&["session", "end", "B"]);
        if let Ok(out) = self.ok(&["session", "list", "--json"])
            && let Ok(v) = serde_json::from_slice::<Value>(&out)
        {
            for pid in v["sessions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s["host_pid"].as_u64())
            {
                let _ = Command::new("kill").arg(pid.to_string()).status();
            }
        }
    }
}

/// Adds finished inline delegations until the ledger holds `total`; returns the last id.
fn seed(path: &Path, total: usize) -> Result<String> {
    let ledger = Ledger::open(path, LedgerConfig::default())?;
    let existing = ledger.list(None, usize::MAX)?.recent.len();
    let now = Timestamp(u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis(),
    )?);
    let mut last = String::new();
    for i in existing..total {
        let task = TaskSpec::new(format!("seeded {i}"), vec!["true".into()]);
        let spec = DispatchSpec::new(task.goal.clone(), vec![task]);
        let admitted = ledger.dispatch(
            NewDelegation {
                id: None,
                session: None,
                channel: Channel::Inline,
                spec,
                host: None,
                transcript_root: None,
            },
            Capacity {
                max_running: 3,
                max_queued: 100,
            },
            now,
        )?;
        let id = admitted.delegation.id;
        ledger.finish_child(
            hermes_ledger::HostId(0),
            &id,
            ChildOutcome {
                exit_code: Some(0),
                started_at: Some(now),
                result: "ok\n".into(),
                ..ChildOutcome::new(0, format!("seeded {i}"), ChildStatus::Completed, now)
            },
            now,
        )?;
        last = id.to_string();
    }
    if last.is_empty() {
        last = ledger
            .list(None, 1)?
            .recent
            .first()
            .map(|u| u.id.to_string())
            .context("no delegation")?;
    }
    Ok(last)
}

fn wait(mut done: impl FnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done()? {
        if Instant::now() > deadline {
            bail!("timed out");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn p50(n: usize, mut f: impl FnMut() -> Result<f64>) -> Result<Value> {
    let samples = (0..n).map(|_| f()).collect::<Result<Vec<_>>>()?;
    Ok(median(samples))
}

fn median(mut samples: Vec<f64>) -> Value {
    samples.sort_by(f64::total_cmp);
    let m = samples.get(samples.len() / 2).copied().unwrap_or(0.0);
    json!((m * 100.0).round() / 100.0)
}
