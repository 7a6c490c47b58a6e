//! What ages out, as steps of a recovery sweep ([`Ledger::recover`]): open events past the
//! replay limit (`delivery.replay_max_age_hours`) dropped; and retention, the terminal units
//! that ended before `delivery.retention_days` removed, with their children, events, claims and
//! index rows, as the sweep's last step. The purge goes in short, paced write transactions, sized to hold the
//! write lock about [`PURGE_TXN_MS`], and spends at most `purge_budget_ms` of one sweep: a
//! backlog of a million units never holds other writers up longer than one batch, and a
//! short-lived command that sweeps never pays for it.

use crate::error::Result;
use crate::ledger::Ledger;
use crate::model::{DelegationId, DropReason, Timestamp, UnitRecord};
use crate::rules;

/// Units the retention purge removes in its first write transaction of a sweep; later ones
/// take more or fewer, so that each holds the write lock about [`PURGE_TXN_MS`] (see
/// `purge_old_units`).
pub const PURGE_BATCH: usize = 64;
/// The fewest and the most units one purge transaction removes.
const PURGE_BATCH_RANGE: (usize, usize) = (8, 1_024);
/// How long one purge transaction aims to hold the write lock, in milliseconds: a dispatch or
/// an ack that waits behind it waits about this long, not the whole purge.
pub const PURGE_TXN_MS: u64 = 15;
/// The least pause after each purge transaction, so that writers waiting for the lock take
/// it between two of them (a lock's waiters are not served in order). The pause is as long as
/// the transaction took when that is longer: the purge takes at most half of the ledger's
/// time while it runs, and leaves the rest (and the machine's CPU and disk) to the writers.
const PURGE_PAUSE: std::time::Duration = std::time::Duration::from_millis(3);
/// The wall time one sweep spends on the purge by default, in milliseconds
/// ([`LedgerConfig::purge_budget_ms`]); the next sweep goes on where it stopped.
pub const PURGE_BUDGET_MS: u64 = 250;

impl Ledger {
    /// Drops the open events past the replay limit (the sweep's look found one); returns how
    /// many.
    pub(crate) fn expire_events(&self, now: Timestamp) -> Result<usize> {
        let cutoff = now.minus_ms(self.config.replay_max_age_ms);
        let expired =
            |event: &crate::model::Event| event.published_at < cutoff && event.is_deliverable(now);
        self.write_then(|w| {
            let mut count = 0;
            for event_ref in w.all_open_events()? {
                let Some(mut event) = w.event(&event_ref)? else {
                    continue;
                };
                if expired(&event) {
                    if let Some(lease) = event.lease.take() {
                        w.remove_claim(lease.token)?;
                    }
                    rules::drop_event(&mut event, DropReason::ReplayExpired, now);
                    w.put_event(&event)?;
                    count += 1;
                }
            }
            Ok((count, count > 0))
        })
    }

    /// Removes the terminal units that ended before the retention cutoff, in short write
    /// transactions: each removes [`PURGE_BATCH`] units at first, then as many as hold the
    /// write lock about [`PURGE_TXN_MS`], with a pause after each as long as it took (at least
    /// [`PURGE_PAUSE`]) so that other writers take the lock between them. However many units
    /// expired, no other process waits longer than one batch, and one sweep spends at most
    /// `purge_budget_ms` on it (at least one batch): the next sweep goes on where this one
    /// stopped, as it does after a sweep that stopped half-way (a crash, a lost connection) —
    /// whole batches are done.
    pub(crate) fn purge_old_units(&self, now: Timestamp, purged: &mut usize) -> Result<()> {
        let cutoff = now.minus_ms(self.config.retention_ms);
        let budget = std::time::Duration::from_millis(self.config.purge_budget_ms);
        let target = std::time::Duration::from_millis(PURGE_TXN_MS);
        let (fewest, most) = PURGE_BATCH_RANGE;
        let started = std::time::Instant::now();
        let mut batch = PURGE_BATCH;
        let mut after = None;
        loop {
            let began = std::time::Instant::now();
            let Some(last) = self.purge_batch(cutoff, after.as_ref(), batch, purged)? else {
                return Ok(());
            };
            after = Some(last);
            let took = began.elapsed();
            batch = if took > target * 2 {
                (batch / 2).max(fewest)
            } else if took < target / 2 {
                (batch * 2).min(most)
            } else {
                batch
            };
            if started.elapsed() >= budget {
                return Ok(());
            }
            std::thread::sleep(took.max(PURGE_PAUSE));
        }
    }

    /// One batch of the purge: the next `limit` units dispatched before `cutoff` after the
    /// by-time key `after`, read first; those of them that ended before `cutoff` are removed
    /// in one write (re-checked inside it), none if none did. Returns the last key read while
    /// there may be more.
    pub(crate) fn purge_batch(
        &self,
        cutoff: Timestamp,
        after: Option<&(u64, String)>,
        limit: usize,
        purged: &mut usize,
    ) -> Result<Option<(u64, String)>> {
        let expired = |units: Vec<UnitRecord>| -> Vec<UnitRecord> {
            units
                .into_iter()
                .filter(|u| u.status.is_terminal() && u.ended_at.is_some_and(|t| t < cutoff))
                .collect()
        };
        // Most sweeps find no unit that old: one statement, without a transaction around it.
        let (page, due) = self.read_one(|r| {
            let page = r.units_before(cutoff, after, limit)?;
            let ids: Vec<DelegationId> =
                page.iter().filter_map(|(_, id)| id.parse().ok()).collect();
            let due: Vec<DelegationId> = expired(r.delegations_of(&ids)?)
                .into_iter()
                .map(|u| u.id)
                .collect();
            Ok((page, due))
        })?;
        if !due.is_empty() {
            *purged += self.write_then(|w| {
                let units = expired(w.delegations_of(&due)?);
                w.purge_delegations(&units)?;
                crate::txn::metrics_base::note_purged(w, &units)?;
                Ok((units.len(), !units.is_empty()))
            })?;
        }
        Ok(page.last().cloned().filter(|_| page.len() == limit))
    }
}
