//! `hermes top`'s refresh in one read transaction ([`Ledger::overview`]): the live state and the
//! most recent ended units, each with its children, stalls and events (`txn/views.rs`).

use crate::error::Result;
use crate::ledger::Ledger;
use crate::model::UnitRecord;
use crate::txn::views::{Overview, live, views};

impl Ledger {
    /// The running and queued units with their children, stalls and events, the
    /// `recent_limit` most recent terminal units likewise, and every host: one read.
    pub fn overview(&self, recent_limit: usize) -> Result<Overview> {
        self.read(|r| {
            let mut overview = live(r)?;
            let extra = overview.running.len() + overview.queued.len();
            let recent: Vec<UnitRecord> = r
                .recent_units(None, recent_limit + extra)?
                .into_iter()
                .filter(|u| u.status.is_terminal())
                .take(recent_limit)
                .collect();
            overview.recent = views(r, recent)?;
            Ok(overview)
        })
    }
}
