//! The metrics of SPEC §15, from one ledger read ([`ledger::Census`]) and this process's own
//! counts, encoded by prometheus-client in the text exposition format (OpenMetrics 1.0, which
//! Prometheus scrapes natively).
//!
//! Gauges describe the ledger now. The counters and the delivery-lag and start-wait histograms
//! are counted over the records the ledger keeps (`delivery.retention_days`): they only grow,
//! except when retention purges old units, which Prometheus reads as a counter reset. The lease
//! renewal failures and the commit-time histogram are this process's own, since it started.

use std::collections::BTreeMap;

use ledger::{Census, EventState, Host, Timestamp, UnitStatus};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use super::tally::Part;
use crate::top::model::{self, Limits};

type Labels = Vec<(&'static str, String)>;

/// Every unit status, so each series exists (at 0) from the first scrape.
const UNIT_STATUSES: [UnitStatus; 10] = [
    UnitStatus::Queued,
    UnitStatus::Running,
    UnitStatus::Completed,
    UnitStatus::Failed,
    UnitStatus::Partial,
    UnitStatus::Interrupted,
    UnitStatus::Stalled,
    UnitStatus::Timeout,
    UnitStatus::Cancelled,
    UnitStatus::Unknown,
];

/// Bucket bounds of the latency histograms, in seconds: 10 ms to about 3 hours.
fn wait_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(0.01, 4.0, 11)
}

/// Bucket bounds of the commit-time histogram, in seconds: 100 µs to about 1.6 s.
pub fn commit_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(0.0001, 2.0, 15)
}

/// What this process counted itself.
#[derive(Clone, Debug, Default)]
pub struct ProcessCounts {
    /// Failed lease renewals of this process's hosts.
    pub lease_renewal_failures: u64,
    /// This process's ledger commit times.
    pub commits: Option<Histogram>,
}

/// The text exposition at `now` of `census` (its live state and open events) and `parts`
/// (what every kept unit adds, [`super::tally`]).
pub fn render(
    census: &Census,
    parts: &[&Part],
    now: Timestamp,
    limits: &Limits,
    dead: &dyn Fn(&Host) -> bool,
    process: &ProcessCounts,
) -> String {
    let mut registry = Registry::with_prefix("hermes");
    gauges(&mut registry, census, parts, now, limits, dead);
    counters(&mut registry, parts, process);
    histograms(&mut registry, parts, process);
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut text, &registry);
    text
}

fn family(registry: &mut Registry, name: &str, help: &str) -> Family<Labels, Gauge> {
    let family = Family::<Labels, Gauge>::default();
    registry.register(name, help, family.clone());
    family
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn by_status(parts: &[&Part], status: UnitStatus) -> usize {
    parts.iter().filter(|p| p.status == status).count()
}

fn gauges(
    registry: &mut Registry,
    census: &Census,
    parts: &[&Part],
    now: Timestamp,
    limits: &Limits,
    dead: &dyn Fn(&Host) -> bool,
) {
    let units = family(registry, "units", "Units the ledger keeps, by status");
    for status in UNIT_STATUSES {
        let n = by_status(parts, status);
        units
            .get_or_create(&vec![("status", status.as_str().to_owned())])
            .set(count(n));
    }
    let live = model::build(&census.live, now, limits, dead);
    let queue = family(
        registry,
        "queue_depth",
        "Queued units: a session's on its machine, a pool's in its pool",
    );
    let slots = family(registry, "machine_slots", "Session slots of a machine");
    let hosts = family(registry, "live_hosts", "Live hosts, by machine and kind");
    for m in &live.machines {
        queue
            .get_or_create(&vec![("machine", m.name.clone()), ("pool", String::new())])
            .set(count(m.queued));
        slots
            .get_or_create(&vec![("machine", m.name.clone())])
            .set(i64::from(m.capacity));
        for (kind, n) in &m.hosts {
            hosts
                .get_or_create(&vec![
                    ("machine", m.name.clone()),
                    ("kind", (*kind).to_owned()),
                ])
                .set(count(*n));
        }
    }
    let workers = family(registry, "live_workers", "Live workers of a pool");
    let capacity = family(
        registry,
        "pool_capacity",
        "Units a pool's live workers run at once",
    );
    for p in &live.pools {
        queue
            .get_or_create(&vec![("machine", String::new()), ("pool", p.name.clone())])
            .set(count(p.queued));
        workers
            .get_or_create(&vec![("pool", p.name.clone())])
            .set(count(p.workers));
        capacity
            .get_or_create(&vec![("pool", p.name.clone())])
            .set(i64::from(p.capacity));
    }
    let children = family(registry, "running_children", "Children running, by machine");
    let mut by_machine: BTreeMap<String, usize> = BTreeMap::new();
    for row in live.rows.iter().filter(|r| !r.finished) {
        let n = row
            .children
            .iter()
            .filter(|c| c.status == "running" || c.status == "stalling");
        *by_machine.entry(row.machine.clone()).or_default() += n.count();
    }
    for (machine, n) in by_machine {
        children
            .get_or_create(&vec![("machine", machine)])
            .set(count(n));
    }
    let open = family(
        registry,
        "open_events",
        "Events not yet delivered or dropped, by state",
    );
    let mut oldest: Option<Timestamp> = None;
    for state in [EventState::Pending, EventState::Claimed] {
        let of: Vec<_> = census.events.iter().filter(|e| e.state == state).collect();
        if state == EventState::Pending {
            oldest = of.iter().map(|e| e.published_at).min();
        }
        open.get_or_create(&vec![("state", state.as_str().to_owned())])
            .set(count(of.len()));
    }
    let age = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
    age.set(oldest.map_or(0.0, |t| now.ms_since(t) as f64 / 1000.0));
    registry.register_with_unit(
        "oldest_pending_event_age",
        "Age of the oldest pending event (0 with none)",
        Unit::Seconds,
        age,
    );
}

fn counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let counter = Counter::<u64>::default();
    counter.inc_by(value);
    registry.register(name, help, counter);
}

fn counters(registry: &mut Registry, parts: &[&Part], process: &ProcessCounts) {
    let sum = |f: fn(&Part) -> u64| parts.iter().map(|p| f(p)).sum::<u64>();
    counter(
        registry,
        "dispatches",
        "Units dispatched",
        parts.len() as u64,
    );
    let completions = Family::<Labels, Counter>::default();
    registry.register(
        "completions",
        "Units that ended, by status",
        completions.clone(),
    );
    for status in UNIT_STATUSES.into_iter().filter(|s| s.is_terminal()) {
        completions
            .get_or_create(&vec![("status", status.as_str().to_owned())])
            .inc_by(by_status(parts, status) as u64);
    }
    counter(
        registry,
        "stalls",
        "Children stopped as stalled",
        sum(|p| p.stalls),
    );
    counter(
        registry,
        "timeouts",
        "Children stopped at their timeout",
        sum(|p| p.timeouts),
    );
    counter(
        registry,
        "deliveries",
        "Events delivered (acked)",
        sum(|p| p.deliveries),
    );
    counter(
        registry,
        "claim_losses",
        "Claims that ended without an ack (released, expired or fenced by a newer claim)",
        sum(|p| p.claim_losses),
    );
    counter(
        registry,
        "recoveries",
        "Units finalized by recovery after their host died",
        by_status(parts, UnitStatus::Unknown) as u64,
    );
    counter(
        registry,
        "lease_renewal_failures",
        "Failed lease renewals of this process's hosts",
        process.lease_renewal_failures,
    );
}

fn histograms(registry: &mut Registry, parts: &[&Part], process: &ProcessCounts) {
    let lag = Histogram::new(wait_buckets());
    for seconds in parts.iter().flat_map(|p| &p.lags) {
        lag.observe(*seconds);
    }
    registry.register_with_unit(
        "delivery_lag",
        "From a child's result being published to its delivery being acked",
        Unit::Seconds,
        lag,
    );
    let wait = Histogram::new(wait_buckets());
    for seconds in parts.iter().filter_map(|p| p.start_wait) {
        wait.observe(seconds);
    }
    registry.register_with_unit(
        "start_wait",
        "From a unit's dispatch to its start",
        Unit::Seconds,
        wait,
    );
    let commits = process
        .commits
        .clone()
        .unwrap_or_else(|| Histogram::new(commit_buckets()));
    registry.register_with_unit(
        "ledger_commit",
        "Durable ledger commits of this process",
        Unit::Seconds,
        commits,
    );
}
