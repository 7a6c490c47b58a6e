//! Worker pools' names and their units inside a transaction: which units may go to a pool, and a
//! unit a dead worker took but never started put back in its pool.

use crate::error::{LedgerError, Result};
use crate::model::{
    Channel, Child, ChildStatus, DelegationId, IdError, SessionId, UnitRecord, UnitStatus,
};
use crate::store::{META_NEXT_QUEUE_SEQ, Writer};
use crate::txn::assign::set_host;

/// The longest pool name.
pub const POOL_NAME_MAX: usize = 128;

/// Checks a pool name: 1 to 128 characters from `A-Z a-z 0-9 . _ : -`, like a session id.
/// Any such name is a pool: a pool exists when it is named.
pub fn check_pool_name(name: &str) -> std::result::Result<(), IdError> {
    let valid = !name.is_empty()
        && name.len() <= POOL_NAME_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(IdError::Pool(name.to_owned()))
    }
}

/// Checks that a unit naming `pool` can go to a pool: a valid name, a background unit of a
/// session (its results need a session to go to).
pub(crate) fn check_pool_unit(
    pool: &str,
    channel: Channel,
    session: Option<&SessionId>,
) -> Result<()> {
    check_pool_name(pool).map_err(|e| LedgerError::Invalid(e.to_string()))?;
    if channel != Channel::Background || session.is_none() {
        return Err(LedgerError::Invalid(format!(
            "pool {pool}: only a background unit of a session can run on a worker pool"
        )));
    }
    Ok(())
}

/// Whether a dead host's running unit is a pool unit none of whose children started: it was
/// taken but never run, so it goes back to its pool instead of ending.
pub(crate) fn returns_to_pool(unit: &UnitRecord, children: &[Child]) -> bool {
    unit.pool().is_some()
        && unit.status == UnitStatus::Running
        && unit.interrupt.is_none()
        && children.iter().all(|c| c.status == ChildStatus::Pending)
}

/// Puts a unit taken by a dead worker back in its pool, at its old place in the FIFO order,
/// and wakes the workers.
pub(crate) fn return_to_pool(w: &Writer<'_>, mut unit: UnitRecord) -> Result<DelegationId> {
    unit.status = UnitStatus::Queued;
    unit.started_at = None;
    if unit.queue_seq.is_none() {
        let seq = w.meta(META_NEXT_QUEUE_SEQ)?.unwrap_or(0);
        w.set_meta(META_NEXT_QUEUE_SEQ, seq + 1)?;
        unit.queue_seq = Some(seq);
    }
    set_host(w, &mut unit, None)?;
    // Waiting again: no tally, so no writer can finish it (see `children::check_owner`).
    w.remove_tally(&unit.id)?;
    w.bump_activity()?;
    Ok(unit.id)
}
