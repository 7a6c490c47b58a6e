//! hermes' own synchronous PostgreSQL client: `tokio-postgres` driven on a small runtime of
//! the connection's own (as the `postgres` crate does), over a socket hermes opens itself so
//! that every round trip has a deadline.
//!
//! The deadline: a call (a statement, `BEGIN`, `COMMIT`, `LISTEN`) that receives not one byte
//! for `PgTarget::answer_within` fails as a broken connection, and the connection is dropped.
//! TCP alone cannot notice a peer that acknowledges and never answers (a black-holing proxy, a
//! hung server, a stopped VM behind a NAT): keepalives see a live peer and `tcp_user_timeout`
//! only ends data left unacknowledged. The verdict is the client's, which knows when a call is
//! waiting; the socket, wrapped in [`Watched`], turns it into the read error `tokio-postgres`
//! reports like any other broken connection, so the pool's retry and reconnect logic takes
//! over unchanged. A connection waiting for notifications with no call outstanding is never
//! timed out: an idle listener is not a hung one.

use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::io;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use postgres::types::{ToSql, Type};
use postgres::{Error, IsolationLevel, Notification, Row, SimpleQueryMessage};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use tokio_postgres::AsyncMessage;
use tokio_postgres::config::Host;
use tokio_postgres::tls::MakeTlsConnect;

use super::connect::Refused;

mod prepared;

/// How long closing a connection may wait for the server to see the goodbye.
const CLOSE_WAIT: Duration = Duration::from_millis(500);

/// The error a call gets when the server did not answer within its deadline (the source of
/// the `postgres::Error` it fails with).
#[derive(Debug)]
pub(super) struct NoAnswer(pub(super) Duration);

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the server did not answer within {} s",
            self.0.as_secs_f64()
        )
    }
}

impl std::error::Error for NoAnswer {}

/// The deadline `err` reports, when it is a call that got no answer in time.
pub(super) fn no_answer(err: &Error) -> Option<Duration> {
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        if let Some(io) = inner.downcast_ref::<io::Error>()
            && let Some(NoAnswer(after)) = io.get_ref().and_then(|e| e.downcast_ref::<NoAnswer>())
        {
            return Some(*after);
        }
        if let Some(NoAnswer(after)) = inner.downcast_ref::<NoAnswer>() {
            return Some(*after);
        }
        source = inner.source();
    }
    None
}

/// A byte stream the client opened.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// What the client and its socket share: the time of the last byte received, and the verdict
/// that a call waited too long.
struct Answer {
    last_byte: std::sync::Mutex<Instant>,
    expired: AtomicBool,
    after: Duration,
}

/// The socket of a connection: reads fail once the client gave up waiting for an answer.
struct Watched {
    inner: Box<dyn Io>,
    answer: Arc<Answer>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.answer.expired.load(Ordering::SeqCst) {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                NoAnswer(self.answer.after),
            )));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            *hermes_stdx::lock(&self.answer.last_byte) = Instant::now();
        }
        read
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A `tokio_postgres::Connection` of whatever stream, as the client drives it.
trait Driven: Send {
    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<AsyncMessage, Error>>>;
}

impl<S, T> Driven for tokio_postgres::Connection<S, T>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
    T: AsyncRead + AsyncWrite + Unpin + Send,
{
    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<AsyncMessage, Error>>> {
        tokio_postgres::Connection::poll_message(self, cx)
    }
}

type Messages = Box<dyn Driven>;

/// One connection and the runtime that drives it.
pub(crate) struct Client {
    // Dropped last, after the connection it drives (see `Drop`).
    runtime: Option<tokio::runtime::Runtime>,
    client: Option<tokio_postgres::Client>,
    connection: Option<Messages>,
    notifications: VecDeque<Notification>,
    answer: Arc<Answer>,
    /// The statements prepared on this connection, and what decides whether to.
    prepared: prepared::Prepared,
}

impl Client {
    /// Opens a connection as `config` says (its hosts in order, the first that logs in wins),
    /// the whole login within `login_within`; each later call must hear from the server within
    /// `answer_within`.
    pub(super) fn connect(
        config: &tokio_postgres::Config,
        tls: &tokio_postgres_rustls::MakeRustlsConnect,
        login_within: Duration,
        answer_within: Duration,
    ) -> Result<Client, Refused> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(Refused::Io)?;
        let answer = Arc::new(Answer {
            last_byte: std::sync::Mutex::new(Instant::now()),
            expired: AtomicBool::new(false),
            after: answer_within,
        });
        let login = login(config, tls, &answer);
        let (client, connection, peer) = runtime
            .block_on(async { tokio::time::timeout(login_within, login).await })
            .map_err(|_| Refused::Silent(login_within))??;
        Ok(Client {
            runtime: Some(runtime),
            client: Some(client),
            connection: Some(connection),
            notifications: VecDeque::new(),
            answer,
            prepared: prepared::Prepared::new(peer),
        })
    }

    /// Whether the connection is gone (it broke, timed out or was closed by the server).
    pub(super) fn is_closed(&self) -> bool {
        self.connection.is_none() || self.client.as_ref().is_none_or(|c| c.is_closed())
    }

    /// Runs the call `f` makes, under the deadline: the connection is driven meanwhile
    /// (notifications that arrive are kept), and a call that hears nothing from the server for
    /// the deadline given at [`Client::connect`] fails, the connection with it.
    fn call<'a, T, F>(
        &'a mut self,
        f: impl FnOnce(&'a tokio_postgres::Client) -> F,
    ) -> Result<T, Error>
    where
        F: Future<Output = Result<T, Error>>,
    {
        let Client {
            runtime,
            client,
            connection,
            notifications,
            answer,
            prepared: _,
        } = self;
        let client: &'a Option<tokio_postgres::Client> = client;
        let (Some(runtime), Some(client)) = (runtime.as_ref(), client.as_ref()) else {
            unreachable!("a client's runtime and handle live until it is dropped");
        };
        let mut future = pin!(f(client));
        let after = answer.after;
        runtime.block_on(async {
            let started = Instant::now();
            let mut timer = pin!(tokio::time::sleep_until(started + after));
            poll_fn(|cx| {
                // Why the connection broke says more than the call's "connection closed".
                if let Some(err) = drive(connection, notifications, cx) {
                    return Poll::Ready(Err(err));
                }
                if let Poll::Ready(result) = future.as_mut().poll(cx) {
                    return Poll::Ready(result);
                }
                let heard = *hermes_stdx::lock(&answer.last_byte);
                let due = started.max(heard) + after;
                if timer.deadline() != due {
                    timer.as_mut().reset(due);
                }
                if connection.is_some() && timer.as_mut().poll(cx).is_ready() {
                    // The verdict: the socket's next read fails, and with it the connection.
                    answer.expired.store(true, Ordering::SeqCst);
                    cx.waker().wake_by_ref();
                }
                Poll::Pending
            })
            .await
        })
    }

    /// Runs `sql` (one or more statements) with the simple protocol, discarding any rows.
    pub(super) fn batch_execute(&mut self, sql: &str) -> Result<(), Error> {
        self.call(|c| c.batch_execute(sql))
    }

    /// Runs `sql` with the simple protocol.
    pub(super) fn simple_query(&mut self, sql: &str) -> Result<Vec<SimpleQueryMessage>, Error> {
        self.call(|c| c.simple_query(sql))
    }

    /// Runs `sql` in one round trip, its parameters' types given.
    pub(super) fn query_typed(
        &mut self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, Error> {
        self.call(|c| c.query_typed(sql, params))
    }

    /// Begins a transaction (`START TRANSACTION` as `tokio-postgres` words it), rolled back
    /// unless committed.
    pub(super) fn begin(
        &mut self,
        isolation: Option<IsolationLevel>,
        read_only: bool,
    ) -> Result<Transaction<'_>, Error> {
        let mut sql = "START TRANSACTION".to_owned();
        if let Some(level) = isolation {
            sql.push_str(match level {
                IsolationLevel::ReadUncommitted => " ISOLATION LEVEL READ UNCOMMITTED",
                IsolationLevel::ReadCommitted => " ISOLATION LEVEL READ COMMITTED",
                IsolationLevel::RepeatableRead => " ISOLATION LEVEL REPEATABLE READ",
                _ => " ISOLATION LEVEL SERIALIZABLE",
            });
        }
        if read_only {
            sql.push_str(if isolation.is_some() {
                ", READ ONLY"
            } else {
                " READ ONLY"
            });
        }
        self.batch_execute(&sql)?;
        Ok(Transaction {
            client: self,
            done: false,
        })
    }

    /// No transaction: each statement run through the returned handle is one of its own, in
    /// its own snapshot, with no `START TRANSACTION` before it and no `ROLLBACK` after (for a
    /// read of one statement, which needs neither).
    pub(super) fn unbracketed(&mut self) -> Transaction<'_> {
        Transaction {
            client: self,
            done: true,
        }
    }

    /// Begins a transaction with the server's defaults.
    pub(super) fn transaction(&mut self) -> Result<Transaction<'_>, Error> {
        self.begin(None, false)
    }

    /// The next notification, waiting up to `timeout` for one (`None`: none came). Waiting
    /// for notifications is not a call: no deadline applies.
    pub(super) fn next_notification(
        &mut self,
        timeout: Duration,
    ) -> Result<Option<Notification>, Error> {
        if let Some(n) = self.notifications.pop_front() {
            return Ok(Some(n));
        }
        // Nothing interrupts this wait but its timeout. A notification that arrived with the
        // connection's end is still handed out; the next call finds the connection closed.
        let waited = self.wait_notifications(timeout, &tokio::sync::Notify::new());
        match self.notifications.pop_front() {
            Some(n) => Ok(Some(n)),
            None => waited.map(|()| None),
        }
    }
}

impl Client {
    /// The notifications received so far (by calls, or waits), taken.
    pub(super) fn take_notifications(&mut self) -> Vec<Notification> {
        self.notifications.drain(..).collect()
    }

    /// Waits up to `timeout` until a notification arrives or `interrupt` is notified, keeping
    /// what arrives (see [`Client::take_notifications`]). Waiting for notifications is not a
    /// call: no deadline applies.
    pub(super) fn wait_notifications(
        &mut self,
        timeout: Duration,
        interrupt: &tokio::sync::Notify,
    ) -> Result<(), Error> {
        if !self.notifications.is_empty() {
            return Ok(());
        }
        let Client {
            runtime,
            connection,
            notifications,
            ..
        } = self;
        let Some(runtime) = runtime.as_ref() else {
            return Ok(());
        };
        runtime.block_on(async {
            let mut timer = pin!(tokio::time::sleep(timeout));
            let mut interrupted = pin!(interrupt.notified());
            poll_fn(|cx| {
                if let Some(err) = drive(connection, notifications, cx) {
                    return Poll::Ready(Err(err));
                }
                if !notifications.is_empty()
                    || connection.is_none()
                    || interrupted.as_mut().poll(cx).is_ready()
                    || timer.as_mut().poll(cx).is_ready()
                {
                    return Poll::Ready(Ok(()));
                }
                Poll::Pending
            })
            .await
        })
    }
}

/// Polls `connection` until it has nothing more now, keeping the notifications it delivers;
/// the error it broke with, if it did (the connection is then dropped, so that every call
/// still waiting on it fails as closed).
fn drive(
    connection: &mut Option<Messages>,
    notifications: &mut VecDeque<Notification>,
    cx: &mut Context<'_>,
) -> Option<Error> {
    while let Some(messages) = connection.as_mut() {
        match messages.poll_message(cx) {
            Poll::Ready(Some(Ok(AsyncMessage::Notification(n)))) => notifications.push_back(n),
            Poll::Ready(Some(Ok(AsyncMessage::Notice(notice)))) => {
                tracing::info!("{}: {}", notice.severity(), notice.message());
            }
            Poll::Ready(Some(Ok(_))) => {}
            Poll::Ready(Some(Err(err))) => {
                *connection = None;
                return Some(err);
            }
            Poll::Ready(None) => *connection = None,
            Poll::Pending => return None,
        }
    }
    None
}

impl Drop for Client {
    fn drop(&mut self) {
        // Dropping the handle tells the connection to say goodbye (`Terminate`); the server
        // gets a short while to see it, never a long one (it may be the one not answering).
        drop(self.client.take());
        if let (Some(runtime), Some(mut messages)) = (self.runtime.as_ref(), self.connection.take())
            && !self.answer.expired.load(Ordering::SeqCst)
        {
            runtime.block_on(async {
                let closed = poll_fn(|cx| {
                    loop {
                        match messages.poll_message(cx) {
                            Poll::Ready(Some(Ok(_))) => {}
                            Poll::Ready(_) => return Poll::Ready(()),
                            Poll::Pending => return Poll::Pending,
                        }
                    }
                });
                let _ = tokio::time::timeout(CLOSE_WAIT, closed).await;
            });
        }
    }
}

/// A transaction on a [`Client`]: rolled back when dropped uncommitted.
pub(super) struct Transaction<'c> {
    client: &'c mut Client,
    done: bool,
}

impl Transaction<'_> {
    /// Runs `sql` in one round trip, its parameters' types given.
    pub(super) fn query_typed(
        &mut self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, Error> {
        self.client.query_typed(sql, params)
    }

    /// Runs `sql` with the simple protocol, discarding any rows.
    pub(super) fn batch_execute(&mut self, sql: &str) -> Result<(), Error> {
        self.client.batch_execute(sql)
    }

    /// Commits (`COMMIT`, one simple-protocol message).
    pub(super) fn commit(mut self) -> Result<(), Error> {
        self.done = true;
        self.client.batch_execute("COMMIT")
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if !self.done && !self.client.is_closed() {
            let _ = self.client.batch_execute("ROLLBACK");
        }
    }
}

/// Logs in as `config` says, trying its hosts in order; with the address the socket reached
/// over TCP (`None` over a Unix-domain socket).
async fn login(
    config: &tokio_postgres::Config,
    tls: &tokio_postgres_rustls::MakeRustlsConnect,
    answer: &Arc<Answer>,
) -> Result<(tokio_postgres::Client, Messages, Option<SocketAddr>), Refused> {
    let hosts = config.get_hosts();
    let addrs = config.get_hostaddrs();
    let count = hosts.len().max(addrs.len()).max(1);
    let mut last = None;
    for i in 0..count {
        let port = config
            .get_ports()
            .get(i)
            .or_else(|| config.get_ports().first())
            .copied()
            .unwrap_or(5432);
        let hostname = match hosts.get(i) {
            Some(Host::Tcp(name)) => Some(name.clone()),
            _ => None,
        };
        let opened = match (addrs.get(i), hosts.get(i)) {
            (Some(ip), _) => tcp(&ip.to_string(), port, config).await,
            (None, Some(Host::Tcp(name))) => tcp(name, port, config).await,
            #[cfg(unix)]
            (None, Some(Host::Unix(dir))) => {
                let path = dir.join(format!(".s.PGSQL.{port}"));
                tokio::net::UnixStream::connect(path)
                    .await
                    .map(|s| (Box::new(s) as Box<dyn Io>, None))
            }
            (None, None) => tcp("localhost", port, config).await,
        };
        let (socket, peer) = match opened {
            Ok((socket, peer)) => (
                Watched {
                    inner: socket,
                    answer: Arc::clone(answer),
                },
                peer,
            ),
            Err(err) => {
                last = Some(Refused::Io(err));
                continue;
            }
        };
        let in_the_clear = config.get_ssl_mode() == tokio_postgres::config::SslMode::Disable;
        let logged_in = if in_the_clear || hostname.is_none() {
            config
                .connect_raw(socket, tokio_postgres::NoTls)
                .await
                .map(|(c, conn)| (c, Box::new(conn) as Messages))
        } else {
            let mut make = tls.clone();
            let connector = <tokio_postgres_rustls::MakeRustlsConnect as MakeTlsConnect<
                Watched,
            >>::make_tls_connect(&mut make, hostname.as_deref().unwrap_or(""));
            match connector {
                Ok(connector) => config
                    .connect_raw(socket, connector)
                    .await
                    .map(|(c, conn)| (c, Box::new(conn) as Messages)),
                Err(err) => {
                    last = Some(Refused::Io(io::Error::other(err)));
                    continue;
                }
            }
        };
        match logged_in {
            Ok((client, messages)) => return Ok((client, messages, peer)),
            Err(err) if config.get_password().is_none() && asked_for_password(&err) => {
                last = Some(Refused::NoPassword);
            }
            Err(err) => last = Some(Refused::Error(err)),
        }
    }
    Err(last.unwrap_or_else(|| Refused::Io(io::Error::other("no host to connect to"))))
}

/// Whether the login failed because the server asked for a password and the configuration
/// has none: `tokio-postgres` reports it as a configuration error of its own, "password
/// missing" — no server error, no broken socket — and has no typed kind for it.
fn asked_for_password(err: &Error) -> bool {
    err.as_db_error().is_none()
        && !err.is_closed()
        && std::error::Error::source(err).is_some_and(|why| why.to_string() == "password missing")
}

/// A TCP connection to `host:port` (each address it resolves to, in turn), with hermes'
/// keepalives and user timeout (`url.rs`, `deadlines`), and the address it reached.
async fn tcp(
    host: &str,
    port: u16,
    config: &tokio_postgres::Config,
) -> io::Result<(Box<dyn Io>, Option<SocketAddr>)> {
    let mut last = None;
    for addr in tokio::net::lookup_host((host, port)).await? {
        let stream = match tokio::net::TcpStream::connect(addr).await {
            Ok(stream) => stream,
            Err(err) => {
                last = Some(err);
                continue;
            }
        };
        stream.set_nodelay(true)?;
        let socket = socket2::SockRef::from(&stream);
        #[cfg(target_os = "linux")]
        if let Some(timeout) = config.get_tcp_user_timeout() {
            socket.set_tcp_user_timeout(Some(*timeout))?;
        }
        if config.get_keepalives() {
            let mut keepalive =
                socket2::TcpKeepalive::new().with_time(config.get_keepalives_idle());
            if let Some(interval) = config.get_keepalives_interval() {
                keepalive = keepalive.with_interval(interval);
            }
            #[cfg(not(any(target_os = "windows", target_os = "openbsd")))]
            if let Some(retries) = config.get_keepalives_retries() {
                keepalive = keepalive.with_retries(retries);
            }
            socket.set_tcp_keepalive(&keepalive)?;
        }
        return Ok((Box::new(stream), Some(addr)));
    }
    Err(last.unwrap_or_else(|| io::Error::other(format!("{host} resolves to no address"))))
}
