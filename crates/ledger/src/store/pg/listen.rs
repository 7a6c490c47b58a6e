//! `LISTEN`/`NOTIFY`: the channels the ledger notifies and the listeners that wait on them —
//! on the ledger's own connection, shared with its calls (`pool.rs`, `hub.rs`), or on a
//! connection of their own to `ledger.listen_url`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_stdx::lock;

use super::client::Client;
use super::connect::{Refused, connect_bare, connect_within};
use super::hub::Heard;
use super::pool::Conns;
use super::retry::{MAX_BACKOFF, Pg, off_runtime, one_line};
use super::url::PgTarget;
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
    ///
    /// Without `ledger.listen_url` the listener listens on the ledger's own connection, which
    /// its calls share (one server connection per process, `pool.rs`); the probe is then
    /// notified from a short-lived connection of its own, once per process.
    pub(crate) fn listen(&self, what: &[Listen]) -> Result<Listener> {
        let channels: Vec<String> = what
            .iter()
            .map(|listen| match listen {
                Listen::Activity => self.target.channel(ACTIVITY_CHANNEL),
                Listen::Events => self.target.channel(EVENTS_CHANNEL),
            })
            .collect();
        let events = self.target.channel(EVENTS_CHANNEL);
        if self.target.listen.is_none() {
            return self.listen_shared(channels, events);
        }
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
                warn_deaf(&target.server);
                return Ok(None);
            }
            for channel in &channels {
                client
                    .batch_execute(&format!("LISTEN {channel}"))
                    .map_err(|err| refused(Refused::Error(err)))?;
            }
            Ok(Some(client))
        })?;
        let mode = match client {
            None => Mode::Deaf,
            Some(client) => Mode::Apart(Box::new(Apart {
                target,
                tls,
                channels,
                client: Some(client),
                failures: 0,
                retry_at: None,
            })),
        };
        Ok(Listener { mode, events })
    }

    /// A listener on the ledger's own connection (see [`Pg::listen`]).
    fn listen_shared(&self, channels: Vec<String>, events: String) -> Result<Listener> {
        let conns = Arc::clone(&self.conns);
        let probed = *lock(&conns.probed);
        let hears = match probed {
            Some(hears) => hears,
            None => {
                let hears = off_runtime(|| self.probe_shared())?;
                *lock(&conns.probed) = Some(hears);
                hears
            }
        };
        if !hears {
            warn_deaf(&self.target.server);
            return Ok(Listener {
                mode: Mode::Deaf,
                events,
            });
        }
        let id = conns.hub.subscribe(&channels);
        let listener = Listener {
            mode: Mode::Shared {
                conns: Arc::clone(&conns),
                id,
            },
            events,
        };
        // Listening from now on: what is notified later is heard.
        off_runtime(|| {
            let mut conn = conns.take()?;
            conns.listen_on(&mut conn)
        })?;
        Ok(listener)
    }

    /// Whether a notification reaches the ledger's own connection: it listens on a probe
    /// channel, and a connection of the probe's own notifies it (through a pooler in
    /// transaction mode, a notification sent on the same client connection could come back on
    /// the same server connection by chance).
    fn probe_shared(&self) -> Result<bool> {
        let probe = format!(
            "{}_{:06x}",
            self.target.channel("hermes_probe"),
            fastrand::u32(..0x100_0000)
        );
        let conns = &self.conns;
        let id = conns.hub.subscribe(std::slice::from_ref(&probe));
        let heard = (|| {
            {
                let mut conn = conns.take()?;
                conns.listen_on(&mut conn)?;
            }
            let mut other = connect_bare(&self.target, &self.tls).map_err(|refused| {
                LedgerError::Unavailable {
                    path: self.path.clone(),
                    reason: refused.reason(&self.target.server),
                }
            })?;
            other
                .simple_query(&format!("SELECT pg_notify('{probe}', '')"))
                .map_err(|err| self.statement_error(&err))?;
            drop(other);
            let until = Instant::now() + PROBE_WAIT;
            loop {
                let left = until.saturating_duration_since(Instant::now());
                let heard = wait_shared(conns, id, left)?;
                if heard
                    .iter()
                    .any(|h| matches!(h, Heard::Note { channel, .. } if *channel == probe))
                {
                    return Ok(true);
                }
                if left.is_zero() {
                    return Ok(false);
                }
            }
        })();
        conns.hub.unsubscribe(id);
        heard
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

fn warn_deaf(server: &str) {
    tracing::warn!(
        server = %server,
        "notifications do not reach this connection (a pooler in transaction mode?): \
         polling every {} ms instead; set ledger.listen_url to a direct connection",
        DEAF_POLL.as_millis()
    );
}

/// Waits up to `timeout` for what subscriber `id` of `conns` hears: on the shared connection
/// while no call needs it (whatever arrives goes to every subscriber), else for whoever holds
/// it to hand it on. With no connection open at all it opens one, which says
/// [`Heard::Reconnected`].
fn wait_shared(conns: &Conns, id: u64, timeout: Duration) -> Result<Vec<Heard>> {
    let until = Instant::now() + timeout;
    loop {
        let (heard, generation) = conns.hub.take(id);
        if !heard.is_empty() {
            return Ok(heard);
        }
        let now = Instant::now();
        if now >= until {
            return Ok(Vec::new());
        }
        if let Some(mut conn) = conns.try_take() {
            conns.listen_on(&mut conn)?;
            conn.client
                .wait_notifications(until - now, &conns.wanted)
                .map_err(|err| conns.unavailable(&err))?;
            // Given back here: what it heard goes to the subscribers.
            continue;
        }
        if conns.none_open() {
            // The server could not be reached lately: the next attempt waits for its time
            // (or for a call that reconnected meanwhile to give its connection back), so a
            // caller that simply calls again makes one attempt per pause.
            if let Some(at) = conns.next_attempt() {
                conns.hub.wait(generation, at.min(until));
                continue;
            }
            drop(conns.take()?);
            continue;
        }
        conns.hub.wait(generation, until);
    }
}

/// A listener for the ledger's notifications (PostgreSQL only).
pub struct Listener {
    mode: Mode,
    /// The events channel (its notifications name a session).
    events: String,
}

enum Mode {
    /// On the ledger's own connection, subscriber `id` of its hub.
    Shared { conns: Arc<Conns>, id: u64 },
    /// On a connection of its own (`ledger.listen_url`).
    Apart(Box<Apart>),
    /// Notifications cannot reach it (see [`Pg::listen`]): it polls instead.
    Deaf,
}

impl Drop for Listener {
    fn drop(&mut self) {
        match &mut self.mode {
            Mode::Shared { conns, id } => conns.hub.unsubscribe(*id),
            Mode::Apart(apart) => {
                if let Some(client) = apart.client.take() {
                    off_runtime(move || drop(client));
                }
            }
            Mode::Deaf => {}
        }
    }
}

/// A connection of the listener's own that `LISTEN`s on its channels.
pub(super) struct Apart {
    pub(super) target: PgTarget,
    pub(super) tls: tokio_postgres_rustls::MakeRustlsConnect,
    pub(super) channels: Vec<String>,
    pub(super) client: Option<Client>,
    /// Reconnection attempts that failed in a row, and when the next may be made.
    pub(super) failures: u32,
    pub(super) retry_at: Option<Instant>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = match &self.mode {
            Mode::Shared { .. } => "shared",
            Mode::Apart(_) => "apart",
            Mode::Deaf => "deaf",
        };
        f.debug_struct("Listener")
            .field("mode", &mode)
            .field("events", &self.events)
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
    #[cfg(any(test, feature = "testing"))]
    pub fn hears_notifications(&self) -> bool {
        !matches!(self.mode, Mode::Deaf)
    }

    /// Blocks until a notification arrives or `timeout` passes; returns what arrived (empty on
    /// timeout). A dropped connection is re-established on a later call, which then returns
    /// [`Notice::Reconnected`] at once; attempts that fail are spaced by a growing pause
    /// (waited out within `timeout`), so a caller simply calls again.
    pub fn wait(&mut self, timeout: Duration) -> Result<Vec<Notice>> {
        let events = &self.events;
        match &mut self.mode {
            Mode::Deaf => {
                std::thread::sleep(timeout.min(DEAF_POLL));
                Ok(vec![Notice::Reconnected])
            }
            Mode::Shared { conns, id } => {
                let heard = off_runtime(|| wait_shared(conns, *id, timeout))?;
                Ok(heard
                    .into_iter()
                    .map(|heard| match heard {
                        Heard::Note { channel, payload } if channel == *events => {
                            Notice::Event(payload)
                        }
                        Heard::Note { .. } => Notice::Activity,
                        Heard::Reconnected => Notice::Reconnected,
                    })
                    .collect())
            }
            Mode::Apart(apart) => apart.wait(timeout),
        }
    }
}

impl Apart {
    fn wait(&mut self, timeout: Duration) -> Result<Vec<Notice>> {
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
