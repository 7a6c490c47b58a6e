//! What this process counts itself, for its `/metrics`: the time of each of its durable ledger
//! commits (the ledger times them; the histogram lives here) and its hosts' failed lease
//! renewals (counted by the registry).

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use hermes_ledger::{Census, HostRecord, Ledger, Liveness as _};

use super::exposition::{Exposition, Format, Seen};
use super::render::{self, ProcessCounts};
use super::tally::{Buckets, Tally, Totals};
use crate::services::home::now;
use crate::services::overview::Limits;

static COMMITS: OnceLock<Mutex<Buckets>> = OnceLock::new();

fn observe(elapsed: std::time::Duration) {
    let commits = COMMITS.get_or_init(|| Mutex::new(Buckets::new(render::commit_buckets())));
    commits
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .observe(elapsed.as_secs_f64());
}

/// Starts timing this process's ledger commits (once; later calls change nothing).
pub fn install() {
    hermes_ledger::observe_commits(observe);
}

/// What this process counted so far.
pub fn counts() -> ProcessCounts {
    ProcessCounts {
        lease_renewal_failures: hermes_registry::counts::lease_renewal_failures(),
        commits: COMMITS
            .get()
            .map(|c| c.lock().unwrap_or_else(PoisonError::into_inner).clone()),
    }
}

/// What a metrics source keeps between its answers: the parts of the units that can no longer
/// change, the last read with the ledger's change stamp at that read, and every series served.
#[derive(Debug, Default)]
pub struct Scrapes {
    tally: Tally,
    last: Option<(u64, Census, Totals)>,
    seen: Seen,
}

/// The metrics of `ledger` now: one read, then rendering. `scrapes` holds what earlier calls
/// counted of units that can no longer change (a fresh one reads every unit), and their last
/// read: while the ledger's change stamp says nothing was committed since, that read still
/// holds and only the rendering (ages, liveness, this process's counters) is done again. A
/// series an earlier call served and this one lacks (a pool or machine gone) reads 0.
pub fn snapshot(
    ledger: &Ledger,
    limits: &Limits,
    scrapes: &mut Scrapes,
) -> anyhow::Result<Exposition> {
    let stamp = ledger.change_stamp();
    let mut exposition = match (&scrapes.last, stamp) {
        (Some((seen, census, totals)), Some(stamp)) if *seen == stamp => {
            render_now(census, totals, limits)
        }
        _ => {
            let census = ledger.census_except(&|id| scrapes.tally.holds(id))?;
            let totals = scrapes.tally.absorb(&census);
            let exposition = render_now(&census, &totals, limits);
            scrapes.last = stamp.map(|stamp| (stamp, census, totals));
            exposition
        }
    };
    exposition.keep(&mut scrapes.seen);
    Ok(exposition)
}

fn render_now(census: &Census, totals: &Totals, limits: &Limits) -> Exposition {
    let reaper = hermes_registry::OsReaper::new();
    let here = reaper.locality();
    let at = now();
    let dead = |h: &HostRecord| h.is_dead(&here, at, &|p| reaper.is_alive(p));
    render::render(census, totals, at, limits, &dead, &counts())
}

/// A source of metrics text for the endpoint; it keeps its tally and series between scrapes.
pub fn source(ledger: Arc<Ledger>, limits: Limits) -> super::serve::MetricsSource {
    let scrapes = Mutex::new(Scrapes::default());
    Arc::new(move |format: Format| {
        let mut scrapes = scrapes.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(snapshot(&ledger, &limits, &mut scrapes)?.encode(format))
    })
}
