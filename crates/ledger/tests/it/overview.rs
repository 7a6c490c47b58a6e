//! The whole-ledger views of `hermes top` and the metrics (`overview`, `census`): each unit
//! with its own children, stalls and events, read in bulk in one transaction, on both
//! backends.

use crate::common::*;
use hermes_ledger::*;

#[test]
fn the_overview_gives_each_unit_its_own_children_stalls_and_events() {
    let f = fixture();
    let l = &f.ledger;
    let host = registered_host(l, 41);
    let batch = unit(l, 3);
    let single = unit(l, 1);
    let done = unit(l, 2);
    for id in [&batch, &single, &done] {
        for index in 0..l.children(id).expect("children").len() as u32 {
            l.child_started(owner(l, id), id, index, host, T0)
                .expect("started");
        }
    }
    finish(l, &batch, 1, T0.plus_ms(5));
    finish(l, &done, 0, T0.plus_ms(6));
    finish(l, &done, 1, T0.plus_ms(7));
    let stalling = Stalling {
        index: 2,
        detail: ExitDetail::Stalled {
            stalled_after_quiet_seconds: 450.0,
            stall_threshold_seconds: 450.0,
            stall_phase: StallPhase::Idle,
            stall_grace_seconds: 120.0,
        },
        since: T0.plus_ms(8),
    };
    assert!(
        l.child_stalling(owner(l, &batch), &batch, &stalling)
            .expect("stalling")
    );

    let overview = l.overview(10).expect("overview");
    let running: Vec<&DelegationId> = overview.running.iter().map(|v| &v.unit.id).collect();
    assert_eq!(running.len(), 2);
    assert!(running.contains(&&batch) && running.contains(&&single));
    let of = |id: &DelegationId| {
        overview
            .running
            .iter()
            .chain(&overview.recent)
            .find(|v| &v.unit.id == id)
            .expect("the unit is in view")
    };
    let b = of(&batch);
    assert_eq!(
        b.children.iter().map(|c| c.index).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert!(b.children.iter().all(|c| c.delegation_id == batch));
    assert_eq!(b.events.len(), 1);
    assert_eq!(b.events[0].key, EventKey::Task(1));
    assert_eq!(b.stalls, [stalling]);
    let s = of(&single);
    assert_eq!(
        (s.children.len(), s.events.len(), s.stalls.len()),
        (1, 0, 0)
    );
    assert_eq!(overview.recent.len(), 1);
    let d = of(&done);
    assert_eq!(d.unit.status, UnitStatus::Completed);
    assert_eq!(d.events.len(), 2);
    assert!(overview.hosts.iter().any(|h| h.process == host));
    assert!(overview.queued.is_empty());
    assert!(l.overview(0).expect("overview").recent.is_empty());

    let census = l.census().expect("census");
    assert_eq!(census.units.len(), 3);
    assert_eq!(census.events.len(), 3);
    assert!(census.live.recent.is_empty());
    assert_eq!(census.live.running.len(), 2);
}

#[test]
fn a_census_except_the_held_units_lists_every_id_and_reads_only_the_others() {
    let f = fixture();
    let l = &f.ledger;
    let ids: Vec<DelegationId> = (0..4).map(|_| unit(l, 1)).collect();
    let host = registered_host(l, 42);
    l.child_started(owner(l, &ids[3]), &ids[3], 0, host, T0)
        .expect("started");
    finish(l, &ids[3], 0, T0.plus_ms(5));
    let held = [&ids[0], &ids[2]];
    let census = l.census_except(&|id| held.contains(&id)).expect("census");
    let mut listed = census.ids.clone();
    listed.sort();
    let mut all = ids.clone();
    all.sort();
    assert_eq!(listed, all, "every id, held or not");
    let read: Vec<&DelegationId> = census.units.iter().map(|u| &u.id).collect();
    assert_eq!(read.len(), 2);
    assert!(read.contains(&&ids[1]) && read.contains(&&ids[3]));
    assert_eq!(census.events.len(), 1, "the events of the units read only");
    assert_eq!(census.events[0].delegation_id, ids[3]);
    assert_eq!(l.census().expect("census").units.len(), 4);
}
