//! What the metrics count over every unit: each unit's [`Part`] (its status, its children
//! stopped, its deliveries and their lag, its start wait) and the [`Totals`] they add up to.
//!
//! A unit that has ended and whose every event is delivered or dropped no longer changes, so
//! its part can be added once and kept: the ledger keeps the totals of such units with a
//! watermark (`census.rs`), and a scrape reads only the units after it.

use serde::{Deserialize, Serialize};

use super::{ChildStatus, Event, EventState, UnitRecord, UnitStatus};

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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Units counted, by status (in [`UNIT_STATUSES`] order).
    by_status: [u64; UNIT_STATUSES.len()],
    /// Of those, the ones retention has removed since, by status: the counters keep them,
    /// the gauge of units kept does not.
    purged: [u64; UNIT_STATUSES.len()],
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
            purged: [0; UNIT_STATUSES.len()],
            stalls: 0,
            timeouts: 0,
            deliveries: 0,
            claim_losses: 0,
            lag: Buckets::new(wait_buckets()),
            start_wait: Buckets::new(wait_buckets()),
        }
    }
}

fn status_index(status: UnitStatus) -> Option<usize> {
    UNIT_STATUSES.iter().position(|s| *s == status)
}

impl Totals {
    /// Adds what one unit adds.
    pub fn add(&mut self, part: &Part) {
        if let Some(i) = status_index(part.status) {
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

    /// Notes that retention removed a unit of `status` counted here.
    pub fn purged(&mut self, status: UnitStatus) {
        if let Some(i) = status_index(status) {
            self.purged[i] += 1;
        }
    }

    /// Units of `status` ever counted, those retention removed since included.
    pub fn units(&self, status: UnitStatus) -> u64 {
        status_index(status).map_or(0, |i| self.by_status[i])
    }

    /// Units of `status` the ledger keeps now.
    pub fn kept(&self, status: UnitStatus) -> u64 {
        status_index(status).map_or(0, |i| self.by_status[i].saturating_sub(self.purged[i]))
    }

    /// Every unit ever counted.
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

    /// Whether a unit with these events can no longer change (until retention removes it).
    pub fn settled(unit: &UnitRecord, events: &[&Event]) -> bool {
        unit.status.is_terminal() && events.iter().all(|e| e.state.is_terminal())
    }
}
