//! The metrics, from one ledger read ([`hermes_ledger::Census`]) and this process's own
//! counts, as an [`Exposition`] — written in either text format by [`super::exposition`].
//!
//! Gauges describe the ledger now (`hermes_units`: the units it keeps, by status). The
//! counters and the delivery-lag and start-wait histograms count every unit the ledger has
//! counted, those retention removed since included, so they only grow: the ledger keeps their
//! totals over the units that no longer change, and a scrape reads only the others
//! ([`hermes_ledger::Ledger::census`]). The lease renewal failures and the commit-time
//! histogram are this process's own, since it started.
//!
//! Every series a ledger can have exists, reading 0 when nothing counts toward it: every unit
//! status, event state and host kind, and every machine's and pool's series for each machine
//! and pool the ledger knows now.

use std::collections::BTreeMap;

use hermes_ledger::{
    Buckets, Census, EventState, HostKind, HostRecord, Timestamp, Totals, UNIT_STATUSES,
    UnitStatus, exponential_buckets,
};

use super::exposition::{Exposition, Kind, labels};
use crate::services::overview::{self as model, Limits};

/// Every host kind, so each machine has every `hermes_live_hosts` series.
const HOST_KINDS: [HostKind; 4] = [
    HostKind::Interactive,
    HostKind::Headless,
    HostKind::Inline,
    HostKind::Worker,
];

const QUEUE_DEPTH: &str = "Queued units: a session's on its machine, a pool's in its pool";

/// Bucket bounds of the commit-time histogram, in seconds: 100 µs to about 1.6 s.
pub fn commit_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.0001, 2.0, 15)
}

/// What this process counted itself.
#[derive(Clone, Debug, Default)]
pub struct ProcessCounts {
    /// Failed lease renewals of this process's hosts.
    pub lease_renewal_failures: u64,
    /// This process's ledger commit times.
    pub commits: Option<Buckets>,
}

/// The exposition at `now` of `census`: its live state, its open events, and what every unit
/// it counted adds up to.
pub fn render(
    census: &Census,
    now: Timestamp,
    limits: &Limits,
    dead: &dyn Fn(&HostRecord) -> bool,
    process: &ProcessCounts,
) -> Exposition {
    let mut out = Exposition::default();
    let totals = &census.totals;
    let live = model::build(&census.live, now, limits, dead);
    units(&mut out, totals);
    machines(&mut out, &live);
    pools(&mut out, &live);
    events(&mut out, census, now);
    counters(&mut out, totals, process);
    histograms(&mut out, totals, process);
    out
}

fn count(n: usize) -> f64 {
    n as f64
}

fn units(out: &mut Exposition, totals: &Totals) {
    let units = out.gauge("hermes_units", "Units the ledger keeps, by status");
    for status in UNIT_STATUSES {
        units.set(
            labels(&[("status", status.as_str())]),
            totals.kept(status) as f64,
        );
    }
}

fn machines(out: &mut Exposition, live: &model::Model) {
    // Children running or stalling, by the machine of their unit (units of a machine with no
    // live host any more count too).
    let mut children: BTreeMap<&str, usize> =
        live.machines.iter().map(|m| (m.name.as_str(), 0)).collect();
    for row in live.rows.iter().filter(|r| !r.finished) {
        let n = row
            .children
            .iter()
            .filter(|c| c.status == "running" || c.status == "stalling");
        *children.entry(row.machine.as_str()).or_default() += n.count();
    }
    let running = out.gauge("hermes_running_children", "Children running, by machine");
    for (machine, n) in children {
        running.set(labels(&[("machine", machine)]), count(n));
    }
    let machine = |m: &model::MachineLine| labels(&[("machine", m.name.as_str())]);
    let queue = out.gauge("hermes_queue_depth", QUEUE_DEPTH);
    for m in &live.machines {
        queue.set(machine(m), count(m.queued));
    }
    let slots = out.gauge("hermes_machine_slots", "Session slots of a machine");
    for m in &live.machines {
        slots.set(machine(m), f64::from(m.capacity));
    }
    let hosts = out.gauge("hermes_live_hosts", "Live hosts, by machine and kind");
    for m in &live.machines {
        for kind in HOST_KINDS.map(HostKind::as_str) {
            let n = m.hosts.get(kind).copied().unwrap_or(0);
            let labels = labels(&[("machine", m.name.as_str()), ("kind", kind)]);
            hosts.set(labels, count(n));
        }
    }
}

fn pools(out: &mut Exposition, live: &model::Model) {
    let pool = |p: &model::PoolLine| labels(&[("pool", p.name.as_str())]);
    let queue = out.gauge("hermes_queue_depth", QUEUE_DEPTH);
    for p in &live.pools {
        queue.set(pool(p), count(p.queued));
    }
    let workers = out.gauge("hermes_live_workers", "Live workers of a pool");
    for p in &live.pools {
        workers.set(pool(p), count(p.workers));
    }
    let capacity = out.gauge(
        "hermes_pool_capacity",
        "Units a pool's live workers run at once",
    );
    for p in &live.pools {
        capacity.set(pool(p), f64::from(p.capacity));
    }
}

fn events(out: &mut Exposition, census: &Census, now: Timestamp) {
    let mut oldest: Option<Timestamp> = None;
    let open = out.gauge(
        "hermes_open_events",
        "Events not yet delivered or dropped, by state",
    );
    for state in [EventState::Pending, EventState::Claimed] {
        let of: Vec<_> = census.events.iter().filter(|e| e.state == state).collect();
        if state == EventState::Pending {
            oldest = of.iter().map(|e| e.published_at).min();
        }
        open.set(labels(&[("state", state.as_str())]), count(of.len()));
    }
    out.family(
        "hermes_oldest_pending_event_age_seconds",
        Kind::Gauge,
        "Age of the oldest pending event (0 with none)",
        Some("seconds"),
    )
    .set(
        Vec::new(),
        oldest.map_or(0.0, |t| now.ms_since(t) as f64 / 1000.0),
    );
}

fn counters(out: &mut Exposition, totals: &Totals, process: &ProcessCounts) {
    let mut counter = |name: &'static str, help: &'static str, value: u64| {
        out.counter(name, help).set(Vec::new(), value as f64);
    };
    counter("hermes_dispatches", "Units dispatched", totals.dispatches());
    counter(
        "hermes_stalls",
        "Children stopped as stalled",
        totals.stalls,
    );
    counter(
        "hermes_timeouts",
        "Children stopped at their timeout",
        totals.timeouts,
    );
    counter(
        "hermes_deliveries",
        "Events delivered (acked)",
        totals.deliveries,
    );
    counter(
        "hermes_claim_losses",
        "Claims that ended without an ack (released, expired or fenced by a newer claim)",
        totals.claim_losses,
    );
    counter(
        "hermes_recoveries",
        "Units finalized by recovery after their host died",
        totals.units(UnitStatus::Unknown),
    );
    counter(
        "hermes_lease_renewal_failures",
        "Failed lease renewals of this process's hosts",
        process.lease_renewal_failures,
    );
    let completions = out.counter("hermes_completions", "Units that ended, by status");
    for status in UNIT_STATUSES.into_iter().filter(|s| s.is_terminal()) {
        completions.set(
            labels(&[("status", status.as_str())]),
            totals.units(status) as f64,
        );
    }
}

fn histograms(out: &mut Exposition, totals: &Totals, process: &ProcessCounts) {
    let mut histogram = |name: &'static str, help: &'static str, buckets: Buckets| {
        out.family(name, Kind::Histogram, help, Some("seconds"))
            .observed(Vec::new(), buckets);
    };
    histogram(
        "hermes_delivery_lag_seconds",
        "From a child's result being published to its delivery being acked",
        totals.lag.clone(),
    );
    histogram(
        "hermes_start_wait_seconds",
        "From a unit's dispatch to its start",
        totals.start_wait.clone(),
    );
    histogram(
        "hermes_ledger_commit_seconds",
        "Durable ledger commits of this process",
        process
            .commits
            .clone()
            .unwrap_or_else(|| Buckets::new(commit_buckets())),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::metrics::exposition::Format;
    use hermes_ledger::{
        Capacity, Channel, DispatchSpec, HostId, Ledger, LedgerConfig, Locality, NewDelegation,
        ProcessId, SessionId, TaskSpec, WorkerPool,
    };

    const AT: Timestamp = Timestamp(1_000_000);

    /// A ledger with a live worker of pool `served` on machine `m1`, a session unit queued
    /// for no host and a unit waiting in pool `waiting`, which no worker serves.
    fn ledger(dir: &std::path::Path) -> Ledger {
        let ledger = Ledger::open(&dir.join("ledger.redb"), LedgerConfig::default()).expect("open");
        let worker = HostRecord {
            process: ProcessId {
                pid: 7,
                start_time: 1,
            },
            kind: HostKind::Worker,
            session: None,
            registered_at: AT,
            heartbeat_at: AT,
            host_id: HostId(7),
            locality: Locality {
                hostname: "m1".into(),
                ..Locality::default()
            },
            lease_expires_at: Timestamp(u64::MAX),
            worker: Some(WorkerPool {
                pool: "served".into(),
                capacity: 2,
            }),
        };
        ledger.register_host(&worker).expect("register");
        for pool in [None, Some("waiting".to_owned())] {
            let spec = DispatchSpec {
                pool,
                ..DispatchSpec::new("goal", vec![TaskSpec::new("t", vec!["true".into()])])
            };
            let new = NewDelegation {
                id: None,
                session: Some(SessionId::new("s").expect("id")),
                channel: Channel::Background,
                spec,
                host: None,
                transcript_root: None,
            };
            let roomy = Capacity {
                max_running: 10,
                max_queued: 10,
            };
            ledger.dispatch(new, roomy, AT).expect("dispatch");
        }
        ledger
    }

    fn text(ledger: &Ledger, format: Format) -> String {
        let census = ledger
            .census(AT, &mut hermes_ledger::Held::default())
            .expect("census");
        let limits = Limits::from_settings(&hermes_settings::Settings::default());
        let dead = |_: &HostRecord| false;
        render(&census, AT, &limits, &dead, &ProcessCounts::default()).encode(format)
    }

    #[test]
    fn the_same_ledger_renders_the_same_sorted_bytes_with_every_series_and_no_empty_label() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger = ledger(dir.path());
        for format in [Format::Prometheus, Format::OpenMetrics] {
            let first = text(&ledger, format);
            assert_eq!(first, text(&ledger, format), "{format:?}");
            assert!(!first.contains("=\"\""), "{first}");
            let types: Vec<&str> = first
                .lines()
                .filter_map(|l| l.strip_prefix("# TYPE "))
                .collect();
            let mut sorted = types.clone();
            sorted.sort_unstable();
            assert_eq!(types, sorted);
            // Within a family, series in order of their labels (a histogram's buckets by
            // bound, then its sum and count).
            let mut last: Option<&str> = None;
            for line in first.lines() {
                if line.starts_with('#') {
                    last = None;
                } else if !line.contains("_bucket") && !line.contains("le=") {
                    assert!(
                        last.is_none_or(|l| l < line),
                        "{l:?} before {line}",
                        l = last
                    );
                    last = Some(line).filter(|l| !l.contains("_sum") && !l.contains("_count"));
                }
            }
        }
        let text = text(&ledger, Format::Prometheus);
        for status in UNIT_STATUSES {
            assert!(
                text.contains(&format!("hermes_units{{status=\"{}\"}} ", status.as_str())),
                "{text}"
            );
        }
        for line in [
            "hermes_completions_total{status=\"stalled\"} 0",
            "hermes_open_events{state=\"claimed\"} 0",
            "hermes_live_hosts{kind=\"worker\",machine=\"m1\"} 1",
            "hermes_live_hosts{kind=\"headless\",machine=\"m1\"} 0",
            "hermes_running_children{machine=\"m1\"} 0",
            "hermes_queue_depth{pool=\"waiting\"} 1",
            "hermes_live_workers{pool=\"waiting\"} 0",
            "hermes_live_workers{pool=\"served\"} 1",
            "hermes_pool_capacity{pool=\"served\"} 2",
            "hermes_ledger_commit_seconds_count 0",
            "hermes_stalls_total 0",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
        }
    }
}
