//! hermes' schema in PostgreSQL: its tables, its version, and creating or migrating it under
//! an advisory lock.

use super::client::{Client, Transaction};
use postgres::error::SqlState;
use postgres::types::Type;

use super::retry::{Pg, off_runtime};
use super::url::{PgTarget, quote_ident};
use crate::error::{LedgerError, Result};

/// The schema version this build creates and reads.
///
/// - 1: events and claims as encoded records;
/// - 2: their fields as columns, and the transition functions (`v2.rs`, `transitions.sql`);
/// - 3: each unit's host as columns, and the transition functions with one-key fast paths
///   (`v3.rs`; every migration replaces the functions);
/// - 4: the same tables, and a claim function that skips rows another transaction holds
///   instead of waiting for them (`transitions.sql`);
/// - 5: `hermes_metrics_base`, the totals the metrics keep of units that no longer change
///   (`census.rs`).
pub const SCHEMA_VERSION: i32 = 5;

/// What version 5 adds.
const SCHEMA_V5: &str = r#"
CREATE TABLE IF NOT EXISTS hermes_metrics_base (key text COLLATE "C" PRIMARY KEY, record bytea NOT NULL);
"#;

/// The advisory lock key under which the schema is created and migrated ("hermes" in ASCII).
pub(super) const SCHEMA_LOCK: i64 = 0x6865_726d_6573;

/// The schema, version 1 (`v2.rs` brings it to version 2).
pub(super) const SCHEMA_V1: &str = r#"
CREATE TABLE hermes_schema (version integer NOT NULL);
CREATE TABLE hermes_meta (key text COLLATE "C" PRIMARY KEY, value bigint NOT NULL);
CREATE TABLE hermes_sessions (id text COLLATE "C" PRIMARY KEY, record bytea NOT NULL);
CREATE TABLE hermes_hosts (
    pid bigint NOT NULL,
    start_time bigint NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (pid, start_time)
);
CREATE TABLE hermes_units (
    id text COLLATE "C" PRIMARY KEY,
    session text COLLATE "C",
    status text NOT NULL,
    dispatched_at bigint NOT NULL,
    active boolean NOT NULL,
    queue_seq bigint,
    record bytea NOT NULL
);
CREATE INDEX hermes_units_by_time ON hermes_units (dispatched_at, id);
CREATE INDEX hermes_units_by_session ON hermes_units (session, id) WHERE session IS NOT NULL;
CREATE INDEX hermes_units_active ON hermes_units (id) WHERE active;
CREATE INDEX hermes_units_queue ON hermes_units (queue_seq) WHERE queue_seq IS NOT NULL;
CREATE TABLE hermes_children (
    unit text COLLATE "C" NOT NULL,
    idx bigint NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (unit, idx)
);
CREATE TABLE hermes_child_tails (
    unit text COLLATE "C" NOT NULL,
    idx bigint NOT NULL,
    tail text NOT NULL,
    PRIMARY KEY (unit, idx)
);
CREATE TABLE hermes_child_stalls (
    unit text COLLATE "C" NOT NULL,
    idx bigint NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (unit, idx)
);
CREATE TABLE hermes_tallies (unit text COLLATE "C" PRIMARY KEY, record bytea NOT NULL);
CREATE TABLE hermes_events (
    unit text COLLATE "C" NOT NULL,
    code bigint NOT NULL,
    session text COLLATE "C" NOT NULL,
    state text NOT NULL,
    open boolean NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (unit, code)
);
CREATE INDEX hermes_events_open ON hermes_events (session, unit, code) WHERE open;
CREATE TABLE hermes_claims (token bytea PRIMARY KEY, record bytea NOT NULL);
INSERT INTO hermes_meta (key, value) VALUES ('activity', 0), ('next_queue_seq', 0);
INSERT INTO hermes_schema (version) VALUES (1);
"#;

impl Pg {
    /// Creates the schema on first use, or checks its version, under an advisory lock.
    /// `asked`: the version the connection read when it opened, if it did.
    pub(super) fn prepare_schema(
        &self,
        client: &mut Client,
        asked: Option<Option<i32>>,
    ) -> Result<()> {
        let found = match asked {
            Some(found) => found,
            None => schema_version(&self.target, client).map_err(|err| self.unavailable(&err))?,
        };
        match found {
            Some(SCHEMA_VERSION) => Ok(()),
            Some(found) if found > SCHEMA_VERSION => Err(self.newer(found)),
            _ => self.migrate(client),
        }
    }

    pub(super) fn newer(&self, found: i32) -> LedgerError {
        LedgerError::NewerFormat {
            path: self.path.clone(),
            found: u32::try_from(found).unwrap_or(u32::MAX),
            supported: u32::try_from(SCHEMA_VERSION).unwrap_or(0),
        }
    }

    /// Brings the schema to `SCHEMA_VERSION` (one process at a time: the others wait on the
    /// advisory lock, then find it done).
    ///
    /// The lock is a transaction-level one, taken inside the migration's own transaction, and
    /// every statement is a simple-protocol or unnamed one: behind a pooler in transaction
    /// mode, where the transaction is the only thing that stays on one server connection, a
    /// session-level lock would be taken on one backend and released on another (or never),
    /// and a named prepared statement would meet another client's of the same name
    /// (<https://www.pgbouncer.org/features.html>).
    pub(crate) fn migrate(&self, client: &mut Client) -> Result<()> {
        let fail = |err: postgres::Error| self.statement_error(&err);
        let mut txn = client.transaction().map_err(fail)?;
        txn.batch_execute(&format!("SELECT pg_advisory_xact_lock({SCHEMA_LOCK})"))
            .map_err(fail)?;
        let found = schema_version_in(&self.target, &mut txn).map_err(fail)?;
        match found {
            Some(SCHEMA_VERSION) => return txn.commit().map_err(fail),
            Some(found) if found > SCHEMA_VERSION => return Err(self.newer(found)),
            None | Some(1) | Some(2) | Some(3) | Some(4) => {}
            Some(found) => {
                return Err(LedgerError::Invalid(format!(
                    "{}: schema version {found} has no migration to {SCHEMA_VERSION}",
                    self.path.display()
                )));
            }
        }
        // A namespace's tables go in a schema of its own, created here unless an operator
        // made it already (creating needs the database's CREATE right).
        if let Some(namespace) = &self.target.namespace {
            let schema = quote_ident(namespace.as_str());
            let exists = !txn
                .query_typed(
                    "SELECT 1 FROM pg_namespace WHERE nspname = $1",
                    &[(&namespace.as_str(), Type::TEXT)],
                )
                .map_err(fail)?
                .is_empty();
            if !exists {
                txn.batch_execute(&format!("CREATE SCHEMA {schema}"))
                    .map_err(fail)?;
            }
            // For this transaction only (a pooler may hand the session on).
            txn.batch_execute(&format!("SET LOCAL search_path TO {schema}"))
                .map_err(fail)?;
        }
        if found.is_none() {
            // A new ledger is made at version 1 and migrated like an old one: one path.
            txn.batch_execute(SCHEMA_V1).map_err(fail)?;
        }
        super::v3::install_transitions(&self.target, &self.path, &mut txn)?;
        if found.is_none_or(|version| version < 2) {
            super::v2::migrate(&self.target, &self.path, &mut txn)?;
        }
        if found.is_none_or(|version| version < 3) {
            super::v3::migrate(&self.path, &mut txn)?;
        }
        if found.is_none_or(|version| version < 5) {
            txn.batch_execute(SCHEMA_V5).map_err(fail)?;
        }
        txn.batch_execute(&format!(
            "UPDATE hermes_schema SET version = {SCHEMA_VERSION}"
        ))
        .map_err(fail)?;
        // Ending the transaction (here, or by dropping it on an error above) releases the lock.
        txn.commit().map_err(fail)
    }

    /// `hermes ledger migrate`: brings the schema to this build's version now (`migrate`
    /// either gets it there or fails) and returns that version.
    pub(crate) fn migrate_now(&self) -> Result<i32> {
        off_runtime(|| {
            let mut conn = self.take()?;
            self.migrate(&mut conn.client)?;
            self.put_back(conn);
            Ok(SCHEMA_VERSION)
        })
    }
}

/// The schema version recorded, `None` if hermes never created its schema in this database.
///
/// Every short-lived command connects and asks this first, so it is one round trip: one
/// simple-protocol query (nothing to prepare), a missing table answering `None` (the two
/// prepared statements it replaces cost four).
pub(super) fn schema_version(
    target: &PgTarget,
    client: &mut Client,
) -> std::result::Result<Option<i32>, postgres::Error> {
    Ok(schema_version_by(target, client, "SELECT max(version) FROM hermes_schema")?.flatten())
}

/// Runs `sql`, a simple-protocol query whose first column is the schema version recorded:
/// `Some(version)` when the schema table exists (`Some(None)`: no version in it), `None` when
/// it does not.
pub(super) fn schema_version_by(
    target: &PgTarget,
    client: &mut Client,
    sql: &str,
) -> std::result::Result<Option<Option<i32>>, postgres::Error> {
    match client.simple_query(&target.qualify(sql)) {
        Ok(messages) => Ok(Some(messages.iter().find_map(|message| match message {
            postgres::SimpleQueryMessage::Row(row) => row.get(0).and_then(|v| v.parse().ok()),
            _ => None,
        }))),
        Err(err)
            if err.code() == Some(&SqlState::UNDEFINED_TABLE)
                || err.code() == Some(&SqlState::INVALID_SCHEMA_NAME) =>
        {
            Ok(None)
        }
        Err(err) => Err(err),
    }
}

pub(super) fn schema_version_in(
    target: &PgTarget,
    txn: &mut Transaction<'_>,
) -> std::result::Result<Option<i32>, postgres::Error> {
    let exists = txn.query_typed(
        &target.qualify("SELECT to_regclass('hermes_schema') IS NOT NULL"),
        &[],
    )?;
    let exists = exists
        .first()
        .map(|row| row.try_get::<_, bool>(0))
        .transpose()?;
    if exists != Some(true) {
        return Ok(None);
    }
    let rows = txn.query_typed(
        &target.qualify("SELECT max(version) FROM hermes_schema"),
        &[],
    )?;
    Ok(rows
        .first()
        .map(|row| row.try_get(0))
        .transpose()?
        .flatten())
}
