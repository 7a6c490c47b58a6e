//! What this process's hosts went through that the ledger does not keep, for the process's
//! metrics (`--metrics-listen`): counted here, read by the CLI.

use std::sync::atomic::{AtomicU64, Ordering};

static LEASE_RENEWAL_FAILURES: AtomicU64 = AtomicU64::new(0);

/// Lease renewals of this process's hosts that failed (the ledger refused or could not be
/// reached), since the process started.
pub fn lease_renewal_failures() -> u64 {
    LEASE_RENEWAL_FAILURES.load(Ordering::Relaxed)
}

/// Counts a failed lease renewal.
pub(crate) fn lease_renewal_failed() {
    LEASE_RENEWAL_FAILURES.fetch_add(1, Ordering::Relaxed);
}
