//! What this process counts itself, for its `/metrics`: the time of each of its durable ledger
//! commits (the ledger times them; the histogram lives here) and its hosts' failed lease
//! renewals (counted by the registry).

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use ledger::{Host, Ledger, Liveness as _};
use prometheus_client::metrics::histogram::Histogram;

use super::render::{self, ProcessCounts};
use super::tally::Tally;
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

/// The metrics of `ledger` now: one read, then rendering. `tally` holds what earlier calls
/// counted of units that can no longer change (a fresh one reads every unit).
pub fn snapshot(ledger: &Ledger, limits: &Limits, tally: &mut Tally) -> anyhow::Result<String> {
    let census = ledger.census_except(&|id| tally.holds(id))?;
    let totals = tally.absorb(&census);
    let reaper = registry::OsReaper::new();
    let here = reaper.locality();
    let at = now();
    let dead = |h: &Host| h.is_dead(&here, at, &|p| reaper.is_alive(p));
    Ok(render::render(
        &census,
        &totals,
        at,
        limits,
        &dead,
        &counts(),
    ))
}

/// A source of metrics text for the endpoint; it keeps its tally between scrapes.
pub fn source(ledger: Arc<Ledger>, limits: Limits) -> super::serve::Source {
    let tally = Mutex::new(Tally::default());
    Arc::new(move || {
        let mut tally = tally.lock().unwrap_or_else(PoisonError::into_inner);
        snapshot(&ledger, &limits, &mut tally)
    })
}
