//! After a fence: a worker or a headless host that fenced itself (a long outage of a shared
//! server, a partition) waits, listening for SIGTERM/SIGINT, for the ledger to answer and for
//! its fenced epoch's units to be recovered, then carries on under a fresh epoch (issue
//! #22). The waiting is here; what "carrying on" means is the caller's (`worker`,
//! `host`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use hermes_ledger::{HostId, Ledger, ProcessId};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::services::home::{Home, now};

/// Starts a host of this process, as a worker or a headless host says in `options`: a fresh
/// fencing epoch, registered, running its units. The first start and each rejoin use it.
pub async fn start(
    ledger: &Arc<Ledger>,
    home: &Home,
    options: hermes_registry::HostOptions,
) -> Result<hermes_registry::Host, hermes_registry::RegistryError> {
    hermes_registry::Host::start(
        Arc::clone(ledger),
        home.registry(),
        Arc::new(hermes_registry::SystemClock),
        options,
    )
    .await
}

/// The first pause between two looks at the ledger.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause between two looks at the ledger.
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// SIGTERM and SIGINT, watched from before registering so that a stop that comes at once is
/// not lost.
pub struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    pub fn watch() -> anyhow::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("cannot watch SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot watch SIGINT")?,
        })
    }

    /// Resolves when either signal arrives.
    pub async fn received(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// Pauses growing from [`FIRST_PAUSE`] to [`MAX_PAUSE`].
pub struct Backoff(Duration);

impl Backoff {
    pub fn new() -> Backoff {
        Backoff(FIRST_PAUSE)
    }

    /// Sleeps the next pause; `false` if a signal came first.
    pub async fn pause(&mut self, signals: &mut Signals) -> bool {
        let pause = self.0;
        self.0 = (self.0 * 2).min(MAX_PAUSE);
        tokio::select! {
            () = tokio::time::sleep(pause) => true,
            () = signals.received() => false,
        }
    }
}

/// Runs the blocking `f` off the runtime (a ledger call the server never answers must not keep
/// the signals from being heard). `None`: a signal came first. A panic in `f` is an error.
pub async fn blocking<T: Send + 'static>(
    signals: &mut Signals,
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> Option<anyhow::Result<T>> {
    let task = tokio::task::spawn_blocking(f);
    tokio::select! {
        joined = task => Some(joined.context("the ledger check failed").and_then(|r| r)),
        () = signals.received() => None,
    }
}

/// Waits until the units of process `me`'s fenced epoch `old_epoch` were recovered
/// ([`recovered`]), looking again with backoff while the ledger does not answer. `false`:
/// SIGTERM or SIGINT came while waiting.
pub async fn await_recovery(
    ledger: &Arc<Ledger>,
    config: &hermes_registry::Config,
    me: ProcessId,
    old_epoch: HostId,
    signals: &mut Signals,
) -> bool {
    let mut backoff = Backoff::new();
    loop {
        let (ledger, config) = (Arc::clone(ledger), config.clone());
        let look = move || Ok(recovered(&ledger, &config, me, old_epoch)?);
        match blocking(signals, look).await {
            None => return false,
            Some(Ok(true)) => return true,
            Some(Ok(false)) => {}
            Some(Err(e)) => {
                tracing::warn!(error = %format!("{e:#}"), "the ledger does not answer yet")
            }
        }
        if !backoff.pause(signals).await {
            return false;
        }
    }
}

/// Whether the units of process `me`'s fenced epoch `old_epoch` were recovered: its lease ran
/// out, and a recovery sweep (this one, or any other process's) ended its running units
/// `unknown`, put what it took but never started back in its pool and handed its queued units
/// on. Registering again before that would make those units look owned by a live host, since
/// the new epoch has the same process.
pub fn recovered(
    ledger: &Ledger,
    config: &hermes_registry::Config,
    me: ProcessId,
    old_epoch: HostId,
) -> hermes_ledger::Result<bool> {
    let at = now();
    if let Some(record) = ledger.host(me)?
        && record.host_id == old_epoch
        && record.lease_expires_at > at
    {
        return Ok(false);
    }
    hermes_registry::housekeeping::sweep(
        ledger,
        &hermes_registry::OsReaper::new(),
        config,
        at,
        hermes_ledger::Sweep::IfDue,
    )?;
    Ok(ledger.units_of_host(me)?.is_empty())
}
