//! The recovery sweep, with a fake operating system.

mod common;

use std::cell::RefCell;
use std::collections::HashSet;

use common::*;
use ledger::*;

struct FakeReaper {
    alive: HashSet<ProcessId>,
    killed: RefCell<Vec<ProcessId>>,
}

impl Reaper for FakeReaper {
    fn is_alive(&self, process: ProcessId) -> bool {
        self.alive.contains(&process)
    }
    fn kill_group(&self, leader: ProcessId) {
        self.killed.borrow_mut().push(leader);
    }
    fn transcript_tail(&self, path: &str) -> Option<String> {
        Some(format!("tail of {path}"))
    }
}

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
    f.ledger
        .register_host(&Host {
            process: host,
            kind: HostKind::Headless,
            session: Some(session()),
            registered_at: T0,
            heartbeat_at: T0,
        })
        .unwrap();
    let new = NewDelegation {
        session: Some(session()),
        channel: Channel::Background,
        spec: spec(3),
        host: Some(host),
        transcript_root: Some("/t".into()),
    };
    let id = f.ledger.dispatch(new, ROOMY, T0).unwrap().delegation.id;
    f.ledger.child_started(&id, 0, child, T0).unwrap();
    f.ledger
        .child_started(
            &id,
            1,
            ProcessId {
                pid: 102,
                start_time: 6,
            },
            T0,
        )
        .unwrap();
    finish(&f.ledger, &id, 1, T0.plus_ms(5));

    let alive = FakeReaper {
        alive: HashSet::from([host]),
        killed: RefCell::default(),
    };
    let report = f.ledger.recover(&alive, T0.plus_ms(10), true).unwrap();
    assert!(
        report.ran && report.finalized.is_empty(),
        "a live host's units are left alone"
    );

    let dead = FakeReaper {
        alive: HashSet::new(),
        killed: RefCell::default(),
    };
    // Rate limited: a sweep within the interval does nothing.
    assert!(!f.ledger.recover(&dead, T0.plus_ms(20), false).unwrap().ran);
    let report = f.ledger.recover(&dead, T0.plus_ms(10_000), false).unwrap();
    assert_eq!(report.finalized, vec![id.clone()]);
    assert_eq!(
        *dead.killed.borrow(),
        vec![child],
        "only the running child's group is killed"
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
            .recover(&dead, T0.plus_ms(20_000), true)
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
        killed: RefCell::default(),
    };
    let id = unit(&f.ledger, 2);
    finish(&f.ledger, &id, 0, T0);
    finish(&f.ledger, &id, 1, T0.plus_ms(900));
    let report = f.ledger.recover(&reaper, T0.plus_ms(1_500), true).unwrap();
    assert_eq!(report.expired_events, 1);
    let event = f.ledger.event(&key(&id, 0)).unwrap().unwrap();
    assert_eq!(event.drop_reason, Some(DropReason::ReplayExpired));
    assert_eq!(state(&f.ledger, &key(&id, 1)), EventState::Pending);
    assert_eq!(
        f.ledger
            .recover(&reaper, T0.plus_ms(5_500), true)
            .unwrap()
            .purged_units,
        0
    );
    let report = f.ledger.recover(&reaper, T0.plus_ms(6_000), true).unwrap();
    assert_eq!(report.purged_units, 1);
    assert!(f.ledger.delegation(&id).unwrap().is_none());
    assert!(f.ledger.events(&id).unwrap().is_empty());
    assert!(f.ledger.children(&id).unwrap().is_empty());
    assert!(f.ledger.list(None, 10).unwrap().recent.is_empty());
}
