//! A host: the process that runs units. It registers itself in the ledger with a fresh fencing
//! epoch, its locality and a lease it renews every `host.heartbeat`; dispatches and launches
//! units, persists its children's progress (and output tails) as it changes, in one write per
//! `progress_interval` at most for all its units (`progress.rs`), acts on interrupts
//! asked for by other processes, starts its queued units when they reach the head of the FIFO
//! queue and a slot is free, runs the recovery sweep every `recovery_interval`, and on shutdown
//! stops what it runs. A worker (`HostKind::Worker`) is the same host bound to no
//! session: instead of its own queued units it takes its pool's, oldest first, while it has a
//! free slot of its own capacity (`Ledger::take_pool_unit`), until [`Host::stop_taking`].
//!
//! A host that cannot renew its lease for `self_fence_after` (lease − heartbeat), or learns that
//! it lost it, fences itself: it kills its children and never writes to the ledger again, so
//! nothing it does can contradict the recovery another process is entitled to run.

mod activity;
mod fence;
mod inner;
mod intake;
mod lease;
mod progress;
mod publish;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::Ordering;

use hermes_ledger::{
    Channel, ChildOutcome, DelegationId, DispatchSpec, HostId, HostKind, InterruptTarget,
    Interrupts, Ledger, NewDelegation, ProcessId, SessionId, UnitRecord, UnitStatus, WorkerPool,
};
use tokio::sync::watch;

use crate::config::Config;
use crate::error::RegistryError;
use crate::transcript;
use crate::unit::{UnitProgress, UnitReport};
use hermes_stdx::Clock;

use activity::watch_activity;
pub(crate) use inner::Inner;
use intake::record_dispatch_as;
pub use intake::{record_dispatch, record_dispatch_to_session_host};
use lease::{fence_on_time, housekeeping_loop};
pub(crate) use publish::Publisher;

/// Finished units whose reports a host keeps for [`Host::wait`].
const KEPT_REPORTS: usize = 256;

/// What kind of host to start, and for which session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostOptions {
    /// Interactive, headless or inline.
    pub kind: HostKind,
    /// The session it hosts (none for inline hosts and workers).
    pub session: Option<SessionId>,
    /// For a worker (`HostKind::Worker`): the pool whose units it takes, and how many it runs
    /// at once (also the parallelism inside one of its batches).
    pub worker: Option<WorkerPool>,
}

/// A unit to dispatch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DispatchRequest {
    /// Background (delivered at boundaries) or inline (run here, awaited).
    pub channel: Channel,
    /// The session the unit belongs to (background units only).
    pub session: Option<SessionId>,
    /// What to run.
    pub spec: DispatchSpec,
    /// The session children are told about in `HERMES_PARENT_SESSION_ID`; `None` (cron, or no
    /// session) also keeps this process's `HERMES_SESSION_*` variables from them.
    pub parent_session: Option<SessionId>,
}

impl DispatchRequest {
    /// A background unit for `session`.
    pub fn background(session: SessionId, spec: DispatchSpec) -> DispatchRequest {
        DispatchRequest {
            channel: Channel::Background,
            session: Some(session.clone()),
            spec,
            parent_session: Some(session),
        }
    }

    /// An inline unit (`-z`, cron); `parent_session` is `None` for cron.
    pub fn inline(spec: DispatchSpec, parent_session: Option<SessionId>) -> DispatchRequest {
        DispatchRequest {
            channel: Channel::Inline,
            session: None,
            spec,
            parent_session,
        }
    }
}

/// What dispatch did.
#[derive(Debug)]
pub struct Dispatched {
    /// The unit as recorded (`running` or `queued`).
    pub delegation: UnitRecord,
    /// Its 1-based place in the queue when queued.
    pub queue_position: Option<u32>,
    /// Its children's transcripts, by index.
    pub transcripts: Vec<PathBuf>,
    /// Its live progress, when it runs in this process.
    pub progress: Option<watch::Receiver<UnitProgress>>,
}

/// A running host. Cheap to clone; every clone is the same host.
#[derive(Clone, Debug)]
pub struct Host {
    inner: Arc<Inner>,
}

impl Host {
    /// Registers this process as a host and starts its maintenance loop (heartbeat, progress,
    /// interrupts, queue). Must be called inside a tokio runtime.
    pub async fn start(
        ledger: Arc<Ledger>,
        config: Config,
        clock: Arc<dyn Clock>,
        options: HostOptions,
    ) -> Result<Host, RegistryError> {
        let (inner, record) = Inner::prepare(ledger, config, clock, options);
        // Queued units of this session whose earlier host went away are this host's now, in
        // the commit that registers it: once it is seen registered, it has them.
        match inner.options.session.clone() {
            Some(session) => {
                inner
                    .call(move |l| l.register_session_host(&record, &session))
                    .await?;
            }
            None => inner.call(move |l| l.register_host(&record)).await?,
        }
        Ok(Host::begin(inner))
    }

    /// Starts a host for one unit it dispatches at once (`-z`, cron): the host is registered in
    /// the dispatch's own commit ([`Ledger::register_and_dispatch`]), so a one-shot run pays
    /// no commit for registering. A refused dispatch registers nothing and starts no host.
    /// An inline unit's host leaves in the commit of the finish that ends the unit, which also
    /// settles the unit's events as delivered ([`hermes_ledger::FinishAs::leaving`],
    /// [`Host::left`]): its caller shows them next and writes nothing more. Otherwise (the unit
    /// was force-finalized) it leaves with [`Host::stop`] and its caller's last write
    /// ([`Ledger::settle_inline_leaving`]), or with [`Host::shutdown`].
    pub async fn start_dispatching(
        ledger: Arc<Ledger>,
        config: Config,
        clock: Arc<dyn Clock>,
        options: HostOptions,
        request: DispatchRequest,
    ) -> Result<(Host, Dispatched), RegistryError> {
        let (inner, record) = Inner::prepare(ledger, config, clock, options);
        if request.channel == Channel::Inline {
            inner.leaves_with_unit.store(true, Ordering::SeqCst);
        }
        let dispatched = Host::dispatch_as(&inner, request, Some(record)).await?;
        Ok((Host::begin(inner), dispatched))
    }

    /// Starts the tasks of a registered host.
    fn begin(inner: Arc<Inner>) -> Host {
        tokio::spawn(housekeeping_loop(inner.clone()));
        tokio::spawn(fence_on_time(inner.clone()));
        tokio::spawn(progress::flush_progress(inner.clone()));
        if inner.options.kind != HostKind::Inline {
            tokio::spawn(watch_activity(inner.clone()));
        }
        Host { inner }
    }

    /// This host's process identity.
    pub fn process(&self) -> ProcessId {
        self.inner.me
    }

    /// This host's fencing epoch.
    pub fn host_id(&self) -> HostId {
        self.inner.host_id
    }

    /// Whether the host left in its unit's last finish ([`Host::start_dispatching`]): its
    /// record is gone and the unit's events are settled; there is nothing left to write.
    pub fn left(&self) -> bool {
        self.inner.left.load(Ordering::SeqCst)
    }

    /// Whether the host fenced itself (its lease lost or unrenewable): its children were
    /// stopped and it writes nothing more. A long-lived process should exit.
    pub fn is_fenced(&self) -> bool {
        self.inner.fenced.load(Ordering::SeqCst)
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.inner.ctx.config
    }

    /// Dispatches a unit hosted here. A unit admitted as `running` starts at once; a queued one
    /// starts when it is the oldest queued unit and a slot is free. Past `max_queued` the ledger
    /// refuses it (`LedgerError::QueueFull`).
    pub async fn dispatch(&self, request: DispatchRequest) -> Result<Dispatched, RegistryError> {
        Host::dispatch_as(&self.inner, request, None).await
    }

    /// Dispatches a unit hosted by `inner`, registering the host in the same commit when
    /// `registering` is its record.
    async fn dispatch_as(
        inner: &Arc<Inner>,
        request: DispatchRequest,
        registering: Option<hermes_ledger::HostRecord>,
    ) -> Result<Dispatched, RegistryError> {
        let _gate = inner.launch_gate.lock().await;
        let new = NewDelegation {
            id: None,
            session: request.session.clone(),
            channel: request.channel,
            spec: request.spec,
            host: Some(inner.me),
            transcript_root: None,
        };
        let now = inner.ctx.clock.now();
        let config = inner.ctx.config.clone();
        // Registering, an inline unit's first children are recorded running by the dispatch.
        let recorded_running = match (&registering, request.channel) {
            (Some(_), Channel::Inline) => {
                inner.ctx.config.delegation.max_concurrent_children.max(1)
            }
            _ => 0,
        };
        let admission = inner
            .call_raw(move |l| record_dispatch_as(l, &config, new, now, registering.as_ref()))
            .await?;
        let unit = admission.delegation;
        if unit.status == UnitStatus::Queued {
            // A unit of ours that finishes must wake the loop to start this one.
            inner
                .queue_seen
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let dir = transcript::unit_dir(&inner.ctx.config.transcript_root, &unit.id);
        let transcripts = (0..unit.task_count())
            .map(|i| transcript::task_log_path(&dir, i))
            .collect();
        let progress = (unit.status == UnitStatus::Running)
            .then(|| inner.launch_recorded(unit.clone(), request.parent_session, recorded_running));
        Ok(Dispatched {
            delegation: unit,
            queue_position: admission.queue_position,
            transcripts,
            progress,
        })
    }

    /// Runs an inline unit here and waits for its end (for tests and benchmarks: the product
    /// runs its inline units through [`Host::start_dispatching`]).
    #[cfg(any(test, feature = "testing"))]
    pub async fn run_inline(
        &self,
        spec: DispatchSpec,
        parent_session: Option<SessionId>,
    ) -> Result<UnitReport, RegistryError> {
        let dispatched = self
            .dispatch(DispatchRequest::inline(spec, parent_session))
            .await?;
        let id = dispatched.delegation.id;
        self.wait(&id)
            .await
            .ok_or_else(|| RegistryError::Worker(format!("{id} ended without a report")))
    }

    /// A unit's live progress, while it runs here.
    pub fn progress(&self, id: &DelegationId) -> Option<watch::Receiver<UnitProgress>> {
        self.inner
            .lock()
            .running
            .get(id)
            .map(|e| e.progress.clone())
    }

    /// Waits for a unit of this host to end: one that runs or ran here, or one queued for this
    /// host (it starts here when its turn comes). `None` if the unit is unknown or another
    /// host's.
    pub async fn wait(&self, id: &DelegationId) -> Option<UnitReport> {
        loop {
            let mut launches = self.inner.launches.subscribe();
            let done = {
                let units = self.inner.lock();
                if let Some(report) = units.reports.get(id) {
                    return Some(UnitReport::clone(report));
                }
                units.running.get(id).map(|e| e.done.clone())
            };
            if let Some(mut done) = done {
                let report = done.wait_for(Option::is_some).await.ok()?.clone()?;
                return Some(UnitReport::clone(&report));
            }
            let (id2, me) = (id.clone(), self.inner.me);
            let unit = self.inner.call(move |l| l.delegation(&id2)).await.ok()??;
            if unit.status.is_terminal() {
                let id2 = id.clone();
                let events = self
                    .inner
                    .call(move |l| l.events(&id2))
                    .await
                    .unwrap_or_default();
                let mut outcomes: Vec<ChildOutcome> = events
                    .iter()
                    .flat_map(|e| e.payload.outcomes().iter().cloned())
                    .collect();
                outcomes.sort_by_key(|o| o.index);
                return Some(UnitReport {
                    transcript_dir: transcript::unit_dir(
                        &self.inner.ctx.config.transcript_root,
                        &unit.id,
                    ),
                    delegation_id: unit.id,
                    status: unit.status,
                    outcomes,
                });
            }
            // Queued for this host, or started here a moment ago (the ledger records the start
            // before the launch registers it): wait for the launch.
            if unit.host != Some(me) {
                return None;
            }
            let sweep = self.inner.ctx.config.host.sweep_interval;
            let _ = tokio::time::timeout(sweep, launches.changed()).await;
        }
    }

    /// Stops a worker from taking more units from its pool, and returns once no take is in
    /// flight: from then on the units it runs are all it will run. (First step of a worker's
    /// shutdown; the units it had not taken stay in the pool for other workers.)
    pub async fn stop_taking(&self) {
        self.inner.taking.store(false, Ordering::SeqCst);
        let _gate = self.inner.launch_gate.lock().await;
    }

    /// Units running here.
    pub fn running(&self) -> Vec<DelegationId> {
        let mut ids: Vec<_> = self.inner.lock().running.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Whether nothing runs here and nothing waits in the queue for this host (a headless host
    /// may exit after being idle for `host.idle_exit_seconds`).
    pub async fn is_idle(&self) -> Result<bool, RegistryError> {
        if !self.inner.lock().running.is_empty() {
            return Ok(false);
        }
        let me = self.inner.me;
        let placed = self.inner.call(move |l| l.units_of_host(me)).await?;
        Ok(placed.is_empty())
    }

    /// Interrupts units: queued ones are cancelled, running ones get SIGTERM to their process
    /// group and SIGKILL after `kill_grace`, and end `interrupted` with `reason`. Units of other
    /// hosts are flagged in the ledger; their hosts act on it within a sweep.
    pub async fn interrupt(
        &self,
        target: InterruptTarget,
        reason: &str,
    ) -> Result<Interrupts, RegistryError> {
        let inner = self.inner.clone();
        let now = inner.ctx.clock.now();
        let (t, r) = (target.clone(), reason.to_owned());
        let result = inner.call(move |l| l.request_interrupt(&t, &r, now)).await;
        // What runs here stops at once, whatever the ledger said.
        inner.interrupt_local(
            |id, session| match &target {
                InterruptTarget::Delegation(d) => d == id,
                InterruptTarget::Session(s) => session == Some(s),
                InterruptTarget::All => true,
            },
            reason,
        );
        result
    }

    /// Cuts short the grace period of every child being stopped, now and from now on: each
    /// gets SIGKILL at once and is finalized (a second Ctrl-C). Children nobody asked to stop
    /// are not touched.
    pub fn hurry(&self) {
        self.inner.hurry.send_replace(true);
    }

    /// Stops the host: queued units of this host are cancelled, running ones interrupted with
    /// `reason` (SIGTERM, SIGKILL after `kill_grace`) and finalized, then the host unregisters.
    pub async fn shutdown(&self, reason: &str) {
        self.stop(reason).await;
        let me = self.inner.me;
        if let Err(e) = self.inner.call(move |l| l.unregister_host(me)).await {
            tracing::warn!(error = %e, "cannot unregister the host");
        }
    }

    /// [`Host::shutdown`] without the unregistering: the host runs nothing more and renews its
    /// lease no more, and its record stays until the caller removes it with its own last write
    /// ([`Ledger::settle_inline_leaving`]). Left behind, the record is a dead host's: the next
    /// sweep on this machine removes it once this process is gone, elsewhere once its lease ran
    /// out.
    pub async fn stop(&self, reason: &str) {
        let inner = self.inner.clone();
        let me = inner.me;
        let now = inner.ctx.clock.now();
        let r = reason.to_owned();
        let cancelled = inner
            .call(move |l| {
                let placed = l.units_of_host(me)?;
                for unit in placed
                    .into_iter()
                    .filter(|u| u.status == UnitStatus::Queued)
                {
                    l.request_interrupt(&InterruptTarget::Delegation(unit.id), &r, now)?;
                }
                Ok(())
            })
            .await;
        if let Err(e) = cancelled {
            tracing::warn!(error = %e, "cannot cancel this host's queued units");
        }
        let running = self.running();
        for id in &running {
            if let Err(e) = self
                .interrupt(InterruptTarget::Delegation(id.clone()), reason)
                .await
            {
                tracing::warn!(delegation = %id, error = %e, "cannot record the interrupt");
            }
        }
        let limit = inner.ctx.config.delegation.kill_grace + Duration::from_secs(5);
        let all = async {
            for id in &running {
                self.wait(id).await;
            }
        };
        if tokio::time::timeout(limit, all).await.is_err() {
            tracing::warn!("some units did not finish during shutdown");
        }
        inner.stop.send_replace(true);
    }
}
