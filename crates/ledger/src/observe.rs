//! A process's hook on the ledger's own timings, for its metrics: the ledger measures how long
//! each durable commit takes and hands the duration to the observer the process installed (the
//! CLI's Prometheus histogram). The ledger records nothing of it and knows no metrics format.

use std::sync::OnceLock;
use std::time::Duration;

/// What is told of each commit.
pub type CommitObserver = fn(Duration);

static COMMIT_OBSERVER: OnceLock<CommitObserver> = OnceLock::new();

/// Installs the observer of commit times, once per process (a second call changes nothing and
/// returns false).
pub fn observe_commits(observer: CommitObserver) -> bool {
    COMMIT_OBSERVER.set(observer).is_ok()
}

/// Tells the observer, if any, how long a durable commit took.
pub(crate) fn commit_took(elapsed: Duration) {
    if let Some(observer) = COMMIT_OBSERVER.get() {
        observer(elapsed);
    }
}
