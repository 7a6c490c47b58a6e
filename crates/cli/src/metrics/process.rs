//! What this process counts itself, for its `/metrics`: the time of each of its durable ledger
//! commits (the ledger times them; the histogram lives here) and its hosts' failed lease
//! renewals (counted by the registry).

use std::sync::{Arc, OnceLock};

use ledger::{Host, Ledger, Liveness as _};
use prometheus_client::metrics::histogram::Histogram;

use super::render::{self, ProcessCounts};
use crate::home::now;
use crate::top::model::Limits;

static COMMITS: OnceLock<Histogram> = OnceLock::new();

fn commits() -> &'static Histogram {
    COMMITS.get_or_init(|| Histogram::new(render::commit_buckets()))
}

fn observe(elapsed: std::time::Duration) {
    commits().observe(elapsed.as_secs_f64());
}

/// Starts timing this process's ledger commits (once; later calls change nothing).
pub fn install() {
    ledger::observe_commits(observe);
}

/// What this process counted so far.
pub fn counts() -> ProcessCounts {
    ProcessCounts {
        lease_renewal_failures: registry::counts::lease_renewal_failures(),
        commits: COMMITS.get().cloned(),
    }
}

/// The metrics of `ledger` now: one read, then rendering.
pub fn snapshot(ledger: &Ledger, limits: &Limits) -> anyhow::Result<String> {
    let census = ledger.census()?;
    let reaper = registry::OsReaper::new();
    let here = reaper.locality();
    let at = now();
    let dead = |h: &Host| h.is_dead(&here, at, &|p| reaper.is_alive(p));
    Ok(render::render(&census, at, limits, &dead, &counts()))
}

/// A source of metrics text for the endpoint.
pub fn source(ledger: Arc<Ledger>, limits: Limits) -> super::serve::Source {
    Arc::new(move || snapshot(&ledger, &limits))
}
