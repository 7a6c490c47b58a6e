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
//! the one every crate uses): [`stdx::SystemClock`] in production, [`stdx::ManualClock`] in
//! tests.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use stdx::{Clock, Signal, lock};

use ledger::{
    ClaimOutcome, ClaimRequest, ClaimToken, Delegation, DelegationId, DropReason, Event, EventRef,
    Ledger, SessionId, SessionState, Timestamp, Transition,
};

use crate::classify::{self, Deferral};
use crate::error::RouterError;
use crate::heartbeat::Heartbeat;
use crate::outcome::{BoundaryOutcome, ClaimedEnvelope, RenderFailure};
use crate::ownership::Access;
use crate::ready::{self, Offer, Plan, Snapshot};
use crate::scheduler::{DeferKey, Scheduler};
use ledger::Boundary;

/// Who consumes, for which session, and how (SPEC §9 `delivery.*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouterConfig {
    /// The session whose events this consumer receives (and no other).
    pub session: SessionId,
    /// The consumer's name, recorded on its claims.
    pub consumer: String,
    /// Lease length of every claim and renewal, in milliseconds (`claim_lease_seconds`).
    pub lease_ms: u64,
    /// How often a presented claim is renewed, in milliseconds (`heartbeat_seconds`).
    pub heartbeat_ms: u64,
    /// How often a waiting consumer polls the ledger for newly published events, in
    /// milliseconds; `None` waits for deferral deadlines, nudges and the caller's deadline only.
    pub poll_interval_ms: Option<u64>,
}

impl RouterConfig {
    /// Default poll interval: idle results appear well within a second.
    pub const DEFAULT_POLL_MS: u64 = 200;

    /// The defaults of SPEC §9 for a consumer `consumer` of `session`.
    pub fn new(session: SessionId, consumer: impl Into<String>) -> RouterConfig {
        RouterConfig::from_settings(session, consumer, &settings::Settings::default())
    }

    /// A consumer `consumer` of `session` with the lease and renewal period of `settings`
    /// (renewals at least twice per lease, [`settings::Delivery::renew_every`]).
    pub fn from_settings(
        session: SessionId,
        consumer: impl Into<String>,
        settings: &settings::Settings,
    ) -> RouterConfig {
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        RouterConfig {
            session,
            consumer: consumer.into(),
            lease_ms: ms(settings.delivery.claim_lease),
            heartbeat_ms: ms(settings.delivery.renew_every()),
            poll_interval_ms: Some(RouterConfig::DEFAULT_POLL_MS),
        }
    }
}

/// Wake-ups of [`Router::wait_ready`] so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitStats {
    /// Every time a wait woke from sleep.
    pub wakeups: u64,
    /// Wake-ups while nothing was due: before any deferral deadline, poll time or the caller's
    /// deadline, and without a nudge or interrupt. Zero unless a clock wakes early.
    pub idle_wakeups: u64,
}

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
    following: Arc<std::sync::atomic::AtomicBool>,
    /// Whether the first wait tried to start following.
    follow_tried: std::sync::atomic::AtomicBool,
}

/// How long a waiting consumer that is woken by the ledger's notifications still polls, in
/// case one was lost while its connection was down.
const FOLLOWING_POLL_MS: u64 = 2_000;

/// How long one wait of the following thread lasts before it checks whether to stop.
const FOLLOW_SLICE: std::time::Duration = std::time::Duration::from_millis(500);

impl Drop for Router {
    fn drop(&mut self) {
        self.following.store(false, Ordering::SeqCst);
    }
}

/// Nudges `signal` whenever an event of `session` becomes deliverable (or the listener had to
/// reconnect and may have missed one), until `following` is cleared.
fn follow(
    mut listener: ledger::Listener,
    session: SessionId,
    signal: Arc<Signal>,
    following: Arc<std::sync::atomic::AtomicBool>,
) {
    while following.load(Ordering::SeqCst) {
        // A lost connection: the listener reconnects on a later wait, pausing between failed
        // attempts; polling (every FOLLOWING_POLL_MS) covers the gap.
        if let Ok(notices) = listener.wait(FOLLOW_SLICE) {
            let ours = notices.iter().any(|notice| match notice {
                ledger::Notice::Event(of) => of == session.as_str(),
                ledger::Notice::Reconnected => true,
                ledger::Notice::Activity => false,
            });
            if ours {
                signal.nudge();
            }
        }
    }
}

type Render<'r, T, E> = dyn FnMut(&Delegation, &[Event]) -> Result<T, E> + 'r;

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
            following: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            follow_tried: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// On a ledger that pushes notifications (PostgreSQL), starts the thread that follows them
    /// for this consumer's session, once, before its first wait: a consumer that never waits
    /// (a `drain` without `--wait`) opens no listening connection.
    fn follow_notifications(&self) {
        if self.follow_tried.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Ok(Some(listener)) = self.ledger.listen(&[ledger::Listen::Events]) {
            self.following.store(true, Ordering::SeqCst);
            let (session, signal, following) = (
                self.config.session.clone(),
                Arc::clone(&self.signal),
                Arc::clone(&self.following),
            );
            std::thread::spawn(move || follow(listener, session, signal, following));
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
        F: FnMut(&Delegation, &[Event]) -> Result<T, E>,
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
    pub fn wait_ready<T, E, F>(
        &self,
        boundary: Boundary,
        deadline: Timestamp,
        clock: &dyn Clock,
        mut render: F,
    ) -> Result<BoundaryOutcome<T, E>, RouterError>
    where
        F: FnMut(&Delegation, &[Event]) -> Result<T, E>,
    {
        // Listening before the first look: nothing published after it goes unheard.
        self.follow_notifications();
        let interrupts = self.signal.current().interrupt;
        loop {
            let mut seen = self.signal.current();
            seen.interrupt = interrupts;
            let now = clock.now();
            let (outcome, own_nudge) = self.take(boundary, now, &mut render)?;
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

    /// Wake-ups of waits so far.
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

    /// Renews the claim every heartbeat from a background thread until the returned guard is
    /// stopped or dropped. Use a clock that really sleeps ([`stdx::SystemClock`]).
    pub fn keep_alive(
        &self,
        token: ClaimToken,
        clock: Arc<dyn Clock>,
    ) -> Result<KeepAlive, RouterError> {
        let stop = Arc::new(Signal::default());
        let seen = stop.current();
        let ledger = Arc::clone(&self.ledger);
        let lease_ms = self.config.lease_ms;
        let every_ms = self.config.heartbeat_ms;
        let signal = Arc::clone(&stop);
        let thread = thread::Builder::new()
            .name("hermes-heartbeat".into())
            .spawn(move || {
                let mut beat = Heartbeat::new(clock.now(), every_ms);
                let mut renewals = 0u32;
                loop {
                    let watch = signal.watch(seen);
                    clock.sleep_until(beat.next_at(), &watch);
                    if watch.signalled() {
                        return Ok(renewals);
                    }
                    let now = clock.now();
                    if beat.is_due(now) {
                        ledger.renew(token, lease_ms, now)?;
                        beat.renewed(now);
                        renewals += 1;
                    }
                }
            })
            .map_err(|err| RouterError::Heartbeat {
                token,
                reason: err.to_string(),
            })?;
        Ok(KeepAlive {
            token,
            stop,
            thread: Some(thread),
        })
    }

    /// One boundary under the routing reservation. Also returns the nudge generation this call
    /// produced, if it moved the earliest deferral deadline earlier (waiters must re-plan).
    fn take<T, E>(
        &self,
        boundary: Boundary,
        now: Timestamp,
        render: &mut Render<'_, T, E>,
    ) -> Result<(BoundaryOutcome<T, E>, Option<u64>), RouterError> {
        let mut state = lock(&self.state);
        let before = state.scheduler.next_deadline();
        let result = self.take_locked(&mut state, boundary, now, render);
        let after = state.scheduler.next_deadline();
        let nudge = after
            .is_some_and(|a| before.is_none_or(|b| a < b))
            .then(|| self.signal.nudge());
        drop(state);
        result.map(|outcome| (outcome, nudge))
    }

    fn take_locked<T, E>(
        &self,
        state: &mut State,
        boundary: Boundary,
        now: Timestamp,
        render: &mut Render<'_, T, E>,
    ) -> Result<BoundaryOutcome<T, E>, RouterError> {
        let snapshot = self.snapshot(now)?;
        // Our own claims that no open event carries any more were settled (or fenced).
        let leased: HashSet<ClaimToken> = snapshot
            .events
            .iter()
            .filter_map(|e| e.lease.as_ref().map(|l| l.token))
            .collect();
        state.outstanding.retain(|token| leased.contains(token));
        let plan = ready::plan(
            snapshot,
            &self.config.session,
            boundary,
            now,
            &state.outstanding,
        );
        match plan.access {
            Access::Open => {}
            Access::Unknown => {
                state.scheduler.clear();
                return Ok(BoundaryOutcome::empty(boundary));
            }
            Access::Ended => {
                state.scheduler.clear();
                state.outstanding.clear();
                if !plan.leftovers.is_empty() {
                    self.ledger
                        .drop_events(&plan.leftovers, DropReason::SessionEnded, now)?;
                }
                return Err(RouterError::SessionEnded(self.config.session.clone()));
            }
        }

        // Re-classify: what is due comes out; whatever the snapshot still shows held by someone
        // else goes (back) in at its holder's current expiry, so a renewed lease is deferred
        // again; entries the snapshot no longer shows held (acked, dropped, released, expired)
        // are discarded.
        state.scheduler.pop_due(now);
        let held: HashSet<DeferKey> = plan.held.iter().map(Deferral::key).collect();
        state.scheduler.retain(|key, _| held.contains(key));
        for deferral in &plan.held {
            state.scheduler.defer(deferral.key(), deferral.retry_at);
        }

        let mut outcome = BoundaryOutcome::empty(boundary);
        outcome.deferred.extend(
            plan.held
                .into_iter()
                .filter(|d| boundary.offers(d.delivery)),
        );
        if let Err(err) = self.claim_offers(state, plan.offers, now, render, &mut outcome) {
            // Nothing of this boundary was shown yet: give every claim of it back.
            for envelope in &outcome.delivered {
                state.outstanding.remove(&envelope.token);
                let _ = self.ledger.defer(envelope.token);
            }
            return Err(err);
        }
        dedup_deferred(&mut outcome.deferred);
        Ok(outcome)
    }

    /// Renders every offer, then claims all that rendered in one transaction (one durable commit
    /// for the whole boundary). An offer refused for some keys is classified key by key and its
    /// remaining keys are tried again at once, on their own.
    fn claim_offers<T, E>(
        &self,
        state: &mut State,
        offers: Vec<Offer>,
        now: Timestamp,
        render: &mut Render<'_, T, E>,
        outcome: &mut BoundaryOutcome<T, E>,
    ) -> Result<(), RouterError> {
        let mut rendered_offers = Vec::with_capacity(offers.len());
        for offer in offers {
            match render(&offer.delegation, &offer.events) {
                Ok(rendered) => rendered_offers.push((offer, rendered)),
                Err(error) => outcome.failed.push(RenderFailure {
                    delegation_id: offer.delegation.id.clone(),
                    keys: offer.events.iter().map(|e| e.key).collect(),
                    error,
                }),
            }
        }
        if rendered_offers.is_empty() {
            return Ok(());
        }
        let requests: Vec<ClaimRequest> = rendered_offers
            .iter()
            .map(|(offer, _)| self.request(&offer.events))
            .collect();
        let results = self.ledger.claim_many(&requests, now)?;
        for ((offer, rendered), result) in rendered_offers.into_iter().zip(results) {
            let Offer {
                delegation,
                mut events,
            } = offer;
            match result {
                ClaimOutcome::Claimed(claim) => {
                    accept(state, outcome, delegation, claim, rendered);
                }
                ClaimOutcome::Refused(refused) => {
                    absorb_refusal(state, &delegation, &refused, &mut events, outcome);
                    if !events.is_empty() {
                        self.claim_offer(
                            state,
                            Offer { delegation, events },
                            now,
                            render,
                            outcome,
                        )?;
                    }
                }
            }
        }
        Ok(())
    }

    fn request(&self, events: &[Event]) -> ClaimRequest {
        ClaimRequest {
            keys: events.iter().map(Event::event_ref).collect(),
            consumer: self.config.consumer.clone(),
            session: Some(self.config.session.clone()),
            lease_ms: self.config.lease_ms,
        }
    }

    /// Renders and claims one offer. A claim refused for some keys is classified key by key and
    /// the rest is tried again at once: a ready child is never held back for a sibling.
    fn claim_offer<T, E>(
        &self,
        state: &mut State,
        offer: Offer,
        now: Timestamp,
        render: &mut Render<'_, T, E>,
        outcome: &mut BoundaryOutcome<T, E>,
    ) -> Result<(), RouterError> {
        let Offer {
            delegation,
            mut events,
        } = offer;
        while !events.is_empty() {
            let rendered = match render(&delegation, &events) {
                Ok(rendered) => rendered,
                Err(error) => {
                    outcome.failed.push(RenderFailure {
                        delegation_id: delegation.id.clone(),
                        keys: events.iter().map(|e| e.key).collect(),
                        error,
                    });
                    return Ok(());
                }
            };
            match self.ledger.claim(&self.request(&events), now)? {
                ClaimOutcome::Claimed(claim) => {
                    accept(state, outcome, delegation, claim, rendered);
                    return Ok(());
                }
                ClaimOutcome::Refused(refused) => {
                    if refused.is_empty() {
                        return Ok(());
                    }
                    absorb_refusal(state, &delegation, &refused, &mut events, outcome);
                }
            }
        }
        Ok(())
    }

    /// Reads the session, its open events and their units.
    fn snapshot(&self, now: Timestamp) -> Result<Snapshot, RouterError> {
        let session = &self.config.session;
        let record = self.ledger.session(session)?;
        let Some(record) = record else {
            return Ok(Snapshot::default());
        };
        if record.state == SessionState::Ended {
            return Ok(Snapshot {
                events: self.ledger.open_events(session)?,
                session: Some(record),
                units: Vec::new(),
            });
        }
        // One read of every open event, then the record of each unit with something ready (the
        // render function needs it); held units need none.
        let events = self.ledger.open_events(session)?;
        let mut units: Vec<Delegation> = Vec::new();
        let mut known: HashSet<DelegationId> = HashSet::new();
        for event in &events {
            if !event.is_deliverable(now) || !known.insert(event.delegation_id.clone()) {
                continue;
            }
            if let Some(unit) = self.ledger.delegation(&event.delegation_id)? {
                units.push(unit);
            }
        }
        Ok(Snapshot {
            session: Some(record),
            events,
            units,
        })
    }
}

/// Records a successful claim as one of this boundary's delivered envelopes.
fn accept<T, E>(
    state: &mut State,
    outcome: &mut BoundaryOutcome<T, E>,
    delegation: Delegation,
    claim: ledger::Claim,
    rendered: T,
) {
    state.outstanding.insert(claim.token);
    outcome.delivered.push(ClaimedEnvelope {
        token: claim.token,
        expires_at: claim.expires_at,
        delegation,
        events: claim.events,
        rendered,
    });
}

/// Classifies a refused claim key by key (deferring what someone else holds, discarding what
/// is gone) and removes the refused keys from `events`.
fn absorb_refusal<T, E>(
    state: &mut State,
    delegation: &Delegation,
    refused: &[(EventRef, ledger::Refusal)],
    events: &mut Vec<Event>,
    outcome: &mut BoundaryOutcome<T, E>,
) {
    let classified = classify::classify_refusals(refused, delegation.spec.delivery);
    for deferral in classified.deferred {
        state.scheduler.defer(deferral.key(), deferral.retry_at);
        if outcome.boundary.offers(deferral.delivery) {
            outcome.deferred.push(deferral);
        }
    }
    outcome.discarded.extend(classified.discarded);
    let gone: HashSet<&EventRef> = refused.iter().map(|(key, _)| key).collect();
    events.retain(|e| !gone.contains(&e.event_ref()));
}

/// Keeps the last deferral per key (a claim refusal is newer than the snapshot).
fn dedup_deferred(deferred: &mut Vec<Deferral>) {
    let mut last: HashMap<DeferKey, usize> = HashMap::new();
    for (at, deferral) in deferred.iter().enumerate() {
        last.insert(deferral.key(), at);
    }
    let mut at = 0;
    deferred.retain(|deferral| {
        let keep = last.get(&deferral.key()) == Some(&at);
        at += 1;
        keep
    });
}

/// Renews one claim every heartbeat from a thread until stopped or dropped.
#[derive(Debug)]
pub struct KeepAlive {
    token: ClaimToken,
    stop: Arc<Signal>,
    thread: Option<JoinHandle<Result<u32, ledger::LedgerError>>>,
}

impl KeepAlive {
    /// The claim it keeps alive.
    pub fn token(&self) -> ClaimToken {
        self.token
    }

    /// Whether the heartbeat thread has ended by itself (renewing failed; [`KeepAlive::stop`]
    /// says why).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Stops renewing; how many renewals were made, or why renewing failed (a lost claim means
    /// another consumer took the events: do not ack).
    pub fn stop(mut self) -> Result<u32, RouterError> {
        self.finish()
    }

    fn finish(&mut self) -> Result<u32, RouterError> {
        self.stop.interrupt();
        match self.thread.take() {
            None => Ok(0),
            Some(thread) => match thread.join() {
                Ok(result) => Ok(result?),
                Err(_) => Err(RouterError::Heartbeat {
                    token: self.token,
                    reason: "the heartbeat thread panicked".into(),
                }),
            },
        }
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        let _ = self.finish();
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

    #[test]
    fn dedup_keeps_the_newest_deferral_per_key() {
        let unit = DelegationId::from_bits(1);
        let deferral = |n: u32, at: u64| Deferral {
            delegation_id: unit.clone(),
            keys: vec![ledger::EventKey::Task(n)],
            retry_at: Timestamp(at),
            delivery: ledger::DeliveryMode::AfterTurn,
        };
        let mut list = vec![deferral(0, 1), deferral(1, 2), deferral(0, 3)];
        dedup_deferred(&mut list);
        assert_eq!(list, vec![deferral(1, 2), deferral(0, 3)]);
    }
}
