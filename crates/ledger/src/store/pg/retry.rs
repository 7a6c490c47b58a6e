//! A PostgreSQL ledger on its connections (`pool.rs`), and the retry loop every transaction
//! runs in (again after a serialization failure; once more on a fresh connection when one
//! broke before `COMMIT`).

use std::cell::{Cell, RefCell};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use postgres::IsolationLevel;

use super::pool::Conns;
use super::tx::Tx;
use super::url::PgTarget;
use crate::error::{LedgerError, Result};
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

/// A PostgreSQL ledger: its connections (`pool.rs`), which its listeners share.
pub(crate) struct Pg {
    pub(super) conns: Arc<Conns>,
}

impl std::ops::Deref for Pg {
    type Target = Conns;

    fn deref(&self) -> &Conns {
        &self.conns
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

/// Serialization failures and deadlocks this process's statements met (each then run again).
static CONFLICTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many serialization failures and deadlocks this process's PostgreSQL statements met
/// (each was run again), for the benchmarks: the one-statement transitions take row locks and
/// should meet none; the serializable transactions meet them when processes write the same
/// rows at once.
pub fn serialization_failures() -> u64 {
    CONFLICTS.load(std::sync::atomic::Ordering::Relaxed)
}

pub(super) fn count_conflict() {
    CONFLICTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// How an operation's statements are run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bracket {
    /// In a transaction.
    Transaction,
    /// One statement on its own ([`Pg::read_one`]).
    One,
}

/// What went wrong with a statement, as far as retrying is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Failure {
    /// A serialization failure or deadlock: run the operation again.
    Conflict,
    /// The connection broke: the operation may run again on a new one if it never reached
    /// `COMMIT`.
    Broken,
    /// A read begun as one statement ([`Pg::read_one`]) asked for a second: run it again in a
    /// read transaction.
    Unbracketed,
    /// A statement the connection had prepared was gone or stale on the server (it had not
    /// run): run the operation again, once, with the connection's statements forgotten.
    Stale,
}

impl Pg {
    /// A pool for `target` with no connection yet.
    fn new(target: PgTarget) -> Pg {
        Pg {
            conns: Arc::new(Conns::new(target)),
        }
    }

    /// Connects to `target` and reads the schema version recorded (`None`: hermes never
    /// created its schema there), creating and migrating nothing.
    pub(crate) fn probe(target: PgTarget) -> Result<Option<i32>> {
        let pg = Pg::new(target);
        off_runtime(|| {
            let (mut conn, asked) = pg.take_reading_schema()?;
            match asked {
                Some(version) => Ok(version),
                None => super::schema::schema_version(&pg.target, &mut conn.client)
                    .map_err(|err| pg.unavailable(&err)),
            }
        })
    }

    /// Connects to `target` (checking, creating or migrating the schema).
    pub(crate) fn connect(target: PgTarget) -> Result<Pg> {
        let pg = Pg::new(target);
        off_runtime(|| {
            let (mut conn, asked) = pg.take_reading_schema()?;
            pg.prepare_schema(&mut conn.client, asked)?;
            pg.put_back(conn);
            Ok::<(), LedgerError>(())
        })?;
        Ok(pg)
    }

    /// Runs a one-value query on a pooled connection (tests).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn query_value<T>(&self, sql: &str) -> Result<T>
    where
        T: for<'r> postgres::types::FromSql<'r> + Send,
    {
        use super::tx::Columns;
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
            row.col::<T>(self.path(), 0)
        })
    }

    /// How the ledger is named in messages.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` in one `REPEATABLE READ` read-only transaction.
    pub(crate) fn read<T: Send>(
        &self,
        counters: &Counters,
        f: &mut (dyn FnMut(&Reader<'_>) -> Result<T> + Send),
    ) -> Result<T> {
        self.read_as(Bracket::Transaction, counters, f)
    }

    /// [`Pg::read`] for a read that is most often one statement (a poll): that statement runs
    /// on its own, one snapshot by itself, without the `START TRANSACTION` and `ROLLBACK` of a
    /// read transaction around it (a short-lived command or a poll pays one statement, not
    /// three). Should `f` ask for a second statement, nothing it read is used: it runs again
    /// in a read transaction, so that all it reads is one snapshot.
    pub(crate) fn read_one<T: Send>(
        &self,
        counters: &Counters,
        f: &mut (dyn FnMut(&Reader<'_>) -> Result<T> + Send),
    ) -> Result<T> {
        self.read_as(Bracket::One, counters, f)
    }

    fn read_as<T: Send>(
        &self,
        bracket: Bracket,
        counters: &Counters,
        f: &mut (dyn FnMut(&Reader<'_>) -> Result<T> + Send),
    ) -> Result<T> {
        self.check_reachable()?;
        off_runtime(|| {
            self.run_as(
                counters,
                bracket,
                IsolationLevel::RepeatableRead,
                true,
                &mut |tx| {
                    let reader = Reader(Box::new(tx));
                    f(&reader).map(|value| (value, false))
                },
            )
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
        self.check_reachable()?;
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
        self.run_as(counters, Bracket::Transaction, isolation, read_only, f)
    }

    fn run_as<T>(
        &self,
        counters: &Counters,
        mut bracket: Bracket,
        isolation: IsolationLevel,
        read_only: bool,
        f: &mut dyn FnMut(Tx<'_, '_>) -> Result<(T, bool)>,
    ) -> Result<T> {
        let mut conflicts = 0u32;
        let mut reconnected = false;
        let mut unprepared = false;
        loop {
            let mut conn = self.take()?;
            let failure = Cell::new(None);
            let committed = Cell::new(false);
            let result = {
                let client = &mut conn.client;
                let begun = match bracket {
                    Bracket::One => Ok(client.unbracketed()),
                    Bracket::Transaction => client.begin(Some(isolation), read_only),
                };
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
                            seen: RefCell::default(),
                            held: RefCell::default(),
                            one_statement: Cell::new(match bracket {
                                Bracket::One => Some(false),
                                Bracket::Transaction => None,
                            }),
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
            self.put_back(conn);
            match (result, failure.get()) {
                // (Whatever `f` made of the refusal, what it read is not one snapshot.)
                (_, Some(Failure::Unbracketed)) => bracket = Bracket::Transaction,
                (Ok((value, _)), _) => return Ok(value),
                (Err(_), Some(Failure::Conflict)) if conflicts < MAX_RETRIES => {
                    conflicts += 1;
                    count_conflict();
                    // A short, growing, jittered pause lets the winner finish.
                    let micros = 50 * u64::from(conflicts.min(20)) * (1 + fastrand::u64(..4));
                    std::thread::sleep(Duration::from_micros(micros));
                }
                (Err(_), Some(Failure::Stale)) if !unprepared => unprepared = true,
                (Err(_), Some(Failure::Broken)) if !committed.get() && !reconnected => {
                    // Whatever broke this connection (a restart, a failover, an operator
                    // ending hermes' backends) most likely broke the idle ones too: the one
                    // retry runs on a new connection, and the idle ones are let go.
                    reconnected = true;
                    self.let_go();
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
    hermes_stdx::one_line(&text)
}
