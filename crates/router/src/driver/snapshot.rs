//! What a boundary looks at: one read of the session, its open events and their units.

use hermes_ledger::{BoundaryView, Timestamp};

use super::Router;
use crate::error::RouterError;
use crate::ready::Snapshot;

impl Router {
    /// Reads the session, its open events and the units of those a consumer could claim now,
    /// in one read transaction.
    pub(super) fn snapshot(&self, now: Timestamp) -> Result<Snapshot, RouterError> {
        let BoundaryView {
            session,
            events,
            units,
        } = self.ledger.boundary_view(&self.config.session, now)?;
        Ok(Snapshot {
            session,
            events,
            units,
        })
    }
}
