//! The connections a PostgreSQL ledger holds: normally one, lent in turn to the process's
//! calls and to its listeners, which wait on it for notifications between calls (issue #22,
//! defect 9: one server connection per process where possible).
//!
//! A call takes the connection; when it is out, the call asks a listener waiting on it to give
//! it up ([`Conns::wanted`]) and waits a moment for it, and only then opens another, which is
//! closed when given back while one is kept already. Every connection `LISTEN`s on the
//! channels the process's listeners subscribed to (`hub.rs`), and the notifications any call
//! or wait receives on it are handed to them when it is given back.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use hermes_stdx::lock;

use super::client::Client;
use super::connect::{
    Refused, connect_reading_schema, connect_within, describe, describe_broken, server_said,
};
use super::hub::Hub;
use super::retry::{CONNECT_TIMEOUT, MAX_BACKOFF, off_runtime, one_line, server_gone};
use super::url::PgTarget;
use crate::error::{LedgerError, Result, StorageFault};

/// Connections kept open while nothing uses them.
const KEEP: usize = 1;
/// How long a call waits for the connection another call holds before opening one more.
const WAIT_FOR_BUSY: Duration = Duration::from_millis(250);

/// One connection, and the channels it listens on.
pub(super) struct Conn {
    pub(super) client: Client,
    pub(super) listening: BTreeSet<String>,
}

/// How a new connection is opened: [`connect_within`], or [`connect_reading_schema`], which
/// also answers the schema version.
type Connect<T> = fn(
    &PgTarget,
    &tokio_postgres_rustls::MakeRustlsConnect,
) -> std::result::Result<(Client, T), Refused>;

/// Consecutive connection failures, for backoff: while the server cannot be reached, a
/// process makes one connection attempt per pause, the pause doubling from 100 ms to
/// [`MAX_BACKOFF`].
#[derive(Default)]
pub(super) struct Backoff {
    pub(super) failures: u32,
    /// No attempt before this (the pause after a failure, or an attempt under way).
    pub(super) not_before: Option<Instant>,
    /// Why the last attempt failed: said again to the calls the pause turns away.
    pub(super) last: Option<String>,
}

/// The kept connections, and how many are lent out.
#[derive(Default)]
pub(super) struct Slots {
    pub(super) idle: Vec<Conn>,
    pub(super) busy: usize,
    /// Calls waiting for a connection: listeners leave it to them.
    pub(super) calls_waiting: usize,
}

/// A PostgreSQL ledger's connections, shared by the ledger and its listeners.
pub(crate) struct Conns {
    pub(super) target: PgTarget,
    pub(super) path: PathBuf,
    pub(super) tls: tokio_postgres_rustls::MakeRustlsConnect,
    pub(super) slots: Mutex<Slots>,
    /// Signalled whenever a connection is given back.
    pub(super) freed: Condvar,
    pub(super) backoff: Mutex<Backoff>,
    /// The listeners' subscriptions and what they heard.
    pub(super) hub: Hub,
    /// Asks a listener waiting on the connection to give it up for a call.
    pub(super) wanted: tokio::sync::Notify,
    /// Whether notifications reach the connection, once a listener probed it.
    pub(super) probed: Mutex<Option<bool>>,
}

impl Drop for Conns {
    fn drop(&mut self) {
        // Closing a client blocks on its runtime: never on a tokio worker thread.
        let idle = std::mem::take(&mut lock(&self.slots).idle);
        off_runtime(move || drop(idle));
    }
}

/// A connection lent out: given back when dropped.
pub(super) struct Pooled<'c> {
    conns: &'c Conns,
    conn: Option<Conn>,
}

impl std::ops::Deref for Pooled<'_> {
    type Target = Conn;

    fn deref(&self) -> &Conn {
        self.conn.as_ref().expect("lent until dropped")
    }
}

impl std::ops::DerefMut for Pooled<'_> {
    fn deref_mut(&mut self) -> &mut Conn {
        self.conn.as_mut().expect("lent until dropped")
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.conns.give_back(conn);
        }
    }
}

impl Conns {
    /// Connections to `target`, none open yet.
    pub(super) fn new(target: PgTarget) -> Conns {
        Conns {
            path: PathBuf::from(target.display()),
            tls: target.tls.clone(),
            hub: Hub::new(),
            target,
            slots: Mutex::new(Slots::default()),
            freed: Condvar::new(),
            backoff: Mutex::new(Backoff::default()),
            wanted: tokio::sync::Notify::new(),
            probed: Mutex::new(None),
        }
    }

    pub(super) fn unavailable(&self, err: &postgres::Error) -> LedgerError {
        LedgerError::Unavailable {
            path: self.path.clone(),
            reason: describe(err, &self.target.server),
        }
    }

    pub(super) fn statement_error(&self, err: &postgres::Error) -> LedgerError {
        if err.is_closed()
            || err.as_db_error().is_none() && err.code().is_none()
            || server_gone(err)
        {
            return LedgerError::Unavailable {
                path: self.path.clone(),
                reason: describe_broken(err, &self.target.server),
            };
        }
        let text = match server_said(err) {
            Some(said) => format!("the PostgreSQL server at {} {said}", self.target.server),
            None => format!("PostgreSQL at {}: {}", self.target.server, one_line(err)),
        };
        LedgerError::Storage(StorageFault::Engine(text))
    }

    /// The kept connection (asking a listener waiting on it to give it up, waiting a moment
    /// for a call to), or a new one (unless connecting failed very recently: then the caller
    /// gets the error at once, and attempts are spaced by a growing pause).
    pub(super) fn take(&self) -> Result<Pooled<'_>> {
        let connect = |target: &PgTarget, tls: &_| connect_within(target, tls).map(|c| (c, ()));
        self.take_as(connect).map(|(conn, _)| conn)
    }

    /// A connection for the first call of a ledger being opened, and the schema version
    /// recorded (see [`connect_reading_schema`]): the kept connection and `None` (not asked)
    /// if there is one, else a new one that asked in its first statement.
    pub(super) fn take_reading_schema(&self) -> Result<(Pooled<'_>, Option<Option<i32>>)> {
        self.take_as(connect_reading_schema)
    }

    /// [`Conns::take`], a new connection opened by `connect`, whose answer comes back beside
    /// it (`None` when the kept connection was lent instead).
    fn take_as<T>(&self, connect: Connect<T>) -> Result<(Pooled<'_>, Option<T>)> {
        let give_up = Instant::now() + WAIT_FOR_BUSY;
        let mut slots = lock(&self.slots);
        loop {
            if let Some(conn) = pop_open(&mut slots) {
                return Ok((self.lend(&mut slots, conn), None));
            }
            let now = Instant::now();
            if slots.busy == 0 || now >= give_up {
                break;
            }
            self.wanted.notify_one();
            slots.calls_waiting += 1;
            slots = match self.freed.wait_timeout(slots, give_up - now) {
                Ok((slots, _)) => slots,
                Err(poisoned) => poisoned.into_inner().0,
            };
            slots.calls_waiting -= 1;
        }
        slots.busy += 1;
        drop(slots);
        match self.open_as(connect) {
            Ok((conn, answer)) => Ok((
                Pooled {
                    conns: self,
                    conn: Some(conn),
                },
                Some(answer),
            )),
            Err(err) => {
                lock(&self.slots).busy -= 1;
                self.freed.notify_all();
                Err(err)
            }
        }
    }

    /// Gives `conn` back (as dropping it does).
    pub(super) fn put_back(&self, conn: Pooled<'_>) {
        drop(conn);
    }

    /// The kept connection if nobody holds it and no call waits for it, without waiting or
    /// connecting (for a listener).
    pub(super) fn try_take(&self) -> Option<Pooled<'_>> {
        let mut slots = lock(&self.slots);
        if slots.calls_waiting > 0 {
            return None;
        }
        pop_open(&mut slots).map(|conn| self.lend(&mut slots, conn))
    }

    /// Whether no connection is open at all (none kept, none lent).
    pub(super) fn none_open(&self) -> bool {
        let slots = lock(&self.slots);
        slots.busy == 0 && slots.idle.is_empty()
    }

    fn lend(&self, slots: &mut Slots, conn: Conn) -> Pooled<'_> {
        slots.busy += 1;
        Pooled {
            conns: self,
            conn: Some(conn),
        }
    }

    /// Takes `conn` back: what it heard goes to the listeners; it is kept unless it broke or
    /// one is kept already (then it is closed).
    fn give_back(&self, mut conn: Conn) {
        let heard = conn.client.take_notifications();
        self.hub.publish(&heard);
        let surplus = {
            let mut slots = lock(&self.slots);
            slots.busy = slots.busy.saturating_sub(1);
            if conn.client.is_closed() || slots.idle.len() >= KEEP {
                Some(conn)
            } else {
                slots.idle.push(conn);
                None
            }
        };
        self.freed.notify_all();
        self.hub.wake();
        drop(surplus);
    }

    /// Lets the kept connections go (after a connection broke: the others most likely did).
    pub(super) fn let_go(&self) {
        let idle = std::mem::take(&mut lock(&self.slots).idle);
        drop(idle);
    }

    /// A new connection by `connect` (which also answers a `T`), listening on what the
    /// listeners subscribed to; they are told to look (notifications may have gone unheard
    /// while none listened).
    fn open_as<T>(&self, connect: Connect<T>) -> Result<(Conn, T)> {
        self.may_attempt()?;
        match connect(&self.target, &self.tls) {
            Ok((client, answer)) => {
                *lock(&self.backoff) = Backoff::default();
                let mut conn = Conn {
                    client,
                    listening: BTreeSet::new(),
                };
                if self.hub.has_subscribers() {
                    self.listen_on(&mut conn)?;
                    self.hub.reconnected();
                }
                Ok((conn, answer))
            }
            Err(refused) => {
                let reason = refused.reason(&self.target.server);
                let mut backoff = lock(&self.backoff);
                backoff.failures = backoff.failures.saturating_add(1);
                let pause = Duration::from_millis(50)
                    .saturating_mul(1 << backoff.failures.min(6))
                    .min(MAX_BACKOFF);
                backoff.not_before = Some(Instant::now() + pause);
                backoff.last = Some(reason.clone());
                Err(LedgerError::Unavailable {
                    path: self.path.clone(),
                    reason,
                })
            }
        }
    }

    /// Whether a new connection may be attempted now: not during the pause after a failed
    /// attempt (the call fails at once, with the reason the last attempt failed), and while
    /// the server cannot be reached, by one caller at a time (the attempt holds the others
    /// off for as long as its login may take).
    fn may_attempt(&self) -> Result<()> {
        let mut backoff = lock(&self.backoff);
        let now = Instant::now();
        if backoff.not_before.is_some_and(|at| now < at) {
            return Err(self.paused(&backoff));
        }
        if backoff.failures > 0 {
            let login = self
                .target
                .config
                .get_connect_timeout()
                .copied()
                .unwrap_or(CONNECT_TIMEOUT);
            backoff.not_before = Some(now + login);
        }
        Ok(())
    }

    /// While the server cannot be reached — no connection open, and the pause after a failed
    /// attempt lasting — the error a call fails with at once, before anything is set up for it
    /// (a thread off the runtime, a transaction); `Ok` otherwise.
    pub(super) fn check_reachable(&self) -> Result<()> {
        if !self.none_open() {
            return Ok(());
        }
        let backoff = lock(&self.backoff);
        match backoff.not_before {
            Some(at) if Instant::now() < at => Err(self.paused(&backoff)),
            _ => Ok(()),
        }
    }

    /// The error of a call turned away during the pause: why the last attempt failed.
    fn paused(&self, backoff: &Backoff) -> LedgerError {
        LedgerError::Unavailable {
            path: self.path.clone(),
            reason: backoff.last.clone().unwrap_or_else(|| {
                format!(
                    "cannot reach the PostgreSQL server at {}",
                    self.target.server
                )
            }),
        }
    }

    /// When the next connection attempt may be made, while connecting failed lately and its
    /// pause lasts (`None`: now).
    pub(super) fn next_attempt(&self) -> Option<Instant> {
        lock(&self.backoff)
            .not_before
            .filter(|at| *at > Instant::now())
    }

    /// `LISTEN`s on `conn` on every channel subscribed to that it does not listen on yet (one
    /// simple-protocol round trip, under the call deadline).
    pub(super) fn listen_on(&self, conn: &mut Conn) -> Result<()> {
        let missing: Vec<String> = self
            .hub
            .channels()
            .into_iter()
            .filter(|c| !conn.listening.contains(c))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        // A channel is `hermes_…` or a namespace's (`[a-z_][a-z0-9_]*_…`): no quoting needed.
        let sql = missing
            .iter()
            .map(|c| format!("LISTEN {c}"))
            .collect::<Vec<_>>()
            .join("; ");
        conn.client
            .batch_execute(&sql)
            .map_err(|err| self.statement_error(&err))?;
        conn.listening.extend(missing);
        Ok(())
    }
}

/// The kept connection that is still open, if any (closed ones are dropped).
fn pop_open(slots: &mut Slots) -> Option<Conn> {
    while let Some(conn) = slots.idle.pop() {
        if !conn.client.is_closed() {
            return Some(conn);
        }
    }
    None
}
