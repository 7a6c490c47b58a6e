//! Typed access to the tables inside one transaction.
//!
//! `Reader` wraps a read transaction and `Writer` a write transaction; both offer the same typed
//! getters (generated once by `getters!`), and `Writer` adds the puts that keep the index tables
//! in step with the rows.

use std::cell::Cell;
use std::path::Path;

use redb::{ReadableTable, TableDefinition};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::codec::{self, DecodeError};
use crate::error::{LedgerError, Result};
use crate::model::{
    Child, ClaimToken, Delegation, DelegationId, Event, EventKey, EventRef, Host, ProcessId,
    Session, SessionId, Stalling, Timestamp,
};
use crate::tables::*;
use crate::units::UnitTally;

/// A claim as stored under its token.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClaimRecord {
    /// The token.
    pub token: ClaimToken,
    /// Every key the claim covers.
    pub keys: Vec<EventRef>,
    /// Who holds it.
    pub consumer: String,
    /// When it was taken.
    pub claimed_at: Timestamp,
    /// When its lease runs out.
    pub expires_at: Timestamp,
}

/// Rows decoded whose count can grow with a batch's size (children and units), for tests
/// and benchmarks that check how much an operation reads.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) rows: std::sync::atomic::AtomicU64,
}

impl Counters {
    fn count(&self, n: u64) {
        self.rows.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A table added after format 1's first tables; `None` if this file does not have it yet (a
/// read of an older file).
macro_rules! open_added {
    ($txn:expr, $def:expr) => {
        match $txn.open_table($def) {
            Ok(table) => Some(table),
            Err(redb::TableError::TableDoesNotExist(_)) => None,
            Err(err) => return Err(storage(err)),
        }
    };
}

pub(crate) fn storage<E: Into<redb::Error>>(err: E) -> LedgerError {
    LedgerError::Storage(err.into().into())
}

pub(crate) fn decode<V: DeserializeOwned>(path: &Path, what: &str, bytes: &[u8]) -> Result<V> {
    codec::decode(bytes).map_err(|err| decode_error(path, what, err))
}

/// A host record of any format (format 1 had no fencing epoch, locality or lease; format 2 no
/// worker pool).
pub(crate) fn decode_host(path: &Path, bytes: &[u8]) -> Result<Host> {
    codec::decode_versioned(bytes, |version, rest| {
        let damaged = |err: postcard::Error| DecodeError::Damaged(err.to_string());
        match version {
            1 => postcard::from_bytes::<crate::model::HostV1>(rest)
                .map(Host::from)
                .map_err(damaged),
            2 => postcard::from_bytes::<crate::model::HostV2>(rest)
                .map(Host::from)
                .map_err(damaged),
            _ => postcard::from_bytes::<Host>(rest).map_err(damaged),
        }
    })
    .map_err(|err| decode_error(path, "host", err))
}

/// A unit of any format (formats 1 and 2 had no pool on its dispatch).
pub(crate) fn decode_delegation(path: &Path, bytes: &[u8]) -> Result<Delegation> {
    codec::decode_versioned(bytes, |version, rest| {
        let damaged = |err: postcard::Error| DecodeError::Damaged(err.to_string());
        if version < 3 {
            postcard::from_bytes::<crate::model::DelegationV2>(rest)
                .map(Delegation::from)
                .map_err(damaged)
        } else {
            postcard::from_bytes::<Delegation>(rest).map_err(damaged)
        }
    })
    .map_err(|err| decode_error(path, "delegation", err))
}

fn decode_error(path: &Path, what: &str, err: DecodeError) -> LedgerError {
    match err {
        DecodeError::Newer(found) => LedgerError::NewerFormat {
            path: path.to_owned(),
            found: u32::from(found),
            supported: u32::from(codec::FORMAT_VERSION),
        },
        DecodeError::Damaged(reason) => LedgerError::Damaged {
            path: path.to_owned(),
            reason: format!("{what}: {reason}"),
        },
    }
}

/// The key range of every row whose first key part is `prefix`, for (str, u32) keys.
fn by_id(prefix: &str) -> std::ops::RangeInclusive<(&str, u32)> {
    (prefix, 0)..=(prefix, u32::MAX)
}

/// The session part of an `OPEN_EVENTS` key (`""` for inline units).
pub(crate) fn session_part(session: Option<&SessionId>) -> &str {
    session.map_or("", SessionId::as_str)
}

/// Upper bound (exclusive) for delegation ids, which are ASCII below `~`.
const ID_END: &str = "~";

macro_rules! getters {
    ($ty:ident) => {
        // Each transaction kind uses its own subset of the shared getters.
        #[allow(dead_code)]
        impl $ty<'_> {
            pub(crate) fn session(&self, id: &SessionId) -> Result<Option<Session>> {
                let table = self.txn.open_table(SESSIONS).map_err(storage)?;
                let row = table.get(id.as_str()).map_err(storage)?;
                row.map(|v| decode(self.path, "session", v.value()))
                    .transpose()
            }

            pub(crate) fn sessions(&self) -> Result<Vec<Session>> {
                let table = self.txn.open_table(SESSIONS).map_err(storage)?;
                let mut out = Vec::new();
                for row in table.iter().map_err(storage)? {
                    let (_, v) = row.map_err(storage)?;
                    out.push(decode(self.path, "session", v.value())?);
                }
                Ok(out)
            }

            pub(crate) fn host(&self, process: ProcessId) -> Result<Option<Host>> {
                let table = self.txn.open_table(HOSTS).map_err(storage)?;
                let row = table
                    .get((process.pid, process.start_time))
                    .map_err(storage)?;
                row.map(|v| decode_host(self.path, v.value())).transpose()
            }

            pub(crate) fn hosts(&self) -> Result<Vec<Host>> {
                let table = self.txn.open_table(HOSTS).map_err(storage)?;
                let mut out = Vec::new();
                for row in table.iter().map_err(storage)? {
                    let (_, v) = row.map_err(storage)?;
                    out.push(decode_host(self.path, v.value())?);
                }
                Ok(out)
            }

            /// The last output a host stored for a running child, if any.
            pub(crate) fn child_tail(
                &self,
                id: &DelegationId,
                index: u32,
            ) -> Result<Option<String>> {
                let table = match self.txn.open_table(CHILD_TAILS) {
                    Ok(table) => table,
                    // A file written before format 2 has no tails.
                    Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
                    Err(err) => return Err(storage(err)),
                };
                let row = table.get((id.as_str(), index)).map_err(storage)?;
                Ok(row.map(|v| v.value().to_owned()))
            }

            pub(crate) fn delegation(&self, id: &str) -> Result<Option<Delegation>> {
                let table = self.txn.open_table(DELEGATIONS).map_err(storage)?;
                let row = table.get(id).map_err(storage)?;
                self.counters.count(1);
                row.map(|v| decode_delegation(self.path, v.value()))
                    .transpose()
            }

            pub(crate) fn delegation_exists(&self, id: &str) -> Result<bool> {
                let table = self.txn.open_table(DELEGATIONS).map_err(storage)?;
                Ok(table.get(id).map_err(storage)?.is_some())
            }

            pub(crate) fn child(&self, id: &DelegationId, index: u32) -> Result<Option<Child>> {
                let table = self.txn.open_table(CHILDREN).map_err(storage)?;
                let row = table.get((id.as_str(), index)).map_err(storage)?;
                self.counters.count(1);
                row.map(|v| decode(self.path, "child", v.value()))
                    .transpose()
            }

            pub(crate) fn children(&self, id: &DelegationId) -> Result<Vec<Child>> {
                let table = self.txn.open_table(CHILDREN).map_err(storage)?;
                let mut out = Vec::new();
                for row in table.range(by_id(id.as_str())).map_err(storage)? {
                    let (_, v) = row.map_err(storage)?;
                    out.push(decode(self.path, "child", v.value())?);
                }
                self.counters.count(out.len() as u64);
                Ok(out)
            }

            /// The children of a unit found stalling, by index.
            pub(crate) fn stalls(&self, id: &DelegationId) -> Result<Vec<Stalling>> {
                let Some(table) = open_added!(self.txn, CHILD_STALLS) else {
                    return Ok(Vec::new());
                };
                let mut out = Vec::new();
                for row in table.range(by_id(id.as_str())).map_err(storage)? {
                    let (_, v) = row.map_err(storage)?;
                    out.push(decode(self.path, "stall", v.value())?);
                }
                Ok(out)
            }

            pub(crate) fn tally(&self, id: &DelegationId) -> Result<Option<UnitTally>> {
                let Some(table) = open_added!(self.txn, UNIT_TALLIES) else {
                    return Ok(None);
                };
                let row = table.get(id.as_str()).map_err(storage)?;
                row.map(|v| decode(self.path, "tally", v.value()))
                    .transpose()
            }

            pub(crate) fn event(&self, event: &EventRef) -> Result<Option<Event>> {
                let table = self.txn.open_table(EVENTS).map_err(storage)?;
                let row = table
                    .get((event.delegation_id.as_str(), key_code(event.key)))
                    .map_err(storage)?;
                row.map(|v| decode(self.path, "event", v.value()))
                    .transpose()
            }

            pub(crate) fn events(&self, id: &DelegationId) -> Result<Vec<Event>> {
                let table = self.txn.open_table(EVENTS).map_err(storage)?;
                let mut out = Vec::new();
                for row in table.range(by_id(id.as_str())).map_err(storage)? {
                    let (_, v) = row.map_err(storage)?;
                    out.push(decode(self.path, "event", v.value())?);
                }
                Ok(out)
            }

            /// Every pending or claimed event of `session` (`None`: of inline units).
            pub(crate) fn open_events(&self, session: Option<&SessionId>) -> Result<Vec<EventRef>> {
                let table = self.txn.open_table(OPEN_EVENTS).map_err(storage)?;
                let part = session_part(session);
                let mut out = Vec::new();
                for row in table
                    .range((part, "", 0)..(part, ID_END, 0))
                    .map_err(storage)?
                {
                    let (k, _) = row.map_err(storage)?;
                    let (_, id, code) = k.value();
                    out.push(event_ref(self.path, id, code)?);
                }
                Ok(out)
            }

            /// Every pending or claimed event of every session.
            pub(crate) fn all_open_events(&self) -> Result<Vec<EventRef>> {
                let table = self.txn.open_table(OPEN_EVENTS).map_err(storage)?;
                let mut out = Vec::new();
                for row in table.iter().map_err(storage)? {
                    let (k, _) = row.map_err(storage)?;
                    let (_, id, code) = k.value();
                    out.push(event_ref(self.path, id, code)?);
                }
                Ok(out)
            }

            pub(crate) fn claim_record(&self, token: ClaimToken) -> Result<Option<ClaimRecord>> {
                let table = self.txn.open_table(CLAIMS).map_err(storage)?;
                let row = table.get(token.0).map_err(storage)?;
                row.map(|v| decode(self.path, "claim", v.value()))
                    .transpose()
            }

            /// Queued or running units, in id order.
            pub(crate) fn active_units(&self) -> Result<Vec<Delegation>> {
                let table = self.txn.open_table(ACTIVE_UNITS).map_err(storage)?;
                let mut ids = Vec::new();
                for row in table.iter().map_err(storage)? {
                    let (k, _) = row.map_err(storage)?;
                    ids.push(k.value().to_owned());
                }
                self.delegations(ids.iter().map(String::as_str))
            }

            /// Queued units in FIFO order.
            pub(crate) fn queue(&self) -> Result<Vec<(u64, String)>> {
                let table = self.txn.open_table(QUEUE).map_err(storage)?;
                let mut out = Vec::new();
                for row in table.iter().map_err(storage)? {
                    let (k, v) = row.map_err(storage)?;
                    out.push((k.value(), v.value().to_owned()));
                }
                Ok(out)
            }

            /// The `limit` most recently dispatched units, newest first, optionally of one
            /// session only.
            /// How many units are recorded, of `session` or of all sessions.
            pub(crate) fn unit_count(&self, session: Option<&SessionId>) -> Result<usize> {
                match session {
                    None => {
                        let table = self.txn.open_table(UNITS_BY_TIME).map_err(storage)?;
                        let len = redb::ReadableTableMetadata::len(&table).map_err(storage)?;
                        Ok(usize::try_from(len).unwrap_or(usize::MAX))
                    }
                    Some(session) => {
                        let table = self.txn.open_table(UNITS_BY_SESSION).map_err(storage)?;
                        let s = session.as_str();
                        Ok(table.range((s, "")..(s, ID_END)).map_err(storage)?.count())
                    }
                }
            }

            pub(crate) fn recent_units(
                &self,
                session: Option<&SessionId>,
                limit: usize,
            ) -> Result<Vec<Delegation>> {
                let mut units = match session {
                    None => {
                        let table = self.txn.open_table(UNITS_BY_TIME).map_err(storage)?;
                        let mut ids = Vec::new();
                        for row in table.iter().map_err(storage)?.rev().take(limit) {
                            let (k, _) = row.map_err(storage)?;
                            ids.push(k.value().1.to_owned());
                        }
                        self.delegations(ids.iter().map(String::as_str))?
                    }
                    Some(session) => {
                        let table = self.txn.open_table(UNITS_BY_SESSION).map_err(storage)?;
                        let s = session.as_str();
                        let mut ids = Vec::new();
                        for row in table.range((s, "")..(s, ID_END)).map_err(storage)? {
                            let (k, _) = row.map_err(storage)?;
                            ids.push(k.value().1.to_owned());
                        }
                        self.delegations(ids.iter().map(String::as_str))?
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

            /// Units dispatched before `cutoff`, oldest first.
            pub(crate) fn units_before(&self, cutoff: Timestamp) -> Result<Vec<(u64, String)>> {
                let table = self.txn.open_table(UNITS_BY_TIME).map_err(storage)?;
                let mut out = Vec::new();
                for row in table.range((0, "")..(cutoff.0, "")).map_err(storage)? {
                    let (k, _) = row.map_err(storage)?;
                    let (at, id) = k.value();
                    out.push((at, id.to_owned()));
                }
                Ok(out)
            }

            fn delegations<'i>(
                &self,
                ids: impl Iterator<Item = &'i str>,
            ) -> Result<Vec<Delegation>> {
                let table = self.txn.open_table(DELEGATIONS).map_err(storage)?;
                let mut out = Vec::new();
                for id in ids {
                    if let Some(v) = table.get(id).map_err(storage)? {
                        out.push(decode_delegation(self.path, v.value())?);
                    }
                }
                Ok(out)
            }

            pub(crate) fn meta(&self, key: &str) -> Result<Option<u64>> {
                let table = self.txn.open_table(META).map_err(storage)?;
                Ok(table.get(key).map_err(storage)?.map(|v| v.value()))
            }
        }
    };
}

fn event_ref(path: &Path, id: &str, code: u32) -> Result<EventRef> {
    let delegation_id = DelegationId::new(id).map_err(|err| LedgerError::Damaged {
        path: path.to_owned(),
        reason: format!("event index: {err}"),
    })?;
    Ok(EventRef {
        delegation_id,
        key: key_from_code(code),
    })
}

/// A read transaction.
pub(crate) struct Reader<'p> {
    pub(crate) txn: redb::ReadTransaction,
    pub(crate) path: &'p Path,
    pub(crate) counters: &'p Counters,
}

/// A write transaction. Dropping it without `commit` aborts it.
pub(crate) struct Writer<'p> {
    pub(crate) txn: redb::WriteTransaction,
    pub(crate) path: &'p Path,
    pub(crate) counters: &'p Counters,
    /// Set by every write through this `Writer`, so group commit can tell an operation that
    /// failed before writing from one that left partial writes behind.
    pub(crate) dirty: Cell<bool>,
}

getters!(Reader);
getters!(Writer);

fn put<K: redb::Key + 'static, T: Serialize>(
    txn: &redb::WriteTransaction,
    def: TableDefinition<K, &'static [u8]>,
    key: K::SelfType<'_>,
    value: &T,
) -> Result<()> {
    let mut table = txn.open_table(def).map_err(storage)?;
    table
        .insert(key, codec::encode(value).as_slice())
        .map_err(storage)?;
    Ok(())
}

impl<'p> Writer<'p> {
    pub(crate) fn new(
        txn: redb::WriteTransaction,
        path: &'p Path,
        counters: &'p Counters,
    ) -> Writer<'p> {
        Writer {
            txn,
            path,
            counters,
            dirty: Cell::new(false),
        }
    }

    /// Commits durably (counted in `io_counts`).
    pub(crate) fn commit(self) -> Result<()> {
        self.txn.commit().map_err(storage)?;
        crate::backend::count_commit();
        Ok(())
    }

    /// The transaction, for a write: marks this `Writer` dirty.
    fn txn_mut(&self) -> &redb::WriteTransaction {
        self.dirty.set(true);
        &self.txn
    }

    /// Stores the last output of a running child.
    pub(crate) fn put_child_tail(&self, id: &DelegationId, index: u32, tail: &str) -> Result<()> {
        let mut table = self.txn_mut().open_table(CHILD_TAILS).map_err(storage)?;
        table.insert((id.as_str(), index), tail).map_err(storage)?;
        Ok(())
    }

    pub(crate) fn put_session(&self, session: &Session) -> Result<()> {
        put(self.txn_mut(), SESSIONS, session.id.as_str(), session)
    }

    pub(crate) fn put_host(&self, host: &Host) -> Result<()> {
        put(
            self.txn_mut(),
            HOSTS,
            (host.process.pid, host.process.start_time),
            host,
        )
    }

    pub(crate) fn remove_host(&self, process: ProcessId) -> Result<()> {
        let mut table = self.txn_mut().open_table(HOSTS).map_err(storage)?;
        table
            .remove((process.pid, process.start_time))
            .map_err(storage)?;
        Ok(())
    }

    /// Inserts or updates a unit, keeping `ACTIVE_UNITS`, `QUEUE`, `UNITS_BY_TIME` and
    /// `UNITS_BY_SESSION` in step.
    pub(crate) fn put_delegation(&self, unit: &Delegation) -> Result<()> {
        let id = unit.id.as_str();
        put(self.txn_mut(), DELEGATIONS, id, unit)?;
        {
            let mut active = self.txn_mut().open_table(ACTIVE_UNITS).map_err(storage)?;
            if unit.status.is_terminal() {
                active.remove(id).map_err(storage)?;
            } else {
                active.insert(id, ()).map_err(storage)?;
            }
        }
        {
            let mut queue = self.txn_mut().open_table(QUEUE).map_err(storage)?;
            if let Some(seq) = unit.queue_seq {
                if unit.status == crate::model::UnitStatus::Queued {
                    queue.insert(seq, id).map_err(storage)?;
                } else {
                    queue.remove(seq).map_err(storage)?;
                }
            }
        }
        let mut by_time = self.txn_mut().open_table(UNITS_BY_TIME).map_err(storage)?;
        by_time
            .insert((unit.dispatched_at.0, id), ())
            .map_err(storage)?;
        if let Some(session) = &unit.session {
            let mut by_session = self
                .txn_mut()
                .open_table(UNITS_BY_SESSION)
                .map_err(storage)?;
            by_session
                .insert((session.as_str(), id), ())
                .map_err(storage)?;
        }
        Ok(())
    }

    pub(crate) fn put_child(&self, child: &Child) -> Result<()> {
        put(
            self.txn_mut(),
            CHILDREN,
            (child.delegation_id.as_str(), child.index),
            child,
        )
    }

    pub(crate) fn put_stall(&self, id: &DelegationId, stalling: &Stalling) -> Result<()> {
        put(
            self.txn_mut(),
            CHILD_STALLS,
            (id.as_str(), stalling.index),
            stalling,
        )
    }

    pub(crate) fn put_tally(&self, id: &DelegationId, tally: &UnitTally) -> Result<()> {
        put(self.txn_mut(), UNIT_TALLIES, id.as_str(), tally)
    }

    pub(crate) fn remove_tally(&self, id: &DelegationId) -> Result<()> {
        let mut table = self.txn_mut().open_table(UNIT_TALLIES).map_err(storage)?;
        table.remove(id.as_str()).map_err(storage)?;
        Ok(())
    }

    /// Inserts or updates an event, keeping `OPEN_EVENTS` in step with its state.
    pub(crate) fn put_event(&self, event: &Event) -> Result<()> {
        let id = event.delegation_id.as_str();
        let code = key_code(event.key);
        put(self.txn_mut(), EVENTS, (id, code), event)?;
        let mut open = self.txn_mut().open_table(OPEN_EVENTS).map_err(storage)?;
        let index_key = (session_part(event.session.as_ref()), id, code);
        if event.state.is_terminal() {
            open.remove(index_key).map_err(storage)?;
        } else {
            open.insert(index_key, ()).map_err(storage)?;
        }
        Ok(())
    }

    pub(crate) fn put_claim(&self, claim: &ClaimRecord) -> Result<()> {
        put(self.txn_mut(), CLAIMS, claim.token.0, claim)
    }

    pub(crate) fn remove_claim(&self, token: ClaimToken) -> Result<()> {
        let mut table = self.txn_mut().open_table(CLAIMS).map_err(storage)?;
        table.remove(token.0).map_err(storage)?;
        Ok(())
    }

    /// Bumps the activity counter (see `META_ACTIVITY`).
    pub(crate) fn bump_activity(&self) -> Result<()> {
        let next = self.meta(META_ACTIVITY)?.unwrap_or(0).wrapping_add(1);
        self.set_meta(META_ACTIVITY, next)
    }

    pub(crate) fn set_meta(&self, key: &str, value: u64) -> Result<()> {
        let mut table = self.txn_mut().open_table(META).map_err(storage)?;
        table.insert(key, value).map_err(storage)?;
        Ok(())
    }

    /// Removes a unit with its children, events and index rows (retention).
    pub(crate) fn purge_delegation(&self, unit: &Delegation) -> Result<()> {
        let id = unit.id.as_str();
        for event in self.events(&unit.id)? {
            if let Some(lease) = &event.lease {
                self.remove_claim(lease.token)?;
            }
            let mut open = self.txn_mut().open_table(OPEN_EVENTS).map_err(storage)?;
            open.remove((
                session_part(event.session.as_ref()),
                id,
                key_code(event.key),
            ))
            .map_err(storage)?;
        }
        self.txn_mut()
            .open_table(EVENTS)
            .map_err(storage)?
            .retain_in(by_id(id), |_, _| false)
            .map_err(storage)?;
        self.txn_mut()
            .open_table(CHILDREN)
            .map_err(storage)?
            .retain_in(by_id(id), |_, _| false)
            .map_err(storage)?;
        self.txn_mut()
            .open_table(CHILD_TAILS)
            .map_err(storage)?
            .retain_in(by_id(id), |_, _| false)
            .map_err(storage)?;
        self.txn_mut()
            .open_table(CHILD_STALLS)
            .map_err(storage)?
            .retain_in(by_id(id), |_, _| false)
            .map_err(storage)?;
        self.remove_tally(&unit.id)?;
        self.txn_mut()
            .open_table(DELEGATIONS)
            .map_err(storage)?
            .remove(id)
            .map_err(storage)?;
        self.txn_mut()
            .open_table(ACTIVE_UNITS)
            .map_err(storage)?
            .remove(id)
            .map_err(storage)?;
        self.txn_mut()
            .open_table(UNITS_BY_TIME)
            .map_err(storage)?
            .remove((unit.dispatched_at.0, id))
            .map_err(storage)?;
        if let Some(seq) = unit.queue_seq {
            self.txn_mut()
                .open_table(QUEUE)
                .map_err(storage)?
                .remove(seq)
                .map_err(storage)?;
        }
        if let Some(session) = &unit.session {
            self.txn_mut()
                .open_table(UNITS_BY_SESSION)
                .map_err(storage)?
                .remove((session.as_str(), id))
                .map_err(storage)?;
        }
        Ok(())
    }

    /// Creates every table, so read transactions never meet a missing one.
    pub(crate) fn create_tables(&self) -> Result<()> {
        self.txn_mut().open_table(META).map_err(storage)?;
        self.txn_mut().open_table(SESSIONS).map_err(storage)?;
        self.txn_mut().open_table(HOSTS).map_err(storage)?;
        self.txn_mut().open_table(DELEGATIONS).map_err(storage)?;
        self.txn_mut().open_table(CHILDREN).map_err(storage)?;
        self.txn_mut().open_table(EVENTS).map_err(storage)?;
        self.txn_mut().open_table(CLAIMS).map_err(storage)?;
        self.txn_mut().open_table(QUEUE).map_err(storage)?;
        self.txn_mut().open_table(OPEN_EVENTS).map_err(storage)?;
        self.txn_mut().open_table(ACTIVE_UNITS).map_err(storage)?;
        self.txn_mut().open_table(UNITS_BY_TIME).map_err(storage)?;
        self.txn_mut()
            .open_table(UNITS_BY_SESSION)
            .map_err(storage)?;
        self.txn_mut().open_table(CHILD_TAILS).map_err(storage)?;
        self.txn_mut().open_table(CHILD_STALLS).map_err(storage)?;
        self.txn_mut().open_table(UNIT_TALLIES).map_err(storage)?;
        Ok(())
    }
}

/// Whether `key` names one of the first `task_count` children.
pub(crate) fn is_task_of(key: EventKey, task_count: u32) -> bool {
    matches!(key, EventKey::Task(n) if n < task_count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        Channel, DelegationV2, DeliveryMode, DispatchSpecV2, HostId, HostKind, HostV1, HostV2,
        Locality, Role, TaskSpec, UnitStatus, WorkerPool,
    };

    fn versioned<T: Serialize>(version: u8, value: &T) -> Vec<u8> {
        let mut bytes = vec![version];
        bytes.extend(postcard::to_allocvec(value).expect("encodes"));
        bytes
    }

    #[test]
    fn a_format_2_unit_reads_with_no_pool_and_a_format_3_one_keeps_its_pool() {
        let old = DelegationV2 {
            id: DelegationId::new("deleg_0123456789ab").expect("id"),
            session: Some(SessionId::new("s").expect("session")),
            channel: Channel::Background,
            spec: DispatchSpecV2 {
                goal: "g".into(),
                context: Some("c".into()),
                toolsets: vec!["t".into()],
                role: Role::Orchestrator,
                model: Some("m".into()),
                delivery: DeliveryMode::Inject,
                timeout_ms: Some(5),
                cwd: Some("/w".into()),
                group: Some("grp".into()),
                tasks: vec![TaskSpec::new("one", vec!["true".into()])],
            },
            status: UnitStatus::Queued,
            dispatched_at: Timestamp(1),
            started_at: None,
            ended_at: None,
            host: Some(ProcessId {
                pid: 3,
                start_time: 4,
            }),
            queue_seq: Some(9),
            interrupt: None,
            transcript_dir: Some("/t".into()),
        };
        for version in [1, 2] {
            let unit = decode_delegation(Path::new("l.redb"), &versioned(version, &old))
                .expect("an old unit decodes");
            assert_eq!(unit.pool(), None);
            assert_eq!(unit.spec.group.as_deref(), Some("grp"));
            assert_eq!(unit.spec.tasks, old.spec.tasks);
            assert_eq!((unit.queue_seq, unit.host), (old.queue_seq, old.host));
        }
        let mut unit = Delegation::from(old);
        unit.spec.pool = Some("gpu".into());
        let bytes = codec::encode(&unit);
        assert_eq!(bytes[0], 3);
        assert_eq!(
            decode_delegation(Path::new("l.redb"), &bytes).expect("decodes"),
            unit
        );
        let mut newer = bytes.clone();
        newer[0] = codec::FORMAT_VERSION + 1;
        assert!(matches!(
            decode_delegation(Path::new("l.redb"), &newer),
            Err(LedgerError::NewerFormat { .. })
        ));
    }

    #[test]
    fn a_format_2_host_reads_as_no_worker_and_a_worker_keeps_its_pool() {
        let old = HostV2 {
            process: ProcessId {
                pid: 7,
                start_time: 9,
            },
            kind: HostKind::Headless,
            session: Some(SessionId::new("s").expect("session")),
            registered_at: Timestamp(1),
            heartbeat_at: Timestamp(2),
            host_id: HostId(5),
            locality: Locality {
                boot_id: "b".into(),
                pid_namespace: "p".into(),
                hostname: "h".into(),
            },
            lease_expires_at: Timestamp(30),
        };
        let host = decode_host(Path::new("l.redb"), &versioned(2, &old)).expect("decodes");
        assert_eq!(host.worker, None);
        assert_eq!(
            (host.host_id, host.lease_expires_at),
            (HostId(5), Timestamp(30))
        );
        let worker = Host {
            kind: HostKind::Worker,
            session: None,
            worker: Some(WorkerPool {
                pool: "default".into(),
                capacity: 4,
            }),
            ..host
        };
        let bytes = codec::encode(&worker);
        assert_eq!(
            decode_host(Path::new("l.redb"), &bytes).expect("decodes"),
            worker
        );
    }

    #[test]
    fn a_format_1_host_record_reads_as_judged_by_pid_with_no_lease() {
        let old = HostV1 {
            process: ProcessId {
                pid: 7,
                start_time: 9,
            },
            kind: HostKind::Headless,
            session: None,
            registered_at: Timestamp(1),
            heartbeat_at: Timestamp(2),
        };
        let mut bytes = vec![1u8];
        bytes.extend(postcard::to_allocvec(&old).expect("encodes"));
        let host = decode_host(Path::new("l.redb"), &bytes).expect("decodes");
        assert_eq!(host.process, old.process);
        assert_eq!(host.host_id, HostId(0));
        assert_eq!(host.locality, Locality::default());
        assert_eq!(host.lease_expires_at, Timestamp(u64::MAX));
        let now = codec::encode(&host);
        assert_eq!(now[0], codec::FORMAT_VERSION);
        assert_eq!(
            decode_host(Path::new("l.redb"), &now).expect("decodes"),
            host
        );
    }
}
