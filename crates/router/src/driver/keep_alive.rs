//! Keeping a presented claim alive: a thread that renews it every heartbeat until stopped.

use std::sync::Arc;
use std::thread::{self, JoinHandle};

use hermes_ledger::ClaimToken;
use hermes_stdx::{Clock, Signal};

use super::Router;
use crate::error::RouterError;
use crate::heartbeat::Heartbeat;

impl Router {
    /// Renews the claim every heartbeat from a background thread until the returned guard is
    /// stopped or dropped. Use a clock that really sleeps ([`hermes_stdx::SystemClock`]).
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
}

/// Renews one claim every heartbeat from a thread until stopped or dropped.
#[derive(Debug)]
pub struct KeepAlive {
    token: ClaimToken,
    stop: Arc<Signal>,
    thread: Option<JoinHandle<Result<u32, hermes_ledger::LedgerError>>>,
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
