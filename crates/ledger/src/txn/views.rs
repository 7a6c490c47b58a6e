//! The live views a whole-ledger read builds (`hermes top`'s overview, the metrics' census):
//! units with their children, stalls and events, read in bulk — one statement each on
//! PostgreSQL, never row by row — so a read costs the same few round trips with 5 or 500 live
//! units.

use crate::error::Result;
use crate::model::{Child, DelegationId, Event, HostRecord, Stalling, UnitRecord, UnitStatus};
use crate::store::Reader;

/// A unit with everything a live view shows of it.
#[derive(Clone, Debug, PartialEq)]
pub struct UnitView {
    /// The unit.
    pub unit: UnitRecord,
    /// Its children, by index.
    pub children: Vec<Child>,
    /// Its children found stalling (waiting out their grace period), by index.
    pub stalls: Vec<Stalling>,
    /// Its events, `task:0..` then `terminal`.
    pub events: Vec<Event>,
}

/// The live state of the ledger, as of one read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overview {
    /// Every host record (live or not: the caller judges liveness, which needs the OS).
    pub hosts: Vec<HostRecord>,
    /// Running units, oldest start first.
    pub running: Vec<UnitView>,
    /// Queued units in FIFO order.
    pub queued: Vec<UnitView>,
    /// The most recently dispatched terminal units, newest first.
    pub recent: Vec<UnitView>,
}

/// Hosts, running and queued units, with their rows.
pub(crate) fn live(r: &Reader<'_>) -> Result<Overview> {
    let (mut running, mut queued): (Vec<UnitRecord>, Vec<UnitRecord>) = r
        .active_units()?
        .into_iter()
        .partition(|u| u.status != UnitStatus::Queued);
    running.sort_by_key(|u| (u.started_at, u.dispatched_at));
    queued.sort_by_key(|u| u.queue_seq);
    Ok(Overview {
        hosts: r.hosts()?,
        running: views_of(r, running, Units::Active)?,
        queued: views_of(r, queued, Units::Active)?,
        recent: Vec::new(),
    })
}

/// Which units a bulk read of views is of.
#[derive(Clone, Copy, PartialEq)]
enum Units {
    /// Queued or running units, all of them of the read's snapshot: their children and events
    /// are read where the backend keeps those of the active units apart.
    Active,
    /// Any units.
    Any,
}

/// Units with their children, stalls and events, read in bulk.
pub(crate) fn views(r: &Reader<'_>, units: Vec<UnitRecord>) -> Result<Vec<UnitView>> {
    views_of(r, units, Units::Any)
}

fn views_of(r: &Reader<'_>, units: Vec<UnitRecord>, of: Units) -> Result<Vec<UnitView>> {
    if units.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<DelegationId> = units.iter().map(|u| u.id.clone()).collect();
    let (children, events) = match of {
        Units::Active => (r.active_children_of(&ids)?, r.active_events_of(&ids)?),
        Units::Any => (r.children_of(&ids)?, r.events_of(&ids)?),
    };
    let mut children = group(children, |c| c.delegation_id.clone());
    let mut events = group(events, |e| e.delegation_id.clone());
    let mut stalls = group(r.stalls_of(&ids)?, |(id, _)| id.clone());
    Ok(units
        .into_iter()
        .map(|unit| UnitView {
            children: children.remove(&unit.id).unwrap_or_default(),
            events: events.remove(&unit.id).unwrap_or_default(),
            stalls: stalls
                .remove(&unit.id)
                .unwrap_or_default()
                .into_iter()
                .map(|(_, s)| s)
                .collect(),
            unit,
        })
        .collect())
}

/// Rows grouped by their unit, each group in the order read.
fn group<T>(
    rows: Vec<T>,
    key: impl Fn(&T) -> DelegationId,
) -> std::collections::HashMap<DelegationId, Vec<T>> {
    let mut out: std::collections::HashMap<DelegationId, Vec<T>> = Default::default();
    for row in rows {
        out.entry(key(&row)).or_default().push(row);
    }
    out
}
