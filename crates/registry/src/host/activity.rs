//! Waking the host when another process records work for it: `LISTEN` on PostgreSQL (whose
//! notices also stand in for the change stamp PostgreSQL lacks), a cheap poll of the activity
//! counter on redb.

use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::Ordering;

use super::inner::Inner;

/// How often a host polls the ledger's activity counter for work recorded by other processes,
/// on a ledger that does not push notifications (redb).
const ACTIVITY_POLL: Duration = Duration::from_millis(100);

/// How long one wait for a notification lasts before the listener looks at `stop` again.
const LISTEN_SLICE: Duration = Duration::from_millis(500);

/// Wakes the housekeeping loop as soon as another process records something for a host to act
/// on (a dispatch, an interrupt, a session end), instead of at the next sweep: on PostgreSQL by
/// `LISTEN` (the server pushes each change), on redb by one cheap read of the activity counter
/// per poll.
pub(super) async fn watch_activity(inner: Arc<Inner>) {
    match inner
        .call(|l| {
            l.listen(&[
                hermes_ledger::Listen::Activity,
                hermes_ledger::Listen::Events,
            ])
        })
        .await
    {
        Ok(Some(listener)) => return listen_activity(inner, listener).await,
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for the ledger's notifications; polling")
        }
    }
    let mut stop = inner.stop.subscribe();
    let mut seen = None;
    // The ledger's change stamp when `seen` was read (on redb one read of the file's header,
    // in this thread): while it stays the same nothing was committed, the counter cannot have
    // moved, and the read is skipped.
    let mut seen_at = None;
    loop {
        let stamp = inner.ledger.change_stamp();
        if stamp.is_none() || stamp != seen_at {
            match inner.call(|l| l.activity()).await {
                Ok(now) => {
                    if seen.is_some_and(|seen| seen != now) {
                        inner.wake.notify_one();
                    }
                    seen = Some(now);
                    seen_at = stamp;
                }
                Err(e) => tracing::debug!(error = %e, "cannot read the ledger's activity"),
            }
        }
        tokio::select! {
            () = tokio::time::sleep(ACTIVITY_POLL) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// `watch_activity` on a ledger that pushes notifications. Every notice heard moves the
/// host's state stamp ([`Inner::state_stamp`]), so that a clean pass stays current only until
/// something is heard; an activity notice also wakes the loop at once, while an event made
/// deliverable (a unit finished, maybe freeing capacity for a queued one) waits for the next
/// sweep interval. A dropped connection is re-established by the listener with a growing
/// pause; it reports that it reconnected, which counts as heard and wakes the loop, since
/// notices may have been missed meanwhile. Once the listener fails, the loop polls again.
pub(super) async fn listen_activity(inner: Arc<Inner>, listener: hermes_ledger::Listener) {
    // What was recorded before the `LISTEN` took effect sent no notice this listener heard:
    // look once now.
    inner.heard.fetch_add(1, Ordering::SeqCst);
    inner.listening.store(true, Ordering::SeqCst);
    inner.wake.notify_one();
    let listener = Arc::new(std::sync::Mutex::new(listener));
    loop {
        if *inner.stop.borrow() || inner.fenced.load(Ordering::SeqCst) {
            inner.listening.store(false, Ordering::SeqCst);
            return;
        }
        let waiting = Arc::clone(&listener);
        let waited = tokio::task::spawn_blocking(move || {
            waiting
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .wait(LISTEN_SLICE)
        })
        .await;
        match waited {
            Ok(Ok(notices)) => {
                if !notices.is_empty() {
                    inner.heard.fetch_add(1, Ordering::SeqCst);
                }
                if notices
                    .iter()
                    .any(|n| !matches!(n, hermes_ledger::Notice::Event(_)))
                {
                    inner.wake.notify_one();
                }
            }
            // The listener reconnects on a later wait, pausing between failed attempts; what
            // was sent meanwhile is lost, so the stamp moves.
            Ok(Err(e)) => {
                inner.heard.fetch_add(1, Ordering::SeqCst);
                tracing::debug!(error = %e, "lost the ledger's notifications; reconnecting")
            }
            Err(e) => {
                inner.listening.store(false, Ordering::SeqCst);
                tracing::warn!(error = %e, "the notification listener failed");
                return;
            }
        }
    }
}
