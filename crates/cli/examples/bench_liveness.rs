//! Liveness by lease, measured. Prints one JSON object on stdout. Run with
//! `cargo run --release -p hermes-cli --example bench_liveness` (what `cargo xtask bench` does).
//!
//! - `host_idle_writes_per_min`: durable commits made by one idle background host with the
//!   default settings (lease renewal every 5 s, recovery sweep every 3 s, monitor every 1 s),
//!   counted by the host's own ledger handle over 30 s.
//! - `dead_host_detect_ms_p50/p99`: on one machine, from `kill -9` of a headless host running a
//!   child to its unit being finalized `unknown` in the ledger, with one other long-lived hermes
//!   process (a `drain --wait`) sweeping at the default interval (3 s) and no command run; the
//!   kills are spread evenly over the sweeper's interval.

mod support;

use support::release_binary;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use hermes_ledger::{DelegationId, HostKind, Ledger, LedgerConfig, SessionId, UnitStatus};
use hermes_registry::{Host, HostOptions, SystemClock};
use serde_json::{Value, json};

const IDLE_WINDOW: Duration = Duration::from_secs(30);
const DETECT_SAMPLES: usize = 8;
/// `host.recovery_interval_seconds`, the default the sweeper runs with.
const SWEEP: Duration = Duration::from_secs(3);

fn main() -> Result<()> {
    let mut figures = serde_json::Map::new();
    figures.insert(
        "host_idle_writes_per_min".into(),
        json!(idle_writes_per_min()?),
    );
    let exe = release_binary()?;
    let (p50, p99) = dead_host_detection(&exe)?;
    figures.insert("dead_host_detect_ms_p50".into(), json!(p50));
    figures.insert("dead_host_detect_ms_p99".into(), json!(p99));
    println!("{}", Value::Object(figures));
    Ok(())
}

/// Commits per minute of one idle host with the default settings.
fn idle_writes_per_min() -> Result<f64> {
    let home = support::private_home()?;
    let ledger = Arc::new(Ledger::open(
        &home.path().join("ledger.redb"),
        LedgerConfig::default(),
    )?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let host = Host::start(
            ledger.clone(),
            hermes_registry::Config::new(home.path()),
            Arc::new(SystemClock),
            HostOptions {
                kind: HostKind::Headless,
                session: Some(SessionId::new("idle")?),
                worker: None,
            },
        )
        .await?;
        // Past registration and the first sweep.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let before = ledger.commits();
        tokio::time::sleep(IDLE_WINDOW).await;
        let commits = ledger.commits() - before;
        host.shutdown("bench").await;
        Ok(commits as f64 * 60.0 / IDLE_WINDOW.as_secs_f64())
    })
}

/// `kill -9` of a host → its unit `unknown`, in milliseconds: (p50, p99).
fn dead_host_detection(exe: &Path) -> Result<(f64, f64)> {
    let home = support::private_home()?;
    let run = |args: &[&str]| -> Result<Value> {
        let out = Command::new(exe)
            .args(args)
            .env("HERMES_HOME", home.path())
            .env_remove("HERMES_SESSION_ID")
            .stdin(Stdio::null())
            .output()
            .context("hermes runs")?;
        if !out.status.success() {
            bail!("{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(serde_json::from_slice(&out.stdout).unwrap_or(Value::Null))
    };
    // The one other long-lived process: it sweeps every 3 s while it waits.
    let _sweeper = Reaped(
        Command::new(exe)
            .args(["drain", "--session", "watcher", "--wait", "600"])
            .env("HERMES_HOME", home.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .context("drain --wait starts")?,
    );
    let ledger = Ledger::open(&home.path().join("ledger.redb"), LedgerConfig::default())?;
    let mut samples = Vec::new();
    for i in 0..DETECT_SAMPLES {
        let session = format!("victim-{i}");
        let handle = run(&[
            "delegate",
            "--session",
            &session,
            "--json",
            "--",
            "sleep",
            "60",
        ])?;
        let id = DelegationId::new(handle["delegation_id"].as_str().unwrap_or_default())?;
        let host = handle["host_pid"].as_u64().context("host pid")?;
        wait(Duration::from_secs(20), || {
            Ok(ledger.children(&id)?[0].process.is_some())
        })?;
        // Kill at evenly spread phases of the sweeper's interval, so the samples cover every
        // distance to its next sweep (left alone, each kill would land just after one).
        std::thread::sleep(SWEEP.mul_f64(i as f64 / DETECT_SAMPLES as f64));
        let status = Command::new("kill")
            .args(["-9", &host.to_string()])
            .status()?;
        if !status.success() {
            bail!("kill -9 {host} failed");
        }
        let killed = Instant::now();
        wait(Duration::from_secs(60), || {
            Ok(ledger.delegation(&id)?.map(|u| u.status) == Some(UnitStatus::Unknown))
        })?;
        samples.push(killed.elapsed().as_secs_f64() * 1000.0);
    }
    samples.sort_by(f64::total_cmp);
    let at =
        |q: f64| samples[((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1];
    Ok((round(at(0.5)), round(at(0.99))))
}

fn round(ms: f64) -> f64 {
    (ms * 10.0).round() / 10.0
}

/// Polls `f` every 5 ms until it holds, or fails after `limit`.
fn wait(limit: Duration, mut f: impl FnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + limit;
    while !f()? {
        if Instant::now() > deadline {
            bail!("timed out");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// A child process killed and reaped when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
