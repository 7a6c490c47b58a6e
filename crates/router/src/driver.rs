//! The thin driver: the one part of the router that calls the ledger, reads a clock and sleeps.
//!
//! A [`Router`] is one consumer of one session inside one process (`hermes drain`, or the
//! interactive session's idle poller and post-turn drain sharing one `Arc<Router>`). Every
//! boundary runs snapshot → coalesce → classify → claim-or-requeue under the router's one lock
//! (the *routing reservation*), so two consumer paths of one process can neither both take nor
//! both miss an event; between processes the ledger's all-or-none claim does the same.
//!
//! Waiting ([`Router::wait_ready`]) sleeps until the earliest of: the next deferral deadline,
//! the next poll of the ledger (new events published by other processes can only be seen by
//! polling), and the caller's deadline. It never spins. Time comes from a [`Clock`] (`stdx`'s,
//! the one every crate uses): [`hermes_stdx::SystemClock`] in production, [`hermes_stdx::ManualClock`] in
//! tests.
//!
//! This file is the [`Router`] and its API; `driver/` holds its parts: `boundary.rs` (one
//! boundary under the routing reservation: plan, render, claim, classify refusals),
//! `snapshot.rs` (the one read a boundary looks at), `follow.rs` (the thread that follows the
//! ledger's notifications), `keep_alive.rs` (renewing a presented claim from a thread) and
//! `config.rs` (`RouterConfig`, `WaitStats`).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hermes_ledger::{
    Boundary, ClaimToken, Event, Ledger, LedgerError, Timestamp, Transition, UnitRecord,
};
use hermes_stdx::{Clock, Signal, lock};

use crate::error::RouterError;
use crate::heartbeat::Heartbeat;
use crate::outcome::BoundaryOutcome;
use crate::ready::{self, Plan};
use crate::scheduler::{DeferKey, Scheduler};

/// The first pause of a wait whose ledger cannot be reached, in milliseconds; it doubles up to
/// [`UNAVAILABLE_MAX_PAUSE`].
const UNAVAILABLE_FIRST_PAUSE: u64 = 100;
/// The longest pause of a wait whose ledger cannot be reached, in milliseconds.
const UNAVAILABLE_MAX_PAUSE: u64 = 2_000;

mod boundary;
mod config;
mod follow;
mod keep_alive;
mod present;
mod snapshot;

pub use config::{RouterConfig, WaitStats};
pub use keep_alive::KeepAlive;
pub use present::AfterShown;

use follow::FOLLOWING_POLL_MS;

#[derive(Debug, Default)]
struct State {
    scheduler: Scheduler,
    /// Claims this consumer took and has not settled: never offered again, never deferred.
    outstanding: HashSet<ClaimToken>,
}

/// One consumer of one session. `Send + Sync`: share it with `Arc` between the paths of one
/// process that consume the same session, so they share its routing reservation.
#[derive(Debug)]
pub struct Router {
    ledger: Arc<Ledger>,
    config: RouterConfig,
    state: Mutex<State>,
    signal: Arc<Signal>,
    wakeups: AtomicU64,
    idle_wakeups: AtomicU64,
    /// Set while a thread follows the ledger's notifications for this session (PostgreSQL);
    /// cleared to stop it.
    following: Arc<AtomicBool>,
    /// Whether the first wait tried to start following.
    follow_tried: AtomicBool,
}

impl Drop for Router {
    fn drop(&mut self) {
        self.following.store(false, Ordering::SeqCst);
    }
}

type Render<'r, T, E> = dyn FnMut(&UnitRecord, &[Event]) -> Result<T, E> + 'r;

impl Router {
    /// A consumer over `ledger`.
    ///
    /// On a ledger that pushes notifications (PostgreSQL), from its first wait on, a thread
    /// follows them and wakes this consumer's waits as soon as an event of its session is
    /// published, instead of polling every `poll_interval_ms`.
    pub fn new(ledger: Arc<Ledger>, config: RouterConfig) -> Router {
        Router {
            ledger,
            config,
            state: Mutex::new(State::default()),
            signal: Arc::new(Signal::default()),
            wakeups: AtomicU64::new(0),
            idle_wakeups: AtomicU64::new(0),
            following: Arc::new(AtomicBool::new(false)),
            follow_tried: AtomicBool::new(false),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &RouterConfig {
        &self.config
    }

    /// The ledger it consumes from.
    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// Takes what is ready at `boundary` at `now`: every ready envelope is rendered with
    /// `render` and then claimed (rendering first, so a rendering failure leaves it unclaimed and
    /// costs no delivery attempt); envelopes held elsewhere are deferred; refused keys are
    /// classified. The caller presents each delivered envelope and settles its token.
    ///
    /// A session the ledger does not know gives an empty outcome; an ended one gives
    /// [`RouterError::SessionEnded`] (and any of its events still open are dropped).
    pub fn take_ready<T, E, F>(
        &self,
        boundary: Boundary,
        now: Timestamp,
        mut render: F,
    ) -> Result<BoundaryOutcome<T, E>, RouterError>
    where
        F: FnMut(&UnitRecord, &[Event]) -> Result<T, E>,
    {
        self.take(boundary, now, &mut render)
            .map(|(outcome, _)| outcome)
    }

    /// What [`Router::take_ready`] would offer at `now`, without claiming anything.
    pub fn preview(&self, boundary: Boundary, now: Timestamp) -> Result<Plan, RouterError> {
        let state = lock(&self.state);
        let snapshot = self.snapshot(now)?;
        Ok(ready::plan(
            snapshot,
            &self.config.session,
            boundary,
            now,
            &state.outstanding,
        ))
    }

    /// Like [`Router::take_ready`], but when nothing is ready blocks until something is, or
    /// until `deadline`, or until [`Router::interrupt_waits`]. It sleeps until the earliest
    /// deferral deadline, poll time or `deadline`, and looks again after a nudge. It returns the
    /// first outcome with something to act on (claimed envelopes or rendering failures), or the
    /// last, empty one.
    ///
    /// A ledger that cannot be reached while it waits (a broken connection, a server restart
    /// or outage: `LedgerError::Unavailable`) does not end the wait: it looks again with a
    /// pause growing to [`UNAVAILABLE_MAX_PAUSE`], and only a ledger still unreachable at
    /// `deadline` is the error.
    pub fn wait_ready<T, E, F>(
        &self,
        boundary: Boundary,
        deadline: Timestamp,
        clock: &dyn Clock,
        mut render: F,
    ) -> Result<BoundaryOutcome<T, E>, RouterError>
    where
        F: FnMut(&UnitRecord, &[Event]) -> Result<T, E>,
    {
        // Listening before the first look: nothing published after it goes unheard.
        self.follow_notifications();
        tracing::debug!(session = %self.config.session, deadline = deadline.0, "waiting for results");
        let interrupts = self.signal.current().interrupt;
        let mut pause = UNAVAILABLE_FIRST_PAUSE;
        let started = clock.now();
        loop {
            let mut seen = self.signal.current();
            seen.interrupt = interrupts;
            let now = clock.now();
            let (outcome, own_nudge) = match self.take(boundary, now, &mut render) {
                Err(RouterError::Ledger(err @ LedgerError::Unavailable { .. }))
                    if now < deadline =>
                {
                    tracing::warn!(error = %err, "the ledger cannot be reached; waiting for it");
                    let watch = self.signal.watch(seen);
                    if watch.interrupted() {
                        return Err(RouterError::Ledger(err));
                    }
                    clock.sleep_until(now.plus_ms(pause).min(deadline), &watch);
                    pause = (pause * 2).min(UNAVAILABLE_MAX_PAUSE);
                    continue;
                }
                Err(RouterError::Ledger(err)) if pause > UNAVAILABLE_FIRST_PAUSE => {
                    // Unreachable still at the deadline, after failing while it waited.
                    let waited = std::time::Duration::from_millis(now.ms_since(started));
                    return Err(RouterError::Ledger(err.after_waiting(waited)));
                }
                taken => taken?,
            };
            pause = UNAVAILABLE_FIRST_PAUSE;
            if own_nudge == Some(seen.nudge + 1) {
                // Our own deferral moved the earliest deadline; that is no news to us.
                seen.nudge += 1;
            }
            let watch = self.signal.watch(seen);
            if outcome.needs_attention() || now >= deadline || watch.interrupted() {
                return Ok(outcome);
            }
            let poll_ms = if self.following.load(Ordering::SeqCst) {
                self.config
                    .poll_interval_ms
                    .map(|ms| ms.max(FOLLOWING_POLL_MS))
            } else {
                self.config.poll_interval_ms
            };
            let poll_at = poll_ms.map(|ms| now.plus_ms(ms.max(1)));
            let wake_at = [Some(deadline), self.next_deadline(), poll_at]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(deadline)
                .max(now.plus_ms(1));
            clock.sleep_until(wake_at, &watch);
            self.wakeups.fetch_add(1, Ordering::Relaxed);
            if clock.now() < wake_at && !watch.signalled() {
                self.idle_wakeups.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Whether a thread follows the ledger's notifications for this consumer (PostgreSQL): its
    /// waits are woken by them, and poll only every two seconds as a safety net.
    pub fn follows_notifications(&self) -> bool {
        self.following.load(Ordering::SeqCst)
    }

    /// Makes every current [`Router::wait_ready`] return at once with what it has.
    pub fn interrupt_waits(&self) {
        self.signal.interrupt();
    }

    /// Makes every current [`Router::wait_ready`] look at the ledger again now (say, after this
    /// process published an event for the session).
    pub fn nudge(&self) {
        self.signal.nudge();
    }

    /// Wake-ups of waits so far (for tests and benchmarks: whether waits spin).
    #[cfg(any(test, feature = "testing"))]
    pub fn wait_stats(&self) -> WaitStats {
        WaitStats {
            wakeups: self.wakeups.load(Ordering::Relaxed),
            idle_wakeups: self.idle_wakeups.load(Ordering::Relaxed),
        }
    }

    /// Every deferred entry with its retry time, earliest first.
    pub fn deferred(&self) -> Vec<(DeferKey, Timestamp)> {
        lock(&self.state).scheduler.entries()
    }

    /// The earliest retry time of a deferred entry.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        lock(&self.state).scheduler.next_deadline()
    }

    /// Marks every event of the claim delivered: call it once the consumer has the result.
    pub fn ack(&self, token: ClaimToken, now: Timestamp) -> Result<Vec<Transition>, RouterError> {
        lock(&self.state).outstanding.remove(&token);
        Ok(self.ledger.ack(token, now)?)
    }

    /// Gives the claim back after it was (partly) shown and then interrupted: the attempt counts.
    pub fn release(
        &self,
        token: ClaimToken,
        now: Timestamp,
    ) -> Result<Vec<Transition>, RouterError> {
        lock(&self.state).outstanding.remove(&token);
        let transitions = self.ledger.release(token, now)?;
        self.signal.nudge();
        Ok(transitions)
    }

    /// Gives the claim back when nothing was shown (the consumer was busy): the attempt is given
    /// back too.
    pub fn defer(&self, token: ClaimToken) -> Result<Vec<Transition>, RouterError> {
        lock(&self.state).outstanding.remove(&token);
        let transitions = self.ledger.defer(token)?;
        self.signal.nudge();
        Ok(transitions)
    }

    /// Extends the claim's lease to `now` + the configured lease; the new expiry.
    pub fn renew(&self, token: ClaimToken, now: Timestamp) -> Result<Timestamp, RouterError> {
        Ok(self.ledger.renew(token, self.config.lease_ms, now)?)
    }

    /// A heartbeat schedule for a claim taken at `since`, at the configured interval.
    pub fn heartbeat(&self, since: Timestamp) -> Heartbeat {
        Heartbeat::new(since, self.config.heartbeat_ms)
    }

    /// Renews the claim if its heartbeat is due at `now`: the new expiry if it renewed. For a
    /// presenting loop that can call it now and then; [`Router::keep_alive`] does it from a
    /// thread instead.
    pub fn renew_if_due(
        &self,
        token: ClaimToken,
        beat: &mut Heartbeat,
        now: Timestamp,
    ) -> Result<Option<Timestamp>, RouterError> {
        if !beat.is_due(now) {
            return Ok(None);
        }
        let expires_at = self.renew(token, now)?;
        beat.renewed(now);
        Ok(Some(expires_at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_router_is_shared_between_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<Router>();
        shareable::<KeepAlive>();
    }
}
