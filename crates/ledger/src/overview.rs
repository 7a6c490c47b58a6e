//! `hermes top`'s refresh in one read transaction ([`Ledger::overview`]): the live state and the
//! most recent ended units, each with its children, stalls and events (`txn/views.rs`).

use crate::error::Result;
use crate::ledger::Ledger;
use crate::txn::views::{Overview, live, views};

impl Ledger {
    /// The running and queued units with their children, stalls and events, the
    /// `recent_limit` most recent terminal units likewise, and every host: one read.
    pub fn overview(&self, recent_limit: usize) -> Result<Overview> {
        self.read(|r| {
            let mut overview = live(r)?;
            let active = overview.running.len() + overview.queued.len();
            if recent_limit > 0 {
                let recent = r.recent_ended_units(None, recent_limit, active)?;
                overview.recent = views(r, recent)?;
            }
            Ok(overview)
        })
    }
}
