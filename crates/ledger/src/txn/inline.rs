//! Delivering an inline unit's events inside a transaction: claimed and acked at once by the
//! process that ran it.

use crate::error::Result;
use crate::model::{DelegationId, Timestamp, Transition};
use crate::rules;
use crate::store::Writer;

/// Marks an inline unit's deliverable events delivered inside `w`, as a claim and its ack at
/// once (one attempt each): after the run showed them ([`Ledger::settle_inline`]), or in the
/// run's last finish (`children::FinishAs::leaving`).
pub(crate) fn deliver_inline(
    w: &Writer<'_>,
    id: &DelegationId,
    now: Timestamp,
) -> Result<Vec<Transition>> {
    let mut transitions = Vec::new();
    for mut event in w.events(id)? {
        if !event.is_deliverable(now) {
            continue;
        }
        let from = event.state;
        if let Some(lease) = event.lease.take() {
            w.remove_claim(lease.token)?;
        }
        // Claimed and acked at once: one attempt, delivered.
        event.attempts += 1;
        rules::ack(&mut event, now);
        w.put_event(&event)?;
        transitions.push(rules::transition(&event, from));
    }
    Ok(transitions)
}
