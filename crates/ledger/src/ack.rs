//! Acknowledging claims exactly once, even when the connection breaks around `COMMIT`
//! (SPEC §11.1). Every consumer — `drain`, `delivery ack`, the hooks, MCP and the interactive
//! session — acks through here ([`Ledger::ack`], [`Ledger::ack_many`]).
//!
//! On PostgreSQL an ack whose outcome is unknown (the connection broke before or during
//! `COMMIT`) is not guessed at: it is run again with the same token and the same `now` on a
//! fresh connection, with a growing pause, for as long as the claim's lease lasts. The second
//! run finds either the claim still held (the first never landed: it acks now), or the keys it
//! read the first time delivered at exactly that `now` with no lease (the first landed: a
//! no-op that says so, [`Acked::repeated`]), or the keys held or settled by someone else (the
//! claim was really lost: `ClaimLost`, as before). A redb ledger never retries: its commit
//! either happened or failed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stdx::lock;

use crate::error::{LedgerError, Result};
use crate::events::held;
use crate::ledger::Ledger;
use crate::model::{ClaimToken, EventRef, EventState, Timestamp, Transition};
use crate::rules;
use crate::store::Writer;

/// How long an ack whose outcome is unknown is retried when the claim's lease was never read
/// (the connection broke before the first statement): the shortest claim lease (SPEC §9).
const UNREAD_LEASE: Duration = Duration::from_secs(10);
/// The first pause between two attempts; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// What an ack did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acked {
    /// The transitions of the ack (for a repeat: those the first ack made).
    pub transitions: Vec<Transition>,
    /// The same token had already acked these keys: an earlier attempt whose outcome was
    /// unknown had committed. Nothing was written now.
    pub repeated: bool,
}

/// What the attempts so far learned of each claim: its keys and when its lease ends.
type Seen = Arc<Mutex<HashMap<ClaimToken, (Vec<EventRef>, Timestamp)>>>;

impl Ledger {
    /// Marks every key of the claim delivered.
    pub fn ack(&self, token: ClaimToken, now: Timestamp) -> Result<Vec<Transition>> {
        self.ack_outcome(token, now).map(|acked| acked.transitions)
    }

    /// Marks every key of the claim delivered, saying whether an earlier attempt of this call
    /// (whose outcome was unknown) had done it already.
    pub fn ack_outcome(&self, token: ClaimToken, now: Timestamp) -> Result<Acked> {
        let mut slots = self.ack_resolved(vec![token], now)?;
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
        let slots = self.ack_resolved(tokens.to_vec(), now)?;
        Ok(slots
            .into_iter()
            .map(|slot| slot.map(|acked| acked.transitions))
            .collect())
    }

    /// The one ack path: one transaction for every token, run again while its outcome is
    /// unknown and the leases last.
    fn ack_resolved(&self, tokens: Vec<ClaimToken>, now: Timestamp) -> Result<Vec<Result<Acked>>> {
        let seen: Seen = Arc::default();
        let mut first_failure: Option<Instant> = None;
        let mut pause = FIRST_PAUSE;
        loop {
            let repeat = first_failure.is_some();
            let batch = tokens.clone();
            let attempt_seen = Arc::clone(&seen);
            let attempt = self.write_grouped(move |_, w| {
                let mut results = Vec::with_capacity(batch.len());
                for token in &batch {
                    match ack_one(w, *token, now, &attempt_seen, repeat) {
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
            });
            let err = match attempt {
                Err(err @ LedgerError::Unavailable { .. }) if self.is_shared() => err,
                other => return other,
            };
            let since = *first_failure.get_or_insert_with(Instant::now);
            if since.elapsed() >= lease_left(&seen, &tokens, now) {
                return Err(err);
            }
            tracing::warn!(error = %err, "the outcome of an ack is unknown; acking again with the same token");
            std::thread::sleep(pause);
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }
}

/// Acks `token` inside `w`. On a repeat, a claim that is gone is looked for among the keys the
/// earlier attempt read: delivered at `now` by it, the ack is a no-op that says so.
fn ack_one(
    w: &Writer<'_>,
    token: ClaimToken,
    now: Timestamp,
    seen: &Seen,
    repeat: bool,
) -> Result<Acked> {
    match held(w, token) {
        Ok((record, events)) => {
            lock(seen).insert(token, (record.keys.clone(), record.expires_at));
            let mut transitions = Vec::with_capacity(events.len());
            for mut event in events {
                let from = event.state;
                rules::ack(&mut event, now);
                w.put_event(&event)?;
                transitions.push(rules::transition(&event, from));
            }
            w.remove_claim(token)?;
            Ok(Acked {
                transitions,
                repeated: false,
            })
        }
        Err(LedgerError::ClaimLost(_)) if repeat => {
            let keys = lock(seen).get(&token).map(|(keys, _)| keys.clone());
            let Some(keys) = keys else {
                return Err(LedgerError::ClaimLost(token));
            };
            let mut transitions = Vec::with_capacity(keys.len());
            for key in &keys {
                let event = w.event(key)?.ok_or(LedgerError::ClaimLost(token))?;
                let ours = event.state == EventState::Delivered
                    && event.delivered_at == Some(now)
                    && event.lease.is_none();
                if !ours {
                    return Err(LedgerError::ClaimLost(token));
                }
                transitions.push(rules::transition(&event, EventState::Claimed));
            }
            tracing::info!(%token, "the ack had committed before its connection broke: already acked by this token");
            Ok(Acked {
                transitions,
                repeated: true,
            })
        }
        Err(err) => Err(err),
    }
}

/// How long, from the first failure, the acks may be retried: the shortest lease left among
/// the claims read, or [`UNREAD_LEASE`] when none was read.
fn lease_left(seen: &Seen, tokens: &[ClaimToken], now: Timestamp) -> Duration {
    let seen = lock(seen);
    tokens
        .iter()
        .filter_map(|token| seen.get(token))
        .map(|(_, expires_at)| Duration::from_millis(expires_at.0.saturating_sub(now.0)))
        .min()
        .unwrap_or(UNREAD_LEASE)
}
