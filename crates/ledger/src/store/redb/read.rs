//! The ledger's reads on redb (`ReadTx`), written once for both kinds of redb transaction
//! through [`Tables`].

use redb::ReadableTable;

use super::guard::storage;
use super::tables::*;
use crate::codec::decode_record as decode;
use crate::error::Result;
use crate::model::legacy::{decode_child, decode_delegation, decode_event, decode_host};
use crate::model::{
    Child, ClaimRecord, ClaimToken, DelegationId, Event, EventRef, HostRecord, ProcessId, Session,
    SessionId, Stalling, Timestamp, UnitRecord, UnitTally,
};
use crate::store::{ReadTx, ended, event_ref, key_code, session_part};

use super::tx::*;

impl<T: Tables> ReadTx for T {
    fn session(&self, id: &SessionId) -> Result<Option<Session>> {
        let table = self.open(SESSIONS).map_err(storage)?;
        let row = table.get(id.as_str()).map_err(storage)?;
        row.map(|v| decode(self.path(), "session", v.value()))
            .transpose()
    }

    fn sessions(&self) -> Result<Vec<Session>> {
        let table = self.open(SESSIONS).map_err(storage)?;
        let mut out = Vec::new();
        for row in table.iter().map_err(storage)? {
            let (_, v) = row.map_err(storage)?;
            out.push(decode(self.path(), "session", v.value())?);
        }
        Ok(out)
    }

    fn host(&self, process: ProcessId) -> Result<Option<HostRecord>> {
        let table = self.open(HOSTS).map_err(storage)?;
        let row = table
            .get((process.pid, process.start_time))
            .map_err(storage)?;
        row.map(|v| decode_host(self.path(), v.value())).transpose()
    }

    fn hosts(&self) -> Result<Vec<HostRecord>> {
        let table = self.open(HOSTS).map_err(storage)?;
        let mut out = Vec::new();
        for row in table.iter().map_err(storage)? {
            let (_, v) = row.map_err(storage)?;
            out.push(decode_host(self.path(), v.value())?);
        }
        Ok(out)
    }

    /// The last output a host stored for a running child, if any.
    fn child_tail(&self, id: &DelegationId, index: u32) -> Result<Option<String>> {
        let table = match self.open(CHILD_TAILS) {
            Ok(table) => table,
            // A file written before format 2 has no tails.
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(err) => return Err(storage(err)),
        };
        let row = table.get((id.as_str(), index)).map_err(storage)?;
        Ok(row.map(|v| v.value().to_owned()))
    }

    fn delegation(&self, id: &str) -> Result<Option<UnitRecord>> {
        let table = self.open(DELEGATIONS).map_err(storage)?;
        let row = table.get(id).map_err(storage)?;
        self.counters().count(1);
        row.map(|v| decode_delegation(self.path(), v.value()))
            .transpose()
    }

    fn delegation_exists(&self, id: &str) -> Result<bool> {
        let table = self.open(DELEGATIONS).map_err(storage)?;
        Ok(table.get(id).map_err(storage)?.is_some())
    }

    fn child(&self, id: &DelegationId, index: u32) -> Result<Option<Child>> {
        let table = self.open(CHILDREN).map_err(storage)?;
        let row = table.get((id.as_str(), index)).map_err(storage)?;
        self.counters().count(1);
        row.map(|v| decode_child(self.path(), v.value()))
            .transpose()
    }

    fn children(&self, id: &DelegationId) -> Result<Vec<Child>> {
        let table = self.open(CHILDREN).map_err(storage)?;
        let mut out = Vec::new();
        for row in table.range(by_id(id.as_str())).map_err(storage)? {
            let (_, v) = row.map_err(storage)?;
            out.push(decode_child(self.path(), v.value())?);
        }
        self.counters().count(out.len() as u64);
        Ok(out)
    }

    /// The children of a unit found stalling, by index.
    fn stalls(&self, id: &DelegationId) -> Result<Vec<Stalling>> {
        let Some(table) = open_added!(self, CHILD_STALLS) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for row in table.range(by_id(id.as_str())).map_err(storage)? {
            let (_, v) = row.map_err(storage)?;
            out.push(decode(self.path(), "stall", v.value())?);
        }
        Ok(out)
    }

    fn tally(&self, id: &DelegationId) -> Result<Option<UnitTally>> {
        let Some(table) = open_added!(self, UNIT_TALLIES) else {
            return Ok(None);
        };
        let row = table.get(id.as_str()).map_err(storage)?;
        row.map(|v| decode(self.path(), "tally", v.value()))
            .transpose()
    }

    fn event(&self, event: &EventRef) -> Result<Option<Event>> {
        let table = self.open(EVENTS).map_err(storage)?;
        let row = table
            .get((event.delegation_id.as_str(), key_code(event.key)))
            .map_err(storage)?;
        row.map(|v| decode_event(self.path(), v.value()))
            .transpose()
    }

    fn active_children_of(&self, ids: &[DelegationId]) -> Result<Vec<Child>> {
        let out = rows_of(self, ACTIVE_CHILDREN, ids, decode_child)?;
        self.counters().count(out.len() as u64);
        Ok(out)
    }

    fn active_events_of(&self, ids: &[DelegationId]) -> Result<Vec<Event>> {
        rows_of(self, ACTIVE_EVENTS, ids, decode_event)
    }

    fn events(&self, id: &DelegationId) -> Result<Vec<Event>> {
        let table = self.open(EVENTS).map_err(storage)?;
        let mut out = Vec::new();
        for row in table.range(by_id(id.as_str())).map_err(storage)? {
            let (_, v) = row.map_err(storage)?;
            out.push(decode_event(self.path(), v.value())?);
        }
        Ok(out)
    }

    /// Every pending or claimed event of `session` (`None`: of inline units).
    fn open_events(&self, session: Option<&SessionId>) -> Result<Vec<EventRef>> {
        let table = self.open(OPEN_EVENTS).map_err(storage)?;
        let part = session_part(session);
        let mut out = Vec::new();
        for row in table
            .range((part, "", 0)..(part, ID_END, 0))
            .map_err(storage)?
        {
            let (k, _) = row.map_err(storage)?;
            let (_, id, code) = k.value();
            out.push(event_ref(self.path(), id, code)?);
        }
        Ok(out)
    }

    /// Every pending or claimed event of every session.
    fn all_open_events(&self) -> Result<Vec<EventRef>> {
        let table = self.open(OPEN_EVENTS).map_err(storage)?;
        let mut out = Vec::new();
        for row in table.iter().map_err(storage)? {
            let (k, _) = row.map_err(storage)?;
            let (_, id, code) = k.value();
            out.push(event_ref(self.path(), id, code)?);
        }
        Ok(out)
    }

    fn claim_record(&self, token: ClaimToken) -> Result<Option<ClaimRecord>> {
        let table = self.open(CLAIMS).map_err(storage)?;
        let row = table.get(token.0).map_err(storage)?;
        row.map(|v| decode(self.path(), "claim", v.value()))
            .transpose()
    }

    /// Queued or running units, in id order.
    fn active_units(&self) -> Result<Vec<UnitRecord>> {
        let table = self.open(ACTIVE_RECORDS).map_err(storage)?;
        let mut out = Vec::new();
        for row in table.iter().map_err(storage)? {
            let (_, v) = row.map_err(storage)?;
            out.push(decode_delegation(self.path(), v.value())?);
        }
        Ok(out)
    }

    /// How many units are recorded, of `session` or of all sessions, up to `at_most` (the
    /// whole table's length is kept by redb; a session's units are counted).
    fn unit_count(&self, session: Option<&SessionId>, at_most: usize) -> Result<usize> {
        match session {
            None => {
                let table = self.open(UNITS_BY_TIME).map_err(storage)?;
                let len = redb::ReadableTableMetadata::len(&*table).map_err(storage)?;
                Ok(usize::try_from(len).unwrap_or(usize::MAX).min(at_most))
            }
            Some(session) => {
                let table = self.open(UNITS_BY_SESSION).map_err(storage)?;
                let s = session.as_str();
                Ok(table
                    .range((s, "")..(s, ID_END))
                    .map_err(storage)?
                    .take(at_most)
                    .count())
            }
        }
    }

    /// The `limit` most recently dispatched units, newest first, optionally of one
    /// session only.
    fn recent_units(&self, session: Option<&SessionId>, limit: usize) -> Result<Vec<UnitRecord>> {
        let mut units = match session {
            None => {
                let table = self.open(UNITS_BY_TIME).map_err(storage)?;
                let mut ids = Vec::new();
                for row in table.iter().map_err(storage)?.rev().take(limit) {
                    let (k, _) = row.map_err(storage)?;
                    ids.push(k.value().1.to_owned());
                }
                delegations(self, ids.iter().map(String::as_str))?
            }
            Some(session) => {
                let table = self.open(UNITS_BY_SESSION).map_err(storage)?;
                let s = session.as_str();
                let mut ids = Vec::new();
                for row in table.range((s, "")..(s, ID_END)).map_err(storage)? {
                    let (k, _) = row.map_err(storage)?;
                    ids.push(k.value().1.to_owned());
                }
                delegations(self, ids.iter().map(String::as_str))?
            }
        };
        units.sort_by(|a, b| {
            b.dispatched_at
                .cmp(&a.dispatched_at)
                .then_with(|| b.id.cmp(&a.id))
        });
        units.truncate(limit);
        Ok(units)
    }

    /// Of all sessions: newest first through the by-time index, past the units in
    /// `ACTIVE_RECORDS` without reading them (every unit not there has ended).
    fn recent_ended_units(
        &self,
        session: Option<&SessionId>,
        limit: usize,
        live: usize,
    ) -> Result<Vec<UnitRecord>> {
        if session.is_some() {
            return Ok(ended(self.recent_units(session, limit + live)?, limit));
        }
        let by_time = self.open(UNITS_BY_TIME).map_err(storage)?;
        let active = self.open(ACTIVE_RECORDS).map_err(storage)?;
        let units = self.open(DELEGATIONS).map_err(storage)?;
        let mut out = Vec::new();
        for row in by_time.iter().map_err(storage)?.rev() {
            if out.len() >= limit {
                break;
            }
            let (k, _) = row.map_err(storage)?;
            let id = k.value().1;
            if active.get(id).map_err(storage)?.is_some() {
                continue;
            }
            if let Some(v) = units.get(id).map_err(storage)? {
                let unit = decode_delegation(self.path(), v.value())?;
                if unit.status.is_terminal() {
                    out.push(unit);
                }
            }
        }
        Ok(out)
    }

    /// A page of the units dispatched before `cutoff`, oldest first, after `after`.
    fn units_before(
        &self,
        cutoff: Timestamp,
        after: Option<&(u64, String)>,
        limit: usize,
    ) -> Result<Vec<(u64, String)>> {
        use std::ops::Bound;
        let table = self.open(UNITS_BY_TIME).map_err(storage)?;
        let start = match after {
            Some((at, id)) => Bound::Excluded((*at, id.as_str())),
            None => Bound::Included((0, "")),
        };
        let mut out = Vec::new();
        for row in table
            .range((start, Bound::Excluded((cutoff.0, ""))))
            .map_err(storage)?
            .take(limit)
        {
            let (k, _) = row.map_err(storage)?;
            let (at, id) = k.value();
            out.push((at, id.to_owned()));
        }
        Ok(out)
    }

    fn meta(&self, key: &str) -> Result<Option<u64>> {
        let table = self.open(META).map_err(storage)?;
        Ok(table.get(key).map_err(storage)?.map(|v| v.value()))
    }

    fn metrics_base(&self) -> Result<Option<Vec<u8>>> {
        let Some(table) = open_added!(self, METRICS_BASE) else {
            return Ok(None);
        };
        Ok(table
            .get(METRICS_BASE_KEY)
            .map_err(storage)?
            .map(|v| v.value().to_vec()))
    }
}

/// Every row of `def` (keyed by unit, then a number) of the units `ids`, by unit.
fn rows_of<T: Tables + ?Sized, R>(
    tables: &T,
    def: redb::TableDefinition<(&'static str, u32), &'static [u8]>,
    ids: &[DelegationId],
    decode: fn(&std::path::Path, &[u8]) -> Result<R>,
) -> Result<Vec<R>> {
    let table = tables.open(def).map_err(storage)?;
    let mut out = Vec::new();
    for id in ids {
        for row in table.range(by_id(id.as_str())).map_err(storage)? {
            let (_, v) = row.map_err(storage)?;
            out.push(decode(tables.path(), v.value())?);
        }
    }
    Ok(out)
}
