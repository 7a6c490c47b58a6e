//! `cargo xtask bench`: the figures in `docs/benchmarks.md`.
//!
//! Ledger figures are measured here, in process, on a fresh file in a temp dir (real fsyncs);
//! the contended figure starts `ledger-worker` processes; crates with their own harness
//! (`examples/bench_*.rs`) are run in release mode and their JSON objects merged in.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use ledger::*;
use serde_json::{Map, Value, json};

use crate::boundaries::workspace_root;

fn now() -> Timestamp {
    Timestamp(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
    )
}

pub(crate) fn run(as_json: bool) -> Result<()> {
    let mut figures = Map::new();
    ledger_benches(&mut figures)?;
    for (package, example) in [
        ("registry", "bench_registry"),
        ("router", "bench_router"),
        ("cli", "bench_cli"),
        ("cli", "bench_agent"),
    ] {
        let manifest = workspace_root()
            .join("crates")
            .join(package)
            .join("examples")
            .join(format!("{example}.rs"));
        if manifest.exists() {
            merge(&mut figures, run_example(package, example)?);
        }
    }
    let value = Value::Object(figures);
    if as_json {
        println!("{value}");
    } else if let Value::Object(map) = &value {
        for (key, figure) in map {
            println!("{key:40} {figure}");
        }
    }
    Ok(())
}

fn merge(into: &mut Map<String, Value>, value: Value) {
    if let Value::Object(map) = value {
        into.extend(map);
    }
}

fn run_example(package: &str, example: &str) -> Result<Value> {
    eprintln!("xtask: bench {package}/{example}");
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "run",
            "--quiet",
            "--release",
            "-p",
            package,
            "--example",
            example,
        ])
        .current_dir(workspace_root())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {package}/{example}"))?;
    if !out.status.success() {
        bail!("{package}/{example} failed ({})", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .unwrap_or("{}");
    serde_json::from_str(line)
        .with_context(|| format!("{package}/{example} printed no JSON object"))
}

fn spec(tasks: u32) -> DispatchSpec {
    let task = TaskSpec::new("bench", vec!["true".into()]);
    DispatchSpec::new("bench", vec![task; tasks as usize])
}

fn outcome(index: u32) -> ChildOutcome {
    // The fields are evaluated before the base, so `started_at` is read no later than `ended_at`.
    ChildOutcome {
        exit_code: Some(0),
        started_at: Some(now()),
        result: "ok".into(),
        ..ChildOutcome::new(index, "bench", ChildStatus::Completed, now())
    }
}

const ROOMY: Capacity = Capacity {
    max_running: 1_000_000,
    max_queued: 1_000_000,
};

fn dispatch(ledger: &Ledger, tasks: u32) -> Result<DelegationId> {
    let new = NewDelegation {
        session: Some(SessionId::new("bench").expect("valid")),
        channel: Channel::Background,
        spec: spec(tasks),
        host: None,
        transcript_root: None,
    };
    Ok(ledger.dispatch(new, ROOMY, now())?.delegation.id)
}

fn claim_all(ledger: &Ledger, keys: Vec<EventRef>) -> Result<ClaimToken> {
    let request = ClaimRequest {
        keys,
        consumer: "bench".into(),
        session: Some(SessionId::new("bench").expect("valid")),
        lease_ms: 60_000,
    };
    match ledger.claim(&request, now())? {
        ClaimOutcome::Claimed(claim) => Ok(claim.token),
        ClaimOutcome::Refused(why) => bail!("bench claim refused: {why:?}"),
    }
}

fn ledger_benches(figures: &mut Map<String, Value>) -> Result<()> {
    eprintln!("xtask: bench ledger");
    let dir = tempfile::tempdir()?;
    let ledger = Ledger::open(&dir.path().join("ledger.redb"), LedgerConfig::default())?;
    let window = Duration::from_secs(3);

    // publish → claim → ack of one event, each its own durable transaction.
    let unit = dispatch(&ledger, 1)?;
    let start = Instant::now();
    let mut cycles = 0u32;
    while start.elapsed() < window {
        let key = EventRef {
            delegation_id: unit.clone(),
            key: EventKey::Task(cycles),
        };
        let payload = EventPayload::Task(outcome(cycles));
        ledger.publish(
            NewEvent {
                delegation_id: unit.clone(),
                key: key.key,
                payload,
            },
            now(),
        )?;
        let token = claim_all(&ledger, vec![key])?;
        ledger.ack(token, now())?;
        cycles += 1;
    }
    figures.insert(
        "ledger_cycle_per_s".into(),
        json!(round(f64::from(cycles) / start.elapsed().as_secs_f64())),
    );

    // 8 children published (one transaction each), one group claim, one ack.
    let mut events = 0u32;
    let mut commits = 0u32;
    let mut elapsed = Duration::ZERO;
    while elapsed < window {
        let unit = dispatch(&ledger, 8)?;
        let start = Instant::now();
        for i in 0..8 {
            ledger.finish_child(HostId(0), &unit, outcome(i), now())?;
        }
        let keys = (0..8)
            .map(|i| EventRef {
                delegation_id: unit.clone(),
                key: EventKey::Task(i),
            })
            .collect();
        let token = claim_all(&ledger, keys)?;
        ledger.ack(token, now())?;
        elapsed += start.elapsed();
        events += 8;
        commits += 8 + 1 + 1;
    }
    figures.insert(
        "ledger_batch8_events_per_s".into(),
        json!(round(f64::from(events) / elapsed.as_secs_f64())),
    );
    figures.insert(
        "commits_per_delivered_event".into(),
        json!(round(f64::from(commits) / f64::from(events))),
    );
    drop(ledger);
    figures.insert(
        "ledger_contended_events_per_s".into(),
        json!(contended(dir.path())?),
    );
    Ok(())
}

/// One publishing process and four consuming processes on one file.
fn contended(dir: &Path) -> Result<f64> {
    const N: u32 = 1_000;
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "build",
            "--quiet",
            "--release",
            "-p",
            "tests",
            "--bin",
            "ledger-worker",
        ])
        .current_dir(workspace_root())
        .status()?;
    if !status.success() {
        bail!("building ledger-worker failed");
    }
    let worker = workspace_root().join("target/release/ledger-worker");
    let db = dir.join("contended.redb");
    let unit = {
        let ledger = Ledger::open(&db, LedgerConfig::default())?;
        dispatch(&ledger, N)?
    };
    let db = db.to_str().context("temp path is not UTF-8")?;
    let start = Instant::now();
    let consumers = (0..4)
        .map(|_| {
            Command::new(&worker)
                .args(["consume", db, "bench", unit.as_str(), &N.to_string()])
                .stdout(Stdio::null())
                .spawn()
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    let publisher = Command::new(&worker)
        .args(["publish", db, unit.as_str(), &N.to_string()])
        .stdout(Stdio::null())
        .status()?;
    if !publisher.success() {
        bail!("the publishing worker failed");
    }
    for mut consumer in consumers {
        if !consumer.wait()?.success() {
            bail!("a consuming worker failed");
        }
    }
    Ok(round(f64::from(N) / start.elapsed().as_secs_f64()))
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
