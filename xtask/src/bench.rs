//! `cargo xtask bench`: the figures in `docs/benchmarks.md`, every one from an optimized build.
//!
//! xtask only orchestrates (it is itself built without optimization): it runs the SQLite
//! reference (`shared/bench/sqlite_ledger_ref.py`, in the shared folder beside the workspace)
//! interleaved with the ledger's figures (`crates/ledger/examples/bench_ledger.rs` and the
//! contended figures as release `ledger-worker` processes on one file), three rounds, medians
//! reported with their runs; then each crate's `examples/bench_*.rs` harness in release mode
//! (not with `--rounds-only`); and merges their JSON objects into one, with the ratios to the
//! reference: each round's figure over the two reference runs that bracket it, the median of
//! the rounds' ratios reported with every round's (`_runs`) and the worst (`_worst`).
//!
//! The run has a throwaway PostgreSQL of its own ([`pg::Cluster`], stopped at the end, fsync
//! on, `pg_stat_statements` preloaded): every bench example gets its admin URL as
//! `HERMES_BENCH_PG_URL` (`postgres://hermes:PASSWORD@127.0.0.1:PORT/postgres`), to create its
//! databases from (the `pg_*` figures, each on a fresh database), and the contended figures run
//! the same `ledger-worker` processes on a redb file and then on a fresh database of it
//! (`pg_contended_events_per_s`), interleaved with the reference like the rest.
//!
//! The PostgreSQL ledger is also compared with the plain-SQL floor on the same server
//! (`shared/bench/pg_floor_ref.py`: one autocommit statement per publish, claim and ack, run by
//! the Python of `target/bench-venv`, a virtual environment with psycopg that the first run
//! makes and later runs reuse), each run on a fresh, empty database, in the same rounds right
//! after the figure it is compared with: `pg_floor_cycle_per_s` (one client, as long as
//! `pg_cycle_per_s` runs) after `bench_ledger`, `pg_floor_contended_events_per_s` (one producer
//! process and as many consumer processes as the contended figure has drains, as many events)
//! after the contended figures; `ratio_pg_cycle_vs_floor` and `ratio_pg_contended_vs_floor` are
//! each round's figure over that round's floor, reported as the median, `_runs` and `_worst`.
//!
//! Round trips are counted by the server, not estimated: `pg_stat_statements` (with
//! `track_utility`, so `BEGIN`, `COMMIT`, `ROLLBACK`, `LISTEN` and `SET` count as statements),
//! reset for the measured database before the measured phase, its `calls` summed for that
//! database after it, divided by the events delivered: `pg_round_trips_per_event_cycle` (in
//! `bench_ledger`), `pg_round_trips_per_event_contended` (every process of the contended
//! figure, from their first connection to the last ack), and the floor's own
//! (`pg_floor_round_trips_per_event_*`) as a check of the method (its cycle is 3 statements).
//! `pg_serialization_failures_per_event_contended` is the serialization failures and deadlocks
//! the contended figure's processes met and ran again (each prints `conflicts N`), per event.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};

use crate::boundaries::{target_dir, workspace_root};
use crate::pg;

mod floor;
use floor::Floor;

/// The admin URL of the run's PostgreSQL, in every command's environment.
const PG_URL_VAR: &str = "HERMES_BENCH_PG_URL";

/// The SQLite reference, in the shared folder beside the workspace ([`shared_script`]).
const REFERENCE: &str = "sqlite_ledger_ref.py";
/// Publish → claim → ack cycles the reference runs.
const REFERENCE_CYCLES: &str = "2000";
/// Interleaved rounds of the reference and the ledger's figures.
const ROUNDS: usize = 3;
/// The product path across processes (`product_path`): units of `PRODUCT_TASKS` children
/// finished by one host process and drained by `PRODUCT_DRAINS` consumer processes. The floor's
/// contended run takes the same number of events and consumers.
const PRODUCT_UNITS: u32 = 500;
const PRODUCT_TASKS: u32 = 8;
const PRODUCT_DRAINS: usize = 4;
/// The run's server counts every statement of every database (`pg_stat_statements`, utility
/// statements such as `BEGIN` and `COMMIT` included), for the `*_round_trips_*` and
/// `pg_cli_statements_per_event` figures; the ledger and the floor pay its cost alike.
const STATEMENT_COUNTING: &str = "
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = top
pg_stat_statements.track_utility = on
pg_stat_statements.max = 20000
";

/// What `cargo xtask bench` was asked for.
pub(crate) struct Options {
    /// One JSON line instead of a table.
    pub(crate) json: bool,
    /// Only the interleaved rounds against the references (SQLite and the PostgreSQL floor),
    /// not the crates' harnesses: for working on those figures.
    pub(crate) rounds_only: bool,
    /// Only these crates' harnesses (`--only bench_cli`), without the interleaved rounds: for
    /// working on one harness's figures on the run's statement-counting server.
    pub(crate) only: Vec<String>,
}

pub(crate) fn run(options: Options) -> Result<()> {
    let cluster = pg::start_with(STATEMENT_COUNTING)?;
    let measured = measure(&cluster.url(), &options);
    let stopped = cluster.stop();
    measured?;
    Ok(stopped?)
}

fn measure(pg_url: &str, options: &Options) -> Result<()> {
    let mut figures = Map::new();
    if !options.only.is_empty() {
        for example in &options.only {
            let Some((package, example)) = HARNESSES.iter().find(|(_, e)| e == example) else {
                bail!("--only {example}: no such harness (one of {HARNESSES:?})");
            };
            merge(&mut figures, run_example(pg_url, package, example)?);
        }
        return print(&Value::Object(figures), options);
    }
    let worker = ledger_worker(pg_url)?;
    let floor = Floor::prepare()?;
    // The disk is shared and its fsync cost drifts from minute to minute: the reference and the
    // ledger's figures run interleaved, ROUNDS times, and each figure is the median of its runs;
    // the PostgreSQL floor runs right after each of the ledger's PostgreSQL figures it is
    // compared with.
    let mut references = Vec::new();
    let mut rounds: Vec<Map<String, Value>> = Vec::new();
    for _ in 0..ROUNDS {
        references.push(reference()?);
        let mut round = Map::new();
        merge(
            &mut round,
            run_example(pg_url, "hermes-ledger", "bench_ledger")?,
        );
        floor.cycle(&worker, pg_url, &mut round)?;
        contended(&worker, pg_url, &mut round)?;
        floor.contended(&worker, pg_url, &mut round)?;
        rounds.push(round);
    }
    references.push(reference()?);
    for key in rounds
        .first()
        .map(|r| r.keys().cloned().collect::<Vec<_>>())
        .unwrap_or_default()
    {
        let runs: Vec<f64> = rounds
            .iter()
            .filter_map(|r| r.get(&key).and_then(Value::as_f64))
            .collect();
        figures.insert(key.clone(), json!(round(median(&runs))));
        figures.insert(format!("{key}_runs"), json!(runs));
    }
    let reference = median(&references);
    figures.insert("sqlite_ref_cycle_per_s".into(), json!(round(reference)));
    figures.insert(
        "sqlite_ref_cycle_per_s_runs".into(),
        json!(references.iter().map(|r| round(*r)).collect::<Vec<_>>()),
    );
    // Each round's own ratio is its figure over the reference runs that bracket it (the one
    // before and the one after, averaged): the ratio reported is the median of the rounds'
    // ratios, with every round's (`_runs`) and the worst (`_worst`), so the spread shows.
    let bracketing: Vec<f64> = references.windows(2).map(|w| (w[0] + w[1]) / 2.0).collect();
    for (key, figure) in [
        ("ratio_cycle_vs_ref", "ledger_cycle_per_s"),
        ("ratio_batch8_vs_ref", "ledger_batch8_events_per_s"),
        ("ratio_contended_vs_ref", "ledger_contended_events_per_s"),
        (
            "ratio_contended_single_key_vs_ref",
            "ledger_contended_single_key_events_per_s",
        ),
        ("ratio_pg_cycle_vs_ref", "pg_cycle_per_s"),
        ("ratio_pg_batch8_vs_ref", "pg_batch8_events_per_s"),
        ("ratio_pg_contended_vs_ref", "pg_contended_events_per_s"),
    ] {
        let ratios = rounds
            .iter()
            .zip(&bracketing)
            .filter_map(|(r, reference)| Some(r.get(figure)?.as_f64()? / reference));
        insert_ratios(&mut figures, key, ratios.collect());
    }
    // The PostgreSQL ledger against the plain-SQL floor on the same server, which ran right
    // after it in the same round.
    for (key, figure, floor) in [
        (
            "ratio_pg_cycle_vs_floor",
            "pg_cycle_per_s",
            "pg_floor_cycle_per_s",
        ),
        (
            "ratio_pg_contended_vs_floor",
            "pg_contended_events_per_s",
            "pg_floor_contended_events_per_s",
        ),
    ] {
        let ratios = rounds
            .iter()
            .filter_map(|r| Some(r.get(figure)?.as_f64()? / r.get(floor)?.as_f64()?));
        insert_ratios(&mut figures, key, ratios.collect());
    }
    if !options.rounds_only {
        for (package, example) in HARNESSES {
            merge(&mut figures, run_example(pg_url, package, example)?);
        }
    }
    print(&Value::Object(figures), options)
}

/// The crates' harnesses, run after the rounds (package, example).
const HARNESSES: [(&str, &str); 13] = [
    ("hermes-registry", "bench_registry"),
    ("hermes-registry", "bench_adapters"),
    ("hermes-router", "bench_router"),
    ("hermes-cli", "bench_cli"),
    ("hermes-cli", "bench_agent"),
    ("hermes-cli", "bench_liveness"),
    ("hermes-cli", "bench_pools"),
    // `hermes top` and the metrics (issue 25).
    ("hermes-cli", "bench_top"),
    // Long-lived processes through a PostgreSQL outage, on a server of its own (issue 42).
    ("hermes-cli", "bench_outage"),
    // Live progress across processes (issue 42).
    ("hermes-cli", "bench_progress"),
    // A child's own git worktree in a 10,000-file repository (issue 37).
    ("hermes-cli", "bench_workspace"),
    // Starting a child in its sandbox against an unconfined one (issue 39).
    ("hermes-registry", "bench_sandbox"),
    // The ledger at 10,000 and at 1,000,000 units, and the retention purge (issue 38).
    ("hermes-cli", "bench_scale"),
];

fn print(value: &Value, options: &Options) -> Result<()> {
    if options.json {
        println!("{value}");
    } else if let Value::Object(map) = value {
        for (key, figure) in map {
            println!("{key:44} {figure}");
        }
    }
    Ok(())
}

fn merge(into: &mut Map<String, Value>, value: Value) {
    if let Value::Object(map) = value {
        into.extend(map);
    }
}

fn cargo(pg_url: &str) -> Command {
    let mut command = crate::cargo(&[]);
    command.env(PG_URL_VAR, pg_url);
    command
}

/// The last JSON object a command printed on stdout.
fn json_of(what: &str, stdout: &[u8]) -> Result<Value> {
    let text = String::from_utf8_lossy(stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .with_context(|| format!("{what} printed no JSON object"))?;
    serde_json::from_str(line).with_context(|| format!("{what} printed malformed JSON"))
}

fn run_example(pg_url: &str, package: &str, example: &str) -> Result<Value> {
    eprintln!("xtask: bench {package}/{example}");
    let out = cargo(pg_url)
        .args(["run", "--quiet", "--release", "-p", package])
        .args(["--example", example])
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {package}/{example}"))?;
    if !out.status.success() {
        bail!("{package}/{example} failed ({})", out.status);
    }
    json_of(&format!("{package}/{example}"), &out.stdout)
}

/// `shared/bench/NAME` in the nearest folder above the workspace that has it: `../shared` beside
/// a checkout, `../../shared` for a worktree one folder further down.
fn shared_script(name: &str) -> Result<PathBuf> {
    let root = workspace_root();
    root.ancestors()
        .skip(1)
        .map(|dir| dir.join("shared/bench").join(name))
        .find(|path| path.exists())
        .with_context(|| {
            format!(
                "the bench script {name} is missing: the ledger figures are compared with it (it \
                 lives in the shared folder beside the workspace, as ../shared/bench/{name}, \
                 looked for above {})",
                root.display()
            )
        })
}

/// The SQLite reference's cycles per second.
fn reference() -> Result<f64> {
    let script = shared_script(REFERENCE)?;
    eprintln!("xtask: bench the SQLite reference ({REFERENCE} {REFERENCE_CYCLES})");
    let out = Command::new("python3")
        .arg(&script)
        .arg(REFERENCE_CYCLES)
        .stderr(Stdio::inherit())
        .output()
        .context("running python3 (the SQLite reference needs it)")?;
    if !out.status.success() {
        bail!("the SQLite reference failed ({})", out.status);
    }
    json_of("the SQLite reference", &out.stdout)?["sqlite_ref_cycle_per_s"]
        .as_f64()
        .context("the SQLite reference printed no sqlite_ref_cycle_per_s")
}

/// The release `ledger-worker`, built now: the contended figures' processes, and what creates
/// databases and reads the server's statement counts for xtask, which names no PostgreSQL
/// crate (`hermes_testkit` through it).
fn ledger_worker(pg_url: &str) -> Result<PathBuf> {
    let status = cargo(pg_url)
        .args(["build", "--quiet", "--release", "-p", "hermes-tests"])
        .args(["--bin", "ledger-worker"])
        .status()?;
    if !status.success() {
        bail!("building ledger-worker failed");
    }
    Ok(target_dir().join("release/ledger-worker"))
}

/// What `ledger-worker ARGS` printed (trimmed), failing if it failed.
fn worker_says(worker: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new(worker)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running ledger-worker {}", args[0]))?;
    if !out.status.success() {
        bail!("ledger-worker {} failed ({})", args[0], out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The statements the server ran in `database` since `reset-statements`, per event.
fn statements_per_event(worker: &Path, pg_url: &str, database: &str, events: f64) -> Result<f64> {
    let count: f64 = worker_says(worker, &["statements", pg_url, database])?
        .parse()
        .context("ledger-worker statements printed no number")?;
    Ok(count / events.max(1.0))
}

/// The contended figures: processes sharing one ledger (a redb file, then a fresh PostgreSQL
/// database of the run's server, whose statements are counted).
fn contended(worker: &Path, pg_url: &str, figures: &mut Map<String, Value>) -> Result<()> {
    eprintln!("xtask: bench contended ledger-worker processes");
    let dir = tempfile::tempdir()?;

    let db = path_arg(&dir.path().join("product.redb"))?;
    figures.insert(
        "ledger_contended_events_per_s".into(),
        json!(round(product_path(worker, &db, dir.path())?.0)),
    );
    // The same processes on PostgreSQL, on a database with hermes' schema: every statement
    // from the processes' first connection to the last ack is counted.
    let database = worker_says(worker, &["fresh-database", pg_url])?;
    worker_says(worker, &["reset-statements", pg_url, &database])?;
    let (per_s, conflicts) = product_path(worker, &database, dir.path())?;
    figures.insert("pg_contended_events_per_s".into(), json!(round(per_s)));
    let events = f64::from(PRODUCT_UNITS * PRODUCT_TASKS);
    figures.insert(
        "pg_serialization_failures_per_event_contended".into(),
        json!(conflicts as f64 / events),
    );
    figures.insert(
        "pg_round_trips_per_event_contended".into(),
        json!(round(statements_per_event(
            worker, pg_url, &database, events
        )?)),
    );

    // The adversarial shape: one event per claim, consumers racing for the same keys.
    const N: u32 = 1_000;
    let db = path_arg(&dir.path().join("single.redb"))?;
    let out = Command::new(worker)
        .args(["dispatch", &db, "bench", &N.to_string()])
        .output()?;
    if !out.status.success() {
        bail!("ledger-worker dispatch failed");
    }
    let unit = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let start = Instant::now();
    let consumers = (0..4)
        .map(|_| spawn(worker, &["consume", &db, "bench", &unit, &N.to_string()]))
        .collect::<Result<Vec<_>>>()?;
    let publisher = spawn(worker, &["publish", &db, &unit, &N.to_string()])?;
    wait_all(std::iter::once(publisher).chain(consumers))?;
    figures.insert(
        "ledger_contended_single_key_events_per_s".into(),
        json!(round(f64::from(N) / start.elapsed().as_secs_f64())),
    );
    Ok(())
}

/// The product path across processes, on the ledger `db` names (a path or a URL): a host
/// process finishing 8-child units through the registry's calls (4 units at once), and four
/// `drain --wait` consumers of the same session through the router. Returns delivered events
/// per second, timed from before the processes start to the last durable ack (each drain
/// prints when its acks were durable), so the drains' wait to notice the end is not counted;
/// and the serialization failures and deadlocks all the processes met (PostgreSQL).
fn product_path(worker: &Path, db: &str, dir: &Path) -> Result<(f64, u64)> {
    let units = PRODUCT_UNITS;
    let done = dir.join(format!("product-{}.done", epoch_ms()));
    let done = path_arg(&done)?;
    let start_ms = epoch_ms();
    let drains = (0..PRODUCT_DRAINS)
        .map(|_| {
            Command::new(worker)
                .args(["drain", db, "bench", &done])
                .stdout(Stdio::piped())
                .spawn()
                .context("starting ledger-worker drain")
        })
        .collect::<Result<Vec<_>>>()?;
    let host = Command::new(worker)
        .args([
            "host",
            db,
            "bench",
            &units.to_string(),
            &PRODUCT_TASKS.to_string(),
            "4",
            &done,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .context("starting ledger-worker host")?;
    let host = host.wait_with_output()?;
    if !host.status.success() {
        bail!("the ledger-worker host failed");
    }
    let mut last_ack_ms = start_ms;
    let mut delivered = 0u64;
    // Every process prints the serialization failures and deadlocks it met (`conflicts N`).
    let mut conflicts = 0u64;
    let mut count_conflicts = |text: &str| {
        for line in text.lines() {
            if let Some(n) = line.strip_prefix("conflicts ") {
                conflicts += n.trim().parse::<u64>().unwrap_or(0);
            }
        }
    };
    count_conflicts(&String::from_utf8_lossy(&host.stdout));
    for drain in drains {
        let out = drain.wait_with_output()?;
        if !out.status.success() {
            bail!("a ledger-worker drain failed");
        }
        count_conflicts(&String::from_utf8_lossy(&out.stdout));
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // `acked N at_ms T`
            let mut words = line.split_whitespace().skip(1);
            let acked = words.next().and_then(|n| n.parse::<u64>().ok());
            let at = words.nth(1).and_then(|t| t.parse::<u64>().ok());
            if let (Some(acked), Some(at)) = (acked, at) {
                delivered += acked;
                last_ack_ms = last_ack_ms.max(at);
            }
        }
    }
    let events = units * PRODUCT_TASKS;
    if delivered != u64::from(events) {
        bail!("the drains acked {delivered} envelopes' events, expected {events}");
    }
    let elapsed_s = last_ack_ms.saturating_sub(start_ms).max(1) as f64 / 1000.0;
    Ok((f64::from(events) / elapsed_s, conflicts))
}

fn path_arg(path: &Path) -> Result<String> {
    path.to_str()
        .map(str::to_owned)
        .context("temp path is not UTF-8")
}

fn spawn(worker: &Path, args: &[&str]) -> Result<Child> {
    Command::new(worker)
        .args(args)
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("starting ledger-worker {}", args[0]))
}

fn wait_all(children: impl Iterator<Item = Child>) -> Result<()> {
    for mut child in children {
        if !child.wait()?.success() {
            bail!("a ledger-worker process failed");
        }
    }
    Ok(())
}

fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A ratio's rounds: `KEY` (their median), `KEY_runs` (each round's) and `KEY_worst` (the
/// lowest: every ratio here is better higher).
fn insert_ratios(figures: &mut Map<String, Value>, key: &str, ratios: Vec<f64>) {
    if ratios.is_empty() {
        return;
    }
    let worst = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    figures.insert(key.into(), json!(round(median(&ratios))));
    figures.insert(format!("{key}_worst"), json!(round(worst)));
    figures.insert(
        format!("{key}_runs"),
        json!(ratios.iter().map(|r| round(*r)).collect::<Vec<_>>()),
    );
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
