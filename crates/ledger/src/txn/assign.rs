//! Which host a unit is assigned to, inside a transaction: moving one unit (its tally kept in
//! step) and handing a session's queued units to its new host.

use crate::error::Result;
use crate::model::{ProcessId, SessionId, UnitRecord, UnitStatus};
use crate::store::Writer;

/// Moves a unit to another host (or to none), keeping its tally in step.
pub(crate) fn set_host(
    w: &Writer<'_>,
    unit: &mut UnitRecord,
    host: Option<ProcessId>,
) -> Result<()> {
    unit.host = host;
    w.put_delegation(unit)?;
    if let Some(mut tally) = w.tally(&unit.id)? {
        tally.host = host;
        w.put_tally(&unit.id, &tally)?;
    }
    Ok(())
}

/// Hands `session`'s queued units (not a pool's) to `host` inside `w`, as a session's host
/// changes (`--resume`, a new headless host): returns how many moved.
pub(crate) fn adopt_in(w: &Writer<'_>, session: &SessionId, host: ProcessId) -> Result<usize> {
    let mut moved = 0;
    for mut unit in w.active_units()? {
        if unit.session.as_ref() == Some(session)
            && unit.status == UnitStatus::Queued
            && unit.pool().is_none()
            && unit.host != Some(host)
        {
            set_host(w, &mut unit, Some(host))?;
            moved += 1;
        }
    }
    Ok(moved)
}
