//! Worker pools: units dispatched with a pool wait, FIFO, in that pool's part of the
//! queue until one worker takes one, atomically and fenced by the worker's epoch; a unit taken
//! by a worker that died before it started any child goes back to the pool.
//!
//! A pool unit is an ordinary queued unit (one `QUEUE` table for every queue) whose dispatch
//! names a pool and whose host is `None` while it waits. A worker is an ordinary host record
//! (`HostKind::Worker`) carrying its pool and capacity, so leases, fencing and the recovery
//! sweep treat it like every other host.

use crate::error::{LedgerError, Result};
use crate::ledger::Ledger;
use crate::model::{
    HostId, HostKind, HostRecord, ProcessId, Timestamp, UnitRecord, UnitStatus, UnitTally,
};
use crate::txn::assign::set_host;
use crate::txn::liveness::Liveness;

/// A live worker and what it runs, for `hermes worker list`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerSummary {
    /// Its host record (pool and capacity in `worker`, locality, lease).
    pub host: HostRecord,
    /// Units of its pool it runs now.
    pub running: usize,
}

impl WorkerSummary {
    /// The pool it serves.
    pub fn pool(&self) -> &str {
        self.host.worker.as_ref().map_or("", |w| w.pool.as_str())
    }

    /// How many units it runs at once at most.
    pub fn capacity(&self) -> u32 {
        self.host.worker.as_ref().map_or(0, |w| w.capacity)
    }
}

impl Ledger {
    /// Takes the oldest queued unit of `pool` for the worker `worker` (fencing epoch `writer`),
    /// if the worker runs fewer than `capacity` units: in one transaction the unit becomes
    /// `running` on that worker, so exactly one worker gets it. Looks first through a read, so
    /// an idle worker polling an empty pool takes no write lock.
    ///
    /// Fails with `LeaseLost` if the worker's record is gone or carries another epoch (it was
    /// judged dead): such a worker must stop, not take work.
    pub fn take_pool_unit(
        &self,
        worker: ProcessId,
        writer: HostId,
        pool: &str,
        capacity: u32,
        now: Timestamp,
    ) -> Result<Option<UnitRecord>> {
        let takeable = |active: &[UnitRecord]| {
            running_on(active, worker) < capacity as usize && next_in_pool(active, pool).is_some()
        };
        if !self.read(|r| Ok(takeable(&r.active_units()?)))? {
            return Ok(None);
        }
        self.write_then(|w| {
            if w.host(worker)?.is_none_or(|h| h.host_id != writer) {
                return Err(LedgerError::LeaseLost(writer));
            }
            let active = w.active_units()?;
            if !takeable(&active) {
                return Ok((None, false));
            }
            let Some(mut unit) = next_in_pool(&active, pool).cloned() else {
                return Ok((None, false));
            };
            unit.status = UnitStatus::Running;
            unit.started_at = Some(now);
            set_host(w, &mut unit, Some(worker))?;
            // A waiting pool unit has no tally: only its worker's writes may finish it.
            if UnitTally::wanted(&unit) {
                w.put_tally(&unit.id, &UnitTally::for_unit(&unit))?;
            }
            Ok((Some(unit), true))
        })
    }

    /// Live workers (judged by their lease and, from their own locality, their process), with
    /// what each runs, in order of pool and registration. `pool`: only that pool's.
    pub fn workers(
        &self,
        pool: Option<&str>,
        liveness: &dyn Liveness,
        now: Timestamp,
    ) -> Result<Vec<WorkerSummary>> {
        let here = liveness.locality();
        let (hosts, active) = self.read(|r| Ok((r.hosts()?, r.active_units()?)))?;
        let mut out: Vec<WorkerSummary> = hosts
            .into_iter()
            .filter(|h| h.kind == HostKind::Worker && h.worker.is_some())
            .filter(|h| pool.is_none_or(|p| h.worker.as_ref().is_some_and(|w| w.pool == p)))
            .filter(|h| !h.is_dead(&here, now, &|p| liveness.is_alive(p)))
            .map(|host| WorkerSummary {
                running: running_on(&active, host.process),
                host,
            })
            .collect();
        out.sort_by(|a, b| {
            (a.pool(), a.host.registered_at, a.host.process).cmp(&(
                b.pool(),
                b.host.registered_at,
                b.host.process,
            ))
        });
        Ok(out)
    }
}

/// Units running on `worker`.
fn running_on(active: &[UnitRecord], worker: ProcessId) -> usize {
    active
        .iter()
        .filter(|u| u.status == UnitStatus::Running && u.host == Some(worker))
        .count()
}

/// The oldest unit waiting in `pool`.
fn next_in_pool<'a>(active: &'a [UnitRecord], pool: &str) -> Option<&'a UnitRecord> {
    active
        .iter()
        .filter(|u| u.status == UnitStatus::Queued && u.pool() == Some(pool) && u.host.is_none())
        .min_by_key(|u| u.queue_seq)
}
