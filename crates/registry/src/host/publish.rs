//! The fenced writes a running unit makes: a child's start, its stall, its outcome and the
//! unit's settlement, each under the host's fencing epoch. `unit.rs` runs a unit against a
//! [`Publisher`] and sees nothing else of its host.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hermes_ledger::{
    ChildOutcome, ChildStatus, DelegationId, FinishAs, FinishChild, LedgerError, ProcessId,
    Progress, Timestamp, UnitRecord, UnitStatus,
};

use crate::child::Context;
use crate::error::RegistryError;
use crate::unrecorded::{self, Unrecorded};

use super::inner::Inner;

/// What a unit of this host may write, and the context its children start in.
#[derive(Clone, Debug)]
pub(crate) struct Publisher {
    inner: Arc<Inner>,
}

impl Publisher {
    pub(super) fn new(inner: Arc<Inner>) -> Publisher {
        Publisher { inner }
    }

    /// The configuration, clock and sinks children start with.
    pub(crate) fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Whether this host is a worker (its units run for other sessions than its own).
    pub(crate) fn is_worker(&self) -> bool {
        self.inner.is_worker()
    }

    /// Records that a child's process started (what recovery kills if this host dies).
    pub(crate) async fn child_started(
        &self,
        id: &DelegationId,
        index: u32,
        process: ProcessId,
        at: Timestamp,
    ) {
        let (id, writer) = (id.clone(), self.inner.host_id);
        if let Err(e) = self
            .inner
            .call(move |l| l.child_started(writer, &id, index, process, at))
            .await
        {
            tracing::warn!(error = %e, "cannot record a child's start");
        }
    }

    /// Records that a child is stalling (SIGTERM sent), so status views show it during the
    /// grace period.
    pub(crate) async fn child_stalling(
        &self,
        id: &DelegationId,
        stalling: hermes_ledger::Stalling,
    ) {
        let (id, writer) = (id.clone(), self.inner.host_id);
        if let Err(e) = self
            .inner
            .call(move |l| l.child_stalling(writer, &id, &stalling))
            .await
        {
            tracing::warn!(error = %e, "cannot record that a child is stalling");
        }
    }

    /// Publishes a child's outcome; `None` if the ledger kept failing or refused it (the unit
    /// is then finalized with [`Publisher::settle_unit`], or left to recovery).
    /// `progress` is the child's final token, persisted with the outcome; `started` its
    /// process, when its start was never recorded on its own (a short inline child).
    pub(crate) async fn finish_child(
        &self,
        id: &DelegationId,
        outcome: ChildOutcome,
        progress: Option<Progress>,
        started: Option<ProcessId>,
    ) -> Option<FinishChild> {
        let mut attempt = 0u32;
        // From the first failure on, the outcome is also kept beside its transcript (what
        // `delegation status` and, should this host fence, recovery read on this machine).
        let mut kept: Option<Unrecorded> = None;
        loop {
            attempt = attempt.saturating_add(1);
            let (id2, o, p, writer) = (
                id.clone(),
                outcome.clone(),
                progress.clone(),
                self.inner.host_id,
            );
            let now = self.inner.ctx.clock.now();
            let leaving = self
                .inner
                .leaves_with_unit
                .load(Ordering::SeqCst)
                .then_some(self.inner.me);
            let how = FinishAs { started, leaving };
            let finished = {
                // A finish that may leave runs between lease renewals, never beside one.
                let _gate = match leaving {
                    Some(_) => Some(self.inner.renewal_gate.lock().await),
                    None => None,
                };
                let finished = self
                    .inner
                    .call(move |l| l.finish_child_as(writer, &id2, o, p, how, now))
                    .await;
                if finished.as_ref().is_ok_and(|f| f.left) {
                    self.inner.has_left();
                }
                finished
            };
            match finished {
                Ok(finish) => {
                    if kept.is_some() {
                        unrecorded::remove(&outcome.transcript);
                        tracing::info!(delegation = %id, index = outcome.index, attempt, "recorded a finished child's outcome after failed attempts");
                    }
                    return Some(finish);
                }
                Err(
                    e @ (RegistryError::Fenced(_)
                    | RegistryError::Ledger(LedgerError::Fenced { .. })),
                ) => {
                    // Recovered elsewhere, or this host fenced itself: the outcome is not ours to
                    // record any more. One kept beside its transcript stays for recovery on
                    // this machine, which records it rather than `unknown`.
                    tracing::warn!(delegation = %id, index = outcome.index, error = %e, unrecorded = kept.is_some(), "outcome refused: this host no longer owns the unit");
                    return None;
                }
                Err(e) => {
                    // Whatever the failure (an unreachable server, a lock timeout, a revoked
                    // grant, a full disk), a finished child's result is never forgotten: it is
                    // retried, each failure logged, for as long as this host holds its lease.
                    // Once the host fences, the call above refuses and this loop ends; the
                    // unit is left to recovery.
                    // A refusal about the unit itself (it is gone, its session ended) does not
                    // change by retrying: a few attempts, then the unit's finalization.
                    tracing::warn!(delegation = %id, index = outcome.index, attempt, error = %e, "cannot record a finished child's outcome; retrying");
                    let entry = kept.get_or_insert_with(|| Unrecorded {
                        outcome: outcome.clone(),
                        since: now,
                        attempts: 0,
                        error: String::new(),
                    });
                    entry.attempts = attempt;
                    entry.error = hermes_stdx::one_line(&e.to_string());
                    if let Err(io) = entry.write() {
                        tracing::warn!(delegation = %id, index = outcome.index, error = %io, "cannot keep an unrecorded outcome beside its transcript");
                    }
                    if !is_storage(&e) && attempt >= PUBLISH_ATTEMPTS {
                        // Left to `settle_unit`, which records it with the unit.
                        return None;
                    }
                    tokio::time::sleep(retry_pause(attempt)).await;
                }
            }
        }
    }

    /// Makes sure the unit is terminal after its children ran; returns its status.
    pub(crate) async fn settle_unit(
        &self,
        unit: &UnitRecord,
        unpublished: Vec<ChildOutcome>,
        outcomes: &std::collections::BTreeMap<u32, ChildOutcome>,
    ) -> UnitStatus {
        let mut attempt = 0u32;
        loop {
            attempt = attempt.saturating_add(1);
            let (id, writer, outcomes_left) =
                (unit.id.clone(), self.inner.host_id, unpublished.clone());
            let now = self.inner.ctx.clock.now();
            let settled = self
                .inner
                .call(move |l| {
                    if let Some(status) =
                        l.finish_unit(writer, &id, outcomes_left, "finalized_by_host", now)?
                    {
                        return Ok(Some(status));
                    }
                    Ok(l.delegation(&id)?
                        .map(|d| d.status)
                        .filter(|s| s.is_terminal()))
                })
                .await;
            match settled {
                Ok(Some(status)) => {
                    for outcome in &unpublished {
                        unrecorded::remove(&outcome.transcript);
                    }
                    return status;
                }
                Ok(None)
                | Err(
                    RegistryError::Fenced(_) | RegistryError::Ledger(LedgerError::Fenced { .. }),
                ) => {
                    // Not ours to finalize (any more): the unit's own record decides.
                    let statuses: Vec<ChildStatus> = outcomes.values().map(|o| o.status).collect();
                    return UnitStatus::from_children(&statuses);
                }
                Err(e) if !is_storage(&e) && attempt >= PUBLISH_ATTEMPTS => {
                    tracing::warn!(delegation = %unit.id, attempt, error = %e, "cannot finalize a finished unit");
                    let statuses: Vec<ChildStatus> = outcomes.values().map(|o| o.status).collect();
                    return UnitStatus::from_children(&statuses);
                }
                Err(e) => {
                    tracing::warn!(delegation = %unit.id, attempt, error = %e, "cannot finalize a finished unit; retrying");
                    tokio::time::sleep(retry_pause(attempt)).await;
                }
            }
        }
    }
}

/// The pause before the next attempt at recording a result: growing from 100 ms to
/// [`MAX_RETRY_PAUSE`].
fn retry_pause(attempt: u32) -> Duration {
    Duration::from_millis(100)
        .saturating_mul(1 << attempt.min(6))
        .min(MAX_RETRY_PAUSE)
}

/// The longest pause between two attempts at recording a result.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(2);

/// Attempts at recording a result that the ledger refused for a reason about the unit itself
/// (not its storage or server).
const PUBLISH_ATTEMPTS: u32 = 3;

/// Whether `e` is the ledger's storage or server failing (retried while the lease holds).
fn is_storage(e: &RegistryError) -> bool {
    matches!(e, RegistryError::Ledger(err) if err.is_unavailable())
}
