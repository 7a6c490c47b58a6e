//! What each kept unit adds to the counters and histograms, and what a long-lived `/metrics`
//! endpoint keeps of it between scrapes.
//!
//! A unit that has ended and whose every event is delivered or dropped can no longer change
//! (until retention purges it), so its [`Part`] is computed once and held; each scrape reads
//! only the other units ([`hermes_ledger::Ledger::census_except`]) and the ids of all, to forget the
//! purged ones. A scrape of a ledger with 10,000 settled units then decodes none of them, and
//! the held parts are summed as they arrive ([`Totals`]), not on each scrape.

use std::collections::{HashMap, HashSet};

use hermes_ledger::{Census, ChildStatus, DelegationId, Event, EventState, UnitRecord, UnitStatus};

/// Every unit status, so each series exists (at 0) from the first scrape.
pub const UNIT_STATUSES: [UnitStatus; 10] = [
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
pub fn wait_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.01, 4.0, 11)
}

/// `n` bounds from `start`, each `factor` times the one before.
pub fn exponential_buckets(start: f64, factor: f64, n: i32) -> impl Iterator<Item = f64> {
    (0..n).map(move |i| start * factor.powi(i))
}

/// A classic histogram as plain counts, which can be added to and copied.
#[derive(Clone, Debug, PartialEq)]
pub struct Buckets {
    sum: f64,
    count: u64,
    /// (upper bound, observations in this bucket alone), the last bound infinite.
    buckets: Vec<(f64, u64)>,
}

impl Buckets {
    /// An empty histogram with these upper bounds (`+Inf` is added).
    pub fn new(bounds: impl Iterator<Item = f64>) -> Buckets {
        Buckets {
            sum: 0.0,
            count: 0,
            buckets: bounds
                .chain(std::iter::once(f64::INFINITY))
                .map(|b| (b, 0))
                .collect(),
        }
    }

    /// Counts `v`.
    pub fn observe(&mut self, v: f64) {
        self.sum += v;
        self.count += 1;
        if let Some(bucket) = self.buckets.iter_mut().find(|(bound, _)| v <= *bound) {
            bucket.1 += 1;
        } else if let Some(last) = self.buckets.last_mut() {
            last.1 += 1;
        }
    }

    /// Each upper bound with the observations at or below it, the last bound infinite.
    pub fn cumulative(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        self.buckets.iter().scan(0, |below, (bound, n)| {
            *below += n;
            Some((*bound, *below))
        })
    }

    /// The sum of the observations.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// The number of observations.
    pub fn count(&self) -> u64 {
        self.count
    }
}

/// What a set of units adds up to.
#[derive(Clone, Debug, PartialEq)]
pub struct Totals {
    /// Units, by status (in [`UNIT_STATUSES`] order).
    by_status: [u64; UNIT_STATUSES.len()],
    /// Children stopped as stalled.
    pub stalls: u64,
    /// Children stopped at their timeout.
    pub timeouts: u64,
    /// Events delivered.
    pub deliveries: u64,
    /// Claims that ended without an ack.
    pub claim_losses: u64,
    /// Publication to ack, of each delivered event.
    pub lag: Buckets,
    /// Dispatch to start, of each started unit.
    pub start_wait: Buckets,
}

impl Default for Totals {
    fn default() -> Totals {
        Totals {
            by_status: [0; UNIT_STATUSES.len()],
            stalls: 0,
            timeouts: 0,
            deliveries: 0,
            claim_losses: 0,
            lag: Buckets::new(wait_buckets()),
            start_wait: Buckets::new(wait_buckets()),
        }
    }
}

impl Totals {
    /// Adds what one unit adds.
    pub fn add(&mut self, part: &Part) {
        if let Some(i) = UNIT_STATUSES.iter().position(|s| *s == part.status) {
            self.by_status[i] += 1;
        }
        self.stalls += part.stalls;
        self.timeouts += part.timeouts;
        self.deliveries += part.deliveries;
        self.claim_losses += part.claim_losses;
        for lag in &part.lags {
            self.lag.observe(*lag);
        }
        if let Some(wait) = part.start_wait {
            self.start_wait.observe(wait);
        }
    }

    /// Units of `status`.
    pub fn units(&self, status: UnitStatus) -> u64 {
        UNIT_STATUSES
            .iter()
            .position(|s| *s == status)
            .map_or(0, |i| self.by_status[i])
    }

    /// Every unit.
    pub fn dispatches(&self) -> u64 {
        self.by_status.iter().sum()
    }
}

/// What one unit adds to the counters and histograms.
#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    /// Its status.
    pub status: UnitStatus,
    /// Seconds from its dispatch to its start, once started.
    pub start_wait: Option<f64>,
    /// Its children stopped as stalled.
    pub stalls: u64,
    /// Its children stopped at their timeout.
    pub timeouts: u64,
    /// Its events delivered (acked).
    pub deliveries: u64,
    /// Its claims that ended without an ack.
    pub claim_losses: u64,
    /// Seconds from publication to ack, of each delivered event.
    pub lags: Vec<f64>,
}

impl Part {
    /// What `unit`, with its `events`, adds.
    pub fn of(unit: &UnitRecord, events: &[&Event]) -> Part {
        let outcomes = || events.iter().flat_map(|e| e.payload.outcomes());
        let ended = |status: ChildStatus| outcomes().filter(|o| o.status == status).count() as u64;
        let delivered = || events.iter().filter(|e| e.state == EventState::Delivered);
        Part {
            status: unit.status,
            start_wait: unit
                .started_at
                .map(|at| at.ms_since(unit.dispatched_at) as f64 / 1000.0),
            stalls: ended(ChildStatus::Stalled),
            timeouts: ended(ChildStatus::Timeout),
            deliveries: delivered().count() as u64,
            // Every claim but the one that was acked, or still holds, ended without an ack.
            claim_losses: events
                .iter()
                .map(|e| {
                    let live = u32::from(matches!(
                        e.state,
                        EventState::Delivered | EventState::Claimed
                    ));
                    u64::from(e.attempts.saturating_sub(live))
                })
                .sum(),
            lags: delivered()
                .filter_map(|e| e.delivered_at.map(|at| at.ms_since(e.published_at)))
                .map(|ms| ms as f64 / 1000.0)
                .collect(),
        }
    }
}

/// Whether a unit with these events can no longer change.
fn settled(unit: &UnitRecord, events: &[&Event]) -> bool {
    unit.status.is_terminal() && events.iter().all(|e| e.state.is_terminal())
}

/// The parts of the settled units seen so far, and their totals.
#[derive(Debug, Default)]
pub struct Tally {
    held: HashMap<DelegationId, Part>,
    totals: Totals,
}

impl Tally {
    /// Whether the part of `id` is held (the census need not read it).
    pub fn holds(&self, id: &DelegationId) -> bool {
        self.held.contains_key(id)
    }

    /// Takes in a census read with [`Tally::holds`]: forgets the purged units, holds the
    /// newly settled ones, and returns the totals of every unit the census counts.
    pub fn absorb(&mut self, census: &Census) -> Totals {
        // Every id the census lists is either held or read: more held than that means some
        // held units were purged. Purges are rare (retention): the totals are summed again.
        if self.held.len() > census.ids.len().saturating_sub(census.units.len()) {
            let kept: HashSet<&DelegationId> = census.ids.iter().collect();
            self.held.retain(|id, _| kept.contains(id));
            self.totals = Totals::default();
            for part in self.held.values() {
                self.totals.add(part);
            }
        }
        let mut events: HashMap<&DelegationId, Vec<&Event>> = HashMap::new();
        for e in &census.events {
            events.entry(&e.delegation_id).or_default().push(e);
        }
        let mut open = Vec::new();
        for unit in &census.units {
            let of = events.get(&unit.id).map_or(&[][..], Vec::as_slice);
            let part = Part::of(unit, of);
            if settled(unit, of) {
                self.totals.add(&part);
                self.held.insert(unit.id.clone(), part);
            } else {
                open.push(part);
            }
        }
        let mut totals = self.totals.clone();
        for part in &open {
            totals.add(part);
        }
        totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::metrics::exposition::Format;
    use crate::services::metrics::render::{self, ProcessCounts};
    use crate::services::overview::Limits;
    use hermes_ledger::{
        Capacity, Channel, ChildOutcome, DispatchSpec, HostId, Ledger, LedgerConfig, NewDelegation,
        ProcessId, TaskSpec, Timestamp,
    };

    const AT: Timestamp = Timestamp(1_000_000);

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
            .dispatch(new, roomy, AT)
            .expect("dispatch")
            .delegation
            .id
    }

    fn finish(ledger: &Ledger, id: &DelegationId) {
        let outcome = ChildOutcome {
            exit_code: Some(0),
            started_at: Some(AT),
            ..ChildOutcome::new(0, "goal", ChildStatus::Completed, Timestamp(AT.0 + 500))
        };
        ledger
            .finish_child(HostId(0), id, outcome, Timestamp(AT.0 + 500))
            .expect("finish");
    }

    /// How many units a scrape with `tally` read, and the lines it rendered.
    fn scrape(ledger: &Ledger, tally: &mut Tally) -> (usize, Vec<String>) {
        let census = ledger.census_except(&|id| tally.holds(id)).expect("census");
        let totals = tally.absorb(&census);
        let limits = Limits::from_settings(&hermes_settings::Settings::default());
        let text = render::render(
            &census,
            &totals,
            Timestamp(AT.0 + 5_000),
            &limits,
            &|_| false,
            &ProcessCounts::default(),
        )
        .encode(Format::Prometheus);
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        (census.units.len(), lines)
    }

    fn has(lines: &[String], line: &str) -> bool {
        lines.iter().any(|l| l == line)
    }

    #[test]
    fn a_warm_tally_reads_only_what_can_change_and_renders_what_a_cold_read_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger =
            Ledger::open(&dir.path().join("ledger.redb"), LedgerConfig::default()).expect("open");
        let delivered = inline(&ledger, "delivered");
        finish(&ledger, &delivered);
        ledger
            .settle_inline(&delivered, Timestamp(AT.0 + 900))
            .expect("settle");
        let pending = inline(&ledger, "pending");
        finish(&ledger, &pending);
        let running = inline(&ledger, "running");
        let child = ProcessId {
            pid: 4242,
            start_time: 1,
        };
        ledger
            .child_started(HostId(0), &running, 0, child, AT)
            .expect("start");

        let mut warm = Tally::default();
        assert_eq!(
            scrape(&ledger, &mut warm).0,
            3,
            "the first scrape reads every unit"
        );
        assert!(warm.holds(&delivered));
        assert!(!warm.holds(&pending) && !warm.holds(&running));
        let (read, text) = scrape(&ledger, &mut warm);
        assert_eq!(read, 2, "the settled unit is not read again");
        assert_eq!(text, scrape(&ledger, &mut Tally::default()).1);
        assert!(has(&text, "hermes_deliveries_total 1"), "{text:?}");
        assert!(has(&text, "hermes_dispatches_total 3"), "{text:?}");
        assert!(
            has(&text, "hermes_delivery_lag_seconds_count 1"),
            "{text:?}"
        );

        // Once its result is shown, the pending unit settles too, and its delivery counts.
        ledger
            .settle_inline(&pending, Timestamp(AT.0 + 1_000))
            .expect("settle");
        let (read, text) = scrape(&ledger, &mut warm);
        assert_eq!(read, 2, "read once more, as it settled");
        assert!(warm.holds(&pending));
        assert!(has(&text, "hermes_deliveries_total 2"), "{text:?}");
        assert_eq!(
            scrape(&ledger, &mut warm).0,
            1,
            "only the running unit is read"
        );
        assert_eq!(
            scrape(&ledger, &mut warm).1,
            scrape(&ledger, &mut Tally::default()).1
        );
    }

    #[test]
    fn purged_units_are_forgotten() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger =
            Ledger::open(&dir.path().join("ledger.redb"), LedgerConfig::default()).expect("open");
        let id = inline(&ledger, "done");
        finish(&ledger, &id);
        ledger.settle_inline(&id, AT).expect("settle");
        let mut tally = Tally::default();
        scrape(&ledger, &mut tally);
        assert_eq!(tally.held.len(), 1);
        // A census after retention purged it lists no such id.
        let totals = tally.absorb(&Census::default());
        assert_eq!(totals, Totals::default());
        assert_eq!(tally.held.len(), 0);
        assert!(!tally.holds(&id));
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
