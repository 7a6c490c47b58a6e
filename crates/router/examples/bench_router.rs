//! The router's figures for `cargo xtask bench` (run in release mode): progress on stderr, one
//! JSON object on the last line of stdout.
//!
//! - `scheduler_100k_insert_ns`, `scheduler_100k_pop_ns`, `scheduler_100k_redefer_ns`: per
//!   operation on a scheduler holding 100,000 deferred entries (pure, in memory). A pop is one
//!   `pop_due` at the next entry's deadline, as the driver does on waking.
//! - `scheduler_wake_late_ms_p99` / `_max`: with the real clock, how late `Router::wait_ready`
//!   wakes after a deferral deadline (100 envelopes held by another consumer whose leases run out
//!   60 ms apart; polling off, so every wake-up is a deferral deadline).
//!   `scheduler_deliver_late_ms_p99`: from the retry deadline (the holder's lease expiry + the
//!   50 ms retry margin) to holding the claim (a snapshot and one durable claim commit later).
//!   `scheduler_deliver_after_expiry_ms_p99`: from the lease expiry itself to holding the claim
//!   (the same, plus the 50 ms margin by design). `scheduler_idle_wakeups`: wake-ups while nothing was due.
//! - `ready_set_boundary_us`: one boundary's snapshot + ownership + coalescing + classification
//!   (`Router::preview`: one read of the session's open events, one read per unit with ready
//!   events, and the pure plan; no claims) for a session with 1,000 pending events across 100
//!   delegations; median of 21.
//!   `ready_set_plan_us`: the pure plan alone on that snapshot. `ready_set_boundary_claim_us`:
//!   the whole `take_ready` boundary including its 100 durable claims; median of 3.

use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use hermes_ledger::*;
use hermes_router::{
    Boundary, Clock, DeferKey, Router, RouterConfig, Scheduler, Snapshot, SystemClock, Watch,
};

const SESSION: &str = "bench";

fn main() {
    let mut figures: Vec<(&str, f64)> = Vec::new();
    eprintln!("bench_router: scheduler");
    scheduler_figures(&mut figures);
    eprintln!("bench_router: wake-ups (real clock)");
    if let Err(err) = wake_figures(&mut figures) {
        eprintln!("bench_router: wake-up bench failed: {err}");
        std::process::exit(1);
    }
    eprintln!("bench_router: ready set");
    if let Err(err) = ready_set_figures(&mut figures) {
        eprintln!("bench_router: ready-set bench failed: {err}");
        std::process::exit(1);
    }
    let body: Vec<String> = figures
        .iter()
        .map(|(name, value)| format!("\"{name}\":{}", round(*value)))
        .collect();
    println!("{{{}}}", body.join(","));
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// A small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn scheduler_figures(figures: &mut Vec<(&'static str, f64)>) {
    const N: usize = 100_000;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let keys: Vec<DeferKey> = (0..N as u64)
        .map(|i| DeferKey::new(DelegationId::from_bits(i), [EventKey::Task(0)]))
        .collect();
    let deadlines: Vec<Timestamp> = (0..N)
        .map(|_| Timestamp(1_000_000 + rng.next() % 10_000_000))
        .collect();
    let mut insert = Vec::new();
    let mut redefer = Vec::new();
    let mut pop = Vec::new();
    for _ in 0..5 {
        let mut scheduler = Scheduler::new();
        let batch = keys.clone();
        let start = Instant::now();
        for (key, deadline) in batch.into_iter().zip(&deadlines) {
            scheduler.defer(key, *deadline);
        }
        insert.push(start.elapsed().as_nanos() as f64 / N as f64);

        let start = Instant::now();
        for (i, key) in keys.iter().enumerate() {
            // Re-deferring an entry moves it; a clone stands in for the key rebuilt from a claim.
            scheduler.defer(key.clone(), deadlines[(i * 7919) % N].plus_ms(1));
        }
        redefer.push(start.elapsed().as_nanos() as f64 / N as f64);
        assert_eq!(scheduler.len(), N);

        let start = Instant::now();
        let mut popped = 0;
        while let Some(next) = scheduler.next_deadline() {
            popped += scheduler.pop_due(next).len();
        }
        pop.push(start.elapsed().as_nanos() as f64 / N as f64);
        assert_eq!(popped, N);
    }
    figures.push(("scheduler_100k_insert_ns", median(&mut insert)));
    figures.push(("scheduler_100k_pop_ns", median(&mut pop)));
    figures.push(("scheduler_100k_redefer_ns", median(&mut redefer)));
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

/// The system clock, recording how late each sleep returned after its wake-up time.
#[derive(Debug)]
struct Measuring {
    late_ms: Mutex<Vec<f64>>,
}

fn precise_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1_000.0)
}

impl Clock for Measuring {
    fn now(&self) -> Timestamp {
        SystemClock.now()
    }

    fn sleep_until(&self, until: Timestamp, watch: &Watch<'_>) {
        SystemClock.sleep_until(until, watch);
        if !watch.signalled() {
            let late = precise_ms() - until.as_millis() as f64;
            if let Ok(mut samples) = self.late_ms.lock() {
                samples.push(late);
            }
        }
    }
}

fn spec(tasks: u32) -> DispatchSpec {
    let task = TaskSpec::new("bench", vec!["true".into()]);
    DispatchSpec::new("bench", vec![task; tasks as usize])
}

fn outcome(index: u32, now: Timestamp) -> ChildOutcome {
    ChildOutcome {
        exit_code: Some(0),
        started_at: Some(now),
        result: "ok".into(),
        ..ChildOutcome::new(index, "bench", ChildStatus::Completed, now)
    }
}

fn session() -> SessionId {
    SessionId::new(SESSION).expect("valid session id")
}

/// A ledger in `dir` with `units` finished units of `tasks` children each in the bench session.
fn ledger_with(
    dir: &std::path::Path,
    units: u32,
    tasks: u32,
) -> Result<(Arc<Ledger>, Vec<DelegationId>), LedgerError> {
    let ledger = Arc::new(Ledger::open(
        &dir.join("ledger.redb"),
        LedgerConfig::default(),
    )?);
    let roomy = Capacity {
        max_running: 1_000_000,
        max_queued: 1_000_000,
    };
    let mut ids = Vec::new();
    for _ in 0..units {
        let new = NewDelegation {
            id: None,
            session: Some(session()),
            channel: Channel::Background,
            spec: spec(tasks),
            host: None,
            transcript_root: None,
        };
        let id = ledger
            .dispatch(new, roomy, SystemClock.now())?
            .delegation
            .id;
        for t in 0..tasks {
            let now = SystemClock.now();
            ledger.finish_child(HostId(0), &id, outcome(t, now), now)?;
        }
        ids.push(id);
    }
    Ok((ledger, ids))
}

fn render(unit: &UnitRecord, events: &[Event]) -> Result<String, std::fmt::Error> {
    Ok(format!("{} {}", unit.id, events.len()))
}

fn wake_figures(figures: &mut Vec<(&'static str, f64)>) -> Result<(), Box<dyn std::error::Error>> {
    const HELD: u32 = 100;
    const SPACING_MS: u64 = 60;
    let dir = tempfile::tempdir()?;
    let (ledger, ids) = ledger_with(dir.path(), HELD, 1)?;
    // Another consumer holds every envelope; its leases run out 60 ms apart (more than the 50 ms retry margin, so each wake-up serves one), from 200 ms on.
    let base = SystemClock.now().plus_ms(200);
    for (i, id) in ids.iter().enumerate() {
        let now = SystemClock.now();
        let expires_at = base.plus_ms(SPACING_MS * i as u64);
        let request = ClaimRequest {
            keys: vec![EventRef {
                delegation_id: id.clone(),
                key: EventKey::Task(0),
            }],
            consumer: "holder".into(),
            session: Some(session()),
            lease_ms: expires_at.ms_since(now),
        };
        if let ClaimOutcome::Refused(why) = ledger.claim(&request, now)? {
            return Err(format!("holder's claim refused: {why:?}").into());
        }
    }
    let mut config = RouterConfig::new(session(), "bench");
    config.poll_interval_ms = None;
    let consumer = Router::new(Arc::clone(&ledger), config);
    let clock = Measuring {
        late_ms: Mutex::new(Vec::new()),
    };
    let mut deliver_late = Vec::new();
    let mut after_expiry = Vec::new();
    let mut delivered = 0;
    let give_up = SystemClock.now().plus_ms(60_000);
    while delivered < HELD && SystemClock.now() < give_up {
        let out = consumer.wait_ready(Boundary::Turn, give_up, &clock, render)?;
        let got_at = precise_ms();
        for envelope in &out.delivered {
            delivered += 1;
            consumer.ack(envelope.token, SystemClock.now())?;
        }
        // The deadline this wake-up served: the holder's expiry + 50 ms.
        if let Some(first) = out.delivered.first() {
            let index = ids
                .iter()
                .position(|id| *id == first.delegation.id)
                .unwrap_or(0);
            let retry_at = base.plus_ms(SPACING_MS * index as u64 + hermes_router::RETRY_SKEW_MS);
            deliver_late.push(got_at - retry_at.as_millis() as f64);
            after_expiry
                .push(got_at - (retry_at.as_millis() - hermes_router::RETRY_SKEW_MS) as f64);
        }
    }
    if delivered < HELD {
        return Err(format!("only {delivered} of {HELD} held envelopes were delivered").into());
    }
    let mut late = clock.late_ms.lock().map(|l| l.clone()).unwrap_or_default();
    figures.push(("scheduler_wake_late_ms_p99", percentile(&mut late, 99.0)));
    figures.push(("scheduler_wake_late_ms_max", percentile(&mut late, 100.0)));
    figures.push((
        "scheduler_deliver_late_ms_p99",
        percentile(&mut deliver_late, 99.0),
    ));
    figures.push((
        "scheduler_deliver_after_expiry_ms_p99",
        percentile(&mut after_expiry, 99.0),
    ));
    let stats = consumer.wait_stats();
    figures.push(("scheduler_wakeups", stats.wakeups as f64));
    figures.push(("scheduler_idle_wakeups", stats.idle_wakeups as f64));
    Ok(())
}

fn ready_set_figures(
    figures: &mut Vec<(&'static str, f64)>,
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let (ledger, _) = ledger_with(dir.path(), 100, 10)?;
    let consumer = Router::new(Arc::clone(&ledger), RouterConfig::new(session(), "bench"));

    let mut boundary = Vec::new();
    for _ in 0..21 {
        let start = Instant::now();
        let plan = consumer.preview(Boundary::Turn, SystemClock.now())?;
        boundary.push(start.elapsed().as_secs_f64() * 1e6);
        let events: usize = plan.offers.iter().map(|o| o.events.len()).sum();
        if plan.offers.len() != 100 || events != 1_000 {
            return Err(format!("expected 100 offers of 1,000 events, got {events}").into());
        }
    }
    figures.push(("ready_set_boundary_us", median(&mut boundary)));

    // The pure plan alone, on the same session's snapshot.
    let now = SystemClock.now();
    let snapshot = Snapshot {
        session: ledger.session(&session())?,
        events: ledger.open_events(&session())?,
        units: ledger
            .deliverable(&session(), now)?
            .into_iter()
            .map(|(unit, _)| unit)
            .collect(),
    };
    let own = Default::default();
    let mut pure = Vec::new();
    let copies: Vec<Snapshot> = (0..21).map(|_| snapshot.clone()).collect();
    for copy in copies {
        let start = Instant::now();
        let plan = hermes_router::plan(copy, &session(), Boundary::Turn, now, &own);
        pure.push(start.elapsed().as_secs_f64() * 1e6);
        std::hint::black_box(plan);
    }
    figures.push(("ready_set_plan_us", median(&mut pure)));

    let mut whole = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let out = consumer.take_ready(Boundary::Turn, SystemClock.now(), render)?;
        whole.push(start.elapsed().as_secs_f64() * 1e6);
        if out.delivered.len() != 100 {
            return Err(format!("claimed {} envelopes, not 100", out.delivered.len()).into());
        }
        // Nothing was shown: give every claim back for the next round.
        for envelope in out.delivered {
            consumer.defer(envelope.token)?;
        }
    }
    figures.push(("ready_set_boundary_claim_us", median(&mut whole)));
    Ok(())
}
