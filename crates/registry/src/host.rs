//! A host: the process that runs units. It registers itself in the ledger with a fresh fencing
//! epoch, its locality and a lease it renews every `heartbeat_interval`; dispatches and launches
//! units, persists its children's progress (and output tails) in batches, acts on interrupts
//! asked for by other processes, starts its queued units when they reach the head of the FIFO
//! queue and a slot is free, runs the recovery sweep every `recovery_interval`, and on shutdown
//! stops what it runs. A worker (`HostKind::Worker`, SPEC §12) is the same host bound to no
//! session: instead of its own queued units it takes its pool's, oldest first, while it has a
//! free slot of its own capacity (`Ledger::take_pool_unit`), until [`Host::stop_taking`].
//!
//! A host that cannot renew its lease for `self_fence_after` (lease − heartbeat), or learns that
//! it lost it, fences itself: it kills its children and never writes to the ledger again, so
//! nothing it does can contradict the recovery another process is entitled to run.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};

use ledger::{
    Admission, Capacity, Channel, ChildOutcome, ChildStatus, Delegation, DelegationId,
    DispatchSpec, FinishChild, HostId, HostKind, InterruptTarget, Interrupts, Ledger, LedgerError,
    NewDelegation, ProcessId, Progress, ProgressUpdate, SessionId, Timestamp, UnitStatus,
    WorkerPool,
};
use tokio::sync::{Notify, watch};

use crate::child::{Context, LiveChild};
use crate::clock::Clock;
use crate::config::{Config, millis};
use crate::error::RegistryError;
use crate::transcript;
use crate::unit::{self, UnitParts, UnitProgress, UnitReport};

/// Finished units whose reports a host keeps for [`Host::wait`].
const KEPT_REPORTS: usize = 256;
/// Attempts at publishing one child's outcome before leaving it to the unit's finalization.
const PUBLISH_ATTEMPTS: u32 = 3;

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
    pub delegation: Delegation,
    /// Its 1-based place in the queue when queued.
    pub queue_position: Option<u32>,
    /// Its children's transcripts, by index.
    pub transcripts: Vec<PathBuf>,
    /// Its live progress, when it runs in this process.
    pub progress: Option<watch::Receiver<UnitProgress>>,
}

/// Records a unit in the ledger and creates its transcripts, without running it: for a process
/// that dispatches into a session another process hosts. The unit's host is `host`, which
/// starts it (at once, or when it leaves the queue). Old transcripts are pruned on a schedule
/// ([`crate::housekeeping`]), never here: dispatch costs the same whatever the history holds.
pub fn record_dispatch(
    ledger: &Ledger,
    config: &Config,
    new: NewDelegation,
    now: Timestamp,
) -> Result<Admission, RegistryError> {
    if let Some(index) = new.spec.tasks.iter().position(|t| t.command.is_empty()) {
        return Err(RegistryError::EmptyCommand { index });
    }
    let root = &config.transcript_root;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
        .map_err(|source| RegistryError::Transcripts {
            path: root.clone(),
            source,
        })?;
    let new = NewDelegation {
        transcript_root: Some(root.display().to_string()),
        ..new
    };
    let admission = ledger.dispatch(new, capacity(config), now)?;
    if let Err(e) = transcript::create_unit(root, &admission.delegation) {
        tracing::warn!(delegation = %admission.delegation.id, error = %e, "cannot create transcripts");
    }
    Ok(admission)
}

use std::os::unix::fs::DirBuilderExt;

fn capacity(config: &Config) -> Capacity {
    Capacity {
        max_running: config.max_concurrent_children,
        max_queued: config.max_queued,
    }
}

/// A running host. Cheap to clone; every clone is the same host.
#[derive(Clone, Debug)]
pub struct Host {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct UnitEntry {
    session: Option<SessionId>,
    interrupt: watch::Sender<Option<String>>,
    progress: watch::Receiver<UnitProgress>,
    done: watch::Receiver<Option<Arc<UnitReport>>>,
    children: Vec<Arc<LiveChild>>,
    persisted: Vec<Option<Progress>>,
}

#[derive(Debug, Default)]
struct Units {
    running: HashMap<DelegationId, UnitEntry>,
    launched: HashSet<DelegationId>,
    reports: HashMap<DelegationId, Arc<UnitReport>>,
    order: VecDeque<DelegationId>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) ledger: Arc<Ledger>,
    pub(crate) ctx: Context,
    me: ProcessId,
    host_id: HostId,
    /// Set once the host fenced itself: it writes nothing more.
    fenced: AtomicBool,
    /// Whether a worker takes units from its pool (cleared by [`Host::stop_taking`]).
    taking: AtomicBool,
    options: HostOptions,
    units: Mutex<Units>,
    launch_gate: tokio::sync::Mutex<()>,
    wake: Notify,
    stop: watch::Sender<bool>,
    launches: watch::Sender<u64>,
}

impl Host {
    /// Registers this process as a host and starts its maintenance loop (heartbeat, progress,
    /// interrupts, queue). Must be called inside a tokio runtime.
    pub async fn start(
        ledger: Arc<Ledger>,
        mut config: Config,
        clock: Arc<dyn Clock>,
        options: HostOptions,
    ) -> Result<Host, RegistryError> {
        if let Some(worker) = &options.worker {
            // A worker's capacity is its own: it bounds its units and their batches.
            config.max_concurrent_children = worker.capacity.max(1);
        }
        let me = crate::procs::current_process();
        let now = clock.now();
        let host_id = ledger.next_host_id();
        let record = ledger::Host {
            process: me,
            kind: options.kind,
            session: options.session.clone(),
            registered_at: now,
            heartbeat_at: now,
            host_id,
            locality: crate::procs::current_locality(),
            lease_expires_at: now.plus_ms(millis(config.lease)),
            worker: options.worker.clone(),
        };
        let inner = Arc::new(Inner {
            ledger,
            ctx: Context {
                config: Arc::new(config),
                clock,
            },
            me,
            host_id,
            fenced: AtomicBool::new(false),
            taking: AtomicBool::new(true),
            options,
            units: Mutex::new(Units::default()),
            launch_gate: tokio::sync::Mutex::new(()),
            wake: Notify::new(),
            stop: watch::channel(false).0,
            launches: watch::channel(0).0,
        });
        inner.call(move |l| l.register_host(&record)).await?;
        // Queued units of this session whose earlier host went away are this host's now.
        if let Some(session) = inner.options.session.clone() {
            inner.call(move |l| l.adopt_units(&session, me)).await?;
        }
        tokio::spawn(maintain(inner.clone()));
        if inner.options.kind != HostKind::Inline {
            tokio::spawn(watch_activity(inner.clone()));
        }
        Ok(Host { inner })
    }

    /// This host's process identity.
    pub fn process(&self) -> ProcessId {
        self.inner.me
    }

    /// This host's fencing epoch.
    pub fn host_id(&self) -> HostId {
        self.inner.host_id
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
        let inner = self.inner.clone();
        let _gate = inner.launch_gate.lock().await;
        let new = NewDelegation {
            session: request.session.clone(),
            channel: request.channel,
            spec: request.spec,
            host: Some(inner.me),
            transcript_root: None,
        };
        let now = inner.ctx.clock.now();
        let config = inner.ctx.config.clone();
        let admission = inner
            .call_raw(move |l| record_dispatch(l, &config, new, now))
            .await?;
        let unit = admission.delegation;
        let dir = transcript::unit_dir(&inner.ctx.config.transcript_root, &unit.id);
        let transcripts = (0..unit.task_count())
            .map(|i| transcript::task_log_path(&dir, i))
            .collect();
        let progress = (unit.status == UnitStatus::Running)
            .then(|| inner.launch(unit.clone(), request.parent_session));
        Ok(Dispatched {
            delegation: unit,
            queue_position: admission.queue_position,
            transcripts,
            progress,
        })
    }

    /// Runs an inline unit here and waits for its end.
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
            if unit.status != UnitStatus::Queued || unit.host != Some(me) {
                return None;
            }
            let sweep = self.inner.ctx.config.sweep_interval;
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
        let listing = self.inner.call(|l| l.list(None, 0)).await?;
        let mine = |u: &Delegation| u.host == Some(me);
        Ok(!listing.queued.iter().any(mine) && !listing.running.iter().any(mine))
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

    /// Stops the host: queued units of this host are cancelled, running ones interrupted with
    /// `reason` (SIGTERM, SIGKILL after `kill_grace`) and finalized, then the host unregisters.
    pub async fn shutdown(&self, reason: &str) {
        let inner = self.inner.clone();
        let me = inner.me;
        let now = inner.ctx.clock.now();
        let r = reason.to_owned();
        let cancelled = inner
            .call(move |l| {
                let queued = l.list(None, 0)?.queued;
                for unit in queued.into_iter().filter(|u| u.host == Some(me)) {
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
        let limit = inner.ctx.config.kill_grace + Duration::from_secs(5);
        let all = async {
            for id in &running {
                self.wait(id).await;
            }
        };
        if tokio::time::timeout(limit, all).await.is_err() {
            tracing::warn!("some units did not finish during shutdown");
        }
        inner.stop.send_replace(true);
        if let Err(e) = inner.call(move |l| l.unregister_host(me)).await {
            tracing::warn!(error = %e, "cannot unregister the host");
        }
    }
}

impl Inner {
    /// Whether this host is a worker (bound to no session).
    pub(crate) fn is_worker(&self) -> bool {
        self.options.kind == HostKind::Worker
    }

    fn lock(&self) -> MutexGuard<'_, Units> {
        self.units
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs a ledger operation on the blocking pool (each is one short transaction).
    async fn call<T, F>(&self, f: F) -> Result<T, RegistryError>
    where
        T: Send + 'static,
        F: FnOnce(&Ledger) -> ledger::Result<T> + Send + 'static,
    {
        self.call_raw(move |l| f(l).map_err(RegistryError::from))
            .await
    }

    async fn call_raw<T, F>(&self, f: F) -> Result<T, RegistryError>
    where
        T: Send + 'static,
        F: FnOnce(&Ledger) -> Result<T, RegistryError> + Send + 'static,
    {
        if self.fenced.load(Ordering::SeqCst) {
            return Err(RegistryError::Fenced(self.host_id));
        }
        let ledger = self.ledger.clone();
        tokio::task::spawn_blocking(move || f(&ledger))
            .await
            .map_err(|e| RegistryError::Worker(e.to_string()))?
    }

    /// Starts running a unit here (once per unit) and returns its progress channel.
    fn launch(
        self: &Arc<Inner>,
        unit: Delegation,
        parent: Option<SessionId>,
    ) -> watch::Receiver<UnitProgress> {
        let mut units = self.lock();
        if let Some(entry) = units.running.get(&unit.id) {
            return entry.progress.clone();
        }
        let dir = transcript::unit_dir(&self.ctx.config.transcript_root, &unit.id);
        let children: Vec<Arc<LiveChild>> = unit
            .spec
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let path = transcript::task_log_path(&dir, i as u32)
                    .display()
                    .to_string();
                Arc::new(LiveChild::new(
                    i as u32,
                    t.goal.clone(),
                    path,
                    self.ctx.config.result_max_bytes,
                ))
            })
            .collect();
        let initial = UnitProgress {
            delegation_id: unit.id.clone(),
            status: UnitStatus::Running,
            children: children.iter().map(|c| c.snapshot()).collect(),
        };
        let (progress_tx, progress_rx) = watch::channel(initial);
        let (interrupt_tx, interrupt_rx) = watch::channel(unit.interrupt.clone());
        let (done_tx, done_rx) = watch::channel(None);
        units.launched.insert(unit.id.clone());
        units.running.insert(
            unit.id.clone(),
            UnitEntry {
                session: unit.session.clone(),
                interrupt: interrupt_tx,
                progress: progress_rx.clone(),
                done: done_rx,
                persisted: vec![None; children.len()],
                children: children.clone(),
            },
        );
        drop(units);
        self.launches.send_modify(|n| *n += 1);
        let parts = UnitParts {
            children,
            interrupt: interrupt_rx,
            progress: progress_tx,
        };
        let inner = self.clone();
        tokio::spawn(async move {
            let report = Arc::new(unit::run(inner.clone(), unit, parent, parts).await);
            let id = report.delegation_id.clone();
            {
                let mut units = inner.lock();
                units.running.remove(&id);
                units.reports.insert(id.clone(), report.clone());
                units.order.push_back(id);
                while units.order.len() > KEPT_REPORTS {
                    if let Some(old) = units.order.pop_front() {
                        units.reports.remove(&old);
                    }
                }
            }
            done_tx.send_replace(Some(report));
            // A slot may have freed: let the queue move now rather than at the next sweep.
            inner.wake.notify_one();
        });
        progress_rx
    }

    /// Fences the host: kills every child it runs (their whole process groups, at once) and
    /// stops all ledger access, because another process may now recover its units.
    fn fence(&self, why: &str) {
        if self.fenced.swap(true, Ordering::SeqCst) {
            return;
        }
        tracing::error!(host = %self.host_id, why, "host fenced: stopping its children and writing nothing more");
        let units = self.lock();
        for entry in units.running.values() {
            for child in &entry.children {
                if let Some(process) = child.process() {
                    crate::procs::signal_group(process, nix::sys::signal::Signal::SIGKILL);
                }
            }
        }
        drop(units);
        self.stop.send_replace(true);
    }

    fn interrupt_local(
        &self,
        matches: impl Fn(&DelegationId, Option<&SessionId>) -> bool,
        reason: &str,
    ) {
        let units = self.lock();
        for (id, entry) in &units.running {
            if matches(id, entry.session.as_ref()) {
                entry.interrupt.send_if_modified(|current| {
                    if current.is_some() {
                        return false;
                    }
                    *current = Some(reason.to_owned());
                    true
                });
            }
        }
    }

    pub(crate) async fn child_started(
        &self,
        id: &DelegationId,
        index: u32,
        process: ProcessId,
        at: Timestamp,
    ) {
        let (id, writer) = (id.clone(), self.host_id);
        if let Err(e) = self
            .call(move |l| l.child_started(writer, &id, index, process, at))
            .await
        {
            tracing::warn!(error = %e, "cannot record a child's start");
        }
    }

    /// Publishes a child's outcome; `None` if the ledger kept failing.
    pub(crate) async fn child_stalling(&self, id: &DelegationId, stalling: ledger::Stalling) {
        let id = id.clone();
        if let Err(e) = self.call(move |l| l.child_stalling(&id, &stalling)).await {
            tracing::warn!(error = %e, "cannot record that a child is stalling");
        }
    }

    /// `progress` is the child's final token, persisted with the outcome.
    pub(crate) async fn finish_child(
        &self,
        id: &DelegationId,
        outcome: ChildOutcome,
        progress: Option<Progress>,
    ) -> Option<FinishChild> {
        let mut attempt = 0u32;
        loop {
            attempt = attempt.saturating_add(1);
            let (id2, o, p, writer) = (id.clone(), outcome.clone(), progress.clone(), self.host_id);
            let now = self.ctx.clock.now();
            match self
                .call(move |l| l.finish_child_with_progress(writer, &id2, o, p, now))
                .await
            {
                Ok(finish) => return Some(finish),
                Err(
                    e @ (RegistryError::Fenced(_)
                    | RegistryError::Ledger(LedgerError::Fenced { .. })),
                ) => {
                    // Recovered elsewhere, or this host fenced itself: the outcome is not ours to
                    // record any more.
                    tracing::warn!(delegation = %id, index = outcome.index, error = %e, "outcome refused: this host no longer owns the unit");
                    return None;
                }
                Err(e) => {
                    // An unreachable ledger (a server restarting, a dropped connection) is
                    // waited out while this host holds its lease: it fences itself, and this
                    // loop ends, once the lease can no longer be renewed. Other failures get a
                    // few attempts.
                    let unreachable =
                        matches!(&e, RegistryError::Ledger(LedgerError::Unavailable { .. }));
                    tracing::warn!(delegation = %id, index = outcome.index, attempt, error = %e, "cannot publish a child's outcome");
                    if !unreachable && attempt >= PUBLISH_ATTEMPTS {
                        return None;
                    }
                    let pause = Duration::from_millis(100 * u64::from(attempt.min(10)));
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

    /// Makes sure the unit is terminal after its children ran; returns its status.
    pub(crate) async fn settle_unit(
        &self,
        unit: &Delegation,
        unpublished: Vec<ChildOutcome>,
        outcomes: &std::collections::BTreeMap<u32, ChildOutcome>,
    ) -> UnitStatus {
        let (id, writer) = (unit.id.clone(), self.host_id);
        let now = self.ctx.clock.now();
        let settled = self
            .call(move |l| {
                if let Some(status) =
                    l.finish_unit(writer, &id, unpublished, "finalized_by_host", now)?
                {
                    return Ok(Some(status));
                }
                Ok(l.delegation(&id)?
                    .map(|d| d.status)
                    .filter(|s| s.is_terminal()))
            })
            .await;
        match settled {
            Ok(Some(status)) => status,
            Ok(None) | Err(_) => {
                let statuses: Vec<ChildStatus> = outcomes.values().map(|o| o.status).collect();
                UnitStatus::from_children(&statuses)
            }
        }
    }

    async fn persist_progress(&self) {
        let updates: Vec<ProgressUpdate> = {
            let mut units = self.lock();
            let mut updates = Vec::new();
            for (id, entry) in units.running.iter_mut() {
                for (child, persisted) in entry.children.iter().zip(entry.persisted.iter_mut()) {
                    let snap = child.snapshot();
                    if snap.status != ChildStatus::Running
                        || persisted.as_ref() == Some(&snap.progress)
                    {
                        continue;
                    }
                    let tail_changed = persisted
                        .as_ref()
                        .is_none_or(|p| p.output_bytes != snap.progress.output_bytes);
                    *persisted = Some(snap.progress.clone());
                    updates.push(ProgressUpdate {
                        delegation_id: id.clone(),
                        index: child.index(),
                        progress: snap.progress,
                        // Filled in below, off the async threads, from the transcript.
                        tail: tail_changed.then(|| child.transcript_path().to_owned()),
                    });
                }
            }
            updates
        };
        if updates.is_empty() {
            return;
        }
        let writer = self.host_id;
        let recorded = self
            .call(move |l| {
                let updates: Vec<ProgressUpdate> = updates
                    .into_iter()
                    .map(|mut u| {
                        u.tail = u.tail.and_then(|path| crate::reaper::read_tail(&path));
                        u
                    })
                    .collect();
                l.record_progress(writer, &updates)
            })
            .await;
        match recorded {
            Ok(fenced) => {
                for id in fenced {
                    tracing::warn!(delegation = %id, "progress refused: this host no longer owns the unit");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot persist progress"),
        }
    }

    async fn poll_interrupts(&self) {
        let me = self.me;
        match self.call(move |l| l.interrupt_requests(me)).await {
            Ok(requests) => {
                for (id, reason) in requests {
                    self.interrupt_local(|d, _| *d == id, &reason);
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read interrupt requests"),
        }
    }

    /// Starts this host's queued units that reached the head of the queue, and running units
    /// recorded for this host by other processes.
    async fn pick_up(self: &Arc<Inner>) {
        let _gate = self.launch_gate.lock().await;
        let (me, cap) = (self.me, capacity(&self.ctx.config));
        if let Some(worker) = self.options.worker.clone() {
            self.take_from_pool(worker).await;
        }
        loop {
            let now = self.ctx.clock.now();
            match self.call(move |l| l.start_next_queued(me, cap, now)).await {
                Ok(Some(unit)) => {
                    let parent = unit.session.clone();
                    self.launch(unit, parent);
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start queued units");
                    break;
                }
            }
        }
        match self.call(|l| l.list(None, 0)).await {
            Ok(listing) => {
                let adopt: Vec<Delegation> = {
                    let units = self.lock();
                    listing
                        .running
                        .into_iter()
                        .filter(|u| u.host == Some(me) && u.channel == Channel::Background)
                        .filter(|u| !units.launched.contains(&u.id))
                        .collect()
                };
                for unit in adopt {
                    let parent = unit.session.clone();
                    self.launch(unit, parent);
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot list units"),
        }
    }
}

impl Inner {
    /// A worker takes units of its pool, oldest first, while it has free slots, and runs them.
    /// Called with the launch gate held.
    async fn take_from_pool(self: &Arc<Inner>, worker: WorkerPool) {
        let (me, writer) = (self.me, self.host_id);
        while self.taking.load(Ordering::SeqCst) {
            let now = self.ctx.clock.now();
            let (pool, capacity) = (worker.pool.clone(), worker.capacity);
            match self
                .call(move |l| l.take_pool_unit(me, writer, &pool, capacity, now))
                .await
            {
                Ok(Some(unit)) => {
                    tracing::info!(delegation = %unit.id, pool = %worker.pool, "took a pool unit");
                    let parent = unit.session.clone();
                    self.launch(unit, parent);
                }
                Ok(None) => break,
                Err(RegistryError::Ledger(LedgerError::LeaseLost(_))) => {
                    self.fence("another process judged this worker dead");
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot take units from the pool");
                    break;
                }
            }
        }
    }
}

/// How often a host polls the ledger's activity counter for work recorded by other processes,
/// on a ledger that does not push notifications (redb).
const ACTIVITY_POLL: Duration = Duration::from_millis(100);

/// How long one wait for a notification lasts before the listener looks at `stop` again.
const LISTEN_SLICE: Duration = Duration::from_millis(500);

/// Wakes the housekeeping loop as soon as another process records something for a host to act
/// on (a dispatch, an interrupt, a session end), instead of at the next sweep: on PostgreSQL by
/// `LISTEN` (the server pushes each change), on redb by one cheap read of the activity counter
/// per poll.
async fn watch_activity(inner: Arc<Inner>) {
    match inner.call(|l| l.listen(&[ledger::Listen::Activity])).await {
        Ok(Some(listener)) => return listen_activity(inner, listener).await,
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for the ledger's notifications; polling")
        }
    }
    let mut stop = inner.stop.subscribe();
    let mut seen = None;
    loop {
        match inner.call(|l| l.activity()).await {
            Ok(now) if seen.is_some_and(|seen| seen != now) => {
                seen = Some(now);
                inner.wake.notify_one();
            }
            Ok(now) => seen = Some(now),
            Err(e) => tracing::debug!(error = %e, "cannot read the ledger's activity"),
        }
        tokio::select! {
            () = tokio::time::sleep(ACTIVITY_POLL) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// `watch_activity` on a ledger that pushes notifications: each one wakes the loop. A dropped
/// connection is re-established by the listener with a growing pause; it reports that it
/// reconnected, and the loop looks, since notices may have been missed meanwhile.
async fn listen_activity(inner: Arc<Inner>, listener: ledger::Listener) {
    // What was recorded before the `LISTEN` took effect sent no notice this listener heard:
    // look once now.
    inner.wake.notify_one();
    let listener = Arc::new(std::sync::Mutex::new(listener));
    loop {
        if *inner.stop.borrow() || inner.fenced.load(Ordering::SeqCst) {
            return;
        }
        let waiting = Arc::clone(&listener);
        let waited = tokio::task::spawn_blocking(move || {
            waiting
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .wait(LISTEN_SLICE)
        })
        .await;
        match waited {
            Ok(Ok(notices)) => {
                if !notices.is_empty() {
                    inner.wake.notify_one();
                }
            }
            // The listener reconnects on a later wait, pausing between failed attempts.
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "lost the ledger's notifications; reconnecting")
            }
            Err(e) => {
                tracing::warn!(error = %e, "the notification listener failed");
                return;
            }
        }
    }
}

/// The host's housekeeping loop.
async fn maintain(inner: Arc<Inner>) {
    let mut stop = inner.stop.subscribe();
    let config = inner.ctx.config.clone();
    let registered = inner.ctx.clock.now();
    let (mut last_renewal, mut renewed) = (registered, registered);
    let mut last_progress = Timestamp(0);
    let mut last_sweep = Timestamp(0);
    let reaper = crate::reaper::OsReaper::new();
    loop {
        let now = inner.ctx.clock.now();
        if now.ms_since(last_renewal) >= millis(config.heartbeat_interval) {
            last_renewal = now;
            let (me, host_id, lease) = (inner.me, inner.host_id, millis(config.lease));
            match inner
                .call(move |l| l.renew_host(me, host_id, lease, now))
                .await
            {
                Ok(_) => renewed = now,
                Err(RegistryError::Ledger(LedgerError::LeaseLost(_))) => {
                    crate::counts::lease_renewal_failed();
                    inner.fence("another process judged this host dead and recovered its units");
                    return;
                }
                Err(e) => {
                    crate::counts::lease_renewal_failed();
                    tracing::warn!(error = %e, "cannot renew the host's lease");
                }
            }
        }
        if now.ms_since(renewed) >= millis(config.self_fence_after) {
            inner.fence("the lease could not be renewed in time");
            return;
        }
        if now.ms_since(last_sweep) >= millis(config.recovery_interval) {
            last_sweep = now;
            let (reaper, config) = (reaper.clone(), config.clone());
            let swept = inner
                .call(move |l| crate::housekeeping::sweep(l, &reaper, &config, now, false))
                .await;
            if let Err(e) = swept {
                tracing::warn!(error = %e, "recovery sweep failed");
            }
        }
        if now.ms_since(last_progress) >= millis(config.progress_interval) {
            last_progress = now;
            inner.persist_progress().await;
        }
        inner.poll_interrupts().await;
        if inner.options.kind != HostKind::Inline {
            inner.pick_up().await;
        }
        tokio::select! {
            () = tokio::time::sleep(config.sweep_interval) => {}
            () = inner.wake.notified() => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}
