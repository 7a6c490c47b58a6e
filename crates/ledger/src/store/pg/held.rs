//! Writes a transaction holds back and sends together: the units, children, tallies and events
//! it wrote and the activity counter's moves, sent in one statement at its commit (or before a
//! statement that reads what they change), not one statement each.
//!
//! A dispatch writes its unit, its children and the activity counter; a child's finish its
//! child, its unit and its event; a group commit of many of them the same per unit. Each would
//! be a round trip of its own; held, they are one `WITH … INSERT` whose parts are all the
//! tables a transaction wrote (a part with nothing to write inserts nothing).
//!
//! What may read a held write sends it first, by what it names ([`Tx::send_held_read_by`]): a
//! statement naming the units' table or a `hermes_read_*` function sends the held units, one
//! naming the events' table the held events, one naming the metadata table the held activity
//! moves. A read of a held child answers from here and any other read of the children's table
//! sends everything first (`ReadTx::children` and the like); tallies are read through
//! [`super::tx::Seen`], which has every tally written; units through it too, by id.

use std::collections::BTreeMap;

use super::rows::{EventColumns, EventRow};
use super::tx::{Tx, encode, int};
use crate::error::Result;
use crate::model::{Child, SessionId, UnitRecord, UnitStatus, UnitTally};
use crate::store::META_ACTIVITY;

/// The writes a transaction holds back ([`Tx::send_held`]).
#[derive(Default)]
pub(super) struct Held {
    pub(super) units: BTreeMap<String, UnitRecord>,
    pub(super) children: BTreeMap<(String, u32), Child>,
    pub(super) tallies: BTreeMap<String, Option<UnitTally>>,
    pub(super) events: BTreeMap<(String, i64), EventRow>,
    /// How far the activity counter moved.
    pub(super) activity: i64,
}

/// Which held writes to send.
#[derive(Clone, Copy, Default)]
struct Parts {
    units: bool,
    children_and_tallies: bool,
    events: bool,
    activity: bool,
}

impl Parts {
    const ALL: Parts = Parts {
        units: true,
        children_and_tallies: true,
        events: true,
        activity: true,
    };

    /// What a statement of text `sql` may read of the held writes.
    fn read_by(sql: &str) -> Parts {
        Parts {
            units: sql.contains("hermes_units") || sql.contains("hermes_read_"),
            children_and_tallies: false,
            events: sql.contains("hermes_events"),
            activity: sql.contains("hermes_meta"),
        }
    }
}

/// Every held write in one statement: each part inserts (or deletes) the rows of its arrays,
/// none when they are empty.
const SEND: &str = concat!(
    "WITH u AS (INSERT INTO hermes_units (id, session, status, dispatched_at, active, \
     queue_seq, delivery, record, host_pid, host_start) \
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bool[], \
     $6::bigint[], $7::text[], $8::bytea[], $9::bigint[], $10::bigint[]) \
     ON CONFLICT (id) DO UPDATE SET session = EXCLUDED.session, status = EXCLUDED.status, \
     dispatched_at = EXCLUDED.dispatched_at, active = EXCLUDED.active, \
     queue_seq = EXCLUDED.queue_seq, delivery = EXCLUDED.delivery, record = EXCLUDED.record, \
     host_pid = EXCLUDED.host_pid, host_start = EXCLUDED.host_start), \
     c AS (INSERT INTO hermes_children (unit, idx, record) \
     SELECT * FROM unnest($11::text[], $12::bigint[], $13::bytea[]) \
     ON CONFLICT (unit, idx) DO UPDATE SET record = EXCLUDED.record), \
     t AS (INSERT INTO hermes_tallies (unit, record) \
     SELECT * FROM unnest($14::text[], $15::bytea[]) \
     ON CONFLICT (unit) DO UPDATE SET record = EXCLUDED.record), \
     g AS (DELETE FROM hermes_tallies WHERE unit = ANY($16)), \
     m AS (INSERT INTO hermes_meta (key, value) SELECT $33::text, $17 WHERE $17 > 0 \
     ON CONFLICT (key) DO UPDATE SET value = hermes_meta.value + EXCLUDED.value) \
     INSERT INTO hermes_events (",
    super::rows::event_columns!(),
    ") SELECT * FROM unnest($18::text[], $19::bigint[], $20::text[], $21::text[], \
     $22::text[], $23::bigint[], $24::bytea[], $25::text[], $26::bigint[], $27::bigint[], \
     $28::bigint[], $29::bigint[], $30::bigint[], $31::text[], $32::bytea[]) \
     ON CONFLICT (unit, code) DO NOTHING"
);

impl Tx<'_, '_> {
    /// Sends every held write, in one statement.
    pub(super) fn send_held(&self) -> Result<()> {
        self.send_parts(Parts::ALL)
    }

    /// Sends the held writes a statement of text `sql` may read.
    pub(super) fn send_held_read_by(&self, sql: &str) -> Result<()> {
        self.send_parts(Parts::read_by(sql))
    }

    fn send_parts(&self, parts: Parts) -> Result<()> {
        let held = {
            let mut held = self.held.borrow_mut();
            let due = (parts.units && !held.units.is_empty())
                || (parts.events && !held.events.is_empty())
                || (parts.activity && held.activity != 0)
                || (parts.children_and_tallies
                    && !(held.children.is_empty() && held.tallies.is_empty()));
            if !due {
                return Ok(());
            }
            // The statement names every table but the children's and the tallies': whatever
            // else is held goes with it. Held children and tallies wait for the commit or a
            // read of their own, so that a group commit's go together.
            let mut out = Held {
                units: std::mem::take(&mut held.units),
                events: std::mem::take(&mut held.events),
                activity: std::mem::take(&mut held.activity),
                ..Held::default()
            };
            if parts.children_and_tallies {
                out.children = std::mem::take(&mut held.children);
                out.tallies = std::mem::take(&mut held.tallies);
            }
            out
        };
        self.send(held)
    }

    fn send(&self, held: Held) -> Result<()> {
        let u = UnitArrays::of(held.units.values());
        let children: Vec<&Child> = held.children.values().collect();
        let child_units: Vec<String> = children
            .iter()
            .map(|c| c.delegation_id.as_str().to_owned())
            .collect();
        let child_indexes: Vec<i64> = children.iter().map(|c| i64::from(c.index)).collect();
        let child_records: Vec<Vec<u8>> = children.iter().map(|c| encode(*c)).collect();
        let (mut tally_units, mut tally_records, mut gone) = (Vec::new(), Vec::new(), Vec::new());
        for (unit, tally) in held.tallies {
            match tally {
                Some(tally) => {
                    tally_units.push(unit);
                    tally_records.push(encode(&tally));
                }
                None => gone.push(unit),
            }
        }
        let e = EventColumns::of(held.events.into_values().collect());
        self.dirty.set(true);
        self.query_as_is(
            SEND,
            &[
                &u.ids,
                &u.sessions,
                &u.statuses,
                &u.dispatched,
                &u.active,
                &u.queue_seqs,
                &u.deliveries,
                &u.records,
                &u.host_pids,
                &u.host_starts,
                &child_units,
                &child_indexes,
                &child_records,
                &tally_units,
                &tally_records,
                &gone,
                &held.activity,
                &e.units,
                &e.codes,
                &e.sessions,
                &e.deliveries,
                &e.states,
                &e.attempts,
                &e.tokens,
                &e.consumers,
                &e.claimed,
                &e.expires,
                &e.published,
                &e.delivered,
                &e.dropped,
                &e.reasons,
                &e.payloads,
                &META_ACTIVITY,
            ],
        )
        .map(drop)
    }
}

/// The held units as the columns of their table, one array each.
struct UnitArrays {
    ids: Vec<String>,
    sessions: Vec<Option<String>>,
    statuses: Vec<String>,
    dispatched: Vec<i64>,
    active: Vec<bool>,
    queue_seqs: Vec<Option<i64>>,
    deliveries: Vec<String>,
    records: Vec<Vec<u8>>,
    host_pids: Vec<Option<i64>>,
    host_starts: Vec<Option<i64>>,
}

impl UnitArrays {
    fn of<'a>(units: impl Iterator<Item = &'a UnitRecord>) -> UnitArrays {
        let units: Vec<&UnitRecord> = units.collect();
        UnitArrays {
            ids: units.iter().map(|u| u.id.as_str().to_owned()).collect(),
            sessions: units
                .iter()
                .map(|u| u.session.as_ref().map(SessionId::to_string))
                .collect(),
            statuses: units.iter().map(|u| u.status.as_str().to_owned()).collect(),
            dispatched: units.iter().map(|u| int(u.dispatched_at.0)).collect(),
            active: units.iter().map(|u| !u.status.is_terminal()).collect(),
            // Only a queued unit has its place in the queue's index.
            queue_seqs: units
                .iter()
                .map(|u| {
                    u.queue_seq
                        .filter(|_| u.status == UnitStatus::Queued)
                        .map(int)
                })
                .collect(),
            deliveries: units
                .iter()
                .map(|u| u.spec.delivery.as_str().to_owned())
                .collect(),
            records: units.iter().map(|u| encode(*u)).collect(),
            host_pids: units
                .iter()
                .map(|u| u.host.map(|h| i64::from(h.pid)))
                .collect(),
            host_starts: units
                .iter()
                .map(|u| u.host.map(|h| int(h.start_time)))
                .collect(),
        }
    }
}
