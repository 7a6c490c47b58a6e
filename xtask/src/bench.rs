//! `cargo xtask bench`: the figures in `docs/benchmarks.md`, every one from an optimized build.
//!
//! xtask only orchestrates (it is itself built without optimization): it runs the SQLite
//! reference (`../shared/bench/sqlite_ledger_ref.py`, beside the workspace) interleaved with
//! the ledger's figures (`crates/ledger/examples/bench_ledger.rs` and the contended figures as
//! release `ledger-worker` processes on one file), three rounds, medians reported with their
//! runs; then each crate's `examples/bench_*.rs` harness in release mode; and merges their JSON
//! objects into one, with the ratios of the medians to the reference's.
//!
//! The run has a throwaway PostgreSQL of its own ([`pg::Cluster`], stopped at the end, fsync
//! on): every bench example gets its admin URL as `HERMES_BENCH_PG_URL`
//! (`postgres://hermes:PASSWORD@127.0.0.1:PORT/postgres`), to create its databases from (the
//! `pg_*` figures, each on a fresh database), and the contended figures run the same
//! `ledger-worker` processes on a redb file and then on a fresh database of it
//! (`pg_contended_events_per_s`), interleaved with the reference like the rest.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};

use crate::boundaries::workspace_root;
use crate::pg;

/// The admin URL of the run's PostgreSQL, in every command's environment.
const PG_URL_VAR: &str = "HERMES_BENCH_PG_URL";

/// The reference, relative to the workspace root.
const REFERENCE: &str = "../shared/bench/sqlite_ledger_ref.py";
/// Publish → claim → ack cycles the reference runs.
const REFERENCE_CYCLES: &str = "2000";
/// Interleaved rounds of the reference and the ledger's figures.
const ROUNDS: usize = 3;

pub(crate) fn run(as_json: bool) -> Result<()> {
    let cluster = pg::start()?;
    let measured = measure(&cluster.url(), as_json);
    let stopped = cluster.stop();
    measured?;
    Ok(stopped?)
}

fn measure(pg_url: &str, as_json: bool) -> Result<()> {
    let mut figures = Map::new();
    // The disk is shared and its fsync cost drifts from minute to minute: the reference and the
    // ledger's figures run interleaved, ROUNDS times, and each figure is the median of its runs.
    let mut references = Vec::new();
    let mut rounds: Vec<Map<String, Value>> = Vec::new();
    for _ in 0..ROUNDS {
        references.push(reference()?);
        let mut round = Map::new();
        merge(&mut round, run_example(pg_url, "ledger", "bench_ledger")?);
        contended(pg_url, &mut round)?;
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
        if let Some(value) = figures.get(figure).and_then(Value::as_f64) {
            figures.insert(key.into(), json!(round(value / reference)));
        }
    }
    for (package, example) in [
        ("registry", "bench_registry"),
        ("registry", "bench_adapters"),
        ("router", "bench_router"),
        ("cli", "bench_cli"),
        ("cli", "bench_agent"),
        ("cli", "bench_liveness"),
        ("cli", "bench_pools"),
        // `hermes top` and the metrics (issue 25).
        ("cli", "bench_top"),
    ] {
        merge(&mut figures, run_example(pg_url, package, example)?);
    }
    let value = Value::Object(figures);
    if as_json {
        println!("{value}");
    } else if let Value::Object(map) = &value {
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
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command
        .current_dir(workspace_root())
        .env(PG_URL_VAR, pg_url);
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

/// The SQLite reference's cycles per second.
fn reference() -> Result<f64> {
    let script = workspace_root().join(REFERENCE);
    if !script.exists() {
        bail!(
            "the SQLite reference {} is missing: the ledger figures are compared with it (it \
             lives in the shared folder beside the workspace, as {REFERENCE})",
            script.display()
        );
    }
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

/// The contended figures: processes sharing one ledger (a redb file, then a fresh PostgreSQL
/// database of the run's server).
fn contended(pg_url: &str, figures: &mut Map<String, Value>) -> Result<()> {
    eprintln!("xtask: bench contended ledger-worker processes");
    let status = cargo(pg_url)
        .args(["build", "--quiet", "--release", "-p", "tests"])
        .args(["--bin", "ledger-worker"])
        .status()?;
    if !status.success() {
        bail!("building ledger-worker failed");
    }
    let worker = workspace_root().join("target/release/ledger-worker");
    let dir = tempfile::tempdir()?;

    let db = path_arg(&dir.path().join("product.redb"))?;
    figures.insert(
        "ledger_contended_events_per_s".into(),
        json!(round(product_path(&worker, &db, dir.path())?)),
    );
    // The same processes on PostgreSQL: xtask names no PostgreSQL crate, so the worker creates
    // the database (`ledger::testing::fresh_database`) and prints its URL.
    let out = Command::new(&worker)
        .args(["fresh-database", pg_url])
        .stderr(Stdio::inherit())
        .output()
        .context("running ledger-worker fresh-database")?;
    if !out.status.success() {
        bail!("ledger-worker could not create a database ({})", out.status);
    }
    let database = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    figures.insert(
        "pg_contended_events_per_s".into(),
        json!(round(product_path(&worker, &database, dir.path())?)),
    );

    // The adversarial shape: one event per claim, consumers racing for the same keys.
    const N: u32 = 1_000;
    let db = path_arg(&dir.path().join("single.redb"))?;
    let out = Command::new(&worker)
        .args(["dispatch", &db, "bench", &N.to_string()])
        .output()?;
    if !out.status.success() {
        bail!("ledger-worker dispatch failed");
    }
    let unit = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let start = Instant::now();
    let consumers = (0..4)
        .map(|_| spawn(&worker, &["consume", &db, "bench", &unit, &N.to_string()]))
        .collect::<Result<Vec<_>>>()?;
    let publisher = spawn(&worker, &["publish", &db, &unit, &N.to_string()])?;
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
/// prints when its acks were durable), so the drains' wait to notice the end is not counted.
fn product_path(worker: &Path, db: &str, dir: &Path) -> Result<f64> {
    let units = 500u32;
    let done = dir.join(format!("product-{}.done", epoch_ms()));
    let done = path_arg(&done)?;
    let start_ms = epoch_ms();
    let drains = (0..4)
        .map(|_| {
            Command::new(worker)
                .args(["drain", db, "bench", &done])
                .stdout(Stdio::piped())
                .spawn()
                .context("starting ledger-worker drain")
        })
        .collect::<Result<Vec<_>>>()?;
    let host = spawn(
        worker,
        &["host", db, "bench", &units.to_string(), "8", "4", &done],
    )?;
    wait_all(std::iter::once(host))?;
    let mut last_ack_ms = start_ms;
    let mut delivered = 0u64;
    for drain in drains {
        let out = drain.wait_with_output()?;
        if !out.status.success() {
            bail!("a ledger-worker drain failed");
        }
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
    if delivered != u64::from(units) * 8 {
        bail!(
            "the drains acked {delivered} envelopes' events, expected {}",
            units * 8
        );
    }
    let elapsed_s = last_ack_ms.saturating_sub(start_ms).max(1) as f64 / 1000.0;
    Ok(f64::from(units * 8) / elapsed_s)
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

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
