//! Acknowledging claims exactly once, even when the connection breaks around `COMMIT`.
//! Every consumer — `drain`, `delivery ack`, the hooks, MCP and the interactive session — acks
//! through here ([`Ledger::ack`], [`Ledger::ack_many`]).
//!
//! An ack leaves a mark of the token that acked: the claim record stays, and each delivered
//! event keeps that claim's lease (`rules::ack`), until retention purges the unit. So another
//! ack by the same token — in this call, in another process, at any later time — finds every
//! key delivered under it (`rules::standing` → `Acked`) and is a no-op that says so
//! ([`Acked::repeated`]), writing nothing; a token that was fenced, released, deferred or
//! dropped, or whose keys were partly delivered by another token, is still `ClaimLost`. A
//! harness whose `hermes delivery ack` exited 6 simply runs it again.
//!
//! On PostgreSQL an ack whose outcome is unknown (the connection broke before or during
//! `COMMIT`) is not guessed at: it is run again with the same token and the same `now` on a
//! fresh connection, with a growing pause, for as long as the claim's lease lasts. The second
//! run finds either the claim still held (the first never landed: it acks now), or the keys
//! acked by this token (the first landed: repeated), or the claim really lost. A redb ledger
//! never retries: its commit either happened or failed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hermes_stdx::lock;

use crate::error::{LedgerError, Result};
use crate::ledger::Ledger;
use crate::model::{ClaimToken, EventState, Timestamp, Transition};
use crate::rules::{self, Standing};
use crate::store::{TokenAck, Writer};
use crate::txn::claims::standing;

/// How long an ack whose outcome is unknown is retried when the claim's lease was never read
/// (the connection broke before the first statement) and the caller did not say how long its
/// leases last: a bound of the ledger's own, long enough to ride out a connection that breaks
/// and comes back, short enough that a consumer does not hang. A consumer that knows its lease
/// passes it ([`Ledger::ack_many_within`]).
const UNREAD_LEASE: Duration = Duration::from_secs(10);
/// The first pause between two attempts; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// What an ack did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acked {
    /// The transitions of the ack (for a repeat: those the first ack made).
    pub transitions: Vec<Transition>,
    /// The same token had already acked these keys (an earlier attempt whose outcome was
    /// unknown had committed, or an earlier ack, in any process). Nothing was written now.
    pub repeated: bool,
}

/// When the lease of each claim the attempts so far read ends.
type Seen = Arc<Mutex<HashMap<ClaimToken, Timestamp>>>;

impl Ledger {
    /// Marks every key of the claim delivered.
    pub fn ack(&self, token: ClaimToken, now: Timestamp) -> Result<Vec<Transition>> {
        self.ack_outcome(token, now).map(|acked| acked.transitions)
    }

    /// Marks every key of the claim delivered, saying whether this token had done it already
    /// (an earlier attempt of this call whose outcome was unknown, or an earlier ack in any
    /// process): then nothing is written.
    pub fn ack_outcome(&self, token: ClaimToken, now: Timestamp) -> Result<Acked> {
        let mut slots = self.ack_resolved(vec![token], now, UNREAD_LEASE)?;
        slots
            .pop()
            .unwrap_or_else(|| Err(LedgerError::Invalid("an ack lost its result".into())))
    }

    /// Acks several claims in one transaction (one durable commit for a whole boundary). Each
    /// token is settled on its own: a lost one gives `Err(ClaimLost)` in its slot and the others
    /// are still acked.
    pub fn ack_many(
        &self,
        tokens: &[ClaimToken],
        now: Timestamp,
    ) -> Result<Vec<Result<Vec<Transition>>>> {
        self.ack_many_within(tokens, now, UNREAD_LEASE)
    }

    /// [`Ledger::ack_many`] by a consumer that knows how long its claims' leases can last at
    /// most (`lease`: it took and renewed them with that lease): while the claims were never
    /// read (the server unreachable from the first attempt on, say during a restart), the
    /// acks are retried for that long rather than [`UNREAD_LEASE`]. A consumer that showed a
    /// result and gave up acking it earlier would see it delivered again once the lease ran
    /// out.
    pub fn ack_many_within(
        &self,
        tokens: &[ClaimToken],
        now: Timestamp,
        lease: Duration,
    ) -> Result<Vec<Result<Vec<Transition>>>> {
        let slots = self.ack_resolved(tokens.to_vec(), now, lease)?;
        Ok(slots
            .into_iter()
            .map(|slot| slot.map(|acked| acked.transitions))
            .collect())
    }

    /// The one ack path: one transaction for every token, run again while its outcome is
    /// unknown and the leases last (`unread`: how long, for claims never read).
    fn ack_resolved(
        &self,
        tokens: Vec<ClaimToken>,
        now: Timestamp,
        unread: Duration,
    ) -> Result<Vec<Result<Acked>>> {
        let seen: Seen = Arc::default();
        let mut first_failure: Option<Instant> = None;
        let mut pause = FIRST_PAUSE;
        loop {
            let batch = tokens.clone();
            let attempt_seen = Arc::clone(&seen);
            let attempt = match self.backend.transitions() {
                Some(at_once) => self
                    .at_once(
                        || at_once.ack(&batch, now),
                        |acks| acks.iter().any(|a| a.standing == Some(Standing::Holds)),
                    )
                    .map(|acks| {
                        acks.into_iter()
                            .zip(&batch)
                            .map(|(ack, token)| acked_at_once(ack, *token, &attempt_seen))
                            .collect()
                    }),
                None => self.write_grouped(move |_, w| {
                    let mut results = Vec::with_capacity(batch.len());
                    for token in &batch {
                        match ack_one(w, *token, now, &attempt_seen) {
                            Err(LedgerError::ClaimLost(lost)) => {
                                results.push(Err(LedgerError::ClaimLost(lost)))
                            }
                            other => results.push(Ok(other?)),
                        }
                    }
                    let wrote = results
                        .iter()
                        .any(|r| r.as_ref().is_ok_and(|acked| !acked.repeated));
                    Ok((results, wrote))
                }),
            };
            let err = match attempt {
                Err(err @ LedgerError::Unavailable { .. }) if self.is_shared() => err,
                other => return other,
            };
            let since = *first_failure.get_or_insert_with(Instant::now);
            if since.elapsed() >= lease_left(&seen, &tokens, now, unread) {
                return Err(err);
            }
            tracing::warn!(error = %err, "the outcome of an ack is unknown; acking again with the same token");
            std::thread::sleep(pause);
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }
}

/// Acks `token` inside `w`; a token that acked every key already gets the transitions its ack
/// made, with nothing written.
fn ack_one(w: &Writer<'_>, token: ClaimToken, now: Timestamp, seen: &Seen) -> Result<Acked> {
    let (record, events, standing) = standing(w, token)?;
    lock(seen).insert(token, record.expires_at);
    match standing {
        Standing::Holds => {
            let mut transitions = Vec::with_capacity(events.len());
            for mut event in events {
                let from = event.state;
                rules::ack(&mut event, now);
                w.put_event(&event)?;
                transitions.push(rules::transition(&event, from));
            }
            // The record stays, the mark of this ack, until retention purges the unit.
            Ok(Acked {
                transitions,
                repeated: false,
            })
        }
        Standing::Acked => {
            tracing::info!(%token, "already acked by this token: nothing to do");
            Ok(Acked {
                transitions: events
                    .iter()
                    .map(|event| rules::transition(event, EventState::Claimed))
                    .collect(),
                repeated: true,
            })
        }
        Standing::Lost => Err(LedgerError::ClaimLost(token)),
    }
}

/// What an ack by a backend's one statement (`store::Transitions::ack`) says of `token`, as
/// [`ack_one`] says it.
fn acked_at_once(ack: TokenAck, token: ClaimToken, seen: &Seen) -> Result<Acked> {
    if let Some(expires_at) = ack.expires_at {
        lock(seen).insert(token, expires_at);
    }
    let repeated = match ack.standing {
        Some(Standing::Holds) => false,
        Some(Standing::Acked) => {
            tracing::info!(%token, "already acked by this token: nothing to do");
            true
        }
        Some(Standing::Lost) | None => return Err(LedgerError::ClaimLost(token)),
    };
    let transitions = ack
        .keys
        .into_iter()
        .map(|event| Transition {
            event,
            from: EventState::Claimed,
            to: EventState::Delivered,
            drop_reason: None,
        })
        .collect();
    Ok(Acked {
        transitions,
        repeated,
    })
}

/// How long, from the first failure, the acks may be retried: the shortest lease left among
/// the claims read, or `unread` when none was read.
fn lease_left(seen: &Seen, tokens: &[ClaimToken], now: Timestamp, unread: Duration) -> Duration {
    let seen = lock(seen);
    tokens
        .iter()
        .filter_map(|token| seen.get(token))
        .map(|expires_at| Duration::from_millis(expires_at.0.saturating_sub(now.0)))
        .min()
        .unwrap_or(unread)
}
