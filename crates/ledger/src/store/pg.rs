//! The PostgreSQL backend: one ledger shared by any number of machines.
//!
//! Each record kind is a table whose key parts and index fields are columns (text keys in the
//! `"C"` collation, so they sort bytewise as redb's do) and whose record is the same
//! `codec`-encoded value the redb backend stores. The redb index tables become columns with
//! partial indexes (`open`, `active`, `queue_seq`).
//!
//! Every ledger operation runs inside one transaction: reads at `REPEATABLE READ` (one
//! snapshot), writes at `SERIALIZABLE`, and a write that loses a serialization race is run
//! again from the start (operations are re-runnable closures), so concurrent claimers,
//! promoters and finishers behave exactly as under redb's one-writer-at-a-time transactions.
//! As on redb, operations issued concurrently by one process's threads may share one
//! transaction and its one commit (group commit, `group.rs`; SPEC §4 allows it); each still
//! gets its own result. `NOTIFY` wakes waiters when
//! the activity counter moves or an event becomes deliverable.
//!
//! The client is the synchronous `postgres` crate, which drives `tokio-postgres` on a small
//! runtime of its own; a call made from inside a tokio runtime runs on a scoped thread, since
//! that runtime cannot be blocked on from there.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use postgres::error::SqlState;
use postgres::types::ToSql;
use postgres::types::Type;
use postgres::{Client, IsolationLevel};
use serde::Serialize;

use super::{
    ClaimRecord, Counters, ReadTx, WriteTx, decode, decode_child, decode_delegation, decode_host,
    event_ref, session_part,
};
use crate::codec;
use crate::error::{LedgerError, Result, StorageFault};
use crate::model::{
    Child, ClaimToken, Delegation, DelegationId, Event, EventRef, Host, ProcessId, Session,
    SessionId, Stalling, Timestamp, UnitStatus,
};
use crate::tables::{META_ACTIVITY, key_code};
use crate::units::UnitTally;

/// The schema version this build creates and reads.
pub const SCHEMA_VERSION: i32 = 1;

/// The advisory lock key under which the schema is created and migrated ("hermes" in ASCII).
const SCHEMA_LOCK: i64 = 0x6865_726d_6573;

/// The channel `NOTIFY`ed when the activity counter moves (a host has something to act on).
pub(crate) const ACTIVITY_CHANNEL: &str = "hermes_activity";
/// The channel `NOTIFY`ed when an event becomes deliverable; the payload is its session.
pub(crate) const EVENTS_CHANNEL: &str = "hermes_events";

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Serialization failures tolerated before an operation gives up.
const MAX_RETRIES: u32 = 200;
/// The longest pause between two connection attempts after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Whether `url` names a PostgreSQL ledger.
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// The schema, version 1.
const SCHEMA_V1: &str = r#"
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

/// Where a PostgreSQL ledger is, parsed from its URL; `Debug` and `Display` never show the
/// password.
#[derive(Clone)]
pub struct PgTarget {
    config: postgres::Config,
    /// `postgres://user@host:port/dbname`, for messages.
    display: String,
    /// `host:port`, for the one-line error when the server cannot be reached.
    server: String,
}

impl std::fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display)
    }
}

impl std::fmt::Display for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display)
    }
}

impl PgTarget {
    /// Parses a libpq URL (`postgres://` or `postgresql://`: host, port, user, password,
    /// dbname, `sslmode` of `disable`, `prefer` or `require`); a URL without a password takes
    /// `PGPASSWORD`'s. The error never contains the password.
    pub fn parse(url: &str, pgpassword: Option<&str>) -> Result<PgTarget> {
        let invalid = |why: String| LedgerError::Invalid(format!("ledger.url: {why}"));
        if !is_postgres_url(url) {
            return Err(invalid(
                "expected a postgres:// or postgresql:// URL".into(),
            ));
        }
        let mut config = postgres::Config::from_str(url).map_err(|err| {
            // The parser's message quotes at most an option name or value, never the URL.
            invalid(format!("not a valid PostgreSQL URL ({err})"))
        })?;
        if config.get_password().is_none()
            && let Some(password) = pgpassword.filter(|p| !p.is_empty())
        {
            config.password(password);
        }
        if config.get_user().is_none() {
            return Err(invalid(
                "the URL names no user (postgres://USER@HOST/DB)".into(),
            ));
        }
        config.connect_timeout(CONNECT_TIMEOUT);
        config.application_name("hermes");
        let host = match config.get_hosts().first() {
            Some(postgres::config::Host::Tcp(host)) => host.clone(),
            #[cfg(unix)]
            Some(postgres::config::Host::Unix(path)) => path.display().to_string(),
            None => "localhost".to_owned(),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let server = format!("{host}:{port}");
        let display = format!(
            "postgres://{}@{server}/{}",
            config.get_user().unwrap_or_default(),
            config
                .get_dbname()
                .or(config.get_user())
                .unwrap_or_default()
        );
        Ok(PgTarget {
            config,
            display,
            server,
        })
    }

    /// `postgres://user@host:port/dbname`, without the password.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// The same server with another database.
    pub fn with_dbname(&self, dbname: &str) -> PgTarget {
        let mut other = self.clone();
        other.config.dbname(dbname);
        other.display = format!(
            "postgres://{}@{}/{dbname}",
            other.config.get_user().unwrap_or_default(),
            other.server
        );
        other
    }
}

/// One pooled connection.
struct Conn {
    client: Client,
}

/// Consecutive connection failures, for backoff.
#[derive(Default)]
struct Backoff {
    failures: u32,
    not_before: Option<Instant>,
}

/// A PostgreSQL ledger's connections.
pub(crate) struct Pg {
    target: PgTarget,
    path: PathBuf,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    idle: Mutex<Vec<Conn>>,
    backoff: Mutex<Backoff>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Drop for Pg {
    fn drop(&mut self) {
        // Closing a client blocks on its runtime: never on a tokio worker thread.
        let idle = std::mem::take(&mut *lock(&self.idle));
        off_runtime(move || drop(idle));
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            off_runtime(move || drop(client));
        }
    }
}

/// Runs `f` where the synchronous client may block: on this thread, or on a scoped thread when
/// this thread belongs to a tokio runtime.
pub(crate) fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|scope| match scope.spawn(f).join() {
        Ok(value) => value,
        Err(payload) => std::panic::resume_unwind(payload),
    })
}

/// What went wrong with a statement, as far as retrying is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    /// A serialization failure or deadlock: run the operation again.
    Conflict,
    /// The connection broke: the operation may run again on a new one if it never reached
    /// `COMMIT`.
    Broken,
}

impl Pg {
    /// Connects to `target` (checking, creating or migrating the schema).
    pub(crate) fn connect(target: PgTarget) -> Result<Pg> {
        let pg = Pg {
            path: PathBuf::from(target.display()),
            tls: tls_connector(),
            target,
            idle: Mutex::new(Vec::new()),
            backoff: Mutex::new(Backoff::default()),
        };
        off_runtime(|| {
            let mut conn = pg.take()?;
            pg.prepare_schema(&mut conn.client)?;
            pg.put_back(conn);
            Ok::<(), LedgerError>(())
        })?;
        Ok(pg)
    }

    /// A listener on the ledger's notifications: `activity` (hosts) and/or `events`
    /// (consumers).
    pub(crate) fn listen(&self, activity: bool, events: bool) -> Result<Listener> {
        let mut channels = Vec::new();
        if activity {
            channels.push(ACTIVITY_CHANNEL);
        }
        if events {
            channels.push(EVENTS_CHANNEL);
        }
        let (target, tls) = (self.target.clone(), self.tls.clone());
        let client = off_runtime(|| listening(&target, &tls, &channels))
            .map_err(|e| self.unavailable(&e))?;
        Ok(Listener {
            target,
            tls,
            channels,
            client: Some(client),
            failures: 0,
            retry_at: None,
        })
    }

    /// Runs a one-value boolean query on a pooled connection (tests).
    pub(crate) fn query_bool(&self, sql: &str) -> Result<bool> {
        off_runtime(|| {
            let mut conn = self.take()?;
            let row = conn
                .client
                .query_one(sql, &[])
                .map_err(|e| self.statement_error(&e))?;
            self.put_back(conn);
            Ok(row.get::<_, bool>(0))
        })
    }

    /// How the ledger is named in messages.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn unavailable(&self, err: &postgres::Error) -> LedgerError {
        LedgerError::Unavailable {
            path: self.path.clone(),
            reason: format!(
                "cannot reach the PostgreSQL server at {}: {}",
                self.target.server,
                one_line(err)
            ),
        }
    }

    /// An idle connection, or a new one (unless connecting failed very recently: then the
    /// caller gets the error at once, and attempts are spaced by a growing pause).
    fn take(&self) -> Result<Conn> {
        while let Some(conn) = lock(&self.idle).pop() {
            if !conn.client.is_closed() {
                return Ok(conn);
            }
        }
        if let Some(not_before) = lock(&self.backoff).not_before
            && Instant::now() < not_before
        {
            return Err(LedgerError::Unavailable {
                path: self.path.clone(),
                reason: format!(
                    "cannot reach the PostgreSQL server at {} (retrying shortly)",
                    self.target.server
                ),
            });
        }
        match self.target.config.connect(self.tls.clone()) {
            Ok(client) => {
                *lock(&self.backoff) = Backoff::default();
                Ok(Conn { client })
            }
            Err(err) => {
                let mut backoff = lock(&self.backoff);
                backoff.failures = backoff.failures.saturating_add(1);
                let pause = Duration::from_millis(50)
                    .saturating_mul(1 << backoff.failures.min(6))
                    .min(MAX_BACKOFF);
                backoff.not_before = Some(Instant::now() + pause);
                Err(self.unavailable(&err))
            }
        }
    }

    fn put_back(&self, conn: Conn) {
        if !conn.client.is_closed() {
            lock(&self.idle).push(conn);
        }
    }

    /// Creates the schema on first use, or checks its version, under an advisory lock.
    fn prepare_schema(&self, client: &mut Client) -> Result<()> {
        let found = schema_version(client).map_err(|err| self.unavailable(&err))?;
        match found {
            Some(SCHEMA_VERSION) => Ok(()),
            Some(found) if found > SCHEMA_VERSION => Err(self.newer(found)),
            _ => self.migrate(client),
        }
    }

    fn newer(&self, found: i32) -> LedgerError {
        LedgerError::NewerFormat {
            path: self.path.clone(),
            found: u32::try_from(found).unwrap_or(u32::MAX),
            supported: u32::try_from(SCHEMA_VERSION).unwrap_or(0),
        }
    }

    /// Brings the schema to `SCHEMA_VERSION` (one process at a time: the others wait on the
    /// advisory lock, then find it done).
    pub(crate) fn migrate(&self, client: &mut Client) -> Result<()> {
        let fail = |err: postgres::Error| self.statement_error(&err);
        client
            .execute("SELECT pg_advisory_lock($1)", &[&SCHEMA_LOCK])
            .map_err(fail)?;
        let result = (|| {
            let mut txn = client.transaction().map_err(fail)?;
            match schema_version_in(&mut txn).map_err(fail)? {
                None => txn.batch_execute(SCHEMA_V1).map_err(fail)?,
                Some(SCHEMA_VERSION) => {}
                Some(found) if found > SCHEMA_VERSION => return Err(self.newer(found)),
                Some(found) => {
                    return Err(LedgerError::Invalid(format!(
                        "{}: schema version {found} has no migration to {SCHEMA_VERSION}",
                        self.path.display()
                    )));
                }
            }
            txn.commit().map_err(fail)
        })();
        let unlocked = client
            .execute("SELECT pg_advisory_unlock($1)", &[&SCHEMA_LOCK])
            .map_err(fail);
        result.and(unlocked.map(drop))
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

    fn statement_error(&self, err: &postgres::Error) -> LedgerError {
        if err.is_closed()
            || err.as_db_error().is_none() && err.code().is_none()
            || server_gone(err)
        {
            return self.unavailable(err);
        }
        LedgerError::Storage(StorageFault::Engine(format!(
            "PostgreSQL at {}: {}",
            self.target.server,
            one_line(err)
        )))
    }

    /// Runs `f` in one `REPEATABLE READ` read-only transaction.
    pub(crate) fn read<T: Send>(
        &self,
        counters: &Counters,
        f: &mut (dyn FnMut(&super::Reader<'_>) -> Result<T> + Send),
    ) -> Result<T> {
        off_runtime(|| {
            self.run(counters, IsolationLevel::RepeatableRead, true, &mut |tx| {
                let reader = super::Reader(Box::new(tx));
                f(&reader).map(|value| (value, false))
            })
        })
    }

    /// Runs `f` in one `SERIALIZABLE` transaction, again from the start after a serialization
    /// failure; commits when `f` returns `(value, true)`.
    /// Returns `f`'s value and whether it committed.
    pub(crate) fn write<T: Send>(
        &self,
        counters: &Counters,
        f: &mut (dyn FnMut(&super::Writer<'_>) -> Result<(T, bool)> + Send),
    ) -> Result<(T, bool)> {
        off_runtime(|| {
            self.run(counters, IsolationLevel::Serializable, false, &mut |tx| {
                let writer = super::Writer(Box::new(tx));
                let (value, commit) = f(&writer)?;
                if commit {
                    writer.commit()?;
                }
                Ok(((value, commit), commit))
            })
        })
    }

    fn run<T>(
        &self,
        counters: &Counters,
        isolation: IsolationLevel,
        read_only: bool,
        f: &mut dyn FnMut(Tx<'_, '_>) -> Result<(T, bool)>,
    ) -> Result<T> {
        let mut conflicts = 0u32;
        let mut reconnected = false;
        loop {
            let mut conn = self.take()?;
            let failure = Cell::new(None);
            let committed = Cell::new(false);
            let result = {
                let Conn { client } = &mut conn;
                let begun = client
                    .build_transaction()
                    .isolation_level(isolation)
                    .read_only(read_only)
                    .start();
                match begun {
                    Ok(txn) => {
                        let tx = Tx {
                            pg: self,
                            txn: RefCell::new(Some(txn)),
                            counters,
                            dirty: Cell::new(false),
                            aborted: Cell::new(false),
                            failure: &failure,
                            committed: &committed,
                        };
                        f(tx)
                    }
                    Err(err) => {
                        // A connection that broke while idle (a server restart) is retried
                        // once, afresh, below.
                        let broken = err.is_closed() || err.as_db_error().is_none();
                        failure.set(broken.then_some(Failure::Broken));
                        Err(self.statement_error(&err))
                    }
                }
            };
            if !conn.client.is_closed() {
                self.put_back(conn);
            }
            match (result, failure.get()) {
                (Ok((value, _)), _) => return Ok(value),
                (Err(_), Some(Failure::Conflict)) if conflicts < MAX_RETRIES => {
                    conflicts += 1;
                    // A short, growing, jittered pause lets the winner finish.
                    let micros = 50 * u64::from(conflicts.min(20)) * (1 + fastrand::u64(..4));
                    std::thread::sleep(Duration::from_micros(micros));
                }
                (Err(_), Some(Failure::Broken)) if !committed.get() && !reconnected => {
                    reconnected = true;
                }
                (Err(err), _) => return Err(err),
            }
        }
    }
}

/// What woke a [`Listener`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// The activity counter moved: a host may have work (a dispatch, an interrupt, a session
    /// end).
    Activity,
    /// An event of this session (`""`: of an inline unit) became deliverable.
    Event(String),
    /// The listening connection was re-established: notices may have been missed, so look.
    Reconnected,
}

/// A connection that `LISTEN`s for the ledger's notifications (PostgreSQL only).
pub struct Listener {
    target: PgTarget,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    channels: Vec<&'static str>,
    client: Option<Client>,
    /// Reconnection attempts that failed in a row, and when the next may be made.
    failures: u32,
    retry_at: Option<Instant>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("target", &self.target)
            .field("channels", &self.channels)
            .finish_non_exhaustive()
    }
}

/// A new connection that `LISTEN`s on `channels`.
fn listening(
    target: &PgTarget,
    tls: &tokio_postgres_rustls::MakeRustlsConnect,
    channels: &[&'static str],
) -> std::result::Result<Client, postgres::Error> {
    let mut client = target.config.connect(tls.clone())?;
    for channel in channels {
        client.batch_execute(&format!("LISTEN {channel}"))?;
    }
    Ok(client)
}

impl Listener {
    /// Blocks until a notification arrives or `timeout` passes; returns what arrived (empty on
    /// timeout). A dropped connection is re-established on a later call, which then returns
    /// [`Notice::Reconnected`] at once; attempts that fail are spaced by a growing pause
    /// (waited out within `timeout`), so a caller simply calls again.
    pub fn wait(&mut self, timeout: Duration) -> Result<Vec<Notice>> {
        use postgres::fallible_iterator::FallibleIterator;
        off_runtime(|| {
            let unavailable = |err: &postgres::Error| LedgerError::Unavailable {
                path: PathBuf::from(self.target.display()),
                reason: format!(
                    "cannot listen on the PostgreSQL server at {}: {}",
                    self.target.server,
                    one_line(err)
                ),
            };
            let mut client = match self.client.take() {
                Some(client) if !client.is_closed() => client,
                _ => {
                    if let Some(at) = self.retry_at {
                        let now = Instant::now();
                        if now < at {
                            std::thread::sleep((at - now).min(timeout));
                            return Ok(Vec::new());
                        }
                    }
                    return match listening(&self.target, &self.tls, &self.channels) {
                        Ok(client) => {
                            (self.client, self.failures, self.retry_at) = (Some(client), 0, None);
                            Ok(vec![Notice::Reconnected])
                        }
                        Err(err) => {
                            self.failures = self.failures.saturating_add(1);
                            let pause = Duration::from_millis(100)
                                .saturating_mul(self.failures)
                                .min(MAX_BACKOFF);
                            self.retry_at = Some(Instant::now() + pause);
                            Err(unavailable(&err))
                        }
                    };
                }
            };
            let mut notices = Vec::new();
            let notice = |n: postgres::Notification| {
                if n.channel() == EVENTS_CHANNEL {
                    Notice::Event(n.payload().to_owned())
                } else {
                    Notice::Activity
                }
            };
            let waited = {
                let mut notifications = client.notifications();
                let first = notifications.timeout_iter(timeout).next();
                match first {
                    Ok(Some(n)) => {
                        notices.push(notice(n));
                        // Whatever else already arrived, without blocking.
                        let mut more = notifications.iter();
                        while let Ok(Some(n)) = more.next() {
                            notices.push(notice(n));
                        }
                        Ok(())
                    }
                    Ok(None) => Ok(()),
                    Err(err) => Err(err),
                }
            };
            match waited {
                Ok(()) => {
                    self.client = Some(client);
                    Ok(notices)
                }
                Err(err) => Err(unavailable(&err)),
            }
        })
    }
}

/// The schema version recorded, `None` if hermes never created its schema in this database.
///
/// Every short-lived command connects and asks this first, so it is one round trip: one
/// simple-protocol query (nothing to prepare), a missing table answering `None` (the two
/// prepared statements it replaces cost four).
fn schema_version(client: &mut Client) -> std::result::Result<Option<i32>, postgres::Error> {
    match client.simple_query("SELECT max(version) FROM hermes_schema") {
        Ok(messages) => Ok(messages.iter().find_map(|message| match message {
            postgres::SimpleQueryMessage::Row(row) => row.get(0).and_then(|v| v.parse().ok()),
            _ => None,
        })),
        Err(err) if err.code() == Some(&SqlState::UNDEFINED_TABLE) => Ok(None),
        Err(err) => Err(err),
    }
}

fn schema_version_in(
    txn: &mut postgres::Transaction<'_>,
) -> std::result::Result<Option<i32>, postgres::Error> {
    let exists = txn.query_one("SELECT to_regclass('hermes_schema') IS NOT NULL", &[])?;
    if !exists.get::<_, bool>(0) {
        return Ok(None);
    }
    let row = txn.query_opt("SELECT max(version) FROM hermes_schema", &[])?;
    Ok(row.and_then(|row| row.get::<_, Option<i32>>(0)))
}

/// Whether the server ended the session or cannot take one now (a shutdown or restart in
/// progress, SQLSTATE class 57P; a connection failure, class 08): try again on a new
/// connection.
fn server_gone(err: &postgres::Error) -> bool {
    err.code()
        .is_some_and(|code| code.code().starts_with("57P") || code.code().starts_with("08"))
}

/// An error and its causes, on one line.
fn one_line(err: &postgres::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        let more = inner.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = inner.source();
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One transaction on one connection.
pub(crate) struct Tx<'c, 'p> {
    pg: &'p Pg,
    txn: RefCell<Option<postgres::Transaction<'c>>>,
    counters: &'p Counters,
    dirty: Cell<bool>,
    /// A statement failed: the server has aborted the transaction.
    aborted: Cell<bool>,
    failure: &'p Cell<Option<Failure>>,
    committed: &'p Cell<bool>,
}

type Row = postgres::Row;

/// A statement parameter with its PostgreSQL type.
trait Param {
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
}

impl Tx<'_, '_> {
    fn fail(&self, err: &postgres::Error) -> LedgerError {
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

    /// Runs `sql` in one round trip: its parameters' types are given (`Param`), so the server
    /// need not describe a prepared statement first (a short-lived command would otherwise pay
    /// a second round trip for every statement on its fresh connection).
    fn query(&self, sql: &'static str, params: &[&dyn Param]) -> Result<Vec<Row>> {
        let mut guard = self.txn.borrow_mut();
        let txn = guard
            .as_mut()
            .ok_or_else(|| LedgerError::Invalid("the transaction has ended".into()))?;
        let typed: Vec<(&(dyn ToSql + Sync), Type)> =
            params.iter().map(|p| (p.as_sql(), p.pg_type())).collect();
        txn.query_typed(sql, &typed).map_err(|e| self.fail(&e))
    }

    fn write(&self, sql: &'static str, params: &[&dyn Param]) -> Result<()> {
        self.dirty.set(true);
        self.query(sql, params).map(drop)
    }

    fn record<V: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        sql: &'static str,
        params: &[&dyn Param],
    ) -> Result<Option<V>> {
        let rows = self.query(sql, params)?;
        rows.first()
            .map(|row| decode(&self.pg.path, what, row.get::<_, &[u8]>(0)))
            .transpose()
    }

    fn records<V: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        sql: &'static str,
        params: &[&dyn Param],
    ) -> Result<Vec<V>> {
        self.query(sql, params)?
            .iter()
            .map(|row| decode(&self.pg.path, what, row.get::<_, &[u8]>(0)))
            .collect()
    }

    fn units(&self, sql: &'static str, params: &[&dyn Param]) -> Result<Vec<Delegation>> {
        self.query(sql, params)?
            .iter()
            .map(|row| decode_delegation(&self.pg.path, row.get::<_, &[u8]>(0)))
            .collect()
    }

    fn unit(&self, sql: &'static str, params: &[&dyn Param]) -> Result<Option<Delegation>> {
        Ok(self.units(sql, params)?.into_iter().next())
    }

    fn event_refs(&self, rows: Vec<Row>) -> Result<Vec<EventRef>> {
        rows.iter()
            .map(|row| {
                let code = u32::try_from(row.get::<_, i64>(1)).unwrap_or(u32::MAX);
                event_ref(&self.pg.path, row.get::<_, &str>(0), code)
            })
            .collect()
    }
}

fn int(n: u64) -> i64 {
    // Stored bit for bit: timestamps, sequences and counters stay far below 2^63.
    n as i64
}

fn uint(n: i64) -> u64 {
    n as u64
}

fn token_bytes(token: ClaimToken) -> Vec<u8> {
    token.0.to_be_bytes().to_vec()
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    codec::encode(value)
}

impl ReadTx for Tx<'_, '_> {
    fn session(&self, id: &SessionId) -> Result<Option<Session>> {
        self.record(
            "session",
            "SELECT record FROM hermes_sessions WHERE id = $1",
            &[&id.as_str()],
        )
    }

    fn sessions(&self) -> Result<Vec<Session>> {
        self.records(
            "session",
            "SELECT record FROM hermes_sessions ORDER BY id",
            &[],
        )
    }

    fn host(&self, process: ProcessId) -> Result<Option<Host>> {
        let rows = self.query(
            "SELECT record FROM hermes_hosts WHERE pid = $1 AND start_time = $2",
            &[&i64::from(process.pid), &int(process.start_time)],
        )?;
        rows.first()
            .map(|row| decode_host(&self.pg.path, row.get::<_, &[u8]>(0)))
            .transpose()
    }

    fn hosts(&self) -> Result<Vec<Host>> {
        self.query(
            "SELECT record FROM hermes_hosts ORDER BY pid, start_time",
            &[],
        )?
        .iter()
        .map(|row| decode_host(&self.pg.path, row.get::<_, &[u8]>(0)))
        .collect()
    }

    fn child_tail(&self, id: &DelegationId, index: u32) -> Result<Option<String>> {
        let rows = self.query(
            "SELECT tail FROM hermes_child_tails WHERE unit = $1 AND idx = $2",
            &[&id.as_str(), &i64::from(index)],
        )?;
        Ok(rows.first().map(|row| row.get::<_, String>(0)))
    }

    fn delegation(&self, id: &str) -> Result<Option<Delegation>> {
        self.counters.count(1);
        self.unit("SELECT record FROM hermes_units WHERE id = $1", &[&id])
    }

    fn delegation_exists(&self, id: &str) -> Result<bool> {
        let rows = self.query("SELECT 1 FROM hermes_units WHERE id = $1", &[&id])?;
        Ok(!rows.is_empty())
    }

    fn child(&self, id: &DelegationId, index: u32) -> Result<Option<Child>> {
        self.counters.count(1);
        let rows = self.query(
            "SELECT record FROM hermes_children WHERE unit = $1 AND idx = $2",
            &[&id.as_str(), &i64::from(index)],
        )?;
        rows.first()
            .map(|row| decode_child(&self.pg.path, row.get::<_, &[u8]>(0)))
            .transpose()
    }

    fn children(&self, id: &DelegationId) -> Result<Vec<Child>> {
        let out: Vec<Child> = self
            .query(
                "SELECT record FROM hermes_children WHERE unit = $1 ORDER BY idx",
                &[&id.as_str()],
            )?
            .iter()
            .map(|row| decode_child(&self.pg.path, row.get::<_, &[u8]>(0)))
            .collect::<Result<_>>()?;
        self.counters.count(out.len() as u64);
        Ok(out)
    }

    fn stalls(&self, id: &DelegationId) -> Result<Vec<Stalling>> {
        self.records(
            "stall",
            "SELECT record FROM hermes_child_stalls WHERE unit = $1 ORDER BY idx",
            &[&id.as_str()],
        )
    }

    fn tally(&self, id: &DelegationId) -> Result<Option<UnitTally>> {
        self.record(
            "tally",
            "SELECT record FROM hermes_tallies WHERE unit = $1",
            &[&id.as_str()],
        )
    }

    fn event(&self, event: &EventRef) -> Result<Option<Event>> {
        self.record(
            "event",
            "SELECT record FROM hermes_events WHERE unit = $1 AND code = $2",
            &[
                &event.delegation_id.as_str(),
                &i64::from(key_code(event.key)),
            ],
        )
    }

    fn events(&self, id: &DelegationId) -> Result<Vec<Event>> {
        self.records(
            "event",
            "SELECT record FROM hermes_events WHERE unit = $1 ORDER BY code",
            &[&id.as_str()],
        )
    }

    fn open_events(&self, session: Option<&SessionId>) -> Result<Vec<EventRef>> {
        let rows = self.query(
            "SELECT unit, code FROM hermes_events WHERE open AND session = $1 \
             ORDER BY unit, code",
            &[&session_part(session)],
        )?;
        self.event_refs(rows)
    }

    fn open_event_records(&self, session: Option<&SessionId>) -> Result<Vec<Event>> {
        self.records(
            "event",
            "SELECT record FROM hermes_events WHERE open AND session = $1 ORDER BY unit, code",
            &[&session_part(session)],
        )
    }

    fn all_open_events(&self) -> Result<Vec<EventRef>> {
        let rows = self.query(
            "SELECT unit, code FROM hermes_events WHERE open ORDER BY session, unit, code",
            &[],
        )?;
        self.event_refs(rows)
    }

    fn claim_record(&self, token: ClaimToken) -> Result<Option<ClaimRecord>> {
        self.record(
            "claim",
            "SELECT record FROM hermes_claims WHERE token = $1",
            &[&token_bytes(token)],
        )
    }

    fn active_units(&self) -> Result<Vec<Delegation>> {
        self.units(
            "SELECT record FROM hermes_units WHERE active ORDER BY id",
            &[],
        )
    }

    fn queue(&self) -> Result<Vec<(u64, String)>> {
        let rows = self.query(
            "SELECT queue_seq, id FROM hermes_units WHERE queue_seq IS NOT NULL \
             ORDER BY queue_seq",
            &[],
        )?;
        Ok(rows
            .iter()
            .map(|row| (uint(row.get(0)), row.get::<_, String>(1)))
            .collect())
    }

    fn unit_count(&self, session: Option<&SessionId>) -> Result<usize> {
        let rows = match session {
            None => self.query("SELECT count(*) FROM hermes_units", &[])?,
            Some(session) => self.query(
                "SELECT count(*) FROM hermes_units WHERE session = $1",
                &[&session.as_str()],
            )?,
        };
        let count = rows.first().map_or(0, |row| row.get::<_, i64>(0));
        Ok(usize::try_from(count).unwrap_or(usize::MAX))
    }

    fn recent_units(&self, session: Option<&SessionId>, limit: usize) -> Result<Vec<Delegation>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        match session {
            None => self.units(
                "SELECT record FROM hermes_units ORDER BY dispatched_at DESC, id DESC LIMIT $1",
                &[&limit],
            ),
            Some(session) => self.units(
                "SELECT record FROM hermes_units WHERE session = $1 \
                 ORDER BY dispatched_at DESC, id DESC LIMIT $2",
                &[&session.as_str(), &limit],
            ),
        }
    }

    fn units_before(&self, cutoff: Timestamp) -> Result<Vec<(u64, String)>> {
        let rows = self.query(
            "SELECT dispatched_at, id FROM hermes_units WHERE dispatched_at < $1 \
             ORDER BY dispatched_at, id",
            &[&int(cutoff.0)],
        )?;
        Ok(rows
            .iter()
            .map(|row| (uint(row.get(0)), row.get::<_, String>(1)))
            .collect())
    }

    fn meta(&self, key: &str) -> Result<Option<u64>> {
        let rows = self.query("SELECT value FROM hermes_meta WHERE key = $1", &[&key])?;
        Ok(rows.first().map(|row| uint(row.get(0))))
    }

    fn children_of(&self, ids: &[DelegationId]) -> Result<Vec<Child>> {
        let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
        let out: Vec<Child> = self
            .query(
                "SELECT record FROM hermes_children WHERE unit = ANY($1) ORDER BY unit, idx",
                &[&ids],
            )?
            .iter()
            .map(|row| decode_child(&self.pg.path, row.get::<_, &[u8]>(0)))
            .collect::<Result<_>>()?;
        self.counters.count(out.len() as u64);
        Ok(out)
    }

    fn events_of(&self, ids: &[DelegationId]) -> Result<Vec<Event>> {
        let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
        self.records(
            "event",
            "SELECT record FROM hermes_events WHERE unit = ANY($1) ORDER BY unit, code",
            &[&ids],
        )
    }

    fn stalls_of(&self, ids: &[DelegationId]) -> Result<Vec<(DelegationId, Stalling)>> {
        let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
        self.query(
            "SELECT unit, record FROM hermes_child_stalls WHERE unit = ANY($1) ORDER BY unit, idx",
            &[&ids],
        )?
        .iter()
        .map(|row| {
            let unit = row.get::<_, String>(0);
            let id = DelegationId::new(&unit).map_err(|err| LedgerError::Damaged {
                path: self.pg.path.clone(),
                reason: format!("stall of {unit}: {err}"),
            })?;
            Ok((id, decode(&self.pg.path, "stall", row.get::<_, &[u8]>(1))?))
        })
        .collect()
    }
}

impl WriteTx for Tx<'_, '_> {
    fn dirty(&self) -> &Cell<bool> {
        &self.dirty
    }

    fn aborted(&self) -> bool {
        self.aborted.get()
    }

    fn commit(self: Box<Self>) -> Result<()> {
        let txn = self
            .txn
            .borrow_mut()
            .take()
            .ok_or_else(|| LedgerError::Invalid("the transaction has ended".into()))?;
        match txn.commit() {
            Ok(()) => {
                self.committed.set(true);
                Ok(())
            }
            Err(err) => {
                let failed = self.fail(&err);
                if self.failure.get() == Some(Failure::Broken) {
                    // Whether COMMIT reached the server is unknown: never run it again.
                    self.committed.set(true);
                    return Err(LedgerError::Unavailable {
                        path: self.pg.path.clone(),
                        reason: format!(
                            "the connection to {} broke while committing; the change may or may not have been recorded",
                            self.pg.target.server
                        ),
                    });
                }
                Err(failed)
            }
        }
    }

    fn put_child_tail(&self, id: &DelegationId, index: u32, tail: &str) -> Result<()> {
        self.write(
            "INSERT INTO hermes_child_tails (unit, idx, tail) VALUES ($1, $2, $3) \
             ON CONFLICT (unit, idx) DO UPDATE SET tail = EXCLUDED.tail",
            &[&id.as_str(), &i64::from(index), &tail],
        )
    }

    fn put_session(&self, session: &Session) -> Result<()> {
        self.write(
            "INSERT INTO hermes_sessions (id, record) VALUES ($1, $2) \
             ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record",
            &[&session.id.as_str(), &encode(session)],
        )
    }

    fn put_host(&self, host: &Host) -> Result<()> {
        self.write(
            "INSERT INTO hermes_hosts (pid, start_time, record) VALUES ($1, $2, $3) \
             ON CONFLICT (pid, start_time) DO UPDATE SET record = EXCLUDED.record",
            &[
                &i64::from(host.process.pid),
                &int(host.process.start_time),
                &encode(host),
            ],
        )
    }

    fn remove_host(&self, process: ProcessId) -> Result<()> {
        self.write(
            "DELETE FROM hermes_hosts WHERE pid = $1 AND start_time = $2",
            &[&i64::from(process.pid), &int(process.start_time)],
        )
    }

    fn put_delegation(&self, unit: &Delegation) -> Result<()> {
        let queue_seq = unit
            .queue_seq
            .filter(|_| unit.status == UnitStatus::Queued)
            .map(int);
        self.write(
            "INSERT INTO hermes_units (id, session, status, dispatched_at, active, queue_seq, record) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (id) DO UPDATE SET session = EXCLUDED.session, \
             status = EXCLUDED.status, dispatched_at = EXCLUDED.dispatched_at, \
             active = EXCLUDED.active, queue_seq = EXCLUDED.queue_seq, record = EXCLUDED.record",
            &[
                &unit.id.as_str(),
                &unit.session.as_ref().map(SessionId::as_str),
                &unit.status.as_str(),
                &int(unit.dispatched_at.0),
                &!unit.status.is_terminal(),
                &queue_seq,
                &encode(unit),
            ],
        )
    }

    fn put_child(&self, child: &Child) -> Result<()> {
        self.write(
            "INSERT INTO hermes_children (unit, idx, record) VALUES ($1, $2, $3) \
             ON CONFLICT (unit, idx) DO UPDATE SET record = EXCLUDED.record",
            &[
                &child.delegation_id.as_str(),
                &i64::from(child.index),
                &encode(child),
            ],
        )
    }

    fn put_stall(&self, id: &DelegationId, stalling: &Stalling) -> Result<()> {
        self.write(
            "INSERT INTO hermes_child_stalls (unit, idx, record) VALUES ($1, $2, $3) \
             ON CONFLICT (unit, idx) DO UPDATE SET record = EXCLUDED.record",
            &[&id.as_str(), &i64::from(stalling.index), &encode(stalling)],
        )
    }

    fn put_tally(&self, id: &DelegationId, tally: &UnitTally) -> Result<()> {
        self.write(
            "INSERT INTO hermes_tallies (unit, record) VALUES ($1, $2) \
             ON CONFLICT (unit) DO UPDATE SET record = EXCLUDED.record",
            &[&id.as_str(), &encode(tally)],
        )
    }

    fn remove_tally(&self, id: &DelegationId) -> Result<()> {
        self.write(
            "DELETE FROM hermes_tallies WHERE unit = $1",
            &[&id.as_str()],
        )
    }

    fn put_event(&self, event: &Event) -> Result<()> {
        let session = session_part(event.session.as_ref());
        self.write(
            "INSERT INTO hermes_events (unit, code, session, state, open, record) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (unit, code) DO UPDATE SET session = EXCLUDED.session, \
             state = EXCLUDED.state, open = EXCLUDED.open, record = EXCLUDED.record",
            &[
                &event.delegation_id.as_str(),
                &i64::from(key_code(event.key)),
                &session,
                &event.state.as_str(),
                &!event.state.is_terminal(),
                &encode(event),
            ],
        )?;
        if event.state == crate::model::EventState::Pending {
            self.write("SELECT pg_notify($1, $2)", &[&EVENTS_CHANNEL, &session])?;
        }
        Ok(())
    }

    fn put_claim(&self, claim: &ClaimRecord) -> Result<()> {
        self.write(
            "INSERT INTO hermes_claims (token, record) VALUES ($1, $2) \
             ON CONFLICT (token) DO UPDATE SET record = EXCLUDED.record",
            &[&token_bytes(claim.token), &encode(claim)],
        )
    }

    fn remove_claim(&self, token: ClaimToken) -> Result<()> {
        self.write(
            "DELETE FROM hermes_claims WHERE token = $1",
            &[&token_bytes(token)],
        )
    }

    fn bump_activity(&self) -> Result<()> {
        self.write(
            "INSERT INTO hermes_meta (key, value) VALUES ($1, 1) \
             ON CONFLICT (key) DO UPDATE SET value = hermes_meta.value + 1",
            &[&META_ACTIVITY],
        )?;
        self.write("SELECT pg_notify($1, '')", &[&ACTIVITY_CHANNEL])
    }

    fn set_meta(&self, key: &str, value: u64) -> Result<()> {
        let key = key.to_owned();
        self.write(
            "INSERT INTO hermes_meta (key, value) VALUES ($1, $2) \
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            &[&key, &int(value)],
        )
    }

    fn purge_delegation(&self, unit: &Delegation) -> Result<()> {
        let id = unit.id.as_str();
        for event in self.events(&unit.id)? {
            if let Some(lease) = &event.lease {
                self.remove_claim(lease.token)?;
            }
        }
        self.write("DELETE FROM hermes_events WHERE unit = $1", &[&id])?;
        self.write("DELETE FROM hermes_children WHERE unit = $1", &[&id])?;
        self.write("DELETE FROM hermes_child_tails WHERE unit = $1", &[&id])?;
        self.write("DELETE FROM hermes_child_stalls WHERE unit = $1", &[&id])?;
        self.write("DELETE FROM hermes_tallies WHERE unit = $1", &[&id])?;
        self.write("DELETE FROM hermes_units WHERE id = $1", &[&id])
    }
}

/// A TLS connector for `sslmode=prefer|require`: encrypted, the server's certificate not
/// verified (libpq's meaning of those modes).
fn tls_connector() -> tokio_postgres_rustls::MakeRustlsConnect {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map(|builder| {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unverified(provider)))
                .with_no_client_auth()
        });
    match config {
        Ok(config) => tokio_postgres_rustls::MakeRustlsConnect::new(config),
        // ring supports the default protocol versions; unreachable in practice.
        Err(_) => tokio_postgres_rustls::MakeRustlsConnect::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap_or_else(|_| unreachable!("TLS 1.3 is supported by ring"))
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unverified(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))))
            .with_no_client_auth(),
        ),
    }
}

/// Accepts any server certificate (as libpq's `sslmode=require` does) while still checking the
/// handshake's signatures.
#[derive(Debug)]
struct Unverified(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> std::result::Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
