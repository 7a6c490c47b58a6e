//! Interrupting units inside a transaction: a queued unit is cancelled at once, a running one
//! flagged for its host to stop.

use crate::error::{LedgerError, Result};
use crate::model::{DelegationId, SessionId, Timestamp, UnitStatus};
use crate::store::Writer;
use crate::txn::finalize::force_finish;

/// Which units an interrupt is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InterruptTarget {
    /// One unit.
    Delegation(DelegationId),
    /// Every unit of a session.
    Session(SessionId),
    /// Every active unit.
    All,
}

/// What an interrupt request did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Interrupts {
    /// Running units flagged; their host stops them.
    pub flagged: Vec<DelegationId>,
    /// Queued units cancelled at once.
    pub cancelled: Vec<DelegationId>,
}

/// Interrupts units inside `w` (see `Ledger::request_interrupt`).
pub(crate) fn interrupt_in(
    w: &Writer<'_>,
    target: &InterruptTarget,
    reason: &str,
    now: Timestamp,
) -> Result<Interrupts> {
    let mut done = Interrupts::default();
    let units = match target {
        InterruptTarget::Delegation(id) => {
            let unit = w
                .delegation(id.as_str())?
                .ok_or_else(|| LedgerError::DelegationNotFound(id.clone()))?;
            vec![unit]
        }
        InterruptTarget::Session(session) => w
            .active_units()?
            .into_iter()
            .filter(|u| u.session.as_ref() == Some(session))
            .collect(),
        InterruptTarget::All => w.active_units()?,
    };
    if !units.is_empty() {
        w.bump_activity()?;
    }
    for mut unit in units {
        match unit.status {
            UnitStatus::Queued => {
                let id = unit.id.clone();
                force_finish(w, unit, Vec::new(), reason, now)?;
                done.cancelled.push(id);
            }
            UnitStatus::Running => {
                unit.interrupt.get_or_insert_with(|| reason.to_owned());
                w.put_delegation(&unit)?;
                done.flagged.push(unit.id);
            }
            _ => {}
        }
    }
    Ok(done)
}
