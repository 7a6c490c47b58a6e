//! Where a host's units come from: recording a dispatch, launching a unit here, picking up its
//! session's queued units and, for a worker, taking its pool's.

use std::sync::Arc;

use std::sync::atomic::Ordering;

use hermes_ledger::{
    Admission, Capacity, Channel, Ledger, LedgerError, NewDelegation, SessionId, Timestamp,
    UnitRecord, UnitStatus, WorkerPool,
};
use tokio::sync::watch;

use crate::child::LiveChild;
use crate::config::Config;
use crate::error::RegistryError;
use crate::transcript;
use crate::unit::{self, UnitParts, UnitProgress};

use super::KEPT_REPORTS;
use super::Publisher;
use super::inner::{Inner, Persisted, UnitEntry};

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
    record_dispatch_as(ledger, config, new, now, None)
}

/// [`record_dispatch`] for the session's own host, found by the dispatch's transaction
/// ([`Ledger::dispatch_to_session_host`]): `None`, recording nothing, when the session has no
/// live host (by `liveness`).
pub fn record_dispatch_to_session_host(
    ledger: &Ledger,
    config: &Config,
    new: NewDelegation,
    liveness: &dyn hermes_ledger::Liveness,
    now: Timestamp,
) -> Result<Option<Admission>, RegistryError> {
    record_with(
        config,
        new,
        |new, capacity| ledger.dispatch_to_session_host(new, capacity, liveness, now),
        Option::as_ref,
    )
}

/// [`record_dispatch`], registering the host `registering` in the same commit
/// ([`Ledger::register_and_dispatch`]) when it is given.
pub(super) fn record_dispatch_as(
    ledger: &Ledger,
    config: &Config,
    new: NewDelegation,
    now: Timestamp,
    registering: Option<&hermes_ledger::HostRecord>,
) -> Result<Admission, RegistryError> {
    record_with(
        config,
        new,
        |new, capacity| match registering {
            Some(host) => ledger.register_and_dispatch(host, new, capacity, now),
            None => ledger.dispatch(new, capacity, now),
        },
        |admission: &Admission| Some(admission),
    )
}

/// Checks `new`, makes the transcript root, records `new` through `dispatch` (given the
/// dispatch with its transcript root and the configured capacity) and creates the transcripts
/// of the unit it admitted (`admitted`: the admission in what `dispatch` returned, if any).
fn record_with<T>(
    config: &Config,
    new: NewDelegation,
    dispatch: impl FnOnce(NewDelegation, Capacity) -> hermes_ledger::Result<T>,
    admitted: impl FnOnce(&T) -> Option<&Admission>,
) -> Result<T, RegistryError> {
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
    let recorded = dispatch(new, capacity(config))?;
    // A unit recorded already (a dispatch sent again under its id) has its transcripts, and
    // perhaps its children's output in them.
    if let Some(admission) = admitted(&recorded).filter(|a| !a.already_recorded)
        && let Err(e) = transcript::create_unit(root, &admission.delegation)
    {
        tracing::warn!(delegation = %admission.delegation.id, error = %e, "cannot create transcripts");
    }
    Ok(recorded)
}

use std::os::unix::fs::DirBuilderExt;

fn capacity(config: &Config) -> Capacity {
    Capacity {
        max_running: config.delegation.max_concurrent_children,
        max_queued: config.delegation.max_queued,
    }
}

impl Inner {
    /// Starts running a unit here (once per unit) and returns its progress channel.
    pub(super) fn launch(
        self: &Arc<Inner>,
        unit: UnitRecord,
        parent: Option<SessionId>,
    ) -> watch::Receiver<UnitProgress> {
        self.launch_recorded(unit, parent, 0)
    }

    /// [`Inner::launch`] of a unit whose first `recorded_running` children its dispatch
    /// recorded running (`Ledger::register_and_dispatch`).
    pub(super) fn launch_recorded(
        self: &Arc<Inner>,
        unit: UnitRecord,
        parent: Option<SessionId>,
        recorded_running: u32,
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
                    self.ctx.config.result_max_bytes(),
                    self.progress_changed.clone(),
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
                persisted: vec![Persisted::default(); children.len()],
                children: children.clone(),
            },
        );
        drop(units);
        self.launches.send_modify(|n| *n += 1);
        let parts = UnitParts {
            children,
            interrupt: interrupt_rx,
            progress: progress_tx,
            recorded_running,
        };
        let inner = self.clone();
        tokio::spawn(async move {
            let report = Arc::new(
                unit::run_to_end(Publisher::new(inner.clone()), unit, parent, parts).await,
            );
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
            // A slot may have freed: let the queue move now rather than at the next sweep —
            // a worker's pool, or a queue the last pass saw (or a pass reading now) holds
            // something. A unit queued after a pass's read sends its own activity notice, and
            // the pass that notice starts reads this unit's finish.
            if inner.options.worker.is_some()
                || inner.in_pass.load(Ordering::SeqCst)
                || inner.queue_seen.load(Ordering::SeqCst)
            {
                inner.wake.notify_one();
            }
        });
        progress_rx
    }

    /// A pass of a (non-inline) host over the ledger: takes its pool's units (a worker), then,
    /// from one read ([`hermes_ledger::Ledger::host_pass`]), acts on the interrupts other processes
    /// asked for, starts its queued units that reached the head of the queue, and runs the
    /// units other processes recorded running for it. Returns whether the ledger could be read.
    pub(super) async fn pick_up(self: &Arc<Inner>) -> bool {
        let _gate = self.launch_gate.lock().await;
        let (me, cap) = (self.me, capacity(&self.ctx.config));
        let mut clean = true;
        if let Some(worker) = self.options.worker.clone() {
            clean &= self.take_from_pool(worker).await;
        }
        self.in_pass.store(true, Ordering::SeqCst);
        let read = self.call(move |l| l.host_pass(me, cap)).await;
        // Unknown (the read failed) counts as seen.
        let queued = read.as_ref().map_or(true, |pass| pass.queued);
        self.queue_seen.store(queued, Ordering::SeqCst);
        self.in_pass.store(false, Ordering::SeqCst);
        let pass = match read {
            Ok(pass) => pass,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the host's units");
                return false;
            }
        };
        self.act_on_interrupts(pass.interrupts);
        let mut startable = pass.startable;
        while startable {
            let now = self.ctx.clock.now();
            match self.call(move |l| l.start_next_queued(me, cap, now)).await {
                Ok(Some(unit)) => {
                    let parent = unit.session.clone();
                    self.launch(unit, parent);
                }
                Ok(None) => startable = false,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start queued units");
                    clean = false;
                    startable = false;
                }
            }
        }
        let adopt: Vec<UnitRecord> = {
            let units = self.lock();
            pass.placed
                .into_iter()
                .filter(|u| u.status != UnitStatus::Queued && u.channel == Channel::Background)
                .filter(|u| !units.launched.contains(&u.id))
                .collect()
        };
        for unit in adopt {
            let parent = unit.session.clone();
            self.launch(unit, parent);
        }
        clean
    }
}

impl Inner {
    /// A worker takes units of its pool, oldest first, while it has free slots, and runs them.
    /// Called with the launch gate held.
    /// Returns whether the pool could be read.
    pub(super) async fn take_from_pool(self: &Arc<Inner>, worker: WorkerPool) -> bool {
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
                    return false;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot take units from the pool");
                    return false;
                }
            }
        }
        true
    }
}
