//! Following the ledger's notifications (PostgreSQL): a thread that nudges a consumer's waits
//! when an event of its session is published, so they need not poll.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hermes_ledger::SessionId;
use hermes_stdx::Signal;

use super::Router;

/// How long a waiting consumer that is woken by the ledger's notifications still polls, in
/// case one was lost while its connection was down.
pub(super) const FOLLOWING_POLL_MS: u64 = 2_000;

/// How long one wait of the following thread lasts before it checks whether to stop.
const FOLLOW_SLICE: std::time::Duration = std::time::Duration::from_millis(500);

/// Nudges `signal` whenever an event of `session` becomes deliverable (or the listener had to
/// reconnect and may have missed one), until `following` is cleared.
fn follow(
    mut listener: hermes_ledger::Listener,
    session: SessionId,
    signal: Arc<Signal>,
    following: Arc<AtomicBool>,
) {
    while following.load(Ordering::SeqCst) {
        // A lost connection: the listener reconnects on a later wait, pausing between failed
        // attempts; polling (every FOLLOWING_POLL_MS) covers the gap.
        if let Ok(notices) = listener.wait(FOLLOW_SLICE) {
            let ours = notices.iter().any(|notice| match notice {
                hermes_ledger::Notice::Event(of) => of == session.as_str(),
                hermes_ledger::Notice::Reconnected => true,
                hermes_ledger::Notice::Activity => false,
            });
            if ours {
                signal.nudge();
            }
        }
    }
}

impl Router {
    /// On a ledger that pushes notifications (PostgreSQL), starts the thread that follows them
    /// for this consumer's session, once, before its first wait: a consumer that never waits
    /// (a `drain` without `--wait`) opens no listening connection.
    pub(super) fn follow_notifications(&self) {
        if self.follow_tried.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Ok(Some(listener)) = self.ledger.listen(&[hermes_ledger::Listen::Events]) {
            self.following.store(true, Ordering::SeqCst);
            let (session, signal, following) = (
                self.config.session.clone(),
                Arc::clone(&self.signal),
                Arc::clone(&self.following),
            );
            std::thread::spawn(move || follow(listener, session, signal, following));
        }
    }
}
