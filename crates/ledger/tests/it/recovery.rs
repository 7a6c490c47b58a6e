//! The recovery sweep, with a fake operating system.

use std::collections::HashSet;
use std::sync::Mutex;

use crate::common::*;
use hermes_ledger::*;

struct FakeReaper {
    alive: HashSet<ProcessId>,
    killed: Mutex<Vec<ProcessId>>,
}

fn here() -> Locality {
    Locality {
        boot_id: "boot-a".into(),
        pid_namespace: "pid:[1]".into(),
        hostname: "a".into(),
    }
}

fn elsewhere() -> Locality {
    Locality {
        pid_namespace: "pid:[2]".into(),
        ..here()
    }
}

impl Liveness for FakeReaper {
    fn locality(&self) -> Locality {
        here()
    }
    fn is_alive(&self, process: ProcessId) -> bool {
        self.alive.contains(&process)
    }
}

impl Reaper for FakeReaper {
    fn kill_child(&self, _: &DelegationId, child: &Child) {
        self.killed.lock().unwrap().extend(child.process);
    }
    fn transcript_tail(&self, path: &str) -> Option<String> {
        Some(format!("tail of {path}"))
    }
}

fn reaper(alive: &[ProcessId]) -> FakeReaper {
    FakeReaper {
        alive: alive.iter().copied().collect(),
        killed: Mutex::default(),
    }
}

/// Registers a host of session `s` at `locality` whose lease runs until `lease_until`.
fn host_at(ledger: &Ledger, pid: u32, locality: Locality, lease_until: Timestamp) -> HostRecord {
    let host = HostRecord {
        process: ProcessId { pid, start_time: 5 },
        kind: HostKind::Headless,
        session: Some(session()),
        registered_at: T0,
        heartbeat_at: T0,
        host_id: HostId(u128::from(pid) << 64),
        locality,
        lease_expires_at: lease_until,
        worker: None,
    };
    ledger.register_host(&host).unwrap();
    host
}

/// A unit of `tasks` children hosted by `host`, its first child started as `child`.
fn hosted_unit(ledger: &Ledger, host: &HostRecord, tasks: u32, child: ProcessId) -> DelegationId {
    let new = NewDelegation {
        id: None,
        session: Some(session()),
        channel: Channel::Background,
        spec: spec(tasks),
        host: Some(host.process),
        transcript_root: Some("/t".into()),
    };
    let id = ledger.dispatch(new, ROOMY, T0).unwrap().delegation.id;
    ledger
        .child_started(host.host_id, &id, 0, child, T0)
        .unwrap();
    id
}

const LONG: Timestamp = Timestamp(u64::MAX);

#[test]
fn a_dead_hosts_units_are_finalized_as_unknown_with_tails() {
    let f = fixture();
    let host = ProcessId {
        pid: 100,
        start_time: 5,
    };
    let child = ProcessId {
        pid: 101,
        start_time: 6,
    };
    let record = HostRecord {
        process: host,
        kind: HostKind::Headless,
        session: Some(session()),
        registered_at: T0,
        heartbeat_at: T0,
        host_id: HostId(9),
        locality: here(),
        lease_expires_at: LONG,
        worker: None,
    };
    f.ledger.register_host(&record).unwrap();
    let new = NewDelegation {
        id: None,
        session: Some(session()),
        channel: Channel::Background,
        spec: spec(3),
        host: Some(host),
        transcript_root: Some("/t".into()),
    };
    let id = f.ledger.dispatch(new, ROOMY, T0).unwrap().delegation.id;
    f.ledger
        .child_started(HostId(9), &id, 0, child, T0)
        .unwrap();
    f.ledger
        .child_started(
            HostId(9),
            &id,
            1,
            ProcessId {
                pid: 102,
                start_time: 6,
            },
            T0,
        )
        .unwrap();
    f.ledger
        .finish_child(
            HostId(9),
            &id,
            outcome(1, ChildStatus::Completed, T0.plus_ms(5)),
            T0.plus_ms(5),
        )
        .unwrap();

    let alive = FakeReaper {
        alive: HashSet::from([host]),
        killed: Mutex::default(),
    };
    let report = f
        .ledger
        .recover(&alive, T0.plus_ms(10), hermes_ledger::Sweep::Now)
        .unwrap();
    assert!(
        report.ran && report.finalized.is_empty(),
        "a live host's units are left alone"
    );

    let dead = FakeReaper {
        alive: HashSet::new(),
        killed: Mutex::default(),
    };
    // Rate limited: a sweep within the interval does nothing.
    assert!(
        !f.ledger
            .recover(&dead, T0.plus_ms(20), hermes_ledger::Sweep::IfDue)
            .unwrap()
            .ran
    );
    let report = f
        .ledger
        .recover(&dead, T0.plus_ms(10_000), hermes_ledger::Sweep::IfDue)
        .unwrap();
    assert_eq!(report.finalized, vec![id.clone()]);
    assert_eq!(
        *dead.killed.lock().unwrap(),
        vec![child],
        "only the running child is killed"
    );
    assert_eq!(report.dead_hosts, 1);

    let unit = f.ledger.delegation(&id).unwrap().unwrap();
    assert_eq!(unit.status, UnitStatus::Unknown);
    let events = f.ledger.events(&id).unwrap();
    assert_eq!(
        events.len(),
        2,
        "task:1 stays, one terminal event covers the rest"
    );
    let terminal = events.iter().find(|e| e.key == EventKey::Terminal).unwrap();
    let EventPayload::Terminal {
        children, reason, ..
    } = &terminal.payload
    else {
        panic!("terminal payload")
    };
    assert_eq!(reason, "owner_died");
    assert_eq!(children.len(), 2);
    assert_eq!(children[0].status, ChildStatus::Unknown);
    assert_eq!(
        children[0].transcript_tail.as_deref(),
        Some(format!("tail of /t/{id}/task-0.log").as_str())
    );
    assert_eq!(
        children[1].status,
        ChildStatus::Cancelled,
        "a child that never started is cancelled"
    );
    assert!(f.ledger.is_fully_recorded(&id).unwrap());
    // A second sweep finds nothing more to do.
    assert!(
        f.ledger
            .recover(&dead, T0.plus_ms(20_000), hermes_ledger::Sweep::Now)
            .unwrap()
            .finalized
            .is_empty()
    );
}

#[test]
fn old_pending_events_expire_and_old_units_are_purged() {
    let config = LedgerConfig {
        replay_max_age_ms: 1_000,
        retention_ms: 5_000,
        ..LedgerConfig::default()
    };
    let f = fixture_with(config);
    let reaper = FakeReaper {
        alive: HashSet::new(),
        killed: Mutex::default(),
    };
    let id = unit(&f.ledger, 2);
    finish(&f.ledger, &id, 0, T0);
    finish(&f.ledger, &id, 1, T0.plus_ms(900));
    let report = f
        .ledger
        .recover(&reaper, T0.plus_ms(1_500), hermes_ledger::Sweep::Now)
        .unwrap();
    assert_eq!(report.expired_events, 1);
    let event = f.ledger.event(&key(&id, 0)).unwrap().unwrap();
    assert_eq!(event.drop_reason, Some(DropReason::ReplayExpired));
    assert_eq!(state(&f.ledger, &key(&id, 1)), EventState::Pending);
    assert_eq!(
        f.ledger
            .recover(&reaper, T0.plus_ms(5_500), hermes_ledger::Sweep::Now)
            .unwrap()
            .purged_units,
        0
    );
    let report = f
        .ledger
        .recover(&reaper, T0.plus_ms(6_000), hermes_ledger::Sweep::Now)
        .unwrap();
    assert_eq!(report.purged_units, 1);
    assert!(f.ledger.delegation(&id).unwrap().is_none());
    assert!(f.ledger.events(&id).unwrap().is_empty());
    assert!(f.ledger.children(&id).unwrap().is_empty());
    assert!(f.ledger.list(None, 10).unwrap().recent.is_empty());
}

#[test]
fn a_host_in_another_locality_is_never_judged_by_pid_while_its_lease_is_fresh() {
    let f = fixture();
    let child = ProcessId {
        pid: 201,
        start_time: 7,
    };
    let host = host_at(&f.ledger, 200, elsewhere(), T0.plus_ms(30_000));
    let id = hosted_unit(&f.ledger, &host, 1, child);
    // Neither pid exists here: that proves nothing about another pid namespace.
    let nobody = reaper(&[]);
    let report = f
        .ledger
        .recover(&nobody, T0.plus_ms(10_000), hermes_ledger::Sweep::Now)
        .unwrap();
    assert!(report.finalized.is_empty(), "{report:?}");
    assert_eq!(report.dead_hosts, 0);
    assert_eq!(
        f.ledger.delegation(&id).unwrap().unwrap().status,
        UnitStatus::Running
    );
    assert!(
        f.ledger
            .host_is_live(host.process, &nobody, T0.plus_ms(10_000))
            .unwrap()
    );
}

#[test]
fn an_expired_lease_elsewhere_ends_the_unit_unknown_with_the_stored_tail_and_kills_nothing_here() {
    let f = fixture();
    let child = ProcessId {
        pid: 301,
        start_time: 7,
    };
    let host = host_at(&f.ledger, 300, elsewhere(), T0.plus_ms(30_000));
    let id = hosted_unit(&f.ledger, &host, 1, child);
    let update = ProgressUpdate {
        delegation_id: id.clone(),
        index: 0,
        progress: Progress::default(),
        tail: Some("last words\n".into()),
    };
    assert!(
        f.ledger
            .record_progress(host.host_id, &[update])
            .unwrap()
            .is_empty()
    );
    // Even a process here with the same pid and start time is not the host's child.
    let confusable = reaper(&[child, host.process]);
    let report = f
        .ledger
        .recover(&confusable, T0.plus_ms(30_001), hermes_ledger::Sweep::Now)
        .unwrap();
    assert_eq!(report.finalized, vec![id.clone()]);
    assert!(
        confusable.killed.lock().unwrap().is_empty(),
        "nothing killed here"
    );
    assert_eq!(report.dead_hosts, 1);
    let terminal = f
        .ledger
        .events(&id)
        .unwrap()
        .into_iter()
        .find(|e| e.key == EventKey::Terminal)
        .unwrap();
    let outcome = &terminal.payload.outcomes()[0];
    assert_eq!(outcome.status, ChildStatus::Unknown);
    assert_eq!(outcome.transcript_tail.as_deref(), Some("last words"));
}

#[test]
fn a_dead_hosts_late_writes_are_refused_and_its_lease_cannot_be_renewed() {
    let f = fixture();
    let child = ProcessId {
        pid: 401,
        start_time: 7,
    };
    let host = host_at(&f.ledger, 400, here(), LONG);
    let id = hosted_unit(&f.ledger, &host, 2, child);
    // kill -9 of a host here is noticed by pid, long before any lease.
    let report = f
        .ledger
        .recover(&reaper(&[]), T0.plus_ms(1), hermes_ledger::Sweep::Now)
        .unwrap();
    assert_eq!(report.finalized, vec![id.clone()]);
    let late = f.ledger.finish_child(
        host.host_id,
        &id,
        outcome(0, ChildStatus::Completed, T0.plus_ms(2)),
        T0.plus_ms(2),
    );
    assert!(
        matches!(&late, Err(LedgerError::Fenced { delegation, host: h }) if *delegation == id && *h == host.host_id),
        "{late:?}"
    );
    let update = ProgressUpdate {
        delegation_id: id.clone(),
        index: 1,
        progress: Progress::default(),
        tail: None,
    };
    assert_eq!(
        f.ledger.record_progress(host.host_id, &[update]).unwrap(),
        vec![id.clone()]
    );
    assert!(matches!(
        f.ledger
            .renew_host(host.process, host.host_id, 30_000, T0.plus_ms(3)),
        Err(LedgerError::LeaseLost(h)) if h == host.host_id
    ));
    assert_eq!(
        f.ledger.events(&id).unwrap().len(),
        1,
        "only the terminal event"
    );
}

#[test]
fn renewals_move_the_lease_until_the_record_is_recovered_or_another_epochs() {
    let f = fixture();
    let host = host_at(&f.ledger, 410, here(), LONG);
    // Several in a row (on PostgreSQL the second on is one statement over the last one).
    for at in [5, 10, 15] {
        let until = f
            .ledger
            .renew_host(host.process, host.host_id, 30_000, T0.plus_ms(at))
            .unwrap();
        assert_eq!(until, T0.plus_ms(at + 30_000));
        let stored = f.ledger.host(host.process).unwrap().unwrap();
        assert_eq!(
            (stored.heartbeat_at, stored.lease_expires_at),
            (T0.plus_ms(at), until)
        );
    }
    // The same process registered again with a fresh epoch: the old epoch's renewal is
    // refused and writes nothing over the new record.
    let newer = HostRecord {
        host_id: HostId(host.host_id.0 + 1),
        ..host.clone()
    };
    f.ledger.register_host(&newer).unwrap();
    assert!(matches!(
        f.ledger
            .renew_host(host.process, host.host_id, 30_000, T0.plus_ms(20)),
        Err(LedgerError::LeaseLost(h)) if h == host.host_id
    ));
    assert_eq!(f.ledger.host(host.process).unwrap().unwrap(), newer);
    // The new epoch renews; once recovery forgot the host, neither does.
    f.ledger
        .renew_host(newer.process, newer.host_id, 30_000, T0.plus_ms(25))
        .unwrap();
    f.ledger
        .renew_host(newer.process, newer.host_id, 30_000, T0.plus_ms(30))
        .unwrap();
    f.ledger
        .recover(&reaper(&[]), T0.plus_ms(31), hermes_ledger::Sweep::Now)
        .unwrap();
    assert_eq!(f.ledger.host(newer.process).unwrap(), None);
    assert!(matches!(
        f.ledger
            .renew_host(newer.process, newer.host_id, 30_000, T0.plus_ms(35)),
        Err(LedgerError::LeaseLost(h)) if h == newer.host_id
    ));
}

#[test]
fn a_dead_hosts_queued_units_go_to_the_sessions_live_host_never_cancelled() {
    let f = fixture();
    let dead = host_at(&f.ledger, 500, here(), LONG);
    let live = host_at(&f.ledger, 600, here(), LONG);
    let new = NewDelegation {
        id: None,
        session: Some(session()),
        channel: Channel::Background,
        spec: spec(1),
        host: Some(dead.process),
        transcript_root: None,
    };
    let full = Capacity {
        max_running: 0,
        max_queued: 10,
    };
    let id = f.ledger.dispatch(new, full, T0).unwrap().delegation.id;
    assert_eq!(
        f.ledger.delegation(&id).unwrap().unwrap().status,
        UnitStatus::Queued
    );
    f.ledger
        .claim_session_host(&session(), live.process, &reaper(&[live.process]), T0)
        .unwrap();
    let before = f.ledger.activity().unwrap();
    let report = f
        .ledger
        .recover(
            &reaper(&[live.process]),
            T0.plus_ms(1),
            hermes_ledger::Sweep::Now,
        )
        .unwrap();
    assert_eq!(report.adopted, vec![id.clone()]);
    assert!(report.finalized.is_empty());
    let unit = f.ledger.delegation(&id).unwrap().unwrap();
    assert_eq!(unit.status, UnitStatus::Queued, "never cancelled");
    assert_eq!(unit.host, Some(live.process));
    assert_ne!(f.ledger.activity().unwrap(), before, "hosts are woken");
}

/// A session's new host (a headless host after the last one left, `--resume`) has the
/// session's queued units from the commit that registers it, and only those: a pool's unit
/// stays the pool's, another session's stays where it was.
#[test]
fn a_session_host_registers_and_takes_its_sessions_queued_units_in_one_commit() {
    let f = fixture();
    let old = host_at(&f.ledger, 500, here(), LONG);
    let mine = queued_on(&f.ledger, &old);
    let queue = |new: NewDelegation| f.ledger.dispatch(new, FULL, T0).unwrap().delegation.id;
    let theirs = queue(NewDelegation {
        session: Some(SessionId::new("other").expect("id")),
        ..queued_request(&old)
    });
    let pooled = queue(NewDelegation {
        spec: DispatchSpec {
            pool: Some("p".into()),
            ..spec(1)
        },
        ..queued_request(&old)
    });
    let new = HostRecord {
        process: ProcessId {
            pid: 600,
            start_time: 5,
        },
        host_id: HostId(600 << 64),
        ..old.clone()
    };
    let commits = f.ledger.commits();
    let moved = f.ledger.register_session_host(&new, &session()).unwrap();
    assert_eq!(moved, 1);
    assert_eq!(f.ledger.commits() - commits, 1, "one commit");
    assert!(f.ledger.host(new.process).unwrap().is_some(), "registered");
    let host_of = |id: &DelegationId| f.ledger.delegation(id).unwrap().unwrap().host;
    assert_eq!(host_of(&mine), Some(new.process));
    assert_eq!(host_of(&theirs), Some(old.process), "another session's");
    assert_ne!(host_of(&pooled), Some(new.process), "the pool's");
}

/// Room for no running unit: every dispatch queues.
const FULL: Capacity = Capacity {
    max_running: 0,
    max_queued: 10,
};

/// A unit of the session for `host` to queue.
fn queued_request(host: &HostRecord) -> NewDelegation {
    NewDelegation {
        id: None,
        session: Some(session()),
        channel: Channel::Background,
        spec: spec(1),
        host: Some(host.process),
        transcript_root: None,
    }
}

/// A unit of the session queued on `host` (no room to run).
fn queued_on(ledger: &Ledger, host: &HostRecord) -> DelegationId {
    ledger
        .dispatch(queued_request(host), FULL, T0)
        .unwrap()
        .delegation
        .id
}

/// Issue #22 defect 7: a session whose host of this machine died (its process
/// gone) with queued units and no other host is reported `hostless`, for the sweeping process
/// to start it a host; one whose host still runs after fencing (it rejoins by itself), or ran
/// on another machine (that machine's to replace), is not.
#[test]
fn a_session_left_with_queued_units_by_a_host_gone_here_is_reported_hostless() {
    let after_lease = T0.plus_ms(10);
    for (case, locality, process_alive, hostless) in [
        ("gone here", here(), false, true),
        ("fenced, still running here", here(), true, false),
        ("on another machine", elsewhere(), false, false),
    ] {
        let f = fixture();
        let dead = host_at(&f.ledger, 500, locality, T0.plus_ms(5));
        let id = queued_on(&f.ledger, &dead);
        let alive: &[ProcessId] = if process_alive { &[dead.process] } else { &[] };
        let report = f
            .ledger
            .recover(&reaper(alive), after_lease, hermes_ledger::Sweep::Now)
            .unwrap();
        assert_eq!(report.adopted, vec![id.clone()], "{case}");
        let expected = if hostless {
            vec![session()]
        } else {
            Vec::new()
        };
        assert_eq!(report.hostless, expected, "{case}");
        let unit = f.ledger.delegation(&id).unwrap().unwrap();
        assert_eq!(
            (unit.status, unit.host),
            (UnitStatus::Queued, None),
            "{case}: waits for the next host"
        );
    }
    // With a live host of the session to take them, nothing is hostless.
    let f = fixture();
    let dead = host_at(&f.ledger, 500, here(), LONG);
    let live = host_at(&f.ledger, 600, here(), LONG);
    queued_on(&f.ledger, &dead);
    f.ledger
        .claim_session_host(&session(), live.process, &reaper(&[live.process]), T0)
        .unwrap();
    let report = f
        .ledger
        .recover(
            &reaper(&[live.process]),
            T0.plus_ms(1),
            hermes_ledger::Sweep::Now,
        )
        .unwrap();
    assert_eq!(report.adopted.len(), 1);
    assert!(report.hostless.is_empty(), "{report:?}");
}

#[test]
fn a_host_of_another_machine_with_the_same_pid_and_start_time_is_never_overwritten() {
    let f = fixture();
    // Machine A's host, live, with a running unit.
    let a = host_at(&f.ledger, 7, elsewhere(), T0.plus_ms(30_000));
    let id = hosted_unit(
        &f.ledger,
        &a,
        1,
        ProcessId {
            pid: 70,
            start_time: 1,
        },
    );
    // Machine B's process happens to have the same pid and start time.
    let b = HostRecord {
        host_id: HostId(99),
        locality: here(),
        registered_at: T0.plus_ms(1_000),
        ..a.clone()
    };
    let err = f.ledger.register_host(&b).expect_err("refused");
    assert!(matches!(err, LedgerError::HostCollision { .. }), "{err}");
    assert_eq!(
        f.ledger.host(a.process).unwrap().unwrap().host_id,
        a.host_id
    );
    // Past A's lease, its unit still names it: still refused, so the unit is recovered as
    // A's, never adopted by B.
    let later = HostRecord {
        registered_at: T0.plus_ms(60_000),
        ..b.clone()
    };
    assert!(f.ledger.register_host(&later).is_err());
    // Once A is recovered (its unit finalized, its record gone), B may register.
    let report = f
        .ledger
        .recover(&reaper(&[]), T0.plus_ms(60_000), hermes_ledger::Sweep::Now)
        .unwrap();
    assert_eq!(report.finalized, vec![id]);
    f.ledger.register_host(&later).expect("registers");
    // The same process registering again (a new epoch of the same locality) is fine.
    let again = HostRecord {
        host_id: HostId(100),
        ..later
    };
    f.ledger.register_host(&again).expect("re-registers");
}

#[test]
fn hosts_of_two_process_tables_sharing_a_pid_and_start_time_are_two_hosts() {
    let f = fixture();
    // Pid 1 of two pid namespaces, started in the same clock tick: one process identity.
    let os = ProcessId {
        pid: 1,
        start_time: 663_037,
    };
    let (a, b) = (os.as_host_in(&here()), os.as_host_in(&elsewhere()));
    assert_ne!(a, b, "the locality is part of a host's identity");
    assert_eq!(a, os.as_host_in(&here()), "and the same in one locality");
    assert!(a.names(1, 663_037) && b.names(1, 663_037));
    assert!(!a.names(1, 663_038) && !a.names(2, 663_037));
    let lease = T0.plus_ms(30_000);
    let register = |process: ProcessId, locality: Locality, epoch: u128| {
        let host = HostRecord {
            process,
            kind: HostKind::Worker,
            session: None,
            registered_at: T0,
            heartbeat_at: T0,
            host_id: HostId(epoch),
            locality,
            lease_expires_at: lease,
            worker: Some(WorkerPool {
                pool: "default".into(),
                capacity: 4,
            }),
        };
        f.ledger.register_host(&host).expect("registers");
        host
    };
    // Both register at once, neither refused, neither overwriting the other.
    let (ha, hb) = (register(a, here(), 1), register(b, elsewhere(), 2));
    assert_eq!(f.ledger.host(a).unwrap().unwrap().host_id, ha.host_id);
    assert_eq!(f.ledger.host(b).unwrap().unwrap().host_id, hb.host_id);
    let workers = f
        .ledger
        .workers(Some("default"), &reaper(&[a]), T0)
        .unwrap();
    assert_eq!(workers.len(), 2, "{workers:?}");
    // Each renews its own lease.
    f.ledger
        .renew_host(a, ha.host_id, 30_000, T0.plus_ms(1))
        .unwrap();
    f.ledger
        .renew_host(b, hb.host_id, 30_000, T0.plus_ms(1))
        .unwrap();
    // Judged from `here`, where the process table holds `a`'s process: `a` by its pid, `b` only
    // by its lease (its pid means another process here).
    let only_a = reaper(&[a]);
    assert!(f.ledger.host_is_live(a, &only_a, T0.plus_ms(2)).unwrap());
    assert!(f.ledger.host_is_live(b, &only_a, T0.plus_ms(2)).unwrap());
    let none = reaper(&[]);
    assert!(!f.ledger.host_is_live(a, &none, T0.plus_ms(2)).unwrap());
    assert!(f.ledger.host_is_live(b, &none, T0.plus_ms(2)).unwrap());
    // A sweep here recovers `a` (gone from this process table) and leaves `b` alone.
    let report = f
        .ledger
        .recover(&none, T0.plus_ms(2), hermes_ledger::Sweep::Now)
        .unwrap();
    assert_eq!(report.dead_hosts, 1, "{report:?}");
    assert!(f.ledger.host(a).unwrap().is_none());
    assert_eq!(f.ledger.host(b).unwrap().unwrap().host_id, hb.host_id);
}

/// A reaper that records every child it is asked to kill, pid or not.
struct RecordingReaper {
    asked: Mutex<Vec<(u32, Option<ProcessId>)>>,
}

impl Liveness for RecordingReaper {
    fn locality(&self) -> Locality {
        here()
    }
    fn is_alive(&self, _: ProcessId) -> bool {
        false
    }
}

impl Reaper for RecordingReaper {
    fn kill_child(&self, _: &DelegationId, child: &Child) {
        self.asked
            .lock()
            .unwrap()
            .push((child.index, child.process));
    }
    fn transcript_tail(&self, _: &str) -> Option<String> {
        None
    }
}

/// A one-shot run's host registers in its unit's dispatch commit, which records the unit's
/// first children running before they have a pid; the run leaves in the commit that settles
/// the unit's events.
#[test]
fn a_oneshot_host_registers_with_its_dispatch_and_leaves_with_its_settlement() {
    let f = fixture();
    let host = HostRecord {
        kind: HostKind::Inline,
        session: None,
        lease_expires_at: LONG,
        ..host_at(&f.ledger, 300, here(), LONG)
    };
    f.ledger.unregister_host(host.process).unwrap();
    let new = NewDelegation {
        id: None,
        session: None,
        channel: Channel::Inline,
        spec: spec(3),
        host: Some(host.process),
        transcript_root: Some("/t".into()),
    };
    let two = Capacity {
        max_running: 2,
        max_queued: 10,
    };
    let before = f.ledger.commits();
    let id = f
        .ledger
        .register_and_dispatch(&host, new, two, T0)
        .unwrap()
        .delegation
        .id;
    assert_eq!(f.ledger.commits(), before + 1, "one commit");
    assert_eq!(f.ledger.host(host.process).unwrap(), Some(host.clone()));
    let children = f.ledger.children(&id).unwrap();
    let states: Vec<_> = children
        .iter()
        .map(|c| (c.status, c.process, c.started_at, c.machine.as_deref()))
        .collect();
    assert_eq!(
        states,
        [
            (ChildStatus::Running, None, Some(T0), Some("a")),
            (ChildStatus::Running, None, Some(T0), Some("a")),
            (ChildStatus::Pending, None, None, None),
        ],
        "as many running as the batch runs at once"
    );
    // A short child's pid goes in with its outcome.
    let pid = ProcessId {
        pid: 301,
        start_time: 7,
    };
    let mut done = outcome(0, ChildStatus::Completed, T0.plus_ms(5));
    done.started_at = Some(T0.plus_ms(1));
    f.ledger
        .finish_started_child(host.host_id, &id, pid, done, None, T0.plus_ms(5))
        .unwrap();
    let first = f.ledger.children(&id).unwrap().remove(0);
    assert_eq!(
        (first.status, first.process, first.started_at),
        (ChildStatus::Completed, Some(pid), Some(T0.plus_ms(1)))
    );
    // One that could not start (recorded running by the dispatch) keeps no start.
    let failed = ChildOutcome {
        started_at: None,
        ..outcome(1, ChildStatus::Error, T0.plus_ms(6))
    };
    f.ledger
        .finish_child(host.host_id, &id, failed, T0.plus_ms(6))
        .unwrap();
    let second = f.ledger.children(&id).unwrap().remove(1);
    assert_eq!((second.process, second.started_at), (None, None));
    f.ledger
        .finish_child(
            host.host_id,
            &id,
            outcome(2, ChildStatus::Completed, T0.plus_ms(6)),
            T0.plus_ms(6),
        )
        .unwrap();
    let before = f.ledger.commits();
    let settled = f
        .ledger
        .settle_inline_leaving(&id, host.process, T0.plus_ms(7))
        .unwrap();
    assert_eq!(settled.len(), 3);
    assert_eq!(f.ledger.commits(), before + 1, "one commit");
    assert_eq!(f.ledger.host(host.process).unwrap(), None);
    assert!(
        f.ledger
            .events(&id)
            .unwrap()
            .iter()
            .all(|e| e.state == EventState::Delivered)
    );
}

/// A one-shot run's host leaves with its unit: the finish that ends the unit also settles the
/// unit's events as delivered and removes the host's record, in that one commit; a finish
/// that leaves children running changes neither. A session's unit is never settled so.
#[test]
fn the_finish_that_ends_an_inline_unit_settles_it_and_its_host_leaves_in_that_commit() {
    let f = fixture();
    let (host, id) = inline_unit(&f, 320, 2);
    let leaving = FinishAs {
        started: Some(ProcessId {
            pid: 321,
            start_time: 7,
        }),
        leaving: Some(host.process),
    };
    let first = f
        .ledger
        .finish_child_as(
            host.host_id,
            &id,
            outcome(0, ChildStatus::Completed, T0.plus_ms(5)),
            None,
            leaving,
            T0.plus_ms(5),
        )
        .unwrap();
    assert_eq!((first.unit_status, first.left), (None, false));
    assert_eq!(f.ledger.host(host.process).unwrap(), Some(host.clone()));
    assert_eq!(f.ledger.events(&id).unwrap()[0].state, EventState::Pending);

    let before = f.ledger.commits();
    let last = f
        .ledger
        .finish_child_as(
            host.host_id,
            &id,
            outcome(1, ChildStatus::Completed, T0.plus_ms(6)),
            None,
            leaving,
            T0.plus_ms(6),
        )
        .unwrap();
    assert_eq!(f.ledger.commits(), before + 1, "one commit");
    assert_eq!(
        (last.published, last.unit_status, last.left),
        (true, Some(UnitStatus::Completed), true)
    );
    assert_eq!(f.ledger.host(host.process).unwrap(), None);
    let events = f.ledger.events(&id).unwrap();
    assert_eq!(events.len(), 2);
    for event in &events {
        assert_eq!(event.state, EventState::Delivered, "{event:?}");
        assert_eq!(event.attempts, 1, "{event:?}");
    }
    // Nothing is left for the run to settle once it printed.
    let before = f.ledger.commits();
    assert!(
        f.ledger
            .settle_inline(&id, T0.plus_ms(7))
            .unwrap()
            .is_empty()
    );
    assert_eq!(f.ledger.commits(), before, "nothing to commit");

    // A session's unit keeps its event for its consumers, and its host stays.
    let other = host_at(&f.ledger, 330, here(), LONG);
    let unit = hosted_unit(&f.ledger, &other, 1, leaving.started.unwrap());
    let finish = f
        .ledger
        .finish_child_as(
            other.host_id,
            &unit,
            outcome(0, ChildStatus::Completed, T0.plus_ms(8)),
            None,
            FinishAs {
                started: None,
                leaving: Some(other.process),
            },
            T0.plus_ms(8),
        )
        .unwrap();
    assert_eq!((finish.unit_status.is_some(), finish.left), (true, false));
    assert!(f.ledger.host(other.process).unwrap().is_some());
    assert_eq!(
        f.ledger.events(&unit).unwrap()[0].state,
        EventState::Pending
    );
}

/// A one-shot run that dies after its dispatch, before it recorded its child's pid: recovery
/// still asks to kill the child (the reaper finds it by its marker) and reports it `unknown`,
/// since it may have run, never `cancelled`.
#[test]
fn a_running_child_without_a_pid_is_killed_by_recovery_and_ends_unknown() {
    let f = fixture();
    let (host, id) = inline_unit(&f, 310, 1);
    let dead = RecordingReaper {
        asked: Mutex::default(),
    };
    let report = f
        .ledger
        .recover(&dead, T0.plus_ms(10), hermes_ledger::Sweep::Now)
        .unwrap();
    assert_eq!(report.finalized, vec![id.clone()]);
    assert_eq!(*dead.asked.lock().unwrap(), vec![(0, None)]);
    let statuses: Vec<_> = f
        .ledger
        .children(&id)
        .unwrap()
        .iter()
        .map(|c| c.status)
        .collect();
    assert_eq!(statuses, [ChildStatus::Unknown, ChildStatus::Cancelled]);
    assert_eq!(
        f.ledger.delegation(&id).unwrap().unwrap().status,
        UnitStatus::Unknown
    );
    assert_eq!(f.ledger.host(host.process).unwrap(), None, "forgotten");
}

/// A child's start is recorded only by the host of its unit in its current epoch, with that
/// host's machine (one read of the host's record serves both).
#[test]
fn a_childs_start_is_refused_to_another_epoch_and_names_the_hosts_machine() {
    let f = fixture();
    let host = host_at(&f.ledger, 300, here(), LONG);
    let child = ProcessId {
        pid: 301,
        start_time: 6,
    };
    let id = hosted_unit(&f.ledger, &host, 2, child);
    let stale = HostId(host.host_id.0 + 1);
    let refused = f.ledger.child_started(stale, &id, 1, child, T0);
    assert!(
        matches!(refused, Err(LedgerError::Fenced { .. })),
        "{refused:?}"
    );
    let children = f.ledger.children(&id).unwrap();
    assert_eq!(children[1].status, ChildStatus::Pending);
    let started = &children[0];
    assert_eq!(started.status, ChildStatus::Running);
    assert_eq!(
        started.machine,
        Some(here().hostname).filter(|h| !h.is_empty())
    );
}

/// A one-shot run's unit of two children, registered with its inline host (process `pid`) in
/// its dispatch commit, as `hermes -z` does, `running` of them started at once.
fn inline_unit(f: &Fixture, pid: u32, running: u32) -> (HostRecord, DelegationId) {
    let host = HostRecord {
        kind: HostKind::Inline,
        session: None,
        ..host_at(&f.ledger, pid, here(), LONG)
    };
    f.ledger.unregister_host(host.process).unwrap();
    let new = NewDelegation {
        id: None,
        session: None,
        channel: Channel::Inline,
        spec: spec(2),
        host: Some(host.process),
        transcript_root: Some("/t".into()),
    };
    let capacity = Capacity {
        max_running: running,
        max_queued: 10,
    };
    let id = f
        .ledger
        .register_and_dispatch(&host, new, capacity, T0)
        .unwrap()
        .delegation
        .id;
    (host, id)
}

/// A host claims its session before its record is written, and a unit can name it in
/// between. From its own process table a sweep judges it by pid; from another one (a process
/// outside the container it runs in) its pid means nothing, and a sweep there must neither hand
/// its units over nor kill its children.
#[test]
fn a_host_still_registering_is_judged_by_pid_only_from_its_own_process_table() {
    let plain = ProcessId {
        pid: 3,
        start_time: 5,
    };
    for (case, process, taken_for_dead) in [
        ("registering here", plain.as_host_in(&here()), true),
        (
            "registering elsewhere",
            plain.as_host_in(&elsewhere()),
            false,
        ),
        ("an untagged format-1 identity", plain, true),
    ] {
        let f = fixture();
        let nobody = reaper(&[]);
        f.ledger
            .claim_session_host(&session(), process, &nobody, T0)
            .unwrap();
        let id = f
            .ledger
            .dispatch(
                NewDelegation {
                    host: Some(process),
                    ..queued_request(&host_at(&f.ledger, 9, here(), LONG))
                },
                FULL,
                T0,
            )
            .unwrap()
            .delegation
            .id;
        assert_eq!(
            f.ledger.host_is_live(process, &nobody, T0).unwrap(),
            !taken_for_dead,
            "{case}"
        );
        let report = f
            .ledger
            .recover(&nobody, T0, hermes_ledger::Sweep::Now)
            .unwrap();
        let unit = f.ledger.delegation(&id).unwrap().unwrap();
        assert_eq!(unit.host.is_none(), taken_for_dead, "{case}: {report:?}");
        assert!(nobody.killed.lock().unwrap().is_empty(), "{case}");
    }
}

/// A sweep as of a change stamp that stands still reads nothing it read before: a host that
/// registers and dies without moving the stamp (on PostgreSQL, a write nobody is notified of)
/// is found by the tenth such sweep after the last full one, not before; an event that ages
/// past the replay limit meanwhile is dropped on time all the same; and a stamp that moves
/// has the next sweep read everything.
#[test]
fn sweeps_as_of_a_still_stamp_skip_their_reads_until_something_ages_or_the_recheck() {
    let config = LedgerConfig {
        recovery_interval_ms: 1_000,
        replay_max_age_ms: 5_000,
        ..LedgerConfig::default()
    };
    let f = fixture_with(config);
    let reaper = reaper(&[]);
    let sweep = |at: Timestamp, stamp: u64| {
        f.ledger
            .recover_as_of(&reaper, at, Sweep::IfDue, Some(stamp))
            .unwrap()
    };
    let id = unit(&f.ledger, 1);
    finish(&f.ledger, &id, 0, T0);
    assert!(sweep(T0, 7).ran, "the first sweep reads everything");
    // Registered after that sweep, with no process here: dead, but the stamp says nothing.
    host_at(&f.ledger, 300, here(), T0);
    let mut at = T0;
    for n in 1..=10 {
        at = at.plus_ms(1_000);
        let report = sweep(at, 7);
        assert!(report.ran);
        assert_eq!(report.dead_hosts, 0, "sweep {n} read no host");
        // Published at T0, the event is past the 5 s limit after T0 + 5 s.
        assert_eq!(report.expired_events > 0, n == 6, "sweep {n}");
    }
    assert_eq!(state(&f.ledger, &key(&id, 0)), EventState::Dropped);
    at = at.plus_ms(1_000);
    assert_eq!(sweep(at, 7).dead_hosts, 1, "the recheck reads every host");
    // A full sweep that finds every host alive is quiet again.
    at = at.plus_ms(1_000);
    assert_eq!(sweep(at, 7).dead_hosts, 0);
    host_at(&f.ledger, 301, here(), T0);
    at = at.plus_ms(1_000);
    assert_eq!(sweep(at, 7).dead_hosts, 0, "the stamp stood still");
    at = at.plus_ms(1_000);
    assert_eq!(sweep(at, 8).dead_hosts, 1, "the stamp moved");
}
