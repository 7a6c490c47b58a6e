//! `cargo xtask soak [--minutes N] [--short] [--seed S] [--json]`: exactly-once delivery on a
//! PostgreSQL ledger under random faults (issue 22), with release `hermes` binaries on a
//! throwaway server of its own. Not part of `cargo xtask ci`; `docs/soak.md` says how to read it.
//!
//! For N minutes (default 5; `--short`: 30 s) three sessions each have a dispatcher (`delegate
//! --session S --json --id ID`, with ids the soak draws, so a dispatch that exits 6 is sent again
//! under its id; half background units for the session's headless host, half `--pool soak`
//! units), two workers (`hermes worker --pool soak`, started again when they exit) and two
//! racing drain loops (`drain --session S --json`, with or without `--wait`), each unit a short
//! child that prints a marker of its own. Meanwhile faults drawn from the seed (`faults.rs`):
//! backend kills from an admin connection, black holes and dropped connections at the fault
//! proxy every hermes process reaches the server through, server restarts and outages. Then a
//! quiet period: no faults, no new units, everything runs until every session has nothing
//! running, queued or undelivered (or the deadline passes); then the drains stop, the ledger
//! is read for every id the soak drew (`delegation status --json`), and everything is stopped.
//! `account.rs` turns what the drains printed and what the ledger holds into missing,
//! duplicated and stranded counts; the run fails unless all are 0.

mod account;
mod faults;
mod procs;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::boundaries::target_dir;
use crate::pg;
use account::{LedgerUnit, Tally};
use faults::{Admin, Schedule};
use procs::{Hermes, Phase, Shared};

/// The sessions, and the drains racing on each.
const SESSIONS: usize = 3;
const DRAINS_PER_SESSION: usize = 2;
const WORKERS: usize = 2;
/// The soak's database on the throwaway server.
const DATABASE: &str = "soak";
/// How long the quiet period may take to settle everything.
const QUIET_LIMIT: Duration = Duration::from_secs(240);
/// The findings listed in the report, per kind.
const FINDINGS_SHOWN: usize = 20;

/// The timings every hermes process of the soak runs with: leases short enough that an outage
/// of a few seconds fences hosts (lease 10 s, renewed every second: fenced after 9 s), claims
/// long enough that no outage outlasts one (a drain's ack is retried within its claim's lease).
const TIMINGS: [(&str, &str); 9] = [
    ("HERMES_HOST_LEASE_SECONDS", "10"),
    ("HERMES_HOST_HEARTBEAT_SECONDS", "1"),
    ("HERMES_HOST_RECOVERY_INTERVAL_SECONDS", "1"),
    ("HERMES_HOST_SWEEP_INTERVAL_MS", "200"),
    ("HERMES_HOST_IDLE_EXIT_SECONDS", "10"),
    ("HERMES_DELEGATION_KILL_GRACE_SECONDS", "1"),
    ("HERMES_DELEGATION_MAX_QUEUED", "2000"),
    ("HERMES_DELIVERY_CLAIM_LEASE_SECONDS", "30"),
    ("HERMES_DELIVERY_HEARTBEAT_SECONDS", "5"),
];

/// What `cargo xtask soak` was asked for.
pub(crate) struct Options {
    pub(crate) minutes: f64,
    pub(crate) short: bool,
    pub(crate) seed: Option<u64>,
    pub(crate) json: bool,
}

impl Options {
    /// Reads `--minutes N`, `--short`, `--seed S` and `--json`.
    pub(crate) fn parse(args: &[String]) -> Result<Options> {
        let mut options = Options {
            minutes: 5.0,
            short: false,
            seed: None,
            json: false,
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--json" => options.json = true,
                "--short" => options.short = true,
                "--minutes" => {
                    let value = args.next().context("--minutes needs a number")?;
                    options.minutes = value
                        .parse()
                        .ok()
                        .filter(|m: &f64| m.is_finite() && *m > 0.0)
                        .with_context(|| format!("--minutes {value}: not a positive number"))?;
                }
                "--seed" => {
                    let value = args.next().context("--seed needs a number")?;
                    options.seed = Some(
                        value
                            .parse()
                            .with_context(|| format!("--seed {value}: not a number"))?,
                    );
                }
                other => bail!("cargo xtask soak: unknown argument {other}"),
            }
        }
        Ok(options)
    }

    fn fault_time(&self) -> Duration {
        if self.short {
            Duration::from_secs(30)
        } else {
            Duration::from_secs_f64(self.minutes * 60.0)
        }
    }
}

pub(crate) fn run(options: &Options) -> Result<()> {
    let seed = options.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    eprintln!("xtask: soak: seed {seed} (again with --seed {seed})");
    let binary = build_hermes()?;
    let cluster = pg::start()?;
    let result = soak(options, seed, &binary, &cluster);
    let stopped = cluster.stop();
    let tally = result?;
    stopped?;
    if !tally.held() {
        bail!(
            "the soak found {} missing, {} duplicated, {} stranded, {} unexpected",
            tally.missing.len(),
            tally.duplicated.len(),
            tally.stranded.len(),
            tally.unexpected.len()
        );
    }
    Ok(())
}

/// The release `hermes`, built now.
fn build_hermes() -> Result<PathBuf> {
    let status = crate::cargo(&[
        "build",
        "--quiet",
        "--release",
        "-p",
        "hermes-cli",
        "--bin",
        "hermes",
    ])
    .status()
    .context("running cargo build")?;
    if !status.success() {
        bail!("building the release hermes failed");
    }
    Ok(target_dir().join("release/hermes"))
}

fn soak(
    options: &Options,
    seed: u64,
    binary: &std::path::Path,
    cluster: &pg::Cluster,
) -> Result<Tally> {
    let shared = Shared::new();
    let admin = Admin {
        psql: cluster.bin().join("psql"),
        url: cluster.url(),
    };
    admin
        .query(&shared, &format!("CREATE DATABASE {DATABASE}"))
        .map_err(|err| anyhow::anyhow!("creating the soak's database: {err}"))?;
    let admin_url = cluster.url();
    let database_url = format!(
        "{}/{DATABASE}",
        admin_url
            .strip_suffix("/postgres")
            .context("the cluster's URL names no postgres database")?
    );
    let (proxy, via) = hermes_pgcluster::FaultProxy::in_front_of(&database_url)
        .context("starting the fault proxy")?;
    proxy.pass();
    // Kept after the run, for the hosts' and workers' logs (`hosts/`, `soak-logs/`).
    let home = tempfile::Builder::new()
        .prefix("hermes-soak-")
        .tempdir()?
        .keep();
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    let mut vars: Vec<(String, String)> = TIMINGS
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    vars.push(("HERMES_LEDGER_URL".into(), via));
    let hermes = Hermes {
        binary: binary.to_owned(),
        home: home.clone(),
        vars,
    };
    let migrated = procs::run_limited(
        &shared,
        "",
        hermes.command(&["ledger", "migrate"]),
        Duration::from_secs(60),
    );
    if migrated.code != Some(0) {
        bail!("hermes ledger migrate failed: {}", migrated.stderr.trim());
    }
    let schedule = if options.short {
        Schedule::SHORT
    } else {
        Schedule::DEFAULT
    };
    let fault_time = options.fault_time();
    eprintln!(
        "xtask: soak: {} s of faults, {SESSIONS} sessions, {WORKERS} workers, {} drains; home {}",
        fault_time.as_secs(),
        SESSIONS * DRAINS_PER_SESSION,
        home.display()
    );
    let sessions: Vec<String> = (1..=SESSIONS).map(|i| format!("soak-{i}")).collect();
    let worker_pids: Vec<AtomicU32> = (0..WORKERS).map(|_| AtomicU32::new(0)).collect();
    let mut ledger = BTreeMap::new();
    let mut settled_after: Option<f64> = None;
    let started = Instant::now();
    thread::scope(|s| -> Result<()> {
        let (shared, hermes) = (&shared, &hermes);
        for (index, pid) in worker_pids.iter().enumerate() {
            s.spawn(move || procs::worker(hermes, shared, index, pid));
        }
        let mut loops = Vec::new();
        let mut dispatchers = Vec::new();
        for (i, session) in sessions.iter().enumerate() {
            let i = i as u64;
            dispatchers.push(s.spawn(move || {
                procs::dispatcher(hermes, shared, session, seed.wrapping_add(100 + i));
            }));
            for d in 0..DRAINS_PER_SESSION as u64 {
                loops.push(s.spawn(move || {
                    procs::drainer(hermes, shared, session, seed.wrapping_add(200 + 10 * i + d));
                }));
            }
        }
        let injector = s.spawn(|| {
            faults::inject(shared, cluster, &proxy, &admin, DATABASE, schedule, seed);
        });
        while started.elapsed() < fault_time {
            thread::sleep(Duration::from_millis(200));
        }
        shared.enter(Phase::Quiet);
        let _ = injector.join();
        let quiet = Instant::now();
        eprintln!(
            "xtask: soak: faults stopped; quiet period (up to {} s)",
            QUIET_LIMIT.as_secs()
        );
        while quiet.elapsed() < QUIET_LIMIT {
            if dispatchers.iter().all(|d| d.is_finished()) && all_settled(hermes, shared, &sessions)
            {
                settled_after = Some(quiet.elapsed().as_secs_f64());
                break;
            }
            thread::sleep(Duration::from_secs(1));
        }
        shared.enter(Phase::Stop);
        for handle in dispatchers.into_iter().chain(loops) {
            let _ = handle.join();
        }
        let ids: Vec<String> = shared
            .journal()
            .dispatches
            .iter()
            .map(|d| d.id.clone())
            .collect();
        ledger = read_ledger(hermes, shared, &ids)?;
        shared.enter(Phase::Done);
        Ok(())
    })?;
    let stopped = procs::stop_all(&home, Duration::from_secs(20));
    let journal = shared.journal();
    let tally = account::classify(&journal.dispatches, &journal.seen, &ledger);
    let mut report = report(
        options,
        seed,
        fault_time,
        settled_after,
        &tally,
        &journal,
        proxy.faults(),
        stopped,
    );
    if let Value::Object(map) = &mut report {
        map.insert("home".into(), json!(home.display().to_string()));
        map.insert("logs".into(), json!(procs::log_counts(&home)));
    }
    if options.json {
        println!("{report}");
    } else {
        print_report(&report);
    }
    Ok(tally)
}

/// Whether every session has nothing running, queued or undelivered (`session list --json`).
fn all_settled(hermes: &Hermes, shared: &Shared, sessions: &[String]) -> bool {
    let ran = procs::run_limited(
        shared,
        "",
        hermes.command(&["session", "list", "--json"]),
        Duration::from_secs(20),
    );
    let Ok(value) = serde_json::from_str::<Value>(ran.stdout.trim()) else {
        return false;
    };
    let listed = value["sessions"].as_array().cloned().unwrap_or_default();
    sessions.iter().all(|name| {
        listed.iter().any(|s| {
            s["id"] == name.as_str()
                && ["running", "queued", "pending"]
                    .iter()
                    .all(|k| s[*k].as_u64() == Some(0))
        })
    })
}

/// A unit's id and what the ledger holds for it (`None`: never recorded).
type Read = (String, Option<LedgerUnit>);

/// `delegation status ID --json` for every id, three at a time.
fn read_ledger(
    hermes: &Hermes,
    shared: &Shared,
    ids: &[String],
) -> Result<BTreeMap<String, LedgerUnit>> {
    let chunks: Vec<&[String]> = ids.chunks(ids.len().div_ceil(3).max(1)).collect();
    let results: Vec<Result<Vec<Read>>> = thread::scope(|s| {
        let handles: Vec<_> = chunks
            .iter()
            .map(|chunk| {
                s.spawn(move || chunk.iter().map(|id| status(hermes, shared, id)).collect())
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a status reader panicked")))
            })
            .collect()
    });
    let mut ledger = BTreeMap::new();
    for result in results {
        for (id, unit) in result? {
            if let Some(unit) = unit {
                ledger.insert(id, unit);
            }
        }
    }
    Ok(ledger)
}

/// One unit as the ledger has it (`None`: never recorded), asked up to five times.
fn status(hermes: &Hermes, shared: &Shared, id: &str) -> Result<Read> {
    let mut last = String::new();
    for _ in 0..5 {
        let ran = procs::run_limited(
            shared,
            "",
            hermes.command(&["delegation", "status", id, "--json"]),
            Duration::from_secs(30),
        );
        if matches!(ran.code, Some(0 | 4))
            && let Ok(value) = serde_json::from_str::<Value>(ran.stdout.trim())
        {
            return match LedgerUnit::from_status(&value) {
                None => Ok((id.to_owned(), None)),
                Some(Ok(unit)) => Ok((id.to_owned(), Some(unit))),
                Some(Err(err)) => bail!("delegation status {id}: {err}"),
            };
        }
        last = ran.stderr.trim().to_owned();
        thread::sleep(Duration::from_millis(500));
    }
    bail!("delegation status {id} failed five times: {last}")
}

#[allow(clippy::too_many_arguments)]
fn report(
    options: &Options,
    seed: u64,
    fault_time: Duration,
    settled_after: Option<f64>,
    tally: &Tally,
    journal: &procs::Journal,
    proxy_faults: u64,
    stopped: usize,
) -> Value {
    let pool_units = journal.dispatches.iter().filter(|d| d.pool).count();
    let retries: u64 = journal
        .dispatches
        .iter()
        .map(|d| u64::from(d.tries.saturating_sub(1)))
        .sum();
    let mut per_session: BTreeMap<&str, usize> = BTreeMap::new();
    for d in &journal.dispatches {
        *per_session.entry(d.session.as_str()).or_default() += 1;
    }
    let round = |x: f64| (x * 100.0).round() / 100.0;
    json!({
        "seed": seed,
        "short": options.short,
        "fault_seconds": fault_time.as_secs(),
        "quiet_settled_seconds": settled_after.map(round),
        "dispatched": tally.dispatched,
        "dispatched_pool": pool_units,
        "dispatched_host": tally.dispatched - pool_units,
        "dispatched_per_session": per_session,
        "dispatch_retries": retries,
        "recorded": tally.recorded,
        "not_recorded": tally.dispatched - tally.recorded,
        "statuses": tally.statuses,
        "delivered": tally.delivered,
        "results_printed": journal.seen.len(),
        "results_with_marker": tally.results_with_marker,
        "missing": tally.missing.len(),
        "duplicated": tally.duplicated.len(),
        "stranded": tally.stranded.len(),
        "unexpected": tally.unexpected.len(),
        "dropped_legitimately": tally.dropped_legitimately,
        "faults": journal.faults,
        "faults_total": journal.faults.values().sum::<u64>(),
        "backends_terminated": journal.backends_terminated,
        "proxy_connections_dropped": proxy_faults,
        "exits": journal.exits,
        "worker_restarts": journal.worker_restarts,
        "errors": journal.errors,
        "unreadable_drain_outputs": journal.unreadable_outputs,
        "recovery_seconds": account::recovery_seconds(journal.last_fault_end_ms, &journal.seen).map(round),
        "processes_stopped_at_end": stopped,
        "findings": tally.findings_json(FINDINGS_SHOWN),
    })
}

fn print_report(report: &Value) {
    if let Value::Object(map) = report {
        for (key, value) in map {
            println!("{key:28} {value}");
        }
    }
}
