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

use super::tally::{Totals, UNIT_STATUSES};
use crate::top::model::{self, Limits};

type Labels = Vec<(&'static str, String)>;

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

/// The text exposition at `now` of `census` (its live state and open events) and `totals`
/// (what every kept unit adds up to, [`super::tally`]).
pub fn render(
    census: &Census,
    totals: &Totals,
    now: Timestamp,
    limits: &Limits,
    dead: &dyn Fn(&Host) -> bool,
    process: &ProcessCounts,
) -> String {
    let mut registry = Registry::with_prefix("hermes");
    gauges(&mut registry, census, totals, now, limits, dead);
    counters(&mut registry, totals, process);
    histograms(&mut registry, totals, process);
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

fn gauges(
    registry: &mut Registry,
    census: &Census,
    totals: &Totals,
    now: Timestamp,
    limits: &Limits,
    dead: &dyn Fn(&Host) -> bool,
) {
    let units = family(registry, "units", "Units the ledger keeps, by status");
    for status in UNIT_STATUSES {
        units
            .get_or_create(&vec![("status", status.as_str().to_owned())])
            .set(i64::try_from(totals.units(status)).unwrap_or(i64::MAX));
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

fn counters(registry: &mut Registry, totals: &Totals, process: &ProcessCounts) {
    counter(
        registry,
        "dispatches",
        "Units dispatched",
        totals.dispatches(),
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
            .inc_by(totals.units(status));
    }
    counter(
        registry,
        "stalls",
        "Children stopped as stalled",
        totals.stalls,
    );
    counter(
        registry,
        "timeouts",
        "Children stopped at their timeout",
        totals.timeouts,
    );
    counter(
        registry,
        "deliveries",
        "Events delivered (acked)",
        totals.deliveries,
    );
    counter(
        registry,
        "claim_losses",
        "Claims that ended without an ack (released, expired or fenced by a newer claim)",
        totals.claim_losses,
    );
    counter(
        registry,
        "recoveries",
        "Units finalized by recovery after their host died",
        totals.units(UnitStatus::Unknown),
    );
    counter(
        registry,
        "lease_renewal_failures",
        "Failed lease renewals of this process's hosts",
        process.lease_renewal_failures,
    );
}

fn histograms(registry: &mut Registry, totals: &Totals, process: &ProcessCounts) {
    registry.register_with_unit(
        "delivery_lag",
        "From a child's result being published to its delivery being acked",
        Unit::Seconds,
        totals.lag.clone(),
    );
    registry.register_with_unit(
        "start_wait",
        "From a unit's dispatch to its start",
        Unit::Seconds,
        totals.start_wait.clone(),
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
