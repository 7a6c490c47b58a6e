//! Measures the ledger in one process, on a fresh file in a temp dir (real `fdatasync`s), and
//! prints one JSON object. Run with `cargo run --release -p hermes-ledger --example bench_ledger` (what
//! `cargo xtask bench` does). Commits are counted by the ledger itself (`Ledger::commits`).
//!
//! - `ledger_cycle_per_s`: publish → claim → ack of one event, one caller, 3 commits per cycle
//!   (the shape of the SQLite reference).
//! - `ledger_batch8_events_per_s`, `commits_per_delivered_event`: the batch path of a busy
//!   host. Units of 8 children go through the calls the registry and the router make —
//!   dispatch; per child, on a thread of its own reused from unit to unit (as the registry's
//!   blocking pool reuses its threads): start and finish, with one progress flush for the unit in between; and a consumer thread that every
//!   200 ms (the router's default poll) takes every ready envelope in one claim commit and acks
//!   them in one more — with `INFLIGHT` (4) units running at once. Every commit of all of it is
//!   counted, dispatch included. The run is 2,000 units (about 4 s on redb): the consumer sees
//!   the last events up to one poll (200 ms) after they are ready, and in a run of 500 units
//!   (about 1 s) that wait was up to a fifth of the time measured (3,761 events/s there against
//!   4,628 for 2,000 units, one after the other on the same machine).
//! - `ledger_batch8_isolated_events_per_s`, `commits_per_delivered_event_isolated`: the same
//!   calls for one unit at a time, consumed when its last child finished (no overlap between
//!   units: the least group commit can do).
//!
//! - `pg_cycle_per_s`, `pg_batch8_events_per_s`, `pg_commits_per_delivered_event`: the cycle
//!   and the busy host again, each on a fresh database of the PostgreSQL server whose admin URL
//!   is in `HERMES_BENCH_PG_URL` (`cargo xtask bench` starts one and sets it; without it this
//!   example stops with a message, before measuring anything). A PostgreSQL ledger has no group
//!   commit of its own: every operation is its own transaction, and the server shares WAL
//!   flushes between concurrent commits.
//! - `pg_serialization_failures_per_event_cycle`: the serialization failures and deadlocks
//!   the cycle's statements met and ran again (`hermes_ledger::serialization_failures`), per cycle.
//! - `pg_round_trips_per_event_cycle`: the statements the server ran for the PostgreSQL cycle
//!   (`pg_stat_statements`, summed over the cycle's database, counted from the first cycle to
//!   the last, `BEGIN`/`COMMIT`/`ROLLBACK` included), per cycle (one event each). The server
//!   must preload `pg_stat_statements`, as the one `cargo xtask bench` starts does.
//!
//! `BENCH_QUICK=1` shortens the runs (for smoke tests).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hermes_ledger::testing::threads::Workers;
use hermes_ledger::*;

const INFLIGHT: u32 = 4;
const TASKS: u32 = 8;
/// The router's default poll interval (`RouterConfig::DEFAULT_POLL_MS`): how often an idle
/// interactive session or `drain --wait` looks for newly ready results.
const POLL: Duration = Duration::from_millis(200);
/// The admin URL of the PostgreSQL server the `pg_*` figures create their databases on.
const PG_URL_VAR: &str = "HERMES_BENCH_PG_URL";

fn now() -> Timestamp {
    Timestamp(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
    )
}

fn session() -> SessionId {
    SessionId::new("bench").expect("valid session id")
}

fn outcome(index: u32) -> ChildOutcome {
    // The fields are evaluated before the base, so `started_at` is read no later than `ended_at`.
    ChildOutcome {
        exit_code: Some(0),
        started_at: Some(now()),
        result: "ok".into(),
        ..ChildOutcome::new(index, "bench", ChildStatus::Completed, now())
    }
}

fn dispatch(ledger: &Ledger, tasks: u32) -> Result<DelegationId> {
    let task = TaskSpec::new("bench", vec!["true".into()]);
    let new = NewDelegation {
        id: None,
        session: Some(session()),
        channel: Channel::Background,
        spec: DispatchSpec::new("bench", vec![task; tasks as usize]),
        host: None,
        transcript_root: None,
    };
    let roomy = Capacity {
        max_running: u32::MAX,
        max_queued: u32::MAX,
    };
    Ok(ledger.dispatch(new, roomy, now())?.delegation.id)
}

/// The registry's calls for one unit: every child, on a thread of `children` (reused from unit
/// to unit, as the registry's blocking pool's threads are), records its start and its finish;
/// the host flushes the unit's progress once in between (it batches a unit's progress at most
/// every 2 s: a child that runs less than that may get no flush at all).
fn run_unit<'scope>(ledger: &'scope Ledger, children: &Workers<'scope, Result<()>>) -> Result<()> {
    let unit = dispatch(ledger, TASKS)?;
    let me = ProcessId {
        pid: std::process::id(),
        start_time: 0,
    };
    let started = Arc::new(std::sync::Barrier::new(TASKS as usize + 1));
    for index in 0..TASKS {
        let (unit, started) = (unit.clone(), started.clone());
        children.run(index as usize, move || {
            let result = ledger.child_started(HostId(0), &unit, index, me, now());
            started.wait();
            result?;
            ledger.finish_child(HostId(0), &unit, outcome(index), now())?;
            Ok(())
        });
    }
    started.wait();
    let progress: Vec<ProgressUpdate> = (0..TASKS)
        .map(|index| ProgressUpdate {
            delegation_id: unit.clone(),
            index,
            progress: Progress {
                output_bytes: 100,
                ..Progress::default()
            },
            tail: None,
        })
        .collect();
    ledger.record_progress(HostId(0), &progress)?;
    children
        .wait(TASKS as usize)
        .ok_or_else(|| LedgerError::Invalid("a child thread panicked".into()))?
        .into_iter()
        .collect()
}

/// The router's calls at one boundary: every ready envelope claimed in one commit, acked in one
/// more. Returns how many events were delivered.
fn consume(ledger: &Ledger) -> Result<usize> {
    let requests: Vec<ClaimRequest> = ledger
        .deliverable(&session(), now())?
        .into_iter()
        .map(|(_, events)| ClaimRequest {
            keys: events.iter().map(Event::event_ref).collect(),
            consumer: "bench".into(),
            session: Some(session()),
            lease_ms: 60_000,
        })
        .collect();
    if requests.is_empty() {
        return Ok(0);
    }
    let mut tokens = Vec::new();
    let mut events = 0;
    for outcome in ledger.claim_many(&requests, now())? {
        if let ClaimOutcome::Claimed(claim) = outcome {
            events += claim.events.len();
            tokens.push(claim.token);
        }
    }
    for acked in ledger.ack_many(&tokens, now())? {
        acked?;
    }
    Ok(events)
}

/// Cycles on `unit` (a unit of one task) for `window`: (cycles per second, cycles).
fn cycle(ledger: &Ledger, unit: &DelegationId, window: Duration) -> Result<(f64, u32)> {
    let start = Instant::now();
    let mut cycles = 0u32;
    while start.elapsed() < window {
        let key = EventRef {
            delegation_id: unit.clone(),
            key: EventKey::Task(cycles),
        };
        ledger.publish(
            NewEvent {
                delegation_id: unit.clone(),
                key: key.key,
                payload: EventPayload::Task(outcome(cycles)),
            },
            now(),
        )?;
        let request = ClaimRequest {
            keys: vec![key],
            consumer: "bench".into(),
            session: Some(session()),
            lease_ms: 60_000,
        };
        let ClaimOutcome::Claimed(claim) = ledger.claim(&request, now())? else {
            return Err(LedgerError::Invalid("bench claim refused".into()));
        };
        ledger.ack(claim.token, now())?;
        cycles += 1;
    }
    Ok((f64::from(cycles) / start.elapsed().as_secs_f64(), cycles))
}

/// Units one at a time: (events/s, commits per event).
fn isolated(ledger: &Ledger, window: Duration) -> Result<(f64, f64)> {
    let commits = ledger.commits();
    let start = Instant::now();
    let mut events = 0usize;
    std::thread::scope(|scope| -> Result<()> {
        let children = Workers::start(scope, TASKS as usize);
        while start.elapsed() < window {
            run_unit(ledger, &children)?;
            events += consume(ledger)?;
        }
        Ok(())
    })?;
    let per_s = events as f64 / start.elapsed().as_secs_f64();
    Ok((per_s, (ledger.commits() - commits) as f64 / events as f64))
}

/// `INFLIGHT` units at a time and a concurrent consumer: (events/s, commits per event).
fn busy_host(ledger: &Ledger, units: u32) -> Result<(f64, f64)> {
    let commits = ledger.commits();
    let total = (units * TASKS) as usize;
    let next = AtomicU32::new(0);
    let failed = AtomicBool::new(false);
    let start = Instant::now();
    let delivered = std::thread::scope(|scope| -> Result<usize> {
        for _ in 0..INFLIGHT {
            let children = Workers::start(scope, TASKS as usize);
            let (next, failed) = (&next, &failed);
            scope.spawn(move || {
                while next.fetch_add(1, Ordering::Relaxed) < units {
                    if run_unit(ledger, &children).is_err() {
                        failed.store(true, Ordering::Relaxed);
                        return;
                    }
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(300);
        let mut delivered = 0;
        while delivered < total {
            if failed.load(Ordering::Relaxed) || Instant::now() > deadline {
                return Err(LedgerError::Invalid("the busy-host run failed".into()));
            }
            delivered += consume(ledger)?;
            // A waiting consumer looks again after the router's default poll interval.
            std::thread::sleep(POLL);
        }
        Ok(delivered)
    })?;
    let per_s = delivered as f64 / start.elapsed().as_secs_f64();
    Ok((
        per_s,
        (ledger.commits() - commits) as f64 / delivered as f64,
    ))
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The admin URL of the bench's PostgreSQL server.
fn pg_admin() -> std::result::Result<String, String> {
    match std::env::var(PG_URL_VAR) {
        Ok(url) if !url.trim().is_empty() => Ok(url),
        _ => Err(format!(
            "{PG_URL_VAR} is unset: the pg_* figures need a PostgreSQL server to create their \
             databases on. Run `cargo xtask bench`, which starts one, or start one with \
             `eval \"$(cargo xtask pg start)\"` and run with {PG_URL_VAR}=\"$HERMES_TEST_PG_URL\""
        )),
    }
}

/// A ledger on a fresh, empty database of the server `admin` names, and its URL.
fn fresh_pg(admin: &str) -> Result<(Ledger, String)> {
    let url = hermes_testkit::fresh_database(admin);
    let ledger = Ledger::open_at(
        &Location::from_url(Some(&url), std::path::Path::new(""), None)?,
        LedgerConfig::default(),
    )?;
    Ok((ledger, url))
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("bench_ledger: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> std::result::Result<(), String> {
    // Checked first: a missing server stops the run before it measures anything.
    let admin = pg_admin()?;
    let quick = std::env::var_os("BENCH_QUICK").is_some();
    let (window, units) = if quick {
        (Duration::from_millis(500), 20)
    } else {
        (Duration::from_secs(3), 2_000)
    };
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let fresh = |name: &str| Ledger::open(&dir.path().join(name), LedgerConfig::default());
    let redb = |e: LedgerError| format!("redb: {e}");
    let ledger = fresh("cycle.redb").map_err(redb)?;
    let unit = dispatch(&ledger, 1).map_err(redb)?;
    let (cycle_per_s, _) = cycle(&ledger, &unit, window).map_err(redb)?;
    let (isolated_per_s, isolated_commits) =
        isolated(&fresh("isolated.redb").map_err(redb)?, window).map_err(redb)?;
    let (busy_per_s, busy_commits) =
        busy_host(&fresh("busy.redb").map_err(redb)?, units).map_err(redb)?;
    let pg = |e: LedgerError| format!("PostgreSQL: {e}");
    let (ledger, url) = fresh_pg(&admin).map_err(pg)?;
    let unit = dispatch(&ledger, 1).map_err(pg)?;
    // Counted from here: the cycles' statements only, not the database's set-up or dispatch.
    hermes_testkit::reset_statements(&admin, &url);
    let conflicts_before = hermes_ledger::serialization_failures();
    let (pg_cycle_per_s, cycles) = cycle(&ledger, &unit, window).map_err(pg)?;
    let pg_conflicts = hermes_ledger::serialization_failures() - conflicts_before;
    let pg_statements = hermes_testkit::statements_run(&admin, &url);
    let (pg_busy_per_s, pg_busy_commits) =
        busy_host(&fresh_pg(&admin).map_err(pg)?.0, units).map_err(pg)?;
    let out = format!(
        "{{\"ledger_cycle_per_s\":{},\"ledger_batch8_events_per_s\":{},\"commits_per_delivered_event\":{},\"ledger_batch8_isolated_events_per_s\":{},\"commits_per_delivered_event_isolated\":{},\"pg_cycle_per_s\":{},\"pg_batch8_events_per_s\":{},\"pg_commits_per_delivered_event\":{},\"pg_round_trips_per_event_cycle\":{},\"pg_serialization_failures_per_event_cycle\":{}}}",
        round(cycle_per_s),
        round(busy_per_s),
        round(busy_commits),
        round(isolated_per_s),
        round(isolated_commits),
        round(pg_cycle_per_s),
        round(pg_busy_per_s),
        round(pg_busy_commits),
        round(pg_statements as f64 / f64::from(cycles.max(1))),
        pg_conflicts as f64 / f64::from(cycles.max(1)),
    );
    println!("{out}");
    Ok(())
}
