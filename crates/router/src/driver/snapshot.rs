//! What a boundary looks at: one read of the session, its open events and their units.

use std::collections::HashSet;

use ledger::{Delegation, DelegationId, SessionState, Timestamp};

use super::Router;
use crate::error::RouterError;
use crate::ready::Snapshot;

impl Router {
    /// Reads the session, its open events and their units.
    pub(super) fn snapshot(&self, now: Timestamp) -> Result<Snapshot, RouterError> {
        let session = &self.config.session;
        let record = self.ledger.session(session)?;
        let Some(record) = record else {
            return Ok(Snapshot::default());
        };
        if record.state == SessionState::Ended {
            return Ok(Snapshot {
                events: self.ledger.open_events(session)?,
                session: Some(record),
                units: Vec::new(),
            });
        }
        // One read of every open event, then the record of each unit with something ready (the
        // render function needs it); held units need none.
        let events = self.ledger.open_events(session)?;
        let mut units: Vec<Delegation> = Vec::new();
        let mut known: HashSet<DelegationId> = HashSet::new();
        for event in &events {
            if !event.is_deliverable(now) || !known.insert(event.delegation_id.clone()) {
                continue;
            }
            if let Some(unit) = self.ledger.delegation(&event.delegation_id)? {
                units.push(unit);
            }
        }
        Ok(Snapshot {
            session: Some(record),
            events,
            units,
        })
    }
}
