//! `LISTEN`/`NOTIFY`: the channels the ledger notifies and the connection that waits on them.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::client::Client;

use super::connect::*;
use super::pool::*;
use super::url::*;
use crate::error::{LedgerError, Result};
use crate::store::Listen;

/// The channel `NOTIFY`ed when the activity counter moves (a host has something to act on).
pub(crate) const ACTIVITY_CHANNEL: &str = "hermes_activity";
/// The channel `NOTIFY`ed when an event becomes deliverable; the payload is its session.
pub(crate) const EVENTS_CHANNEL: &str = "hermes_events";

/// How long a new listener waits for its own probe notification before concluding that
/// notifications cannot reach it (a pooler in transaction mode). On a direct connection or
/// a session pooler the probe arrives within a round trip or two.
const PROBE_WAIT: Duration = Duration::from_millis(500);
/// How often a listener that cannot hear notifications tells its caller to look.
pub(crate) const DEAF_POLL: Duration = Duration::from_millis(250);

impl Pg {
    /// A listener on the ledger's notifications of `what`: activity (hosts) and/or events
    /// (consumers), on `ledger.listen_url` when one is set, else on the ledger's own URL.
    ///
    /// It first checks that a notification reaches it at all: it listens on a probe channel of
    /// its own and has another connection notify it. Through a pooler in transaction mode
    /// `LISTEN` takes effect on whichever server connection ran it, and what that connection
    /// hears later reaches no client (<https://www.pgbouncer.org/features.html>): then the
    /// listener listens on nothing (which would only leak onto the pooler's connections) and
    /// tells its caller to look every [`DEAF_POLL`], and a warning says how to do better.
    pub(crate) fn listen(&self, what: &[Listen]) -> Result<Listener> {
        let channels: Vec<String> = what
            .iter()
            .map(|listen| match listen {
                Listen::Activity => self.target.channel(ACTIVITY_CHANNEL),
                Listen::Events => self.target.channel(EVENTS_CHANNEL),
            })
            .collect();
        let target = self.target.listen_target().clone();
        let tls = target.tls.clone();
        let refused = |refused: Refused| LedgerError::Unavailable {
            path: self.path.clone(),
            reason: refused.reason(&target.server),
        };
        let probe = format!(
            "{}_{:06x}",
            self.target.channel("hermes_probe"),
            fastrand::u32(..0x100_0000)
        );
        let client = off_runtime(|| -> Result<Option<Client>> {
            let mut client =
                listening(&target, &tls, std::slice::from_ref(&probe)).map_err(refused)?;
            if !self.probe_reaches(&mut client, &probe)? {
                tracing::warn!(
                    server = %target.server,
                    "notifications do not reach this connection (a pooler in transaction mode?): \
                     polling every {} ms instead; set ledger.listen_url to a direct connection",
                    DEAF_POLL.as_millis()
                );
                return Ok(None);
            }
            for channel in &channels {
                client
                    .batch_execute(&format!("LISTEN {channel}"))
                    .map_err(|err| refused(Refused::Error(err)))?;
            }
            Ok(Some(client))
        })?;
        Ok(Listener {
            deaf: client.is_none(),
            target,
            tls,
            channels,
            client,
            failures: 0,
            retry_at: None,
        })
    }

    /// Whether a notification on `probe`, sent from one of the pool's connections, reaches
    /// `client` (which listens on it) within [`PROBE_WAIT`].
    fn probe_reaches(&self, client: &mut Client, probe: &str) -> Result<bool> {
        let mut conn = self.take()?;
        // One simple-protocol statement: nothing a transaction pooler could trip on.
        conn.client
            .simple_query(&format!("SELECT pg_notify('{probe}', '')"))
            .map_err(|err| self.statement_error(&err))?;
        self.put_back(conn);
        let deadline = std::time::Instant::now() + PROBE_WAIT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match client.next_notification(left) {
                Ok(Some(n)) if n.channel() == probe => return Ok(true),
                Ok(Some(_)) => continue,
                Ok(None) => return Ok(false),
                Err(err) => return Err(self.unavailable(&err)),
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
    /// The listening connection was re-established, or notifications cannot reach this
    /// listener at all (a pooler in transaction mode): notices may have been missed, so look.
    Reconnected,
}

/// A connection that `LISTEN`s for the ledger's notifications (PostgreSQL only).
pub struct Listener {
    pub(super) target: PgTarget,
    pub(super) tls: tokio_postgres_rustls::MakeRustlsConnect,
    pub(super) channels: Vec<String>,
    pub(super) client: Option<Client>,
    /// Notifications cannot reach it (see [`Pg::listen`]): it polls instead.
    pub(super) deaf: bool,
    /// Reconnection attempts that failed in a row, and when the next may be made.
    pub(super) failures: u32,
    pub(super) retry_at: Option<Instant>,
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
pub(super) fn listening(
    target: &PgTarget,
    tls: &tokio_postgres_rustls::MakeRustlsConnect,
    channels: &[String],
) -> std::result::Result<Client, Refused> {
    let mut client = connect_within(target, tls)?;
    // A channel is `hermes_…` or a namespace's (`[a-z_][a-z0-9_]*_…`): no quoting needed.
    for channel in channels {
        client
            .batch_execute(&format!("LISTEN {channel}"))
            .map_err(Refused::Error)?;
    }
    Ok(client)
}

impl Listener {
    /// Whether notifications reach this listener; `false` behind a pooler in transaction
    /// mode without `ledger.listen_url`, where [`Listener::wait`] returns
    /// [`Notice::Reconnected`] every [`DEAF_POLL`] so its caller looks.
    pub fn hears_notifications(&self) -> bool {
        !self.deaf
    }

    /// Blocks until a notification arrives or `timeout` passes; returns what arrived (empty on
    /// timeout). A dropped connection is re-established on a later call, which then returns
    /// [`Notice::Reconnected`] at once; attempts that fail are spaced by a growing pause
    /// (waited out within `timeout`), so a caller simply calls again.
    pub fn wait(&mut self, timeout: Duration) -> Result<Vec<Notice>> {
        if self.deaf {
            std::thread::sleep(timeout.min(DEAF_POLL));
            return Ok(vec![Notice::Reconnected]);
        }
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
                        Err(refused) => {
                            self.failures = self.failures.saturating_add(1);
                            let pause = Duration::from_millis(100)
                                .saturating_mul(self.failures)
                                .min(MAX_BACKOFF);
                            self.retry_at = Some(Instant::now() + pause);
                            Err(LedgerError::Unavailable {
                                path: PathBuf::from(self.target.display()),
                                reason: format!(
                                    "cannot listen: {}",
                                    refused.reason(&self.target.server)
                                ),
                            })
                        }
                    };
                }
            };
            let mut notices = Vec::new();
            let events = self.target.channel(EVENTS_CHANNEL);
            let notice = |n: postgres::Notification| {
                if n.channel() == events {
                    Notice::Event(n.payload().to_owned())
                } else {
                    Notice::Activity
                }
            };
            let waited = match client.next_notification(timeout) {
                Ok(Some(n)) => {
                    notices.push(notice(n));
                    // Whatever else already arrived, without blocking.
                    while let Ok(Some(n)) = client.next_notification(Duration::ZERO) {
                        notices.push(notice(n));
                    }
                    Ok(())
                }
                Ok(None) => Ok(()),
                Err(err) => Err(err),
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
