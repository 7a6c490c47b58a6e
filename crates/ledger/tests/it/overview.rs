//! The whole-ledger views of `hermes top` and the metrics (`overview`, `census`): each unit
//! with its own children, stalls and events, read in bulk in one transaction; the metrics'
//! base, which keeps what no longer changes so that a census reads only the rest. On both
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

    let mut held = Held::default();
    let census = l.census(T0, &mut held).expect("census");
    assert_eq!(census.read, 3, "nothing is old enough for the base yet");
    assert_eq!(census.totals.dispatches(), 3);
    assert_eq!(census.events.len(), 3);
    assert!(census.live.recent.is_empty());
    assert_eq!(census.live.running.len(), 2);
    // Nothing is held until a unit no longer changes (the ended one's event is undelivered).
    assert!(held.is_empty());
}

#[test]
fn the_live_views_follow_every_change_of_a_running_units_children_and_events() {
    let f = fixture();
    let l = &f.ledger;
    let host = registered_host(l, 42);
    let batch = unit(l, 2);
    for index in 0..2 {
        l.child_started(owner(l, &batch), &batch, index, host, T0)
            .expect("started");
    }
    let progress = Progress {
        api_calls: 7,
        output_bytes: 120,
        progress_seq: 3,
        last_activity_at: Some(T0.plus_ms(2)),
        ..Progress::default()
    };
    l.record_progress(
        owner(l, &batch),
        &[ProgressUpdate {
            delegation_id: batch.clone(),
            index: 0,
            progress: progress.clone(),
            tail: None,
        }],
    )
    .expect("progress");
    finish(l, &batch, 1, T0.plus_ms(5));
    let event = key(&batch, 1);
    let claim = claimed(claim(
        l,
        std::slice::from_ref(&event),
        60_000,
        T0.plus_ms(6),
    ));
    l.ack(claim.token, T0.plus_ms(7)).expect("ack");

    // The running unit's view is its children and events as they are now.
    let overview = l.overview(10).expect("overview");
    let [view] = &overview.running[..] else {
        panic!("one running unit: {:?}", overview.running);
    };
    assert_eq!(view.children, l.children(&batch).expect("children"));
    assert_eq!(view.children[0].progress, progress);
    assert_eq!(view.events, l.events(&batch).expect("events"));
    assert_eq!(view.events[0].state, EventState::Delivered);

    // Once it ends it is no longer live, and its view as a recent unit has both events.
    finish(l, &batch, 0, T0.plus_ms(8));
    let overview = l.overview(10).expect("overview");
    assert!(overview.running.is_empty() && overview.queued.is_empty());
    let [recent] = &overview.recent[..] else {
        panic!("one recent unit: {:?}", overview.recent);
    };
    assert_eq!(recent.events, l.events(&batch).expect("events"));
    assert_eq!(recent.events.len(), 2);
}

#[test]
fn the_recent_units_are_the_newest_ended_ones_past_any_number_of_live_ones() {
    let f = fixture();
    let l = &f.ledger;
    let at = |ms| T0.plus_ms(ms);
    let dispatch = |ms| {
        l.dispatch(background(1), ROOMY, at(ms))
            .expect("dispatch")
            .delegation
            .id
    };
    // Ended units at 1..=3 ms, then live ones dispatched after them.
    let ended: Vec<DelegationId> = (1..=3).map(dispatch).collect();
    for (i, id) in ended.iter().enumerate() {
        finish(l, id, 0, at(10 + i as u64));
    }
    let live: Vec<DelegationId> = (4..=8).map(dispatch).collect();

    let newest_first =
        |units: &[UnitRecord]| units.iter().map(|u| u.id.clone()).collect::<Vec<_>>();
    let listing = l.list(None, 2).expect("list");
    assert_eq!(
        newest_first(&listing.recent),
        [ended[2].clone(), ended[1].clone()]
    );
    assert_eq!(listing.running.len() + listing.queued.len(), live.len());
    let overview = l.overview(2).expect("overview");
    let recent: Vec<DelegationId> = overview.recent.iter().map(|v| v.unit.id.clone()).collect();
    assert_eq!(recent, [ended[2].clone(), ended[1].clone()]);
    // Of one session, and none asked for.
    let mine = l.list(Some(&session()), 5).expect("list");
    assert_eq!(
        newest_first(&mine.recent),
        [ended[2].clone(), ended[1].clone(), ended[0].clone()]
    );
    assert!(l.list(None, 0).expect("list").recent.is_empty());
}

#[test]
fn a_long_lived_census_decodes_each_unit_that_no_longer_changes_once() {
    let f = fixture_with(config(FOLD_PAGE));
    let l = &f.ledger;
    let ids: Vec<DelegationId> = (0..4).map(|_| unit(l, 1)).collect();
    settle(l, &ids[..3].iter().collect::<Vec<_>>(), T0.plus_ms(5));
    // Within the margin: the base takes none of them, this process holds the settled ones.
    let at = T0.plus_ms(5_000);
    let mut held = Held::default();
    let first = l.census(at, &mut held).expect("census");
    assert_eq!((first.read, held.len()), (4, 3));
    let second = l.census(at, &mut held).expect("census");
    assert_eq!(second.read, 1, "the unit that can still change");
    assert_eq!(second.totals, first.totals);
    assert_eq!(
        l.census(at, &mut Held::default()).expect("census").totals,
        first.totals
    );
    // Past the margin the base takes them, and this process lets them go.
    let later = T0.plus_ms(FOLD_MARGIN_MS + 10_000);
    let third = l.census(later, &mut held).expect("census");
    assert_eq!((third.read, held.len()), (1, 0));
    assert_eq!(third.totals, first.totals);
}

/// A census at `now` after finishing child 0 of each of `ids` as `at`, with every pending
/// event dropped (past the replay limit) by a sweep at `at` plus a second.
fn settle(l: &Ledger, ids: &[&DelegationId], at: Timestamp) {
    for id in ids {
        finish(l, id, 0, at);
    }
    l.recover(&Pids(true), at.plus_ms(2_000), Sweep::Now)
        .expect("sweep");
}

fn config(page: usize) -> LedgerConfig {
    LedgerConfig {
        replay_max_age_ms: 1_000,
        retention_ms: 30 * 86_400_000,
        census_page: page,
        census_fold_min: 1,
        ..LedgerConfig::default()
    }
}

#[test]
fn a_census_keeps_what_no_longer_changes_and_then_reads_only_the_rest() {
    // Two units a page: the first census goes page by page.
    let f = fixture_with(config(2));
    let l = &f.ledger;
    let ids: Vec<DelegationId> = (0..12).map(|_| unit(l, 1)).collect();
    let (settled, open) = ids.split_at(11);
    settle(l, &settled.iter().collect::<Vec<_>>(), T0.plus_ms(5));
    let later = T0.plus_ms(FOLD_MARGIN_MS + 10_000);

    let first = l.census(later, &mut Held::default()).expect("census");
    assert_eq!(first.totals.dispatches(), 12);
    assert_eq!(first.totals.units(UnitStatus::Completed), 11);
    // The pages before were folded and stored as they were read: the last census read decodes
    // the last page (up to two units) and the unsettled unit, wherever its id sorts.
    assert!(first.read <= 3, "{}", first.read);
    let second = l.census(later, &mut Held::default()).expect("census");
    assert_eq!(
        second.read, 1,
        "every page was stored: only the unit that can still change is read"
    );
    assert_eq!(second.totals, first.totals);
    assert_eq!(
        f.reopen()
            .census(later, &mut Held::default())
            .expect("census")
            .totals,
        first.totals,
        "the base is the ledger's, for every process"
    );

    // A unit dispatched within the margin is read, however settled it is.
    let recent = l
        .dispatch(background(1), ROOMY, later)
        .expect("dispatch")
        .delegation
        .id;
    assert_eq!(
        l.census(later, &mut Held::default()).expect("census").read,
        2
    );

    // The open unit settles: counted once into the base, then not read again.
    settle(l, &[&open[0]], later.plus_ms(10));
    let third = l
        .census(later.plus_ms(5_000), &mut Held::default())
        .expect("census");
    assert_eq!(third.read, 2);
    assert_eq!(third.totals.units(UnitStatus::Completed), 12);
    assert_eq!(third.totals.dispatches(), 13);
    let fourth = l
        .census(later.plus_ms(5_000), &mut Held::default())
        .expect("census");
    assert_eq!(fourth.read, 1, "only {recent}");
    assert_eq!(fourth.totals, third.totals);
}

#[test]
fn units_retention_removes_leave_the_gauge_of_units_kept_not_the_counters() {
    let f = fixture_with(config(FOLD_PAGE));
    let l = &f.ledger;
    let ids: Vec<DelegationId> = (0..3).map(|_| unit(l, 1)).collect();
    settle(l, &ids.iter().collect::<Vec<_>>(), T0.plus_ms(5));
    let later = T0.plus_ms(FOLD_MARGIN_MS + 10_000);
    let before = l.census(later, &mut Held::default()).expect("census");
    assert_eq!(before.totals.kept(UnitStatus::Completed), 3);

    let past_retention = T0.plus_ms(31 * 86_400_000);
    let report = l
        .recover(&Pids(true), past_retention, Sweep::Now)
        .expect("sweep");
    assert_eq!(report.purged_units, 3);
    let after = l
        .census(past_retention, &mut Held::default())
        .expect("census");
    assert_eq!(after.read, 0);
    assert_eq!(
        after.totals.units(UnitStatus::Completed),
        3,
        "counters only grow"
    );
    assert_eq!(after.totals.dispatches(), 3);
    assert_eq!(after.totals.kept(UnitStatus::Completed), 0, "none is kept");
}

#[test]
fn a_census_stores_a_base_only_for_enough_change_and_counts_the_same_either_way() {
    let f = fixture_with(LedgerConfig {
        census_fold_min: 5,
        ..config(FOLD_PAGE)
    });
    let l = &f.ledger;
    let first: Vec<DelegationId> = (0..3).map(|_| unit(l, 1)).collect();
    settle(l, &first.iter().collect::<Vec<_>>(), T0.plus_ms(5));
    let later = T0.plus_ms(FOLD_MARGIN_MS + 10_000);
    let census = l.census(later, &mut Held::default()).expect("census");
    assert_eq!((census.read, census.totals.dispatches()), (3, 3));
    assert_eq!(
        l.census(later, &mut Held::default()).expect("census").read,
        3,
        "three settled units are read again rather than stored"
    );
    let more: Vec<DelegationId> = (0..3).map(|_| unit(l, 1)).collect();
    settle(l, &more.iter().collect::<Vec<_>>(), T0.plus_ms(6));
    let census = l.census(later, &mut Held::default()).expect("census");
    assert_eq!((census.read, census.totals.dispatches()), (6, 6));
    let stored = l.census(later, &mut Held::default()).expect("census");
    assert_eq!((stored.read, stored.totals), (0, census.totals));
}
