//! `hermes worker [--pool NAME] [--capacity N] [--drain-timeout SECS]` and `hermes worker list`.
//!
//! A worker is a registry `Host` of kind `Worker`, bound to no session: it holds a lease like
//! every host, takes its pool's units (oldest first, atomically, fenced by its epoch) while it
//! has free slots, runs them exactly as a session's host would, and delivers nothing itself:
//! each result goes to its unit's session. SIGTERM/SIGINT: it stops taking units, lets its
//! children finish for up to `--drain-timeout`, interrupts what still runs (`worker_shutdown`)
//! and exits 0 with nothing claimed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_ledger::{HostKind, WorkerPool};
use hermes_registry::{Host, HostOptions};
use serde_json::json;

use crate::args::{WorkerArgs, WorkerCommand};
use crate::cmd::rejoin::{self, Backoff, Signals};
use crate::services::exit::{Code, fail};
use crate::services::home::{Home, now};
use crate::services::output::{self, time};

/// How often the worker looks at its own state (fenced? drained?). Work arrives through the
/// host's activity watch, not through this.
const POLL: Duration = Duration::from_millis(100);

/// The reason its children are interrupted with when a worker stops.
pub const SHUTDOWN_REASON: &str = "worker_shutdown";

/// Runs `hermes worker` or `hermes worker list`.
pub fn run(args: &WorkerArgs, quiet: bool) -> anyhow::Result<Code> {
    if let Some(WorkerCommand::List { pool, json }) = &args.command {
        return list(pool.as_deref(), *json);
    }
    hermes_ledger::check_pool_name(&args.pool).map_err(|e| fail(Code::Usage, e.to_string()))?;
    let home = Home::load()?;
    let ledger = home.open_ledger_and_sweep()?;
    let capacity = args
        .capacity
        .unwrap_or(home.settings.delegation.max_concurrent_children);
    let pool = WorkerPool {
        pool: args.pool.clone(),
        capacity,
    };
    let drain = args.drain_timeout.unwrap_or_default();
    let limits = crate::services::overview::Limits::from_settings(&home.settings);
    if args.metrics_listen.is_some() {
        crate::services::metrics::process::install();
    }
    let metrics = args
        .metrics_listen
        .map(crate::services::metrics::serve::bind)
        .transpose()?;
    let metrics_ledger = std::sync::Arc::clone(&ledger);
    let runtime = crate::services::home::runtime()?;
    runtime.block_on(async move {
        // Watch the signals before registering, so a stop that comes at once is not lost.
        let mut signals = Signals::watch()?;
        let mut host = start(&ledger, &home, &pool).await?;
        if let Some(listener) = metrics {
            crate::services::metrics::serve::spawn(
                listener,
                crate::services::metrics::process::source(metrics_ledger, limits),
            )?;
        }
        tracing::info!(pool = %pool.pool, capacity, pid = host.process().pid, "worker started");
        if !quiet {
            eprintln!(
                "hermes: worker {} serving pool {} with capacity {capacity} (stop with SIGTERM or Ctrl-C)",
                host.process().pid,
                pool.pool
            );
        }
        loop {
            tokio::select! {
                () = tokio::time::sleep(POLL) => {}
                () = signals.received() => break,
            }
            if host.is_fenced() {
                // A long outage ends no worker: once the ledger answers again and
                // the fenced epoch's units were recovered, it carries on under a fresh one.
                let pid = host.process().pid;
                tracing::warn!(pool = %pool.pool, pid, "worker fenced; re-registering with a fresh epoch once the ledger answers");
                if !quiet {
                    eprintln!(
                        "hermes: worker {pid} of pool {} lost its lease and stopped its children (their units are recovered); re-registering once the ledger answers",
                        pool.pool
                    );
                }
                let Some(fresh) = rejoin(&ledger, &home, &pool, &host, &mut signals).await
                else {
                    // Stopped while waiting: nothing runs and nothing is claimed.
                    return anyhow::Ok(());
                };
                host = fresh;
                tracing::info!(pool = %pool.pool, pid, "worker re-registered with a fresh epoch");
                if !quiet {
                    eprintln!(
                        "hermes: worker {pid} of pool {} re-registered with a fresh epoch",
                        pool.pool
                    );
                }
            }
        }
        if !quiet {
            eprintln!(
                "hermes: worker {} stopping: taking no more units; {} running unit(s) {}",
                host.process().pid,
                host.running().len(),
                if drain.is_zero() {
                    "interrupted now (worker_shutdown)".to_owned()
                } else {
                    format!(
                        "may finish within {}s (a second signal interrupts them)",
                        drain.as_secs_f64()
                    )
                }
            );
        }
        stop(&host, drain, &mut signals).await;
        anyhow::Ok(())
    })?;
    Ok(Code::Ok)
}

/// Starts the worker's host: a fresh fencing epoch, registered, taking units of `pool`.
async fn start(
    ledger: &Arc<hermes_ledger::Ledger>,
    home: &Home,
    pool: &WorkerPool,
) -> Result<Host, hermes_registry::RegistryError> {
    rejoin::start(
        ledger,
        home,
        HostOptions {
            kind: HostKind::Worker,
            session: None,
            worker: Some(pool.clone()),
        },
    )
    .await
}

/// Re-registers a worker whose host `fenced` fenced itself, once the ledger answers and the
/// fenced epoch's units were recovered (`rejoin::await_recovery`). `None`: SIGTERM or SIGINT
/// came while waiting.
async fn rejoin(
    ledger: &Arc<hermes_ledger::Ledger>,
    home: &Home,
    pool: &WorkerPool,
    fenced: &Host,
    signals: &mut Signals,
) -> Option<Host> {
    let config = home.registry();
    if !rejoin::await_recovery(ledger, &config, fenced.process(), fenced.host_id(), signals).await {
        return None;
    }
    let mut backoff = Backoff::new();
    loop {
        tokio::select! {
            started = start(ledger, home, pool) => match started {
                Ok(host) => return Some(host),
                Err(e) => tracing::warn!(error = %e, "cannot re-register the worker yet"),
            },
            () = signals.received() => return None,
        }
        if !backoff.pause(signals).await {
            return None;
        }
    }
}

/// Stops a worker: no more units are taken (those it never took stay in the pool), running
/// children may finish within `drain` (a second SIGTERM/SIGINT cuts that short), then what
/// still runs is interrupted with `worker_shutdown` and finalized, and the worker unregisters.
async fn stop(host: &Host, drain: Duration, signals: &mut Signals) {
    host.stop_taking().await;
    let started = Instant::now();
    tracing::info!(running = host.running().len(), ?drain, "worker stopping");
    while !host.running().is_empty() && started.elapsed() < drain && !host.is_fenced() {
        tokio::select! {
            () = tokio::time::sleep(POLL.min(drain.saturating_sub(started.elapsed()))) => {}
            () = signals.received() => break,
        }
    }
    host.shutdown(SHUTDOWN_REASON).await;
}

/// `hermes worker list [--pool NAME] [--json]`.
fn list(pool: Option<&str>, json_out: bool) -> anyhow::Result<Code> {
    if let Some(pool) = pool {
        hermes_ledger::check_pool_name(pool).map_err(|e| fail(Code::Usage, e.to_string()))?;
    }
    let home = Home::load()?;
    let ledger = home.open_ledger_and_sweep()?;
    let at = now();
    let workers = ledger.workers(pool, &hermes_registry::OsReaper::new(), at)?;
    if json_out {
        let rows: Vec<_> = workers
            .iter()
            .map(|w| {
                json!({
                    "pool": w.pool(),
                    "pid": w.host.process.pid,
                    "host_id": w.host.host_id.to_string(),
                    "capacity": w.capacity(),
                    "running": w.running,
                    "hostname": w.host.locality.hostname,
                    "locality": {
                        "hostname": w.host.locality.hostname,
                        "boot_id": w.host.locality.boot_id,
                        "pid_namespace": w.host.locality.pid_namespace,
                    },
                    "registered_at": time(Some(w.host.registered_at)),
                    "heartbeat_at": time(Some(w.host.heartbeat_at)),
                    "lease_expires_at": time(Some(w.host.lease_expires_at)),
                })
            })
            .collect();
        output::print_json(&json!({ "workers": rows }))?;
        return Ok(Code::Ok);
    }
    if workers.is_empty() {
        output::print(&match pool {
            Some(pool) => format!("no live worker serves pool {pool}\n"),
            None => "no live workers\n".to_owned(),
        })?;
        return Ok(Code::Ok);
    }
    let mut text = format!(
        "{:<16} {:>8} {:>8} {:>7}  {:<20} lease\n",
        "pool", "pid", "capacity", "running", "machine"
    );
    for w in &workers {
        let left = w.host.lease_expires_at.ms_since(at) as f64 / 1000.0;
        text.push_str(&format!(
            "{:<16} {:>8} {:>8} {:>7}  {:<20} {left:.0}s left\n",
            hermes_formatter::one_line(w.pool(), 16),
            w.host.process.pid,
            w.capacity(),
            w.running,
            hermes_formatter::one_line(&w.host.locality.hostname, 20),
        ));
    }
    output::print(&text)?;
    Ok(Code::Ok)
}
