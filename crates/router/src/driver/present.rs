//! The one delivery protocol's second half, for every consumer — drain, the hooks,
//! the MCP server, the interactive session: keep the claims alive while the result is shown,
//! then acknowledge all of it in one commit, or give all of it back.

use std::sync::Arc;

use hermes_ledger::ClaimToken;
use hermes_stdx::{Clock, SystemClock, lock};

use super::Router;
use crate::error::RouterError;

/// What becomes of claims whose result was shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterShown {
    /// Acknowledged: the conversation has them.
    Ack,
    /// Left claimed until their lease runs out (`hermes drain --hold`: look, do not take).
    Hold,
}

impl Router {
    /// Runs `show` while the claims of `tokens` are renewed every heartbeat, so an output that
    /// blocks longer than the lease cannot let another consumer deliver them too. Then, if
    /// `show` succeeded, acknowledges all of them in one durable commit (or holds them, as
    /// `after` says); if it failed, gives all of them back unshown (no attempt counted).
    ///
    /// Returns what `show` returned. A claim lost while `show` ran (another consumer took its
    /// events) is not acknowledged: the ack refuses it, and the first such refusal is the error
    /// returned, after every other claim was settled.
    pub fn present<R, E>(
        &self,
        tokens: &[ClaimToken],
        after: AfterShown,
        show: impl FnOnce() -> Result<R, E>,
    ) -> Result<Result<R, E>, RouterError> {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let beats: Vec<_> = tokens
            .iter()
            .filter_map(|token| match self.keep_alive(*token, Arc::clone(&clock)) {
                Ok(beat) => Some(beat),
                // Shown all the same: the settlement says whether the claim still held.
                Err(e) => {
                    tracing::warn!(%token, error = %e, "cannot renew a claim while presenting it");
                    None
                }
            })
            .collect();
        let shown = show();
        for beat in beats {
            let token = beat.token();
            if let Err(e) = beat.stop() {
                tracing::warn!(%token, error = %e, "a claim was lost while it was presented");
            }
        }
        match (&shown, after) {
            (Err(_), _) => self.give_back(tokens),
            (Ok(_), AfterShown::Hold) => {}
            (Ok(_), AfterShown::Ack) => self.ack_all(tokens)?,
        }
        Ok(shown)
    }

    /// Gives claims back unshown (the attempt is not counted); a claim that cannot be given
    /// back waits out its lease.
    pub fn give_back(&self, tokens: &[ClaimToken]) {
        for token in tokens {
            if let Err(e) = self.defer(*token) {
                tracing::warn!(%token, error = %e, "cannot give a claim back");
            }
        }
    }

    /// Acknowledges every claim in one commit; the first refusal, once all were settled.
    fn ack_all(&self, tokens: &[ClaimToken]) -> Result<(), RouterError> {
        if tokens.is_empty() {
            return Ok(());
        }
        {
            let mut state = lock(&self.state);
            for token in tokens {
                state.outstanding.remove(token);
            }
        }
        let mut first = None;
        // Retried, should the server be unreachable, for as long as the claims can last: they
        // were taken and renewed with this consumer's lease.
        let lease = std::time::Duration::from_millis(self.config.lease_ms);
        for result in self
            .ledger
            .ack_many_within(tokens, SystemClock.now(), lease)?
        {
            if let Err(e) = result {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), |e| Err(e.into()))
    }
}
