//! The connections of a PostgreSQL ledger: a small pool, reconnecting with backoff, and the
//! retry loop every transaction runs in (again after a serialization failure; once more on a
//! fresh connection when one broke before `COMMIT`).

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use postgres::IsolationLevel;

use super::client::Client;

use super::connect::*;
use super::listen::*;
use super::tx::*;
use super::url::*;
use crate::error::{LedgerError, Result, StorageFault};
use crate::store::{Counters, Reader, Writer};

/// How long a connection attempt may take.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long sent data may stay unacknowledged before the kernel drops the connection.
pub(super) const TCP_USER_TIMEOUT: Duration = Duration::from_secs(10);
/// Keepalives on an idle connection: after this long idle…
pub(super) const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
/// …one probe this often…
pub(super) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(3);
/// …and the connection is dropped after this many unanswered.
pub(super) const KEEPALIVE_RETRIES: u32 = 3;
/// The server ends a statement that runs longer (set per session), unless
/// `ledger.statement_timeout_seconds` says otherwise.
pub(super) const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);
/// The most a call waits past the statement timeout for the server's answer before its
/// connection is taken for broken (`PgTarget::answer_within`).
pub(super) const ANSWER_MARGIN: Duration = Duration::from_secs(5);
/// The server ends a session whose transaction stays idle longer (its client hung or vanished
/// mid-transaction: its locks are released).
pub(super) const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);
/// Serialization failures tolerated before an operation gives up.
pub(super) const MAX_RETRIES: u32 = 200;
/// The longest pause between two connection attempts after failures.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// One pooled connection.
pub(super) struct Conn {
    pub(super) client: Client,
}

/// Consecutive connection failures, for backoff.
#[derive(Default)]
pub(super) struct Backoff {
    pub(super) failures: u32,
    pub(super) not_before: Option<Instant>,
}

/// A PostgreSQL ledger's connections.
pub(crate) struct Pg {
    pub(super) target: PgTarget,
    pub(super) path: PathBuf,
    pub(super) tls: tokio_postgres_rustls::MakeRustlsConnect,
    pub(super) idle: Mutex<Vec<Conn>>,
    pub(super) backoff: Mutex<Backoff>,
}

pub(super) use stdx::lock;

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
pub(super) enum Failure {
    /// A serialization failure or deadlock: run the operation again.
    Conflict,
    /// The connection broke: the operation may run again on a new one if it never reached
    /// `COMMIT`.
    Broken,
}

impl Pg {
    /// A pool for `target` with no connection yet.
    fn new(target: PgTarget) -> Pg {
        Pg {
            path: PathBuf::from(target.display()),
            tls: target.tls.clone(),
            target,
            idle: Mutex::new(Vec::new()),
            backoff: Mutex::new(Backoff::default()),
        }
    }

    /// Connects to `target` and reads the schema version recorded (`None`: hermes never
    /// created its schema there), creating and migrating nothing.
    pub(crate) fn probe(target: PgTarget) -> Result<Option<i32>> {
        let pg = Pg::new(target);
        off_runtime(|| {
            let mut conn = pg.take()?;
            super::schema::schema_version(&pg.target, &mut conn.client)
                .map_err(|err| pg.unavailable(&err))
        })
    }

    /// Connects to `target` (checking, creating or migrating the schema).
    pub(crate) fn connect(target: PgTarget) -> Result<Pg> {
        let pg = Pg::new(target);
        off_runtime(|| {
            let mut conn = pg.take()?;
            pg.prepare_schema(&mut conn.client)?;
            pg.put_back(conn);
            Ok::<(), LedgerError>(())
        })?;
        Ok(pg)
    }

    /// Runs a one-value query on a pooled connection (tests).
    pub(crate) fn query_value<T>(&self, sql: &str) -> Result<T>
    where
        T: for<'r> postgres::types::FromSql<'r> + Send,
    {
        off_runtime(|| {
            let mut conn = self.take()?;
            let rows = conn
                .client
                .query_typed(sql, &[])
                .map_err(|e| self.statement_error(&e))?;
            self.put_back(conn);
            let row = rows
                .first()
                .ok_or_else(|| LedgerError::Invalid(format!("no row from {sql}")))?;
            Ok(row.get::<_, T>(0))
        })
    }

    /// How the ledger is named in messages.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn unavailable(&self, err: &postgres::Error) -> LedgerError {
        LedgerError::Unavailable {
            path: self.path.clone(),
            reason: describe(err, &self.target.server),
        }
    }

    /// An idle connection, or a new one (unless connecting failed very recently: then the
    /// caller gets the error at once, and attempts are spaced by a growing pause).
    pub(super) fn take(&self) -> Result<Conn> {
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
        match connect_within(&self.target, &self.tls) {
            Ok(client) => {
                *lock(&self.backoff) = Backoff::default();
                Ok(Conn { client })
            }
            Err(refused) => {
                let mut backoff = lock(&self.backoff);
                backoff.failures = backoff.failures.saturating_add(1);
                let pause = Duration::from_millis(50)
                    .saturating_mul(1 << backoff.failures.min(6))
                    .min(MAX_BACKOFF);
                backoff.not_before = Some(Instant::now() + pause);
                Err(LedgerError::Unavailable {
                    path: self.path.clone(),
                    reason: refused.reason(&self.target.server),
                })
            }
        }
    }

    pub(super) fn put_back(&self, conn: Conn) {
        if !conn.client.is_closed() {
            lock(&self.idle).push(conn);
        }
    }

    pub(super) fn statement_error(&self, err: &postgres::Error) -> LedgerError {
        if err.is_closed()
            || err.as_db_error().is_none() && err.code().is_none()
            || server_gone(err)
        {
            return self.unavailable(err);
        }
        let text = match server_said(err) {
            Some(said) => format!("the PostgreSQL server at {} {said}", self.target.server),
            None => format!("PostgreSQL at {}: {}", self.target.server, one_line(err)),
        };
        LedgerError::Storage(StorageFault::Engine(text))
    }

    /// Runs `f` in one `REPEATABLE READ` read-only transaction.
    pub(crate) fn read<T: Send>(
        &self,
        counters: &Counters,
        f: &mut (dyn FnMut(&Reader<'_>) -> Result<T> + Send),
    ) -> Result<T> {
        off_runtime(|| {
            self.run(counters, IsolationLevel::RepeatableRead, true, &mut |tx| {
                let reader = Reader(Box::new(tx));
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
        f: &mut (dyn FnMut(&Writer<'_>) -> Result<(T, bool)> + Send),
    ) -> Result<(T, bool)> {
        off_runtime(|| {
            self.run(counters, IsolationLevel::Serializable, false, &mut |tx| {
                let writer = Writer(Box::new(tx));
                let (value, commit) = f(&writer)?;
                if commit {
                    writer.commit()?;
                }
                Ok(((value, commit), commit))
            })
        })
    }

    pub(super) fn run<T>(
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
                let begun = client.begin(Some(isolation), read_only);
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
                        // A connection that broke while idle (a server restart, or a backend
                        // terminated by an operator: its FATAL 57P01 arrives as the answer to
                        // BEGIN) is retried once, afresh, below.
                        let broken =
                            err.is_closed() || err.as_db_error().is_none() || server_gone(&err);
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
                    // Whatever broke this connection (a restart, a failover, an operator
                    // ending hermes' backends) most likely broke the idle ones too: the one
                    // retry runs on a new connection, and the idle ones are let go.
                    reconnected = true;
                    let idle = std::mem::take(&mut *lock(&self.idle));
                    drop(idle);
                }
                (Err(err), _) => return Err(err),
            }
        }
    }
}

/// Whether the server ended the session or cannot take one now (a shutdown or restart in
/// progress, SQLSTATE class 57P; a connection failure, class 08): try again on a new
/// connection.
pub(super) fn server_gone(err: &postgres::Error) -> bool {
    err.code()
        .is_some_and(|code| code.code().starts_with("57P") || code.code().starts_with("08"))
}

/// An error and its causes, on one line.
pub(super) fn one_line(err: &postgres::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        let more = inner.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = inner.source();
    }
    stdx::one_line(&text)
}
