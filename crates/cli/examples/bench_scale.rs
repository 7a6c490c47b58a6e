//! The ledger at 10,000 and at 1,000,000 units, on redb and on PostgreSQL: whether what a
//! command costs grows with the history it keeps. Prints one JSON object on stdout. Run with
//! `cargo run --release -p hermes-cli --example bench_scale` (what `cargo xtask bench` does),
//! with `HERMES_BENCH_PG_URL` naming a PostgreSQL server to create databases on.
//!
//! Each ledger is loaded by `hermes_ledger::testing::bulk` (the product's own records: one
//! unit run through the ledger's API, copied under other ids and times; a hundred ended
//! sessions; 300 queued units, 200 running inline units and 8 ready events through the API),
//! its history ended over the last five days (inside `delivery.retention_days`). Then, in a
//! home of its own with a session `B` whose headless host runs, each figure is the median of
//! whole `hermes` processes of the release binary (`<figure>_10k` and `<figure>_1m`, `pg_`
//! before them on PostgreSQL):
//!
//! - `delegate_ms_p50`: `delegate --session B -- true`;
//! - `drain_empty_ms_p50`, `drain_8_ready_ms_p50`: `drain --session B` with nothing ready and
//!   with 8 results ready;
//! - `list_ms_p50`: `delegation list --json`; `list_all_page_ms_p50`: `delegation list --all
//!   --json --limit 100 --since ID`, a page from the middle of the history;
//! - `status_ms_p50`: `delegation status ID --json` of a history unit;
//! - `hook_nothing_ready_ms_p50`: `hook post-tool-use` of a bound conversation with nothing
//!   ready (as `bench_agent`);
//! - `top_refresh_ms_p50`: one refresh of `hermes top` (the ledger read, the model and a frame
//!   drawn on ratatui's test backend, as `bench_top`), in this process;
//! - `metrics_base_build_ms`: the ledger's first metrics census, in this process, which reads
//!   every unit once, page by page, and stores the totals of those that no longer change
//!   (once per ledger, not a per-command figure); then `metrics_ms_p50`: `metrics`, and
//!   `metrics_render_ms_p50`: one answer of a long-lived `/metrics` endpoint started on the
//!   ledger (as `bench_top`; in this process, on a handle opened after the base was built:
//!   the handle that read every unit allocates more slowly ever after, see
//!   docs/benchmarks.md);
//! - `bytes_per_unit`: the redb file's size, or `pg_total_relation_size` of hermes' tables
//!   (their indexes and TOAST included), over the units kept;
//! - `load_s`: how long the loader took (not a product figure).
//!
//! Then the retention purge: with a `delivery.retention_days` that puts 90% of the history
//! (900,000 units at 1 M) before its cutoff, sweeps run back to back (`Ledger::recover`, each
//! spending the product's purge budget in paced batches) while one thread dispatches
//! (`delegate`) and another drains (`drain`) session `B` in a loop of whole processes that do
//! not sweep themselves. `purge_s` is how long the sweeps ran — until one purged nothing, or
//! at most `PURGE_WINDOW` (`purge_complete` says which) — `purged_units` and
//! `purge_units_per_s` what they removed, `purge_dispatch_ms_p99` and `purge_drain_ms_p99` the
//! p99 of the dispatches and drains that ran meanwhile (`purge_dispatches` of them).

mod support;

// Not every item of the library's modules is used by a benchmark.
#[allow(dead_code)]
#[path = "../src/services/metrics/exposition.rs"]
mod exposition;
#[allow(dead_code)]
#[path = "../src/services/overview.rs"]
mod model;
#[allow(dead_code)]
#[path = "../src/services/metrics/render.rs"]
mod render;
#[allow(dead_code)]
#[path = "../src/top/ui.rs"]
mod ui;
#[allow(dead_code)]
#[path = "../src/top/view.rs"]
mod view;
/// `render.rs` and `view.rs` find the model where the library keeps it.
mod services {
    pub(crate) use crate::model as overview;
}

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use hermes_ledger::testing::bulk::{self, History, Live};
use hermes_ledger::{Ledger, LedgerConfig, PgTarget, Sweep, Timestamp, TokenSource};
use serde_json::{Map, Value, json};

const PG_URL_VAR: &str = "HERMES_BENCH_PG_URL";
const DAY_MS: u64 = 86_400_000;
/// The history ends within the last `SPAN_MS` (the default retention is 7 days).
const SPAN_MS: u64 = 5 * DAY_MS;
/// The longest the purge is followed: at 1 M units on redb it takes several minutes, and its
/// pace and its neighbours' p99 are what is measured.
const PURGE_WINDOW: Duration = Duration::from_secs(90);
/// The share of the history the purge removes.
const PURGED_SHARE: f64 = 0.9;
const LIVE: Live = Live {
    queued: 300,
    running: 200,
    ready: 8,
};
/// A hook's input as hook-driven agent CLIs send it after a tool call.
const PAYLOAD: &str = r#"{"session_id":"bench-conv","transcript_path":"/tmp/bench-conv.jsonl","cwd":"/tmp","permission_mode":"default","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"ls"},"tool_response":{"stdout":"Cargo.toml\nsrc\n","stderr":"","interrupted":false},"tool_use_id":"toolu_01"}"#;

fn main() -> Result<()> {
    let admin = match std::env::var(PG_URL_VAR) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => bail!(
            "{PG_URL_VAR} is unset: the pg_* figures need a PostgreSQL server to create their \
             databases on. Run `cargo xtask bench --only bench_scale`, which starts one"
        ),
    };
    let exe = support::release_binary()?;
    let mut figures = Map::new();
    // `HERMES_BENCH_SCALE_CASES=redb-1m,pg-10k`: only those (all four without it).
    let cases = std::env::var("HERMES_BENCH_SCALE_CASES").unwrap_or_default();
    for pg in [false, true] {
        for (units, suffix) in [(10_000usize, "10k"), (1_000_000, "1m")] {
            let prefix = if pg { "pg_" } else { "" };
            let case = format!("{}-{suffix}", if pg { "pg" } else { "redb" });
            if !cases.is_empty() && !cases.split(',').any(|c| c == case) {
                continue;
            }
            let url = pg.then(|| hermes_testkit::fresh_database(&admin));
            let found = measure(&exe, url.as_deref(), units)?;
            eprintln!("bench_scale: {prefix}{suffix}: {found:?}");
            for (name, value) in found {
                figures.insert(format!("{prefix}{name}_{suffix}"), value);
            }
            if let Some(url) = url {
                hermes_ledger::testing::drop_database(
                    &admin,
                    &hermes_ledger::testing::database_name(&url),
                );
            }
        }
    }
    println!("{}", Value::Object(figures));
    Ok(())
}

fn now() -> Timestamp {
    Timestamp(
        u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis()),
        )
        .unwrap_or(0),
    )
}

/// Every figure of one ledger of `units` history units (redb, or the database of `url`).
fn measure(exe: &Path, url: Option<&str>, units: usize) -> Result<Vec<(String, Value)>> {
    let home = support::private_home()?;
    let h = Bench {
        exe: exe.to_owned(),
        home: home.path().to_owned(),
        ledger_url: url.map(str::to_owned),
    };
    let start = now();
    let history = History {
        units,
        first_end: Timestamp(start.0 - SPAN_MS - 60_000),
        step_ms: SPAN_MS / units as u64,
    };
    let loading = Instant::now();
    {
        let ledger = h.open()?;
        bulk::load(&ledger, url, &history, &LIVE)?;
    }
    let mut out = vec![("load_s".to_owned(), round(loading.elapsed().as_secs_f64()))];

    // A session with a running host, and nothing of it pending.
    h.ok(&["delegate", "--session", "B", "--", "true"])?;
    wait(|| Ok(h.pending("B")? == 1))?;
    h.ok(&["drain", "--session", "B"])?;
    let mut figure = |name: &str, value: Value| {
        eprintln!("bench_scale: {units} units: {name} {value}");
        out.push((name.to_owned(), value));
    };

    figure(
        "delegate_ms_p50",
        p50(15, || {
            h.timed(&["delegate", "--session", "B", "--", "true"])
        })?,
    );
    wait(|| Ok(h.pending("B")? == 15))?;
    h.ok(&["drain", "--session", "B"])?;
    figure(
        "drain_empty_ms_p50",
        p50(15, || h.timed(&["drain", "--session", "B"]))?,
    );
    let mut samples = Vec::new();
    for _ in 0..5 {
        for _ in 0..8 {
            h.ok(&["delegate", "--session", "B", "--", "true"])?;
        }
        wait(|| Ok(h.pending("B")? == 8))?;
        samples.push(h.timed(&["drain", "--session", "B"])?);
        if h.pending("B")? != 0 {
            bail!("drain left events pending");
        }
    }
    figure("drain_8_ready_ms_p50", median(samples));
    figure(
        "list_ms_p50",
        p50(10, || h.timed(&["delegation", "list", "--json"]))?,
    );
    let middle = bulk::history_id(units / 2).to_string();
    let page: Value = serde_json::from_slice(&h.ok(&[
        "delegation",
        "list",
        "--all",
        "--json",
        "--limit",
        "100",
        "--since",
        &middle,
    ])?)?;
    if page["recent"].as_array().map_or(0, Vec::len) != 100 {
        bail!("a page of --limit 100 from the middle of the history has not 100 units: {page}");
    }
    figure(
        "list_all_page_ms_p50",
        p50(10, || {
            h.timed(&[
                "delegation",
                "list",
                "--all",
                "--json",
                "--limit",
                "100",
                "--since",
                &middle,
            ])
        })?,
    );
    figure(
        "status_ms_p50",
        p50(10, || h.timed(&["delegation", "status", &middle, "--json"]))?,
    );
    h.hook("session-start")?;
    figure(
        "hook_nothing_ready_ms_p50",
        p50(15, || {
            let start = Instant::now();
            let printed = h.hook("post-tool-use")?;
            if !printed.is_empty() {
                bail!("the hook printed something with nothing ready: {printed}");
            }
            Ok(start.elapsed().as_secs_f64() * 1000.0)
        })?,
    );
    {
        let ledger = h.open()?;
        let measured = in_process(&ledger)?;
        figure("top_refresh_ms_p50", measured.top);
        figure("metrics_base_build_ms", measured.base_build);
    }
    figure("metrics_ms_p50", p50(15, || h.timed(&["metrics"]))?);
    {
        let ledger = h.open()?;
        figure("metrics_render_ms_p50", endpoint(&ledger)?);
        let kept = bulk::kept_units(&ledger)?;
        figure(
            "bytes_per_unit",
            json!(bytes(&h, url)? / kept.max(1) as u64),
        );
    }
    let purge = purge(&h, &history)?;
    out.extend(purge);
    Ok(out)
}

/// What `in_process` measures.
struct InProcess {
    top: Value,
    base_build: Value,
}

/// `top`'s refresh, then the first metrics census of the ledger (it builds the base), in this
/// process.
fn in_process(ledger: &Ledger) -> Result<InProcess> {
    let limits = model::Limits::from_settings(&hermes_settings::Settings::default());
    let ui = ui::Ui::default();
    let mut terminal =
        ratatui::Terminal::new(ratatui::backend::TestBackend::new(200, 60)).context("backend")?;
    let top = p50(20, || {
        let started = Instant::now();
        let overview = ledger.overview(20)?;
        let at = now();
        let model = model::build(&overview, at, &limits, &|_| false);
        let screen = view::Screen {
            model: &model,
            ui: &ui,
            now: at,
            ledger: "bench",
            log: None,
        };
        terminal.draw(|f| view::draw(f, &screen))?;
        Ok(started.elapsed().as_secs_f64() * 1000.0)
    })?;
    let base_build = json!(round(scrape(ledger, &mut hermes_ledger::Held::default())?));
    Ok(InProcess { top, base_build })
}

/// One answer of a long-lived metrics endpoint on `ledger`, after its first.
fn endpoint(ledger: &Ledger) -> Result<Value> {
    let mut held = hermes_ledger::Held::default();
    scrape(ledger, &mut held)?;
    p50(5, || scrape(ledger, &mut held))
}

/// A census of `ledger` and its exposition text, in milliseconds.
fn scrape(ledger: &Ledger, held: &mut hermes_ledger::Held) -> Result<f64> {
    let limits = model::Limits::from_settings(&hermes_settings::Settings::default());
    let process = render::ProcessCounts::default();
    let started = Instant::now();
    let census = ledger.census(now(), held)?;
    let text = render::render(&census, now(), &limits, &|_| false, &process)
        .encode(exposition::Format::Prometheus);
    std::hint::black_box(text);
    Ok(started.elapsed().as_secs_f64() * 1000.0)
}

/// The ledger's bytes: the redb file, or hermes' tables with their indexes and TOAST.
fn bytes(h: &Bench, url: Option<&str>) -> Result<u64> {
    match url {
        None => Ok(std::fs::metadata(h.home.join("ledger.redb"))?.len()),
        Some(url) => Ok(bulk::pg_bytes(url)?),
    }
}

/// The purge of `PURGED_SHARE` of the history while session `B` dispatches and drains.
fn purge(h: &Bench, history: &History) -> Result<Vec<(String, Value)>> {
    let last_purged = (history.units as f64 * PURGED_SHARE) as usize - 1;
    let done = AtomicBool::new(false);
    let (purge_ms, purged, complete, dispatches, drains) = std::thread::scope(|s| -> Result<_> {
        let loop_of = |args: &'static [&'static str]| {
            let done = &done;
            s.spawn(move || -> Result<Vec<f64>> {
                let mut samples = Vec::new();
                while !done.load(Ordering::Relaxed) {
                    let start = Instant::now();
                    // Swept once at most: the purging process is the one that sweeps.
                    let mut command = h.command(args);
                    command.env("HERMES_HOST_RECOVERY_INTERVAL_SECONDS", "3600");
                    let out = command.output().context("running hermes")?;
                    if !out.status.success() {
                        bail!(
                            "hermes {args:?} failed: {}",
                            String::from_utf8_lossy(&out.stderr)
                        );
                    }
                    samples.push(start.elapsed().as_secs_f64() * 1000.0);
                }
                Ok(samples)
            })
        };
        let dispatch = loop_of(&["delegate", "--session", "B", "--", "true"]);
        let drain = loop_of(&["drain", "--session", "B"]);
        // Both loops run before the purge starts.
        std::thread::sleep(Duration::from_millis(300));
        // Cut between the last unit to purge and the next one.
        let cutoff = history.ended_at(last_purged).0 + history.step_ms / 2;
        // Sweeps back to back, as a host's would be if they came no faster than the purge
        // goes: each sweep spends the product's budget on it, in paced batches.
        let config = LedgerConfig {
            retention_ms: now().0 - cutoff,
            ..LedgerConfig::default()
        };
        let ledger = h.open_with(config)?;
        let reaper = hermes_registry::OsReaper::new();
        let started = Instant::now();
        let (mut purged, mut sweeps, mut complete) = (0usize, 0usize, false);
        let swept = loop {
            match ledger.recover(&reaper, now(), Sweep::Now) {
                Ok(report) if report.purged_units == 0 => {
                    complete = true;
                    break Ok(());
                }
                Ok(report) => purged += report.purged_units,
                Err(err) => break Err(err),
            }
            sweeps += 1;
            if started.elapsed() > PURGE_WINDOW {
                break Ok(());
            }
        };
        let purge_ms = started.elapsed().as_secs_f64() * 1000.0;
        done.store(true, Ordering::Relaxed);
        let dispatches = dispatch.join().map_err(|_| anyhow::anyhow!("panicked"))??;
        let drains = drain.join().map_err(|_| anyhow::anyhow!("panicked"))??;
        swept.context("the purging sweeps")?;
        eprintln!(
            "bench_scale: {sweeps} sweeps purged {purged} units in {purge_ms:.0} ms \
             ({}; {} dispatches and {} drains meanwhile)",
            if complete {
                "all of them"
            } else {
                "stopped at the window"
            },
            dispatches.len(),
            drains.len()
        );
        Ok((purge_ms, purged, complete, dispatches, drains))
    })?;
    if purged == 0 || (complete && purged < last_purged + 1) {
        bail!("the purge removed {purged} units, not {}", last_purged + 1);
    }
    Ok(vec![
        ("purge_s".into(), round(purge_ms / 1000.0)),
        ("purged_units".into(), json!(purged)),
        ("purge_complete".into(), json!(complete)),
        (
            "purge_units_per_s".into(),
            round(purged as f64 / (purge_ms / 1000.0)),
        ),
        ("purge_dispatches".into(), json!(dispatches.len())),
        ("purge_dispatch_ms_p99".into(), quantile(dispatches, 0.99)),
        ("purge_drain_ms_p99".into(), quantile(drains, 0.99)),
    ])
}

struct Bench {
    exe: PathBuf,
    home: PathBuf,
    /// `HERMES_LEDGER_URL`: `None` → the home's redb file.
    ledger_url: Option<String>,
}

impl Bench {
    fn open(&self) -> Result<Ledger> {
        self.open_with(LedgerConfig::default())
    }

    fn open_with(&self, config: LedgerConfig) -> Result<Ledger> {
        Ok(match &self.ledger_url {
            None => Ledger::open(&self.home.join("ledger.redb"), config)?,
            Some(url) => {
                Ledger::connect(&PgTarget::parse(url, None)?, config, TokenSource::Random)?
            }
        })
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.exe);
        c.args(args)
            .env("HERMES_HOME", &self.home)
            .env("HERMES_HOST_SWEEP_INTERVAL_MS", "50")
            .env("HERMES_HOST_IDLE_EXIT_SECONDS", "600")
            .env("HERMES_DELEGATION_MAX_CONCURRENT_CHILDREN", "16")
            .env_remove("HERMES_SESSION_ID")
            .env_remove("HERMES_LEDGER_URL")
            .env_remove("HERMES_DELIVERY_RETENTION_DAYS")
            .env_remove("HERMES_HOST_RECOVERY_INTERVAL_SECONDS")
            .env_remove("RUST_LOG")
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

    /// Runs one hook with the payload; returns its stdout.
    fn hook(&self, event: &str) -> Result<String> {
        let mut child = self
            .command(&["hook", event])
            .stdin(Stdio::piped())
            .spawn()
            .context("running hermes hook")?;
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(PAYLOAD.as_bytes())
            .context("writing the payload")?;
        let out = child.wait_with_output().context("waiting for the hook")?;
        if !out.status.success() {
            bail!(
                "hermes hook {event} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
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

fn median(samples: Vec<f64>) -> Value {
    quantile(samples, 0.5)
}

fn quantile(mut samples: Vec<f64>, q: f64) -> Value {
    samples.sort_by(f64::total_cmp);
    let at = ((samples.len() as f64 * q).ceil() as usize).saturating_sub(1);
    round(samples.get(at).copied().unwrap_or(0.0))
}

fn round(v: f64) -> Value {
    json!((v * 100.0).round() / 100.0)
}
