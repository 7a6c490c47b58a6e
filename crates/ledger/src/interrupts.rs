//! Interrupts: a queued unit is cancelled at once, a running one flagged for its host to stop.

use crate::error::Result;
use crate::ledger::Ledger;
use crate::model::{DelegationId, ProcessId, Timestamp, UnitStatus};
use crate::txn::interrupt::{InterruptTarget, Interrupts, interrupt_in};

impl Ledger {
    /// Asks for units to be interrupted. Queued units are cancelled at once; running ones are
    /// flagged, and their host stops them (SIGTERM, then SIGKILL) and finalizes them.
    pub fn request_interrupt(
        &self,
        target: &InterruptTarget,
        reason: &str,
        now: Timestamp,
    ) -> Result<Interrupts> {
        self.write(|w| interrupt_in(w, target, reason, now))
    }

    /// Running units of `host` that another process asked to interrupt, with the reason.
    pub fn interrupt_requests(&self, host: ProcessId) -> Result<Vec<(DelegationId, String)>> {
        self.read(|r| {
            Ok(r.active_units()?
                .into_iter()
                .filter(|u| u.host == Some(host) && u.status == UnitStatus::Running)
                .filter_map(|u| u.interrupt.map(|reason| (u.id, reason)))
                .collect())
        })
    }
}
