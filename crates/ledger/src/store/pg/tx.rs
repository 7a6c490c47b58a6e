//! One transaction on one pooled connection, and the typed statements it runs.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::Path;

use postgres::error::SqlState;
use postgres::types::Type;
use postgres::types::{FromSql, ToSql};
use serde::Serialize;

use super::retry::{Failure, Pg, server_gone};
use crate::codec::{self, decode_record as decode};
use crate::error::{LedgerError, Result};
use crate::model::legacy::{decode_delegation, decode_host};
use crate::model::{
    Child, DelegationId, Event, EventRef, HostRecord, ProcessId, Session, UnitRecord, UnitTally,
};
use crate::store::{Counters, event_ref};

/// One transaction on one connection.
pub(crate) struct Tx<'c, 'p> {
    pub(super) pg: &'p Pg,
    pub(super) txn: RefCell<Option<super::client::Transaction<'c>>>,
    pub(super) counters: &'p Counters,
    pub(super) dirty: Cell<bool>,
    /// A statement failed: the server has aborted the transaction.
    pub(super) aborted: Cell<bool>,
    pub(super) failure: &'p Cell<Option<Failure>>,
    pub(super) committed: &'p Cell<bool>,
    /// The rows of [`Seen`] this transaction read or wrote.
    pub(super) seen: RefCell<Seen>,
    /// Writes held back until the next read of their table or the commit ([`Held`]).
    pub(super) held: RefCell<super::held::Held>,
    /// `Some` when no transaction is open ([`Pg::read_one`]): whether its one statement ran.
    pub(super) one_statement: Cell<Option<bool>>,
}

/// Rows the operations of one transaction read again and again — a unit's host and session,
/// its tally, the unit — kept as this transaction read or wrote them, so that the eight
/// children of a unit finishing in one group commit read each once: one statement, not eight.
/// Every write of these rows goes through this transaction (which keeps its copy in step) and
/// nobody else's can change them before it commits (it would fail to serialize), so a kept
/// row is the row.
#[derive(Default)]
pub(super) struct Seen {
    pub(super) hosts: HashMap<ProcessId, Option<HostRecord>>,
    pub(super) sessions: HashMap<String, Option<Session>>,
    pub(super) tallies: HashMap<String, Option<UnitTally>>,
    pub(super) units: HashMap<String, Option<UnitRecord>>,
    /// Every host, once read and until this transaction writes one.
    pub(super) all_hosts: Option<Vec<HostRecord>>,
    /// Every active unit, once read and until this transaction writes a unit.
    pub(super) active: Option<Vec<UnitRecord>>,
    /// Children a look read ahead ([`crate::store::ReadTx::finish_look`]), each taken by the
    /// next read of it (a later write of it is held, and read from there).
    pub(super) children: HashMap<(String, u32), Option<Child>>,
}

/// `key`'s row from `rows` if this transaction has it, else `read` it and keep it.
pub(super) fn kept<K, V>(
    rows: fn(&mut Seen) -> &mut HashMap<K, Option<V>>,
    seen: &RefCell<Seen>,
    key: K,
    read: impl FnOnce() -> Result<Option<V>>,
) -> Result<Option<V>>
where
    K: std::hash::Hash + Eq,
    V: Clone,
{
    if let Some(row) = rows(&mut seen.borrow_mut()).get(&key) {
        return Ok(row.clone());
    }
    let row = read()?;
    rows(&mut seen.borrow_mut()).insert(key, row.clone());
    Ok(row)
}

pub(super) type Row = postgres::Row;

/// Reading a column as the type this build's statements give it. A column of another type (a
/// schema altered by hand) makes the ledger damaged: one line, where `Row::get` would panic.
pub(super) trait Columns {
    fn col<'a, T: FromSql<'a>>(&'a self, path: &Path, idx: usize) -> Result<T>;
}

impl Columns for Row {
    fn col<'a, T: FromSql<'a>>(&'a self, path: &Path, idx: usize) -> Result<T> {
        self.try_get(idx).map_err(|err| {
            let name = self.columns().get(idx).map_or("?", |c| c.name());
            LedgerError::Damaged {
                path: path.to_owned(),
                reason: format!("column {name} of a row: {err}"),
            }
        })
    }
}

/// A statement parameter with its PostgreSQL type.
pub(super) trait Param {
    fn as_sql(&self) -> &(dyn ToSql + Sync);
    fn pg_type(&self) -> Type;
}

macro_rules! param {
    ($($ty:ty => $pg:expr),* $(,)?) => {
        $(impl Param for $ty {
            fn as_sql(&self) -> &(dyn ToSql + Sync) {
                self
            }
            fn pg_type(&self) -> Type {
                $pg
            }
        })*
    };
}

param! {
    &str => Type::TEXT,
    String => Type::TEXT,
    Option<&str> => Type::TEXT,
    i64 => Type::INT8,
    Option<i64> => Type::INT8,
    bool => Type::BOOL,
    Vec<u8> => Type::BYTEA,
    Vec<String> => Type::TEXT_ARRAY,
    Option<String> => Type::TEXT,
    Option<Vec<u8>> => Type::BYTEA,
    Vec<i32> => Type::INT4_ARRAY,
    Vec<i64> => Type::INT8_ARRAY,
    Vec<Option<String>> => Type::TEXT_ARRAY,
    Vec<Vec<u8>> => Type::BYTEA_ARRAY,
    Vec<Option<Vec<u8>>> => Type::BYTEA_ARRAY,
    Vec<Option<i64>> => Type::INT8_ARRAY,
    Vec<bool> => Type::BOOL_ARRAY,
}

impl Tx<'_, '_> {
    pub(super) fn fail(&self, err: &postgres::Error) -> LedgerError {
        self.aborted.set(true);
        let kind = match err.code() {
            Some(code)
                if *code == SqlState::T_R_SERIALIZATION_FAILURE
                    || *code == SqlState::T_R_DEADLOCK_DETECTED =>
            {
                Some(Failure::Conflict)
            }
            _ if err.is_closed() || err.as_db_error().is_none() || server_gone(err) => {
                Some(Failure::Broken)
            }
            _ => None,
        };
        if kind.is_some() {
            self.failure.set(kind);
        }
        self.pg.statement_error(err)
    }

    /// Runs `sql` in one round trip, after the held writes it may read (`held.rs`): its
    /// parameters' types are given (`Param`), so the server need not describe a prepared
    /// statement first (a short-lived command would otherwise pay a second round trip for every
    /// statement on its fresh connection).
    pub(super) fn query(&self, sql: &'static str, params: &[&dyn Param]) -> Result<Vec<Row>> {
        self.send_held_read_by(sql)?;
        self.query_as_is(sql, params)
    }

    /// [`Tx::query`] without sending the held writes first (`held.rs` sends them with it).
    pub(super) fn query_as_is(&self, sql: &'static str, params: &[&dyn Param]) -> Result<Vec<Row>> {
        match self.one_statement.get() {
            Some(true) => {
                self.failure.set(Some(Failure::Unbracketed));
                return Err(LedgerError::Invalid(
                    "a read of one statement asked for another".into(),
                ));
            }
            Some(false) => self.one_statement.set(Some(true)),
            None => {}
        }
        let mut guard = self.txn.borrow_mut();
        let txn = guard
            .as_mut()
            .ok_or_else(|| LedgerError::Invalid("the transaction has ended".into()))?;
        let typed: Vec<(&(dyn ToSql + Sync), Type)> =
            params.iter().map(|p| (p.as_sql(), p.pg_type())).collect();
        let result = txn.query_hot(&self.pg.target.qualify(sql), &typed);
        result.map_err(|e| {
            if txn.take_stale() {
                // Prepared, and gone or stale on the server: the connection forgot its
                // statements, and the transaction runs again unprepared.
                self.aborted.set(true);
                self.failure.set(Some(Failure::Stale));
                return self.pg.statement_error(&e);
            }
            self.fail(&e)
        })
    }

    /// The unit whose record is column `at` of `row` (`None` when NULL), and its host's
    /// record, column `at + 1`, kept ([`Seen`]) unless this transaction has it: a read that
    /// joins `hermes_hosts` on the unit's `host_pid` and `host_start`.
    ///
    /// The host is kept only when it is the one the unit's record names. This build writes
    /// those columns with the record, but a build of schema version 2 still running beside it
    /// (it checked the version when it connected, before the migration) writes the record
    /// alone, leaving the columns empty or naming the unit's previous host. So a joined host
    /// that is another, or none at all, is not taken for the record's: that host is read by
    /// itself when it is asked for.
    pub(super) fn keep_unit(&self, row: &Row, at: usize) -> Result<Option<UnitRecord>> {
        let path = &self.pg.path;
        let Some(record) = row.col::<Option<&[u8]>>(path, at)? else {
            return Ok(None);
        };
        let unit = decode_delegation(path, record)?;
        if let Some(process) = unit.host {
            let host = row
                .col::<Option<&[u8]>>(path, at + 1)?
                .map(|record| decode_host(path, record))
                .transpose()?;
            if let Some(host) = host.filter(|host| host.process == process) {
                self.seen
                    .borrow_mut()
                    .hosts
                    .entry(process)
                    .or_insert(Some(host));
            }
        }
        Ok(Some(unit))
    }

    /// Every child of unit `id` when this transaction holds them all: it has the unit (so
    /// knows how many tasks it has) and a held write of each of its children. A unit's last
    /// child to finish in a transaction of its own asks for the children it just wrote (a unit
    /// of one task always does): no statement for that.
    pub(super) fn held_children_of(&self, id: &DelegationId) -> Option<Vec<Child>> {
        let tasks = match self.seen.borrow().units.get(id.as_str()) {
            Some(Some(unit)) => unit.spec.tasks.len(),
            _ => return None,
        };
        let held = self.held.borrow();
        (0..tasks)
            .map(|index| {
                let index = u32::try_from(index).ok()?;
                held.children.get(&(id.as_str().to_owned(), index)).cloned()
            })
            .collect()
    }

    pub(super) fn write(&self, sql: &'static str, params: &[&dyn Param]) -> Result<()> {
        self.dirty.set(true);
        self.query(sql, params).map(drop)
    }

    pub(super) fn record<V: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        sql: &'static str,
        params: &[&dyn Param],
    ) -> Result<Option<V>> {
        let rows = self.query(sql, params)?;
        rows.first()
            .map(|row| decode(&self.pg.path, what, row.col(&self.pg.path, 0)?))
            .transpose()
    }

    pub(super) fn records<V: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        sql: &'static str,
        params: &[&dyn Param],
    ) -> Result<Vec<V>> {
        self.query(sql, params)?
            .iter()
            .map(|row| decode(&self.pg.path, what, row.col(&self.pg.path, 0)?))
            .collect()
    }

    pub(super) fn event_rows(
        &self,
        sql: &'static str,
        params: &[&dyn Param],
    ) -> Result<Vec<Event>> {
        self.query(sql, params)?
            .iter()
            .map(|row| super::rows::event_of(&self.pg.path, row, 0))
            .collect()
    }

    pub(super) fn units(
        &self,
        sql: &'static str,
        params: &[&dyn Param],
    ) -> Result<Vec<UnitRecord>> {
        self.query(sql, params)?
            .iter()
            .map(|row| decode_delegation(&self.pg.path, row.col(&self.pg.path, 0)?))
            .collect()
    }

    pub(super) fn event_refs(&self, rows: Vec<Row>) -> Result<Vec<EventRef>> {
        rows.iter()
            .map(|row| {
                let code = u32::try_from(row.col::<i64>(&self.pg.path, 1)?).unwrap_or(u32::MAX);
                event_ref(&self.pg.path, row.col::<&str>(&self.pg.path, 0)?, code)
            })
            .collect()
    }
}

pub(super) fn int(n: u64) -> i64 {
    // Stored bit for bit: timestamps, sequences and counters stay far below 2^63.
    n as i64
}

pub(super) fn uint(n: i64) -> u64 {
    n as u64
}

pub(super) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    codec::encode(value)
}
