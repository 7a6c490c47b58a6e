//! A helper process for multi-process ledger tests and benchmarks.
//!
//! `DB` is a ledger location: a redb file's path, or a `postgres://` / `postgresql://` URL of a
//! PostgreSQL database (`hermes_ledger::Location::from_url`), so the same processes run on either
//! backend.
//!
//! ```text
//! ledger-worker publish DB DELEGATION N      finish children 0..N-1 (publishing task:i), one per txn
//! ledger-worker consume DB SESSION DELEGATION N   claim and ack until N events are delivered
//! ledger-worker crash DB DELEGATION          publish, claim, ack forever, reporting each commit
//! ledger-worker dispatch DB SESSION N         record a unit of N children; print its id
//! ledger-worker host DB SESSION UNITS TASKS INFLIGHT DONE
//!     the registry's ledger path: dispatch UNITS units of TASKS children, INFLIGHT units at a
//!     time; each child on a thread of its own, reused from unit to unit (as the registry's
//!     blocking pool's are), records its start and its finish, beside one progress flush;
//!     creates the file DONE at the end
//! ledger-worker drain DB SESSION DONE
//!     a waiting turn-boundary consumer through the router, as `hermes drain --wait` is
//!     (`wait_ready`, then `ack_many` of every envelope), until DONE exists and the session has
//!     nothing open; prints `acked N at_ms T` when the acks of N events were durable
//! ledger-worker fresh-database ADMIN_URL
//!     create a database with hermes' schema on the server ADMIN_URL names (`hermes_testkit::fresh_database`)
//!     and print its URL (for `cargo xtask bench`, which names no PostgreSQL crate)
//! ledger-worker fresh-empty-database ADMIN_URL
//!     the same without hermes' schema (`hermes_testkit::fresh_empty_database`), for the
//!     plain-SQL floor the bench compares the ledger with
//! ledger-worker reset-statements ADMIN_URL DB_URL
//! ledger-worker statements ADMIN_URL DB_URL
//!     forget, then print, the statements the server ran in the database of DB_URL, as
//!     `pg_stat_statements` counts them (`hermes_testkit::statements_run`)
//! ```
//! Every committed step is printed on its own line (`published task:3`, `acked task:3`) and
//! flushed before the next step starts, so a parent that kills this process knows what was
//! durably done.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hermes_ledger::testing::threads::Workers;
use hermes_ledger::*;

fn now() -> Timestamp {
    Timestamp(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
    )
}

fn outcome(index: u32) -> ChildOutcome {
    // The fields are evaluated before the base, so `started_at` is read no later than `ended_at`.
    ChildOutcome {
        exit_code: Some(0),
        started_at: Some(now()),
        result: format!("result {index}"),
        ..ChildOutcome::new(
            index,
            format!("task {index}"),
            ChildStatus::Completed,
            now(),
        )
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("ledger-worker: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let arg = |i: usize| {
        args.get(i)
            .cloned()
            .ok_or_else(|| format!("missing argument {i}"))
    };
    let open = |db: &str| {
        Ledger::open_at(&location(db)?, LedgerConfig::default()).map_err(|e| e.to_string())
    };
    let id = |s: String| DelegationId::new(s).map_err(|e| e.to_string());
    let number = |s: String| s.parse::<u32>().map_err(|e| e.to_string());
    let mut out = std::io::stdout().lock();
    match arg(0)?.as_str() {
        "publish" => {
            let ledger = open(&arg(1)?)?;
            let unit = id(arg(2)?)?;
            for i in 0..number(arg(3)?)? {
                ledger
                    .finish_child(HostId(0), &unit, outcome(i), now())
                    .map_err(|e| e.to_string())?;
                writeln!(out, "published task:{i}").map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        "consume" => {
            let ledger = open(&arg(1)?)?;
            let session = SessionId::new(arg(2)?).map_err(|e| e.to_string())?;
            let unit = id(arg(3)?)?;
            let total = number(arg(4)?)? as usize;
            let consumer = format!("worker-{}", std::process::id());
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                let ready = ledger
                    .deliverable(&session, now())
                    .map_err(|e| e.to_string())?;
                for (_, events) in ready {
                    // One event per claim, in a random order, so consumers really contend.
                    let mut events = events;
                    fastrand_shuffle(&mut events);
                    for event in events {
                        let request = ClaimRequest {
                            keys: vec![event.event_ref()],
                            consumer: consumer.clone(),
                            session: Some(session.clone()),
                            lease_ms: 30_000,
                        };
                        if let ClaimOutcome::Claimed(claim) =
                            ledger.claim(&request, now()).map_err(|e| e.to_string())?
                        {
                            match ledger.ack(claim.token, now()) {
                                Ok(_) => writeln!(out, "acked {}", event.key)
                                    .map_err(|e| e.to_string())?,
                                Err(LedgerError::ClaimLost(_)) => {}
                                Err(err) => return Err(err.to_string()),
                            }
                        }
                    }
                }
                let delivered = ledger
                    .events(&unit)
                    .map_err(|e| e.to_string())?
                    .iter()
                    .filter(|e| e.state == EventState::Delivered)
                    .count();
                if delivered >= total {
                    return Ok(());
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "only {delivered} of {total} delivered before the deadline"
                    ));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        "crash" => {
            let ledger = open(&arg(1)?)?;
            let unit = id(arg(2)?)?;
            let mut next = ledger.events(&unit).map_err(|e| e.to_string())?.len() as u32;
            let session = ledger
                .delegation(&unit)
                .map_err(|e| e.to_string())?
                .and_then(|u| u.session);
            loop {
                ledger
                    .finish_child(HostId(0), &unit, outcome(next), now())
                    .map_err(|e| e.to_string())?;
                writeln!(out, "published task:{next}").map_err(|e| e.to_string())?;
                out.flush().map_err(|e| e.to_string())?;
                let request = ClaimRequest {
                    keys: vec![EventRef {
                        delegation_id: unit.clone(),
                        key: EventKey::Task(next),
                    }],
                    consumer: "crash".into(),
                    session: session.clone(),
                    lease_ms: 1,
                };
                if let ClaimOutcome::Claimed(claim) =
                    ledger.claim(&request, now()).map_err(|e| e.to_string())?
                {
                    if next.is_multiple_of(3) {
                        ledger
                            .release(claim.token, now())
                            .map_err(|e| e.to_string())?;
                    } else {
                        ledger.ack(claim.token, now()).map_err(|e| e.to_string())?;
                        writeln!(out, "acked task:{next}").map_err(|e| e.to_string())?;
                        out.flush().map_err(|e| e.to_string())?;
                    }
                }
                next += 1;
            }
        }
        "dispatch" => {
            let ledger = open(&arg(1)?)?;
            let session = SessionId::new(arg(2)?).map_err(|e| e.to_string())?;
            let tasks = number(arg(3)?)?;
            let unit = dispatch(&ledger, &session, tasks)?;
            writeln!(out, "{unit}").map_err(|e| e.to_string())
        }
        "host" => {
            let ledger = open(&arg(1)?)?;
            let session = SessionId::new(arg(2)?).map_err(|e| e.to_string())?;
            let units = number(arg(3)?)?;
            let tasks = number(arg(4)?)?;
            let inflight = number(arg(5)?)?.max(1);
            let done = arg(6)?;
            let next = std::sync::atomic::AtomicU32::new(0);
            std::thread::scope(|scope| {
                let runners: Vec<_> = (0..inflight)
                    .map(|_| {
                        let children = Workers::start(scope, tasks as usize);
                        let (ledger, session, next) = (&ledger, &session, &next);
                        scope.spawn(move || -> Result<(), String> {
                            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < units {
                                run_unit(ledger, session, tasks, &children)?;
                            }
                            Ok(())
                        })
                    })
                    .collect();
                runners
                    .into_iter()
                    .try_for_each(|r| r.join().map_err(|_| "a unit runner panicked".to_string())?)
            })?;
            std::fs::write(&done, b"done").map_err(|e| e.to_string())?;
            // Serialization failures and deadlocks met (PostgreSQL), for the benchmark.
            writeln!(out, "conflicts {}", hermes_ledger::serialization_failures())
                .map_err(|e| e.to_string())?;
            // Commits as the ledger counts them (either backend); syncs are redb's own.
            eprintln!(
                "commits {} syncs {}",
                ledger.commits(),
                hermes_ledger::io_counts().syncs
            );
            Ok(())
        }
        "drain" => {
            let ledger = std::sync::Arc::new(open(&arg(1)?)?);
            let session = SessionId::new(arg(2)?).map_err(|e| e.to_string())?;
            let done = arg(3)?;
            let consumer = format!("drain-{}", std::process::id());
            let router = hermes_router::Router::new(
                ledger.clone(),
                hermes_router::RouterConfig::new(session.clone(), consumer),
            );
            let deadline = Instant::now() + Duration::from_secs(300);
            loop {
                // `drain --wait`: wake when the router's poll (200 ms) finds something ready.
                let round = router
                    .wait_ready(
                        Boundary::Turn,
                        now().plus_ms(250),
                        &hermes_router::SystemClock,
                        |_, _| Ok::<(), ()>(()),
                    )
                    .map_err(|e| e.to_string())?;
                let tokens: Vec<ClaimToken> = round.delivered.iter().map(|t| t.token).collect();
                if !tokens.is_empty() {
                    for acked in ledger.ack_many(&tokens, now()).map_err(|e| e.to_string())? {
                        acked.map_err(|e| e.to_string())?;
                    }
                    // How many events, and the moment their acks were durable, for the
                    // benchmark's count and clock.
                    let events: usize = round.delivered.iter().map(|t| t.events.len()).sum();
                    writeln!(out, "acked {events} at_ms {}", now().0).map_err(|e| e.to_string())?;
                    continue;
                }
                let finished = Path::new(&done).exists();
                if finished
                    && ledger
                        .open_events(&session)
                        .map_err(|e| e.to_string())?
                        .is_empty()
                {
                    writeln!(out, "conflicts {}", hermes_ledger::serialization_failures())
                        .map_err(|e| e.to_string())?;
                    eprintln!(
                        "commits {} syncs {}",
                        ledger.commits(),
                        hermes_ledger::io_counts().syncs
                    );
                    return Ok(());
                }
                if Instant::now() > deadline {
                    return Err("the session did not drain before the deadline".into());
                }
            }
        }
        "fresh-database" => {
            let url = hermes_testkit::fresh_database(&arg(1)?);
            writeln!(out, "{url}").map_err(|e| e.to_string())
        }
        "fresh-empty-database" => {
            let url = hermes_testkit::fresh_empty_database(&arg(1)?);
            writeln!(out, "{url}").map_err(|e| e.to_string())
        }
        "reset-statements" => {
            hermes_testkit::reset_statements(&arg(1)?, &arg(2)?);
            Ok(())
        }
        "statements" => {
            let count = hermes_testkit::statements_run(&arg(1)?, &arg(2)?);
            writeln!(out, "{count}").map_err(|e| e.to_string())
        }
        other => Err(format!("unknown mode {other:?}")),
    }
}

/// The ledger `db` names: a PostgreSQL URL, or else a redb file's path.
fn location(db: &str) -> Result<Location, String> {
    if is_postgres_url(db) {
        Location::from_url(Some(db), Path::new(""), None).map_err(|e| e.to_string())
    } else {
        Ok(Location::File(db.into()))
    }
}

/// One unit through the registry's ledger calls: dispatch, then every child on a thread of
/// `children` (the registry runs each ledger call on tokio's blocking pool, whose threads are
/// reused, so children of one host write concurrently and share group commits): start, one
/// progress flush, finish.
fn run_unit<'scope>(
    ledger: &'scope Ledger,
    session: &SessionId,
    tasks: u32,
    children: &Workers<'scope, Result<(), String>>,
) -> Result<(), String> {
    let unit = dispatch(ledger, session, tasks)?;
    let me = ProcessId {
        pid: std::process::id(),
        start_time: 0,
    };
    for index in 0..tasks {
        let unit = unit.clone();
        children.run(index as usize, move || {
            ledger
                .child_started(HostId(0), &unit, index, me, now())
                .map_err(|e| e.to_string())?;
            ledger
                .finish_child(HostId(0), &unit, outcome(index), now())
                .map_err(|e| e.to_string())?;
            Ok(())
        });
    }
    // The host flushes the unit's progress once while its children run.
    let progress: Vec<ProgressUpdate> = (0..tasks)
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
    ledger
        .record_progress(HostId(0), &progress)
        .map_err(|e| e.to_string())?;
    children
        .wait(tasks as usize)
        .ok_or("a child thread panicked")?
        .into_iter()
        .collect()
}

/// Records a background unit of `tasks` children in `session`.
fn dispatch(ledger: &Ledger, session: &SessionId, tasks: u32) -> Result<DelegationId, String> {
    let spec = DispatchSpec::new(
        "bench",
        (0..tasks)
            .map(|i| TaskSpec::new(format!("task {i}"), vec!["true".into()]))
            .collect(),
    );
    let new = NewDelegation {
        id: None,
        session: Some(session.clone()),
        channel: Channel::Background,
        spec,
        host: None,
        transcript_root: None,
    };
    let roomy = Capacity {
        max_running: u32::MAX,
        max_queued: u32::MAX,
    };
    Ok(ledger
        .dispatch(new, roomy, now())
        .map_err(|e| e.to_string())?
        .delegation
        .id)
}

/// A small Fisher–Yates shuffle seeded from the pid and the clock; order only affects contention.
fn fastrand_shuffle<T>(items: &mut [T]) {
    let mut state = u64::from(std::process::id()) ^ now().0;
    for i in (1..items.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        items.swap(i, (state % (i as u64 + 1)) as usize);
    }
}
