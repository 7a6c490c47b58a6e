//! Worker pools: pool queues, taking a unit atomically, capacity, fencing of a dead
//! worker, and units going back to their pool.

use std::sync::{Arc, Barrier};

use crate::common::*;
use hermes_ledger::*;

/// Registers a live worker of `pool` (pid `pid`) whose lease runs until `lease_until`.
fn worker(
    ledger: &Ledger,
    pid: u32,
    pool: &str,
    capacity: u32,
    lease_until: Timestamp,
) -> HostRecord {
    let host = HostRecord {
        process: ProcessId { pid, start_time: 3 },
        kind: HostKind::Worker,
        session: None,
        registered_at: T0,
        heartbeat_at: T0,
        host_id: HostId(u128::from(pid) << 32 | 7),
        locality: Locality::default(),
        lease_expires_at: lease_until,
        worker: Some(WorkerPool {
            pool: pool.to_owned(),
            capacity,
        }),
    };
    ledger.register_host(&host).expect("worker registers");
    host
}

fn pool_spec(pool: &str, tasks: u32) -> DispatchSpec {
    DispatchSpec {
        pool: Some(pool.to_owned()),
        ..spec(tasks)
    }
}

/// Dispatches a pool unit of one child into session `s`.
fn pool_unit(ledger: &Ledger, pool: &str, capacity: Capacity) -> Result<Admission> {
    ledger.dispatch(
        NewDelegation {
            id: None,
            session: Some(session()),
            channel: Channel::Background,
            spec: pool_spec(pool, 1),
            host: None,
            transcript_root: None,
        },
        capacity,
        T0,
    )
}

fn take(ledger: &Ledger, w: &HostRecord, capacity: u32) -> Option<UnitRecord> {
    let pool = &w.worker.as_ref().expect("a worker").pool;
    ledger
        .take_pool_unit(w.process, w.host_id, pool, capacity, T0.plus_ms(1))
        .expect("take runs")
}

const LONG: Timestamp = Timestamp(u64::MAX);

#[test]
fn a_pool_unit_waits_in_its_pool_even_with_free_slots_and_counts_per_pool() {
    let f = fixture();
    let before = f.ledger.activity().unwrap();
    let a1 = pool_unit(&f.ledger, "a", ROOMY).unwrap();
    assert_ne!(
        f.ledger.activity().unwrap(),
        before,
        "a pool dispatch wakes the workers"
    );
    assert_eq!(a1.delegation.status, UnitStatus::Queued);
    assert_eq!(a1.delegation.host, None, "no host until a worker takes it");
    assert_eq!(a1.queue_position, Some(1));
    assert_eq!(
        pool_unit(&f.ledger, "b", ROOMY).unwrap().queue_position,
        Some(1),
        "each pool has its own queue"
    );
    assert_eq!(
        pool_unit(&f.ledger, "a", ROOMY).unwrap().queue_position,
        Some(2)
    );
    let small = Capacity {
        max_running: 1,
        max_queued: 2,
    };
    assert!(matches!(
        pool_unit(&f.ledger, "a", small),
        Err(LedgerError::QueueFull { max: 2 })
    ));
    // The session's own queue is empty and no session unit runs: a session unit runs at once.
    let host = registered_host(&f.ledger, 40);
    let own = f
        .ledger
        .dispatch(
            NewDelegation {
                id: None,
                session: Some(session()),
                channel: Channel::Background,
                spec: spec(1),
                host: Some(host),
                transcript_root: None,
            },
            small,
            T0,
        )
        .unwrap();
    assert_eq!(own.delegation.status, UnitStatus::Running);
}

#[test]
fn bad_pool_dispatches_are_refused() {
    let f = fixture();
    for bad in ["", "no spaces", &"x".repeat(129)] {
        assert!(
            matches!(
                pool_unit(&f.ledger, bad, ROOMY),
                Err(LedgerError::Invalid(_))
            ),
            "{bad:?}"
        );
    }
    let inline = f.ledger.dispatch(
        NewDelegation {
            id: None,
            session: None,
            channel: Channel::Inline,
            spec: pool_spec("a", 1),
            host: None,
            transcript_root: None,
        },
        ROOMY,
        T0,
    );
    assert!(matches!(inline, Err(LedgerError::Invalid(_))));
    assert!(check_pool_name("gpu.large:2").is_ok());
    assert!(check_pool_name("gpu large").is_err());
}

#[test]
fn workers_take_their_own_pools_units_oldest_first_up_to_their_capacity() {
    let f = fixture();
    let a1 = pool_unit(&f.ledger, "a", ROOMY).unwrap().delegation.id;
    let b1 = pool_unit(&f.ledger, "b", ROOMY).unwrap().delegation.id;
    let a2 = pool_unit(&f.ledger, "a", ROOMY).unwrap().delegation.id;
    let a3 = pool_unit(&f.ledger, "a", ROOMY).unwrap().delegation.id;
    let wa = worker(&f.ledger, 10, "a", 2, LONG);
    let wb = worker(&f.ledger, 11, "b", 2, LONG);

    let first = take(&f.ledger, &wa, 2).expect("a unit of pool a");
    assert_eq!(first.id, a1);
    assert_eq!(first.status, UnitStatus::Running);
    assert_eq!(first.host, Some(wa.process));
    assert_eq!(take(&f.ledger, &wa, 2).expect("another").id, a2);
    assert!(take(&f.ledger, &wa, 2).is_none(), "capacity 2 is full");
    assert_eq!(take(&f.ledger, &wb, 2).expect("pool b's").id, b1);
    assert!(take(&f.ledger, &wb, 2).is_none(), "pool b is empty");

    // Finishing one of its units frees a slot for the next of the pool.
    f.ledger
        .finish_child(
            wa.host_id,
            &a1,
            outcome(0, ChildStatus::Completed, T0.plus_ms(5)),
            T0.plus_ms(5),
        )
        .unwrap();
    assert_eq!(take(&f.ledger, &wa, 2).expect("the last").id, a3);

    let listed = f.ledger.workers(None, &Pids(true), T0).unwrap();
    let running: Vec<(&str, usize, u32)> = listed
        .iter()
        .map(|w| (w.pool(), w.running, w.capacity()))
        .collect();
    assert_eq!(running, [("a", 2, 2), ("b", 1, 2)]);
    assert_eq!(
        f.ledger.workers(Some("b"), &Pids(true), T0).unwrap().len(),
        1
    );
    assert!(
        f.ledger.workers(None, &Pids(false), T0).unwrap().is_empty(),
        "workers whose processes are gone are not live"
    );
}

#[test]
fn pool_units_neither_block_nor_take_session_slots() {
    let f = fixture();
    let one = Capacity {
        max_running: 1,
        max_queued: 10,
    };
    let host = registered_host(&f.ledger, 40);
    let session_unit = |ledger: &Ledger| {
        ledger
            .dispatch(
                NewDelegation {
                    id: None,
                    session: Some(session()),
                    channel: Channel::Background,
                    spec: spec(1),
                    host: Some(host),
                    transcript_root: None,
                },
                one,
                T0,
            )
            .unwrap()
            .delegation
    };
    // A pool unit heads the queue table and another runs on a worker.
    pool_unit(&f.ledger, "a", one).unwrap();
    pool_unit(&f.ledger, "a", one).unwrap();
    let w = worker(&f.ledger, 10, "a", 1, LONG);
    take(&f.ledger, &w, 1).expect("taken");

    let running = session_unit(&f.ledger);
    assert_eq!(
        running.status,
        UnitStatus::Running,
        "the worker's unit takes no session slot"
    );
    let queued = session_unit(&f.ledger);
    assert_eq!(queued.status, UnitStatus::Queued);
    let owner = f.ledger.host(host).unwrap().unwrap().host_id;
    f.ledger
        .finish_child(
            owner,
            &running.id,
            outcome(0, ChildStatus::Completed, T0.plus_ms(2)),
            T0.plus_ms(2),
        )
        .unwrap();
    let started = f
        .ledger
        .start_next_queued(host, one, T0.plus_ms(3))
        .unwrap()
        .expect("the session's queued unit starts though a pool unit is older");
    assert_eq!(started.id, queued.id);
}

#[test]
fn two_workers_racing_for_units_never_take_the_same_one() {
    let f = fixture();
    let ids: Vec<DelegationId> = (0..12)
        .map(|_| pool_unit(&f.ledger, "race", ROOMY).unwrap().delegation.id)
        .collect();
    let hosts: Vec<HostRecord> = (0..2)
        .map(|i| worker(&f.ledger, 20 + i, "race", 100, LONG))
        .collect();
    let barrier = Arc::new(Barrier::new(hosts.len()));
    let threads: Vec<_> = hosts
        .into_iter()
        .map(|w| {
            // Each worker has its own handle on the ledger, as separate processes do.
            let (ledger, barrier) = (f.reopen(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let mut mine = Vec::new();
                while let Some(unit) = take(&ledger, &w, 100) {
                    assert_eq!(unit.host, Some(w.process));
                    mine.push(unit.id);
                }
                mine
            })
        })
        .collect();
    let mut taken: Vec<DelegationId> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("worker thread"))
        .collect();
    taken.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(taken, expected, "every unit taken exactly once");

    // One unit, two workers: exactly one wins.
    let last = pool_unit(&f.ledger, "race", ROOMY).unwrap().delegation.id;
    let w1 = worker(&f.ledger, 30, "race", 100, LONG);
    let w2 = worker(&f.ledger, 31, "race", 100, LONG);
    let won: Vec<_> = [&w1, &w2]
        .into_iter()
        .filter_map(|w| take(&f.ledger, w, 100))
        .collect();
    assert_eq!(won.len(), 1);
    assert_eq!(won[0].id, last);
}

#[test]
fn a_dead_workers_running_unit_ends_unknown_and_its_late_writes_are_refused() {
    let f = fixture();
    let id = pool_unit(&f.ledger, "a", ROOMY).unwrap().delegation.id;
    let w = worker(&f.ledger, 10, "a", 1, T0.plus_ms(1_000));
    take(&f.ledger, &w, 1).expect("taken");
    let child = ProcessId {
        pid: 11,
        start_time: 4,
    };
    f.ledger
        .child_started(w.host_id, &id, 0, child, T0.plus_ms(2))
        .unwrap();

    // Its lease runs out: it is dead wherever it ran.
    let report = f
        .ledger
        .recover(&Pids(true), T0.plus_ms(2_000), hermes_ledger::Sweep::Now)
        .unwrap();
    assert_eq!(report.finalized, vec![id.clone()]);
    assert!(report.returned_to_pool.is_empty());
    let unit = f.ledger.delegation(&id).unwrap().unwrap();
    assert_eq!(unit.status, UnitStatus::Unknown);
    assert!(f.ledger.is_fully_recorded(&id).unwrap());

    let late = f.ledger.finish_child(
        w.host_id,
        &id,
        outcome(0, ChildStatus::Completed, T0.plus_ms(2_100)),
        T0.plus_ms(2_100),
    );
    assert!(matches!(late, Err(LedgerError::Fenced { .. })), "{late:?}");
    let progress = f
        .ledger
        .record_progress(
            w.host_id,
            &[ProgressUpdate {
                delegation_id: id.clone(),
                index: 0,
                progress: Progress::default(),
                tail: None,
            }],
        )
        .unwrap();
    assert_eq!(progress, vec![id.clone()], "late progress is refused");
    pool_unit(&f.ledger, "a", ROOMY).unwrap();
    assert!(
        matches!(
            f.ledger
                .take_pool_unit(w.process, w.host_id, "a", 1, T0.plus_ms(2_200)),
            Err(LedgerError::LeaseLost(_))
        ),
        "a worker judged dead takes nothing more"
    );
    assert!(matches!(
        f.ledger
            .renew_host(w.process, w.host_id, 1_000, T0.plus_ms(2_200)),
        Err(LedgerError::LeaseLost(_))
    ));
}

#[test]
fn a_unit_a_dead_worker_never_started_goes_back_to_its_place_in_the_pool() {
    let f = fixture();
    let first = pool_unit(&f.ledger, "a", ROOMY).unwrap().delegation.id;
    let w1 = worker(&f.ledger, 10, "a", 1, LONG);
    take(&f.ledger, &w1, 1).expect("taken");
    let second = pool_unit(&f.ledger, "a", ROOMY).unwrap().delegation.id;

    // The worker's process is gone (a kill -9 on this machine) before it started a child.
    let before = f.ledger.activity().unwrap();
    let report = f
        .ledger
        .recover(&Pids(false), T0.plus_ms(10), hermes_ledger::Sweep::Now)
        .unwrap();
    assert_eq!(report.returned_to_pool, vec![first.clone()]);
    assert_ne!(
        f.ledger.activity().unwrap(),
        before,
        "the other workers are woken"
    );
    assert!(report.finalized.is_empty());
    assert_eq!(report.dead_hosts, 1);
    let unit = f.ledger.delegation(&first).unwrap().unwrap();
    assert_eq!(unit.status, UnitStatus::Queued);
    assert_eq!((unit.host, unit.started_at), (None, None));
    assert!(
        f.ledger.events(&first).unwrap().is_empty(),
        "nothing was published"
    );

    // Its late start is refused; the next worker takes it first, before the younger unit.
    let late = f.ledger.child_started(
        w1.host_id,
        &first,
        0,
        ProcessId {
            pid: 12,
            start_time: 1,
        },
        T0.plus_ms(11),
    );
    assert!(matches!(late, Err(LedgerError::Fenced { .. })), "{late:?}");
    let late = f.ledger.finish_child(
        w1.host_id,
        &first,
        outcome(0, ChildStatus::Completed, T0.plus_ms(11)),
        T0.plus_ms(11),
    );
    assert!(matches!(late, Err(LedgerError::Fenced { .. })), "{late:?}");
    let late = f
        .ledger
        .finish_unit(w1.host_id, &first, Vec::new(), "x", T0.plus_ms(11));
    assert!(matches!(late, Err(LedgerError::Fenced { .. })), "{late:?}");
    let stalling = Stalling {
        index: 0,
        detail: ExitDetail::None,
        since: T0.plus_ms(11),
    };
    let late = f.ledger.child_stalling(w1.host_id, &first, &stalling);
    assert!(matches!(late, Err(LedgerError::Fenced { .. })), "{late:?}");
    let w2 = worker(&f.ledger, 20, "a", 1, LONG);
    assert_eq!(take(&f.ledger, &w2, 1).expect("taken again").id, first);
    f.ledger
        .finish_child(
            w2.host_id,
            &first,
            outcome(0, ChildStatus::Completed, T0.plus_ms(20)),
            T0.plus_ms(20),
        )
        .unwrap();
    assert_eq!(take(&f.ledger, &w2, 1).expect("then the next").id, second);
    let done = f.ledger.delegation(&first).unwrap().unwrap();
    assert_eq!(done.status, UnitStatus::Completed);
    assert_eq!(f.ledger.events(&first).unwrap().len(), 1, "one event, once");
}

#[test]
fn stopping_or_ending_the_session_reaches_pool_units() {
    let f = fixture();
    let waiting = pool_unit(&f.ledger, "a", ROOMY).unwrap().delegation.id;
    let w = worker(&f.ledger, 10, "a", 1, LONG);
    let running = pool_unit(&f.ledger, "a", ROOMY).unwrap().delegation.id;
    // `waiting` was first in the pool: the worker runs it; `running` now waits.
    assert_eq!(take(&f.ledger, &w, 1).unwrap().id, waiting);
    let end = f.ledger.end_session(&session(), T0.plus_ms(5)).unwrap();
    assert_eq!(end.interrupted, vec![waiting.clone()]);
    assert_eq!(end.cancelled, vec![running.clone()]);
    assert_eq!(
        f.ledger.interrupt_requests(w.process).unwrap(),
        vec![(waiting, "session_end".to_owned())],
        "the worker is asked to stop the unit it runs"
    );
    assert!(
        take(&f.ledger, &w, 1).is_none(),
        "a cancelled unit is never taken"
    );
}
