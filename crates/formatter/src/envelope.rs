//! An envelope: one delegation and the events of it delivered together at one boundary, and
//! which of the two block shapes it takes.

use std::fmt;

use hermes_ledger::{ChildOutcome, Event, EventPayload, UnitRecord, UnitStatus};

use crate::batch::write_batch;
use crate::block::write_single;
use crate::time::RenderContext;

/// One delegation and the events of it being delivered at one boundary. Rendering reads nothing
/// else, so a consumer can format an envelope before it claims the events.
#[derive(Clone, Copy, Debug)]
pub struct Envelope<'a> {
    /// The unit the events belong to.
    pub delegation: &'a UnitRecord,
    /// Its events in this envelope (`task:N` and possibly `terminal`), in any order.
    pub events: &'a [Event],
}

/// How a unit ended when it ended without an event for every child: what a `terminal` event says
/// beyond its children.
pub(crate) struct UnitEnd<'a> {
    pub(crate) status: UnitStatus,
    pub(crate) reason: &'a str,
}

impl<'a> Envelope<'a> {
    /// The envelope of `delegation` carrying `events`.
    pub fn new(delegation: &'a UnitRecord, events: &'a [Event]) -> Envelope<'a> {
        Envelope { delegation, events }
    }

    /// Every child outcome the envelope carries, by task index (a `terminal` event carries
    /// several).
    pub fn outcomes(&self) -> Vec<&'a ChildOutcome> {
        let mut outcomes: Vec<&ChildOutcome> = self
            .events
            .iter()
            .flat_map(|e| e.payload.outcomes())
            .collect();
        outcomes.sort_by_key(|o| o.index);
        outcomes
    }

    /// The event keys, in the order of the events (`task:0`, `terminal`, …).
    pub fn event_keys(&self) -> Vec<String> {
        self.events.iter().map(|e| e.key.to_string()).collect()
    }

    /// The most claims any of its events has seen so far.
    pub fn attempts(&self) -> u32 {
        self.events.iter().map(|e| e.attempts).max().unwrap_or(0)
    }

    /// How many children the unit has: its dispatched task count, or, for a record that lists
    /// none, as many as its outcomes name.
    pub fn task_count(&self) -> u32 {
        let dispatched = self.delegation.task_count();
        if dispatched > 0 {
            return dispatched;
        }
        self.outcomes()
            .iter()
            .map(|o| o.index.saturating_add(1))
            .max()
            .unwrap_or(0)
    }

    /// The `terminal` events' account of how the unit ended, if it has any.
    pub(crate) fn unit_ends(&self) -> Vec<UnitEnd<'a>> {
        self.events
            .iter()
            .filter_map(|e| match &e.payload {
                EventPayload::Terminal {
                    unit_status,
                    reason,
                    ..
                } => Some(UnitEnd {
                    status: *unit_status,
                    reason,
                }),
                EventPayload::Task(_) => None,
            })
            .collect()
    }

    /// The unit's status as far as this envelope knows: what a `terminal` event says, else the
    /// delegation's recorded status once terminal, else, when the envelope holds an outcome for
    /// every child, what their statuses add up to, else the recorded status (`running`).
    pub fn unit_status(&self) -> UnitStatus {
        if let Some(end) = self.unit_ends().first() {
            return end.status;
        }
        if self.delegation.status.is_terminal() {
            return self.delegation.status;
        }
        let outcomes = self.outcomes();
        let mut indices: Vec<u32> = outcomes.iter().map(|o| o.index).collect();
        indices.dedup();
        let count = self.task_count();
        if count > 0 && indices.len() == count as usize && indices.iter().all(|&i| i < count) {
            let statuses: Vec<_> = outcomes.iter().map(|o| o.status).collect();
            return UnitStatus::from_children(&statuses);
        }
        self.delegation.status
    }
}

/// Writes one envelope: a single-child block for a one-task unit with its one outcome, a batch
/// envelope otherwise. Ends with a line break.
pub fn write_envelope<W: fmt::Write + ?Sized>(
    w: &mut W,
    envelope: &Envelope<'_>,
    ctx: &RenderContext,
) -> fmt::Result {
    let outcomes = envelope.outcomes();
    match outcomes.as_slice() {
        [only] if envelope.task_count() <= 1 => write_single(w, envelope, only, ctx),
        _ => write_batch(w, envelope, &outcomes, ctx),
    }
}

/// One envelope as text (see [`write_envelope`]).
pub fn render_envelope(envelope: &Envelope<'_>, ctx: &RenderContext) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = write_envelope(&mut out, envelope, ctx);
    out
}
