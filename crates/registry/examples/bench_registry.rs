//! Measures the registry and prints one JSON object:
//!
//! - `stall_detect_late_ms_p50` / `_p99`: from the moment a quiet child crosses its stall
//!   threshold (its start, as the registry stamped it, plus the threshold) to the moment the
//!   child received SIGTERM (it traps the signal and writes the time), over many children
//!   (default sweep interval, 1 s). Both are wall-clock readings of the same machine.
//! - `host_cpu_pct_100_idle_children` / `host_rss_mb_100_idle_children`: this process's own CPU
//!   (utime + stime from `/proc/self/stat`, in % of one core) and resident set over 10 s with
//!   100 background units each running `sleep`.
//!
//! Run with `cargo run --release -p hermes-registry --example bench_registry`. `BENCH_QUICK=1` shortens
//! the runs (for smoke tests).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_ledger::{
    DispatchSpec, ExitDetail, HostKind, InterruptTarget, Ledger, LedgerConfig, SessionId, TaskSpec,
};
use hermes_registry::{Config, DispatchRequest, Host, HostOptions, SystemClock};

fn spec(tasks: usize, command: &[&str]) -> DispatchSpec {
    let tasks = (0..tasks)
        .map(|i| {
            let argv = command.iter().map(|s| s.to_string()).collect();
            TaskSpec::new(format!("bench child {i}"), argv)
        })
        .collect();
    DispatchSpec::new("bench", tasks)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// utime + stime of this process, in clock ticks.
fn cpu_ticks() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0;
    };
    let Some(close) = stat.rfind(')') else {
        return 0;
    };
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    // Fields 14 and 15 of the file are utime and stime; `fields[0]` is field 3.
    let field = |n: usize| {
        fields
            .get(n - 3)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(14) + field(15)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

async fn host(home: &std::path::Path, tweak: impl FnOnce(&mut Config)) -> Host {
    let ledger = Arc::new(
        Ledger::open(&home.join("ledger.redb"), LedgerConfig::default()).expect("ledger opens"),
    );
    let mut config = Config::new(home);
    tweak(&mut config);
    let options = HostOptions {
        kind: HostKind::Headless,
        session: Some(SessionId::new("bench").expect("session")),
        worker: None,
    };
    Host::start(ledger, config, Arc::new(SystemClock), options)
        .await
        .expect("host starts")
}

async fn stall_lateness(rounds: usize, per_round: usize) -> Vec<f64> {
    let home = tempfile::tempdir().expect("tempdir");
    let stamps = tempfile::tempdir().expect("tempdir");
    let host = host(home.path(), |c| {
        c.delegation.stall_idle = Duration::from_secs(1);
        c.delegation.stall_grace = Duration::from_secs(1);
        c.delegation.max_concurrent_children = per_round as u32;
    })
    .await;
    let mut late = Vec::new();
    for round in 0..rounds {
        // Children start at different moments relative to the sweep.
        tokio::time::sleep(Duration::from_millis(137 * round as u64 % 1000)).await;
        // Each child traps SIGTERM and writes the moment it got it (ns since the epoch).
        let script = format!(
            "trap 'date +%s%N > \"{}/$HERMES_DELEGATION_ID-$HERMES_TASK_INDEX\"; exit 0' TERM; \
             sleep 1000 & wait",
            stamps.path().display()
        );
        let report = host
            .run_inline(spec(per_round, &["sh", "-c", &script]), None)
            .await
            .expect("runs");
        for outcome in report.outcomes {
            let ExitDetail::Stalled {
                stall_threshold_seconds,
                ..
            } = outcome.detail
            else {
                continue;
            };
            let stamp = stamps
                .path()
                .join(format!("{}-{}", report.delegation_id, outcome.index));
            let (Some(started), Some(termed_ns)) = (
                outcome.started_at,
                std::fs::read_to_string(&stamp)
                    .ok()
                    .and_then(|t| t.trim().parse::<u64>().ok()),
            ) else {
                continue;
            };
            // The threshold crossing: the child's start (the registry's own stamp, in ms)
            // plus the threshold, since a quiet child has no later activity.
            let crossing_ms = started.0 as f64 + stall_threshold_seconds * 1000.0;
            late.push(termed_ns as f64 / 1e6 - crossing_ms);
        }
    }
    host.shutdown("bench_done").await;
    late.sort_by(f64::total_cmp);
    late
}

async fn idle_children(children: usize, window: Duration) -> (f64, f64) {
    let home = tempfile::tempdir().expect("tempdir");
    let host = host(home.path(), |c| {
        c.delegation.max_concurrent_children = children as u32;
        c.delegation.stall_idle = Duration::from_secs(3600);
    })
    .await;
    let session = SessionId::new("bench").expect("session");
    let mut ids = Vec::new();
    for _ in 0..children {
        let d = host
            .dispatch(DispatchRequest::background(
                session.clone(),
                spec(1, &["sleep", "1000"]),
            ))
            .await
            .expect("dispatches");
        ids.push(d.delegation.id);
    }
    // Let start-up settle before measuring.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let ticks_per_s = 100.0; // USER_HZ on Linux.
    let (t0, c0) = (Instant::now(), cpu_ticks());
    tokio::time::sleep(window).await;
    let (t1, c1) = (Instant::now(), cpu_ticks());
    let rss_mb = rss_kib() as f64 / 1024.0;
    let cpu_pct = (c1 - c0) as f64 / ticks_per_s / (t1 - t0).as_secs_f64() * 100.0;
    let _ = host
        .interrupt(InterruptTarget::Session(session), "bench_done")
        .await;
    for id in &ids {
        host.wait(id).await;
    }
    host.shutdown("bench_done").await;
    (cpu_pct, rss_mb)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::var_os("BENCH_QUICK").is_some();
    let (rounds, per_round, window) = if quick {
        (1, 10, Duration::from_secs(2))
    } else {
        (5, 40, Duration::from_secs(10))
    };
    let late = stall_lateness(rounds, per_round).await;
    let (cpu_pct, rss_mb) = idle_children(100, window).await;
    let round = |x: f64| (x * 10.0).round() / 10.0;
    let out = serde_json::json!({
        "stall_detect_late_ms_p50": round(percentile(&late, 50.0)),
        "stall_detect_late_ms_p99": round(percentile(&late, 99.0)),
        "stall_detect_samples": late.len(),
        "host_cpu_pct_100_idle_children": round(cpu_pct),
        "host_rss_mb_100_idle_children": round(rss_mb),
    });
    println!("{out}");
}
