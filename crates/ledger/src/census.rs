//! What the metrics count ([`Ledger::census`]) without reading the whole history each time.
//!
//! A unit that has ended, with every event delivered or dropped, no longer changes until
//! retention removes it. The ledger keeps a **metrics base**: the totals ([`Totals`]) of such
//! units up to a watermark in the by-time index (dispatched at, id), with the few units before
//! the watermark that could still change when it passed them (`open`). A census reads the base,
//! the units after the watermark and the open ones, and the live state: what it reads grows
//! with what happened lately, not with the history kept. Then it moves the watermark on over
//! what it read that no longer changes, short of [`FOLD_MARGIN_MS`] before now (a unit is
//! dispatched at its dispatcher's clock and committed a moment later), and stores the new base
//! if no other process stored one meanwhile (compare and set, one small write) — when it counts
//! at least [`FOLD_MIN`] more units; fewer are read again next time instead.
//!
//! The first census of a ledger reads every unit once, [`FOLD_PAGE`] at a time, storing the
//! base after each page. Retention removing a unit the base counts notes it there
//! (`Totals::purged`), in the purge's own transaction: the counters keep every unit ever
//! counted, the gauge of units kept does not. Where the base cannot be stored (a read-only
//! handle, a refused write) a census still counts everything, in memory.
//!
//! A long-lived metrics endpoint also keeps, in its own memory ([`Held`]), the parts of the
//! units after the watermark that no longer change, so that it decodes each of them once.

use std::collections::{HashMap, HashSet};

use crate::codec;
use crate::error::Result;
use crate::ledger::Ledger;
use crate::model::{DelegationId, Event, Part, Timestamp, Totals, UnitRecord};
use crate::store::Reader;
use crate::txn::metrics_base::MetricsBase;
use crate::txn::views::{Overview, live};

/// How long before now the watermark stays: a unit dispatched at its dispatcher's clock and
/// committed a moment later still lands after it. Twice the default host lease: machines
/// sharing a ledger already need clocks that agree well within a lease (other machines judge
/// a host's lease by their own clocks), and a dispatch commits within seconds of its time.
pub const FOLD_MARGIN_MS: u64 = 60 * 1000;
/// The most units one read of a census takes after the watermark by default
/// (`LedgerConfig::census_page`): the first census of a large ledger reads it page by page,
/// folding each.
pub const FOLD_PAGE: usize = 50_000;
/// The fewest changes a census stores a new base for by default
/// (`LedgerConfig::census_fold_min`): a scrape that finds a few units passed or settled reads
/// them again next time (a millisecond) rather than commit a new base each time.
pub const FOLD_MIN: usize = 256;
/// How often a census starts again when another process stored a base meanwhile.
const FOLD_ATTEMPTS: usize = 4;

/// Everything the metrics count, as of one read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Census {
    /// The live state (no recent units).
    pub live: Overview,
    /// What every unit the ledger counted adds up to (those retention removed since included
    /// in the counters, [`Totals::kept`] without them).
    pub totals: Totals,
    /// The events of the units read: every open event among them.
    pub events: Vec<Event>,
    /// How many units this read decoded (the base stands for the others).
    pub read: usize,
}

/// What a long-lived metrics source keeps between its censuses: the parts of the units after
/// the base's watermark that no longer change (the base keeps the ones before it).
#[derive(Debug, Default)]
pub struct Held {
    parts: HashMap<String, Part>,
}

impl Held {
    /// How many units' parts are held.
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }
}

/// One read of a census: the base it started from and the units it does not cover.
struct Look {
    base: MetricsBase,
    /// The stored base as read, for the compare and set (`None`: none stored).
    stored: Option<Vec<u8>>,
    /// The by-time keys after the watermark, in order.
    after: Vec<(u64, String)>,
    /// Whether more keys follow (the live state was not read).
    more: bool,
    units: Vec<UnitRecord>,
    events: Vec<Event>,
    live: Overview,
}

impl Ledger {
    /// The live state, and the totals of every unit counted: one read of what changed since
    /// the stored base (see the module docs), then a small write moving the base on when
    /// something settled before `now` less [`FOLD_MARGIN_MS`]. `held` is what an earlier
    /// census of this process kept (a fresh one for a one-off).
    pub fn census(&self, now: Timestamp, held: &mut Held) -> Result<Census> {
        let horizon = now.minus_ms(FOLD_MARGIN_MS).0;
        // `None`: the stored base; `Some`: carried over from the page before (with the bytes
        // stored for it, or the stale ones when storing failed).
        let mut carried: Option<(MetricsBase, Option<Vec<u8>>)> = None;
        let mut storable = true;
        let mut restarts = 0;
        loop {
            let page = self.config.census_page.max(1);
            let look = self.read(|r| look(r, carried.as_ref(), page, held))?;
            let index = Index::of(&look);
            let next = fold(&look, &index, horizon, held);
            // A page always moves on; the last read stores only enough change to be worth a
            // commit (what it leaves is read again, and counted the same either way).
            let next = if look.more || changes(&look.base, &next) >= self.config.census_fold_min {
                next
            } else {
                look.base.clone()
            };
            let mut stored = look.stored.clone();
            if storable && next != look.base {
                match self.store_base(look.stored.as_deref(), &next) {
                    Ok(Some(bytes)) => stored = Some(bytes),
                    Ok(None) if restarts < FOLD_ATTEMPTS => {
                        // Another process stored a base meanwhile: start from it.
                        restarts += 1;
                        carried = None;
                        continue;
                    }
                    Ok(None) => storable = false,
                    Err(err) => {
                        tracing::debug!(error = %err, "cannot store the metrics base; counting in memory");
                        storable = false;
                    }
                }
            }
            if look.more {
                carried = Some((next, stored));
                continue;
            }
            let totals = held.keep(&look, &index, &next);
            return Ok(Census {
                live: look.live,
                totals,
                read: look.units.len(),
                events: look.events,
            });
        }
    }

    /// Stores `next` if the stored base is still `expected`; the bytes stored, `None` if it
    /// was not.
    fn store_base(&self, expected: Option<&[u8]>, next: &MetricsBase) -> Result<Option<Vec<u8>>> {
        let encoded = codec::encode(next);
        self.write_then(|w| {
            if w.metrics_base()?.as_deref() != expected {
                return Ok((None, false));
            }
            w.put_metrics_base(&encoded)?;
            Ok((Some(encoded.clone()), true))
        })
    }
}

/// Reads the base (`carried`, or the stored one), up to `page` units after its watermark with
/// its open units (but the ones `held` has), and, on the last page, the live state.
fn look(
    r: &Reader<'_>,
    carried: Option<&(MetricsBase, Option<Vec<u8>>)>,
    page: usize,
    held: &Held,
) -> Result<Look> {
    let (base, stored) = match carried {
        Some((base, stored)) => (base.clone(), stored.clone()),
        None => {
            let stored = r.metrics_base()?;
            (decoded(stored.as_deref()), stored)
        }
    };
    let mut after = r.units_before(
        Timestamp(i64::MAX as u64),
        base.through.as_ref(),
        page.saturating_add(1),
    )?;
    let more = after.len() > page;
    after.truncate(page);
    let live = if more { Overview::default() } else { live(r)? };
    // The live units were read with their events just now: taken from there.
    let mut units: Vec<UnitRecord> = Vec::new();
    let mut events: Vec<Event> = Vec::new();
    let mut have: HashSet<&str> = HashSet::new();
    for view in live.running.iter().chain(&live.queued) {
        have.insert(view.unit.id.as_str());
        units.push(view.unit.clone());
        events.extend(view.events.iter().cloned());
    }
    let wanted: Vec<DelegationId> = after
        .iter()
        .map(|(_, id)| id.as_str())
        .chain(base.open.iter().map(String::as_str))
        .filter(|id| !have.contains(id) && !held.parts.contains_key(*id))
        .filter_map(|id| id.parse().ok())
        .collect();
    units.extend(r.delegations_of(&wanted)?);
    events.extend(r.events_of(&wanted)?);
    Ok(Look {
        base,
        stored,
        after,
        more,
        units,
        events,
        live,
    })
}

/// The stored base, or an empty one (none stored, or one this build cannot read: counted
/// again from the start, and stored over only by a census that reads it as this one did).
fn decoded(stored: Option<&[u8]>) -> MetricsBase {
    let Some(bytes) = stored else {
        return MetricsBase::default();
    };
    codec::decode(bytes).unwrap_or_else(|_| {
        tracing::warn!("the stored metrics base cannot be read; counting from the start");
        MetricsBase::default()
    })
}

/// The units a look read, by id, with their events.
struct Index<'l> {
    units: HashMap<&'l str, &'l UnitRecord>,
    events: HashMap<&'l DelegationId, Vec<&'l Event>>,
}

impl<'l> Index<'l> {
    fn of(look: &'l Look) -> Index<'l> {
        let mut events: HashMap<&DelegationId, Vec<&Event>> = HashMap::new();
        for e in &look.events {
            events.entry(&e.delegation_id).or_default().push(e);
        }
        Index {
            units: look.units.iter().map(|u| (u.id.as_str(), u)).collect(),
            events,
        }
    }

    /// The unit `id` as read, with its events.
    fn get(&self, id: &str) -> Option<(&'l UnitRecord, &[&'l Event])> {
        let unit = *self.units.get(id)?;
        let events = self.events.get(&unit.id).map_or(&[][..], Vec::as_slice);
        Some((unit, events))
    }
}

/// The base `look` leads to: its watermark moved on to the last key read dispatched before
/// `horizon`, the units passed that no longer change added (read, or `held`), the others
/// listed open.
fn fold(look: &Look, index: &Index<'_>, horizon: u64, held: &Held) -> MetricsBase {
    let mut next = MetricsBase {
        through: look.base.through.clone(),
        open: Vec::new(),
        totals: look.base.totals.clone(),
    };
    let passed = look.after.iter().take_while(|(at, _)| *at < horizon);
    if let Some(last) = passed.clone().last() {
        next.through = Some(last.clone());
    }
    let candidates = look
        .base
        .open
        .iter()
        .map(String::as_str)
        .chain(passed.map(|(_, id)| id.as_str()));
    for id in candidates {
        let Some((unit, events)) = index.get(id) else {
            // Held: it no longer changes. Neither read nor held: retention removed it before
            // it was counted.
            if let Some(part) = held.parts.get(id) {
                next.totals.add(part);
            }
            continue;
        };
        if Part::settled(unit, events) {
            next.totals.add(&Part::of(unit, events));
        } else {
            next.open.push(id.to_owned());
        }
    }
    next
}

impl Held {
    /// The totals of every unit as of `look`, whose base leads to `next`: `next`'s, its open
    /// units' and those of the units after its watermark (read, or held). Keeps the parts of
    /// those that no longer change, and forgets the ones `next` counts.
    fn keep(&mut self, look: &Look, index: &Index<'_>, next: &MetricsBase) -> Totals {
        let mut totals = next.totals.clone();
        let mut kept = HashMap::with_capacity(self.parts.len());
        let after = look
            .after
            .iter()
            .filter(|key| next.through.as_ref().is_none_or(|through| *key > through))
            .map(|(_, id)| id);
        for id in next.open.iter().chain(after) {
            if let Some((unit, events)) = index.get(id) {
                let part = Part::of(unit, events);
                totals.add(&part);
                if Part::settled(unit, events) {
                    kept.insert(id.clone(), part);
                }
            } else if let Some((id, part)) = self.parts.remove_entry(id.as_str()) {
                // Moved over, key and all: a held unit costs no allocation per census.
                totals.add(&part);
                kept.insert(id, part);
            }
        }
        self.parts = kept;
        totals
    }
}

/// How many units `next` counts that `base` did not: what storing it spares the next census
/// from reading.
fn changes(base: &MetricsBase, next: &MetricsBase) -> usize {
    let counted = next
        .totals
        .dispatches()
        .saturating_sub(base.totals.dispatches());
    usize::try_from(counted).unwrap_or(usize::MAX)
}
