//! The redb backend: the embedded default, one file per home.
//!
//! Every record kind is a typed redb table (`tables.rs`); index tables (`OPEN_EVENTS`,
//! `ACTIVE_RECORDS`, `UNITS_BY_TIME`, `UNITS_BY_SESSION`, `QUEUE`) are written in the same
//! transaction as the rows they index. Reads are written once for both kinds of redb
//! transaction, through `ReadableTable`, the way redb shares getters itself.

use std::cell::Cell;
use std::ops::Deref;
use std::path::Path;

use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::Serialize;

use super::guard::storage;
use super::open::{Lent, OpenTables};
use super::tables::*;
use crate::codec::{self};
use crate::error::Result;
use crate::model::legacy::decode_delegation;
use crate::model::{
    Child, ClaimRecord, ClaimToken, DelegationId, Event, HostRecord, ProcessId, Session, Stalling,
    UnitRecord, UnitTally,
};
use crate::store::{Counters, META_ACTIVITY, ReadTx, WriteTx, key_code, session_part};

/// A redb transaction of either kind, seen as its tables.
pub(crate) trait Tables {
    /// An open table of this transaction.
    type Table<'t, K: redb::Key + 'static, V: redb::Value + 'static>: Deref<
        Target: ReadableTable<K, V> + ReadableTableMetadata,
    >
    where
        Self: 't;

    /// Opens a table.
    fn open<K: redb::Key + 'static, V: redb::Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
    ) -> std::result::Result<Self::Table<'_, K, V>, redb::TableError>;

    /// The file, for errors.
    fn path(&self) -> &Path;

    /// The row counters of the ledger handle.
    fn counters(&self) -> &Counters;
}

/// A redb read transaction.
pub(crate) struct Read<'p> {
    pub(crate) txn: redb::ReadTransaction,
    pub(crate) path: &'p Path,
    pub(crate) counters: &'p Counters,
}

/// A redb write transaction. Dropping it without `commit` aborts it.
pub(crate) struct Write<'p> {
    /// The tables opened so far, kept open for the rest of the transaction. Declared before
    /// `txn`: they close before it ends (see [`OpenTables`]).
    open: OpenTables,
    /// Boxed: the open tables refer to it, and a `Write` moves (into its `Writer`).
    txn: Box<redb::WriteTransaction>,
    pub(crate) path: &'p Path,
    pub(crate) counters: &'p Counters,
    dirty: Cell<bool>,
}

impl Tables for Read<'_> {
    type Table<'t, K: redb::Key + 'static, V: redb::Value + 'static>
        = Box<redb::ReadOnlyTable<K, V>>
    where
        Self: 't;

    fn open<K: redb::Key + 'static, V: redb::Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
    ) -> std::result::Result<Self::Table<'_, K, V>, redb::TableError> {
        self.txn.open_table(def).map(Box::new)
    }

    fn path(&self) -> &Path {
        self.path
    }

    fn counters(&self) -> &Counters {
        self.counters
    }
}

impl Tables for Write<'_> {
    type Table<'t, K: redb::Key + 'static, V: redb::Value + 'static>
        = Lent<'t, K, V>
    where
        Self: 't;

    fn open<K: redb::Key + 'static, V: redb::Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
    ) -> std::result::Result<Self::Table<'_, K, V>, redb::TableError> {
        self.table(def)
    }

    fn path(&self) -> &Path {
        self.path
    }

    fn counters(&self) -> &Counters {
        self.counters
    }
}

/// A table added after format 1's first tables; `None` if this file does not have it yet (a
/// read of an older file).
macro_rules! open_added {
    ($tables:expr, $def:expr) => {
        match $tables.open($def) {
            Ok(table) => Some(table),
            Err(redb::TableError::TableDoesNotExist(_)) => None,
            Err(err) => return Err(storage(err)),
        }
    };
}
pub(super) use open_added;

/// The key range of every row whose first key part is `prefix`, for (str, u32) keys.
pub(super) fn by_id(prefix: &str) -> std::ops::RangeInclusive<(&str, u32)> {
    (prefix, 0)..=(prefix, u32::MAX)
}

/// Upper bound (exclusive) for delegation ids, which are ASCII below `~`.
pub(super) const ID_END: &str = "~";

/// The units of `ids` that exist, in that order.
pub(super) fn delegations<'i, T: Tables + ?Sized>(
    tables: &T,
    ids: impl Iterator<Item = &'i str>,
) -> Result<Vec<UnitRecord>> {
    let table = tables.open(DELEGATIONS).map_err(storage)?;
    let mut out = Vec::new();
    for id in ids {
        if let Some(v) = table.get(id).map_err(storage)? {
            out.push(decode_delegation(tables.path(), v.value())?);
        }
    }
    Ok(out)
}

fn put<K: redb::Key + 'static, T: Serialize>(
    write: &Write<'_>,
    def: TableDefinition<K, &'static [u8]>,
    key: K::SelfType<'_>,
    value: &T,
) -> Result<()> {
    let mut table = write.table_mut(def).map_err(storage)?;
    table
        .insert(key, codec::encode(value).as_slice())
        .map_err(storage)?;
    Ok(())
}

impl<'p> Write<'p> {
    pub(crate) fn new(
        txn: redb::WriteTransaction,
        path: &'p Path,
        counters: &'p Counters,
    ) -> Write<'p> {
        Write {
            open: OpenTables::default(),
            txn: Box::new(txn),
            path,
            counters,
            dirty: Cell::new(false),
        }
    }

    /// The transaction, for a write: marks this transaction dirty.
    fn txn_mut(&self) -> &redb::WriteTransaction {
        self.dirty.set(true);
        &self.txn
    }

    /// A table of this transaction, for reading (opened once, then kept open).
    fn table<K: redb::Key + 'static, V: redb::Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
    ) -> std::result::Result<Lent<'_, K, V>, redb::TableError> {
        // SAFETY: every table of `self.open` was opened in `self.txn`, which is boxed (so
        // moving `self` does not move it) and outlives them: `commit` closes them first, and a
        // drop drops `open` before `txn`.
        unsafe { self.open.lend(&self.txn, def) }
    }

    /// A table of this transaction, for writing: marks the transaction dirty.
    fn table_mut<K: redb::Key + 'static, V: redb::Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
    ) -> std::result::Result<Lent<'_, K, V>, redb::TableError> {
        self.dirty.set(true);
        self.table(def)
    }

    /// Creates every table, so read transactions never meet a missing one.
    pub(crate) fn create_tables(&self) -> Result<()> {
        self.table_mut(META).map_err(storage)?;
        self.table_mut(SESSIONS).map_err(storage)?;
        self.table_mut(HOSTS).map_err(storage)?;
        self.table_mut(DELEGATIONS).map_err(storage)?;
        self.table_mut(CHILDREN).map_err(storage)?;
        self.table_mut(EVENTS).map_err(storage)?;
        self.table_mut(CLAIMS).map_err(storage)?;
        self.table_mut(QUEUE).map_err(storage)?;
        self.table_mut(OPEN_EVENTS).map_err(storage)?;
        self.table_mut(ACTIVE_RECORDS).map_err(storage)?;
        self.table_mut(ACTIVE_CHILDREN).map_err(storage)?;
        self.table_mut(ACTIVE_EVENTS).map_err(storage)?;
        self.table_mut(UNITS_BY_TIME).map_err(storage)?;
        self.table_mut(UNITS_BY_SESSION).map_err(storage)?;
        self.table_mut(CHILD_TAILS).map_err(storage)?;
        self.table_mut(CHILD_STALLS).map_err(storage)?;
        self.table_mut(UNIT_TALLIES).map_err(storage)?;
        self.table_mut(METRICS_BASE).map_err(storage)?;
        Ok(())
    }

    /// Whether `id` is a queued or running unit (its children and events are mirrored).
    fn is_active(&self, id: &str) -> Result<bool> {
        let active = self.table(ACTIVE_RECORDS).map_err(storage)?;
        Ok(active.get(id).map_err(storage)?.is_some())
    }

    /// Writes `bytes` under `key` (unit, number) in `def`, and in `mirror` while the unit is
    /// active.
    fn put_mirrored(
        &self,
        def: TableDefinition<(&'static str, u32), &'static [u8]>,
        mirror: TableDefinition<(&'static str, u32), &'static [u8]>,
        key: (&str, u32),
        bytes: &[u8],
    ) -> Result<()> {
        self.table_mut(def)
            .map_err(storage)?
            .insert(key, bytes)
            .map_err(storage)?;
        if self.is_active(key.0)? {
            self.table_mut(mirror)
                .map_err(storage)?
                .insert(key, bytes)
                .map_err(storage)?;
        }
        Ok(())
    }

    /// Removes the mirrors of a unit's children and events (it ended, or is removed).
    fn forget_active(&self, id: &str) -> Result<()> {
        for def in [ACTIVE_CHILDREN, ACTIVE_EVENTS] {
            self.table_mut(def)
                .map_err(storage)?
                .retain_in(by_id(id), |_, _| false)
                .map_err(storage)?;
        }
        Ok(())
    }

    /// Copies the record, children and events of every unit format 6 indexed as active into
    /// the tables of the active units, then deletes that index (the migration to format 7).
    pub(crate) fn move_active_units_v6(&self) -> Result<()> {
        let ids: Vec<String> = match self.table(ACTIVE_UNITS_V6) {
            Ok(table) => table
                .iter()
                .map_err(storage)?
                .map(|row| row.map(|(k, _)| k.value().to_owned()))
                .collect::<std::result::Result<_, _>>()
                .map_err(storage)?,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
            Err(err) => return Err(storage(err)),
        };
        {
            let units = self.table_mut(DELEGATIONS).map_err(storage)?;
            let mut active = self.table_mut(ACTIVE_RECORDS).map_err(storage)?;
            for id in &ids {
                if let Some(record) = units.get(id.as_str()).map_err(storage)? {
                    active
                        .insert(id.as_str(), record.value())
                        .map_err(storage)?;
                }
            }
            for (rows, mirror) in [(CHILDREN, ACTIVE_CHILDREN), (EVENTS, ACTIVE_EVENTS)] {
                let rows = self.table(rows).map_err(storage)?;
                let mut mirror = self.table_mut(mirror).map_err(storage)?;
                for id in &ids {
                    for row in rows.range(by_id(id)).map_err(storage)? {
                        let (k, v) = row.map_err(storage)?;
                        mirror.insert(k.value(), v.value()).map_err(storage)?;
                    }
                }
            }
        }
        // A table is deleted closed: every open one is closed first.
        self.open.close();
        self.txn_mut()
            .delete_table(ACTIVE_UNITS_V6)
            .map_err(storage)?;
        Ok(())
    }
}

impl WriteTx for Write<'_> {
    fn dirty(&self) -> &Cell<bool> {
        &self.dirty
    }

    fn commit(self: Box<Self>) -> Result<()> {
        let Write { open, txn, .. } = *self;
        drop(open);
        txn.commit().map_err(storage)
    }

    /// Stores the last output of a running child.
    fn put_child_tail(&self, id: &DelegationId, index: u32, tail: &str) -> Result<()> {
        let mut table = self.table_mut(CHILD_TAILS).map_err(storage)?;
        table.insert((id.as_str(), index), tail).map_err(storage)?;
        Ok(())
    }

    fn put_session(&self, session: &Session) -> Result<()> {
        put(self, SESSIONS, session.id.as_str(), session)
    }

    fn put_host(&self, host: &HostRecord) -> Result<()> {
        put(
            self,
            HOSTS,
            (host.process.pid, host.process.start_time),
            host,
        )
    }

    fn remove_host(&self, process: ProcessId) -> Result<()> {
        let mut table = self.table_mut(HOSTS).map_err(storage)?;
        table
            .remove((process.pid, process.start_time))
            .map_err(storage)?;
        Ok(())
    }

    /// Inserts or updates a unit, keeping `ACTIVE_RECORDS`, `QUEUE`, `UNITS_BY_TIME` and
    /// `UNITS_BY_SESSION` in step.
    fn put_delegation(&self, unit: &UnitRecord) -> Result<()> {
        let id = unit.id.as_str();
        let encoded = codec::encode(unit);
        self.table_mut(DELEGATIONS)
            .map_err(storage)?
            .insert(id, encoded.as_slice())
            .map_err(storage)?;
        {
            let mut active = self.table_mut(ACTIVE_RECORDS).map_err(storage)?;
            if unit.status.is_terminal() {
                if active.remove(id).map_err(storage)?.is_some() {
                    drop(active);
                    self.forget_active(id)?;
                }
            } else {
                active.insert(id, encoded.as_slice()).map_err(storage)?;
            }
        }
        {
            let mut queue = self.table_mut(QUEUE).map_err(storage)?;
            if let Some(seq) = unit.queue_seq {
                if unit.status == crate::model::UnitStatus::Queued {
                    queue.insert(seq, id).map_err(storage)?;
                } else {
                    queue.remove(seq).map_err(storage)?;
                }
            }
        }
        let mut by_time = self.table_mut(UNITS_BY_TIME).map_err(storage)?;
        by_time
            .insert((unit.dispatched_at.0, id), ())
            .map_err(storage)?;
        if let Some(session) = &unit.session {
            let mut by_session = self.table_mut(UNITS_BY_SESSION).map_err(storage)?;
            by_session
                .insert((session.as_str(), id), ())
                .map_err(storage)?;
        }
        Ok(())
    }

    /// Inserts or updates a child, and its mirror while its unit is active.
    fn put_child(&self, child: &Child) -> Result<()> {
        let key = (child.delegation_id.as_str(), child.index);
        self.put_mirrored(CHILDREN, ACTIVE_CHILDREN, key, &codec::encode(child))
    }

    fn put_stall(&self, id: &DelegationId, stalling: &Stalling) -> Result<()> {
        put(self, CHILD_STALLS, (id.as_str(), stalling.index), stalling)
    }

    fn put_tally(&self, id: &DelegationId, tally: &UnitTally) -> Result<()> {
        put(self, UNIT_TALLIES, id.as_str(), tally)
    }

    fn remove_tally(&self, id: &DelegationId) -> Result<()> {
        let mut table = self.table_mut(UNIT_TALLIES).map_err(storage)?;
        table.remove(id.as_str()).map_err(storage)?;
        Ok(())
    }

    /// Inserts or updates an event, keeping `OPEN_EVENTS` in step with its state.
    fn put_event(&self, event: &Event) -> Result<()> {
        let id = event.delegation_id.as_str();
        let code = key_code(event.key);
        self.put_mirrored(EVENTS, ACTIVE_EVENTS, (id, code), &codec::encode(event))?;
        let mut open = self.table_mut(OPEN_EVENTS).map_err(storage)?;
        let index_key = (session_part(event.session.as_ref()), id, code);
        if event.state.is_terminal() {
            open.remove(index_key).map_err(storage)?;
        } else {
            open.insert(index_key, ()).map_err(storage)?;
        }
        Ok(())
    }

    fn put_claim(&self, claim: &ClaimRecord) -> Result<()> {
        put(self, CLAIMS, claim.token.0, claim)
    }

    fn remove_claim(&self, token: ClaimToken) -> Result<()> {
        let mut table = self.table_mut(CLAIMS).map_err(storage)?;
        table.remove(token.0).map_err(storage)?;
        Ok(())
    }

    /// Bumps the activity counter (see `META_ACTIVITY`).
    fn bump_activity(&self) -> Result<()> {
        let next = self.meta(META_ACTIVITY)?.unwrap_or(0).wrapping_add(1);
        self.set_meta(META_ACTIVITY, next)
    }

    fn set_meta(&self, key: &str, value: u64) -> Result<()> {
        let mut table = self.table_mut(META).map_err(storage)?;
        table.insert(key, value).map_err(storage)?;
        Ok(())
    }

    fn put_metrics_base(&self, record: &[u8]) -> Result<()> {
        let mut table = self.table_mut(METRICS_BASE).map_err(storage)?;
        table.insert(METRICS_BASE_KEY, record).map_err(storage)?;
        Ok(())
    }

    /// Removes a unit with its children, events and index rows (retention).
    fn purge_delegation(&self, unit: &UnitRecord) -> Result<()> {
        let id = unit.id.as_str();
        for event in self.events(&unit.id)? {
            if let Some(lease) = &event.lease {
                self.remove_claim(lease.token)?;
            }
            let mut open = self.table_mut(OPEN_EVENTS).map_err(storage)?;
            open.remove((
                session_part(event.session.as_ref()),
                id,
                key_code(event.key),
            ))
            .map_err(storage)?;
        }
        self.table_mut(EVENTS)
            .map_err(storage)?
            .retain_in(by_id(id), |_, _| false)
            .map_err(storage)?;
        self.table_mut(CHILDREN)
            .map_err(storage)?
            .retain_in(by_id(id), |_, _| false)
            .map_err(storage)?;
        self.table_mut(CHILD_TAILS)
            .map_err(storage)?
            .retain_in(by_id(id), |_, _| false)
            .map_err(storage)?;
        self.table_mut(CHILD_STALLS)
            .map_err(storage)?
            .retain_in(by_id(id), |_, _| false)
            .map_err(storage)?;
        self.remove_tally(&unit.id)?;
        self.table_mut(DELEGATIONS)
            .map_err(storage)?
            .remove(id)
            .map_err(storage)?;
        let was_active = self
            .table_mut(ACTIVE_RECORDS)
            .map_err(storage)?
            .remove(id)
            .map_err(storage)?
            .is_some();
        if was_active {
            self.forget_active(id)?;
        }
        self.table_mut(UNITS_BY_TIME)
            .map_err(storage)?
            .remove((unit.dispatched_at.0, id))
            .map_err(storage)?;
        if let Some(seq) = unit.queue_seq {
            self.table_mut(QUEUE)
                .map_err(storage)?
                .remove(seq)
                .map_err(storage)?;
        }
        if let Some(session) = &unit.session {
            self.table_mut(UNITS_BY_SESSION)
                .map_err(storage)?
                .remove((session.as_str(), id))
                .map_err(storage)?;
        }
        Ok(())
    }
}
