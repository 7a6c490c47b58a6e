//! What this process counts itself, for its `/metrics`: the time of each of its durable ledger
//! commits (the ledger times them; the histogram lives here) and its hosts' failed lease
//! renewals (counted by the registry).

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use hermes_ledger::{Buckets, Census, Held, HostRecord, Ledger, Liveness as _};

use super::exposition::{Exposition, Format, Seen};
use super::render::{self, ProcessCounts};
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

/// What a metrics source keeps between its answers: the parts of the units after the ledger's
/// base that no longer change ([`Held`]), the last read with the ledger's change stamp at that
/// read, and every series served.
#[derive(Debug, Default)]
pub struct Scrapes {
    held: Held,
    last: Option<(u64, Census)>,
    seen: Seen,
}

/// The metrics of `ledger` now: one census (the ledger's stored totals of the units that no
/// longer change, and a read of the others), then rendering. While the ledger's change stamp
/// says nothing was committed since the last call, that call's census still holds and only the
/// rendering (ages, liveness, this process's counters) is done again. A series an earlier call
/// served and this one lacks (a pool or machine gone) reads 0.
pub fn snapshot(
    ledger: &Ledger,
    limits: &Limits,
    scrapes: &mut Scrapes,
) -> anyhow::Result<Exposition> {
    let mut exposition = match &scrapes.last {
        Some((seen, census)) if ledger.change_stamp() == Some(*seen) => render_now(census, limits),
        _ => {
            // Taken before the read, so that a commit during it is read by the next call (as
            // is the census's own, when it stores the base: one read more).
            let stamp = ledger.change_stamp();
            let census = ledger.census(now(), &mut scrapes.held)?;
            let exposition = render_now(&census, limits);
            scrapes.last = stamp.map(|stamp| (stamp, census));
            exposition
        }
    };
    exposition.keep(&mut scrapes.seen);
    Ok(exposition)
}

fn render_now(census: &Census, limits: &Limits) -> Exposition {
    let reaper = hermes_registry::OsReaper::new();
    let here = reaper.locality();
    let at = now();
    let dead = |h: &HostRecord| h.is_dead(&here, at, &|p| reaper.is_alive(p));
    render::render(census, at, limits, &dead, &counts())
}

/// A source of metrics text for the endpoint; it keeps its tally and series between scrapes.
pub fn source(ledger: Arc<Ledger>, limits: Limits) -> super::serve::MetricsSource {
    let scrapes = Mutex::new(Scrapes::default());
    Arc::new(move |format: Format| {
        let mut scrapes = scrapes.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(snapshot(&ledger, &limits, &mut scrapes)?.encode(format))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::metrics::exposition::Format;
    use hermes_ledger::{
        Capacity, Channel, DelegationId, DispatchSpec, LedgerConfig, NewDelegation, TaskSpec,
    };

    fn inline(ledger: &Ledger, goal: &str) -> DelegationId {
        let task = TaskSpec::new(goal, vec!["true".into()]);
        let new = NewDelegation {
            id: None,
            session: None,
            channel: Channel::Inline,
            spec: DispatchSpec::new(goal, vec![task]),
            host: None,
            transcript_root: None,
        };
        let roomy = Capacity {
            max_running: 10,
            max_queued: 10,
        };
        ledger
            // Now, as a dispatch is: the ledger's metrics base passes a unit only minutes
            // after its dispatch time.
            .dispatch(new, roomy, now())
            .expect("dispatch")
            .delegation
            .id
    }

    /// A long-lived endpoint skips the read while nothing was committed, and never serves a
    /// read older than the ledger's last commit.
    #[test]
    fn an_endpoint_reads_again_after_every_commit_and_only_then() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ledger.redb");
        let ledger = Ledger::open(&path, LedgerConfig::default()).expect("open");
        // Another process's handle on the same file.
        let other = Ledger::open(&path, LedgerConfig::default()).expect("open");
        let limits = Limits::from_settings(&hermes_settings::Settings::default());
        let mut scrapes = crate::services::metrics::process::Scrapes::default();
        let mut scrape = || {
            crate::services::metrics::process::snapshot(&ledger, &limits, &mut scrapes)
                .map(|e| e.encode(Format::Prometheus))
        };
        let dispatched = |text: &str| {
            text.lines()
                .find(|l| l.starts_with("hermes_dispatches_total"))
                .map(str::to_owned)
        };
        let first = scrape().expect("scrape");
        assert_eq!(dispatched(&first), dispatched(&scrape().expect("scrape")));
        for n in 1..=3 {
            inline(&other, &format!("unit {n}"));
            let text = scrape().expect("scrape");
            assert_eq!(
                dispatched(&text).as_deref(),
                Some(format!("hermes_dispatches_total {n}").as_str()),
                "{text}"
            );
        }
    }
}
