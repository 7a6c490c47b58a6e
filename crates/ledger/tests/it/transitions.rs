//! Every transition of the ledger's state, one test each.

use crate::common::*;
use hermes_ledger::*;

#[test]
fn publish_is_idempotent_per_key() {
    let f = fixture();
    let id = unit(&f.ledger, 2);
    let event = NewEvent {
        delegation_id: id.clone(),
        key: EventKey::Task(0),
        payload: EventPayload::Task(outcome(0, ChildStatus::Completed, T0)),
    };
    assert_eq!(
        f.ledger.publish(event.clone(), T0).unwrap(),
        Published::Inserted
    );
    assert_eq!(
        f.ledger.publish(event, T0.plus_ms(5)).unwrap(),
        Published::AlreadyPresent
    );
    assert_eq!(f.ledger.events(&id).unwrap().len(), 1);
    assert_eq!(
        f.ledger.event(&key(&id, 0)).unwrap().unwrap().published_at,
        T0
    );
}

#[test]
fn claim_then_ack_delivers() {
    let f = fixture();
    let id = unit(&f.ledger, 1);
    finish(&f.ledger, &id, 0, T0);
    let c = claimed(claim(&f.ledger, &[key(&id, 0)], 1_000, T0));
    assert_eq!(c.events[0].attempts, 1);
    assert_eq!(state(&f.ledger, &key(&id, 0)), EventState::Claimed);
    let transitions = f.ledger.ack(c.token, T0.plus_ms(10)).unwrap();
    assert_eq!(transitions.len(), 1);
    assert_eq!(
        (transitions[0].from, transitions[0].to),
        (EventState::Claimed, EventState::Delivered)
    );
    let event = f.ledger.event(&key(&id, 0)).unwrap().unwrap();
    assert_eq!(event.state, EventState::Delivered);
    assert_eq!(event.delivered_at, Some(T0.plus_ms(10)));
    // Acking twice is a no-op that says so; settling otherwise is a lost claim; and a
    // delivered event cannot be claimed again.
    let again = f.ledger.ack_outcome(c.token, T0.plus_ms(20)).unwrap();
    assert!(again.repeated);
    assert_eq!(again.transitions, transitions);
    assert!(matches!(
        f.ledger.release(c.token, T0.plus_ms(20)),
        Err(LedgerError::ClaimLost(_))
    ));
    assert_eq!(
        claim(&f.ledger, &[key(&id, 0)], 1_000, T0),
        ClaimOutcome::Refused(vec![(
            key(&id, 0),
            Refusal::Terminal(EventState::Delivered)
        )])
    );
}

#[test]
fn stale_token_ack_renew_release_are_claim_lost() {
    let f = fixture();
    let id = unit(&f.ledger, 1);
    finish(&f.ledger, &id, 0, T0);
    let old = claimed(claim(&f.ledger, &[key(&id, 0)], 1_000, T0));
    // The lease expires and someone else claims: the old token is fenced out.
    let new = claimed(claim(&f.ledger, &[key(&id, 0)], 1_000, T0.plus_ms(1_000)));
    assert_ne!(
        old.token, new.token,
        "a reclaim after expiry rotates the token"
    );
    assert_eq!(new.events[0].attempts, 2);
    let now = T0.plus_ms(1_100);
    assert!(
        matches!(f.ledger.ack(old.token, now), Err(LedgerError::ClaimLost(t)) if t == old.token)
    );
    assert!(matches!(
        f.ledger.renew(old.token, 1_000, now),
        Err(LedgerError::ClaimLost(_))
    ));
    assert!(matches!(
        f.ledger.release(old.token, now),
        Err(LedgerError::ClaimLost(_))
    ));
    assert!(matches!(
        f.ledger.defer(old.token),
        Err(LedgerError::ClaimLost(_))
    ));
    assert!(matches!(
        f.ledger.drop_claim(old.token, DropReason::Orphaned, now),
        Err(LedgerError::ClaimLost(_))
    ));
    // The new holder is unaffected.
    assert_eq!(
        f.ledger.ack(new.token, now).unwrap()[0].to,
        EventState::Delivered
    );
}

#[test]
fn an_expired_holder_may_still_settle_if_nobody_claimed_since() {
    let f = fixture();
    let id = unit(&f.ledger, 1);
    finish(&f.ledger, &id, 0, T0);
    let c = claimed(claim(&f.ledger, &[key(&id, 0)], 1_000, T0));
    let late = T0.plus_ms(5_000);
    assert_eq!(
        f.ledger.renew(c.token, 1_000, late).unwrap(),
        late.plus_ms(1_000)
    );
    assert!(matches!(
        claim(&f.ledger, &[key(&id, 0)], 1_000, late.plus_ms(10)),
        ClaimOutcome::Refused(ref why) if matches!(why[0].1, Refusal::LiveClaim { expires_at } if expires_at == late.plus_ms(1_000))
    ));
    assert_eq!(
        f.ledger.ack(c.token, late.plus_ms(20)).unwrap()[0].to,
        EventState::Delivered
    );
}

#[test]
fn group_claim_with_one_key_live_elsewhere_claims_nothing() {
    let f = fixture();
    let id = unit(&f.ledger, 3);
    for i in 0..3 {
        finish(&f.ledger, &id, i, T0);
    }
    let other = claimed(claim(&f.ledger, &[key(&id, 1)], 60_000, T0));
    let all = [key(&id, 0), key(&id, 1), key(&id, 2)];
    match claim(&f.ledger, &all, 60_000, T0.plus_ms(1)) {
        ClaimOutcome::Refused(why) => {
            assert_eq!(
                why,
                vec![(
                    key(&id, 1),
                    Refusal::LiveClaim {
                        expires_at: T0.plus_ms(60_000)
                    }
                )]
            );
        }
        ClaimOutcome::Claimed(_) => panic!("a group claim must be all-or-none"),
    }
    assert_eq!(state(&f.ledger, &key(&id, 0)), EventState::Pending);
    assert_eq!(state(&f.ledger, &key(&id, 2)), EventState::Pending);
    assert_eq!(f.ledger.event(&key(&id, 0)).unwrap().unwrap().attempts, 0);
    // Missing keys are refused too.
    let ghost = EventRef {
        delegation_id: DelegationId::from_bits(1),
        key: EventKey::Task(0),
    };
    assert_eq!(
        claim(&f.ledger, &[key(&id, 0), ghost.clone()], 1_000, T0),
        ClaimOutcome::Refused(vec![(ghost, Refusal::Missing)])
    );
    drop(other);
}

#[test]
fn claims_fail_closed_across_sessions() {
    let f = fixture();
    let id = unit(&f.ledger, 1);
    finish(&f.ledger, &id, 0, T0);
    let request = ClaimRequest {
        keys: vec![key(&id, 0)],
        consumer: "b".into(),
        session: Some(SessionId::new("b").unwrap()),
        lease_ms: 1_000,
    };
    assert_eq!(
        f.ledger.claim(&request, T0).unwrap(),
        ClaimOutcome::Refused(vec![(key(&id, 0), Refusal::NotOwned)])
    );
    assert!(
        f.ledger
            .deliverable(&SessionId::new("b").unwrap(), T0)
            .unwrap()
            .is_empty()
    );
    assert_eq!(f.ledger.deliverable(&session(), T0).unwrap().len(), 1);
}

#[test]
fn a_boundary_view_reads_every_open_event_but_only_the_units_ready_to_claim() {
    let f = fixture();
    let (held, ready) = (unit(&f.ledger, 1), unit(&f.ledger, 1));
    finish(&f.ledger, &held, 0, T0);
    finish(&f.ledger, &ready, 0, T0);
    claimed(claim(&f.ledger, &[key(&held, 0)], 1_000, T0));
    let view = f.ledger.boundary_view(&session(), T0.plus_ms(1)).unwrap();
    assert_eq!(view.session.as_ref().map(|s| &s.id), Some(&session()));
    assert_eq!(view.events.len(), 2, "the live claim is open too");
    let units: Vec<&DelegationId> = view.units.iter().map(|u| &u.id).collect();
    assert_eq!(units, vec![&ready], "a live lease's unit is not needed yet");
    // Once the lease ran out, its unit is read too.
    let later = f
        .ledger
        .boundary_view(&session(), T0.plus_ms(1_001))
        .unwrap();
    assert_eq!(later.units.len(), 2);
    let unknown = SessionId::new("nobody").unwrap();
    assert_eq!(
        f.ledger.boundary_view(&unknown, T0).unwrap(),
        BoundaryView::default()
    );
}

#[test]
fn the_eighth_release_drops_with_attempts_exhausted() {
    let f = fixture();
    let id = unit(&f.ledger, 1);
    finish(&f.ledger, &id, 0, T0);
    for attempt in 1..=8u32 {
        let now = T0.plus_ms(u64::from(attempt));
        let c = claimed(claim(&f.ledger, &[key(&id, 0)], 1_000, now));
        assert_eq!(c.events[0].attempts, attempt);
        let t = f.ledger.release(c.token, now).unwrap();
        if attempt < 8 {
            assert_eq!(
                t[0].to,
                EventState::Pending,
                "release {attempt} returns it to pending"
            );
        } else {
            assert_eq!(t[0].to, EventState::Dropped);
            assert_eq!(t[0].drop_reason, Some(DropReason::AttemptsExhausted));
        }
    }
    let event = f.ledger.event(&key(&id, 0)).unwrap().unwrap();
    assert_eq!(event.drop_reason, Some(DropReason::AttemptsExhausted));
    assert!(
        matches!(event.payload, EventPayload::Task(ref o) if o.result == "result 0"),
        "content stays readable"
    );
}

#[test]
fn expired_claims_use_up_attempts_too() {
    let f = fixture_with(LedgerConfig {
        max_attempts: 2,
        ..LedgerConfig::default()
    });
    let id = unit(&f.ledger, 1);
    finish(&f.ledger, &id, 0, T0);
    claimed(claim(&f.ledger, &[key(&id, 0)], 10, T0));
    claimed(claim(&f.ledger, &[key(&id, 0)], 10, T0.plus_ms(10)));
    assert_eq!(
        claim(&f.ledger, &[key(&id, 0)], 10, T0.plus_ms(20)),
        ClaimOutcome::Refused(vec![(key(&id, 0), Refusal::Terminal(EventState::Dropped))])
    );
    assert_eq!(state(&f.ledger, &key(&id, 0)), EventState::Dropped);
}

#[test]
fn defer_gives_the_attempt_back() {
    let f = fixture();
    let id = unit(&f.ledger, 1);
    finish(&f.ledger, &id, 0, T0);
    for _ in 0..20 {
        let c = claimed(claim(&f.ledger, &[key(&id, 0)], 1_000, T0));
        assert_eq!(c.events[0].attempts, 1);
        let t = f.ledger.defer(c.token).unwrap();
        assert_eq!(t[0].to, EventState::Pending);
    }
    assert_eq!(f.ledger.event(&key(&id, 0)).unwrap().unwrap().attempts, 0);
}

#[test]
fn drop_by_token_and_by_key() {
    let f = fixture();
    let id = unit(&f.ledger, 2);
    finish(&f.ledger, &id, 0, T0);
    finish(&f.ledger, &id, 1, T0);
    let c = claimed(claim(&f.ledger, &[key(&id, 0)], 1_000, T0));
    let t = f
        .ledger
        .drop_claim(c.token, DropReason::Other("operator".into()), T0)
        .unwrap();
    assert_eq!(t[0].drop_reason, Some(DropReason::Other("operator".into())));
    let t = f
        .ledger
        .drop_events(&[key(&id, 1), key(&id, 0)], DropReason::Orphaned, T0)
        .unwrap();
    assert_eq!(t.len(), 1, "only the still-open event changes");
    assert_eq!(t[0].event, key(&id, 1));
    assert_eq!(t[0].from, EventState::Pending);
}

#[test]
fn renew_extends_every_key() {
    let f = fixture();
    let id = unit(&f.ledger, 2);
    finish(&f.ledger, &id, 0, T0);
    finish(&f.ledger, &id, 1, T0);
    let c = claimed(claim(&f.ledger, &[key(&id, 0), key(&id, 1)], 1_000, T0));
    let until = f.ledger.renew(c.token, 5_000, T0.plus_ms(900)).unwrap();
    assert_eq!(until, T0.plus_ms(5_900));
    for i in 0..2 {
        let lease = f
            .ledger
            .event(&key(&id, i))
            .unwrap()
            .unwrap()
            .lease
            .unwrap();
        assert_eq!(lease.expires_at, until);
    }
    assert!(
        f.ledger
            .deliverable(&session(), T0.plus_ms(5_000))
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        f.ledger.deliverable(&session(), until).unwrap()[0].1.len(),
        2
    );
}

#[test]
fn batch_completeness_needs_exactly_every_task_key() {
    let f = fixture();
    let id = unit(&f.ledger, 3);
    finish(&f.ledger, &id, 0, T0);
    finish(&f.ledger, &id, 2, T0);
    assert!(
        !f.ledger.is_fully_recorded(&id).unwrap(),
        "task:0 and task:2 of 3 is not complete"
    );
    // An extra key beyond N and a key whose payload names another child never count.
    let extra = NewEvent {
        delegation_id: id.clone(),
        key: EventKey::Task(5),
        payload: EventPayload::Task(outcome(5, ChildStatus::Completed, T0)),
    };
    f.ledger.publish(extra, T0).unwrap();
    let forged = NewEvent {
        delegation_id: id.clone(),
        key: EventKey::Task(7),
        payload: EventPayload::Task(outcome(1, ChildStatus::Completed, T0)),
    };
    f.ledger.publish(forged, T0).unwrap();
    assert_eq!(f.ledger.events(&id).unwrap().len(), 4);
    assert!(!f.ledger.is_fully_recorded(&id).unwrap());
    finish(&f.ledger, &id, 1, T0);
    assert!(f.ledger.is_fully_recorded(&id).unwrap());
    assert_eq!(
        f.ledger.delegation(&id).unwrap().unwrap().status,
        UnitStatus::Completed
    );
}

#[test]
fn malformed_keys_are_refused_at_parse_time() {
    for bad in [
        "task:",
        "task:-1",
        "task:x",
        "Task:1",
        "task:4294967295",
        "terminal ",
        "",
    ] {
        assert!(bad.parse::<EventKey>().is_err(), "{bad:?} must not parse");
    }
    assert_eq!("task:12".parse::<EventKey>().unwrap(), EventKey::Task(12));
    assert!("deleg_00000000000g".parse::<DelegationId>().is_err());
    assert!(
        "0123456789abcdef0123456789ABCDEF"
            .parse::<ClaimToken>()
            .is_ok()
    );
    assert!(SessionId::new("a b").is_err());
    assert!(SessionId::new("x".repeat(129)).is_err());
}

#[test]
fn a_reopened_session_takes_new_work_and_what_was_dropped_stays_dropped() {
    let f = fixture();
    let id = unit(&f.ledger, 1);
    finish(&f.ledger, &id, 0, T0);
    f.ledger.end_session(&session(), T0.plus_ms(1)).unwrap();
    assert!(f.ledger.reopen_session(&session(), T0.plus_ms(2)).unwrap());
    assert!(!f.ledger.reopen_session(&session(), T0.plus_ms(3)).unwrap());
    let record = f.ledger.session(&session()).unwrap().unwrap();
    assert_eq!(record.state, SessionState::Active);
    assert_eq!(record.ended_at, None);
    assert_eq!(state(&f.ledger, &key(&id, 0)), EventState::Dropped);
    assert!(
        f.ledger
            .deliverable(&session(), T0.plus_ms(4))
            .unwrap()
            .is_empty()
    );
    let new = background(1);
    assert!(f.ledger.dispatch(new, ROOMY, T0.plus_ms(5)).is_ok());
    let fresh = SessionId::new("never-seen").unwrap();
    assert!(!f.ledger.reopen_session(&fresh, T0).unwrap());
    assert!(f.ledger.session(&fresh).unwrap().is_some());
}

#[test]
fn ending_a_session_drops_its_pending_events_and_refuses_dispatch() {
    let f = fixture();
    let id = unit(&f.ledger, 3);
    finish(&f.ledger, &id, 0, T0);
    finish(&f.ledger, &id, 1, T0);
    let held = claimed(claim(&f.ledger, &[key(&id, 1)], 60_000, T0));
    let end = f.ledger.end_session(&session(), T0.plus_ms(1)).unwrap();
    assert_eq!(end.dropped_events, 2);
    assert_eq!(end.interrupted, vec![id.clone()]);
    for i in 0..2 {
        let event = f.ledger.event(&key(&id, i)).unwrap().unwrap();
        assert_eq!(event.state, EventState::Dropped);
        assert_eq!(event.drop_reason, Some(DropReason::SessionEnded));
    }
    assert!(matches!(
        f.ledger.ack(held.token, T0),
        Err(LedgerError::ClaimLost(_))
    ));
    // The host's late publication lands dropped; nothing is ever deliverable again.
    finish(&f.ledger, &id, 2, T0.plus_ms(2));
    assert_eq!(state(&f.ledger, &key(&id, 2)), EventState::Dropped);
    assert!(
        f.ledger
            .deliverable(&session(), T0.plus_ms(3))
            .unwrap()
            .is_empty()
    );
    let new = background(1);
    assert!(matches!(
        f.ledger.dispatch(new, ROOMY, T0),
        Err(LedgerError::SessionEnded(_))
    ));
    assert!(matches!(
        f.ledger.end_session(&SessionId::new("nobody").unwrap(), T0),
        Err(LedgerError::SessionNotFound(_))
    ));
}

#[test]
fn finalization_happens_once() {
    let f = fixture();
    let id = unit(&f.ledger, 2);
    let stalled = ChildOutcome {
        detail: ExitDetail::Stalled {
            stalled_after_quiet_seconds: 3.0,
            stall_threshold_seconds: 2.0,
            stall_phase: StallPhase::Idle,
            stall_grace_seconds: 1.0,
        },
        ..outcome(0, ChildStatus::Stalled, T0)
    };
    assert!(
        f.ledger
            .finish_child(BY_HAND, &id, stalled, T0)
            .unwrap()
            .published
    );
    // The child exits after force-finalization: nothing more is published.
    let late = f
        .ledger
        .finish_child(BY_HAND, &id, outcome(0, ChildStatus::Completed, T0), T0)
        .unwrap();
    assert_eq!(
        late,
        FinishChild {
            published: false,
            unit_status: None,
            left: false,
        }
    );
    let done = f
        .ledger
        .finish_child(BY_HAND, &id, outcome(1, ChildStatus::Completed, T0), T0)
        .unwrap();
    assert_eq!(done.unit_status, Some(UnitStatus::Partial));
    assert_eq!(f.ledger.events(&id).unwrap().len(), 2);
    assert_eq!(
        f.ledger
            .finish_unit(BY_HAND, &id, Vec::new(), "late", T0)
            .unwrap(),
        None
    );
}

#[test]
fn capacity_queues_fifo_and_refuses_past_max_queued() {
    let f = fixture();
    let host = registered_host(&f.ledger, 10);
    let other = registered_host(&f.ledger, 11);
    let cap = Capacity {
        max_running: 2,
        max_queued: 2,
    };
    let dispatch = |h: ProcessId| {
        let new = NewDelegation {
            host: Some(h),
            ..background(1)
        };
        f.ledger.dispatch(new, cap, T0)
    };
    let a = dispatch(host).unwrap();
    let b = dispatch(host).unwrap();
    let c = dispatch(other).unwrap();
    let d = dispatch(host).unwrap();
    assert_eq!(a.delegation.status, UnitStatus::Running);
    assert_eq!(b.delegation.status, UnitStatus::Running);
    assert_eq!(
        (c.delegation.status, c.queue_position),
        (UnitStatus::Queued, Some(1))
    );
    assert_eq!(
        (d.delegation.status, d.queue_position),
        (UnitStatus::Queued, Some(2))
    );
    assert!(matches!(
        dispatch(host),
        Err(LedgerError::QueueFull { max: 2 })
    ));
    // Inline units take no slot.
    let inline = NewDelegation {
        id: None,
        session: None,
        channel: Channel::Inline,
        spec: spec(1),
        host: Some(host),
        transcript_root: None,
    };
    assert_eq!(
        f.ledger
            .dispatch(inline, cap, T0)
            .unwrap()
            .delegation
            .status,
        UnitStatus::Running
    );
    // No slot yet.
    assert_pass(&f.ledger, other, cap, false, true);
    assert_eq!(f.ledger.start_next_queued(other, cap, T0).unwrap(), None);
    finish(&f.ledger, &a.delegation.id, 0, T0);
    // The oldest queued unit belongs to `other`: `host` may not jump the queue.
    assert_pass(&f.ledger, host, cap, false, true);
    assert_pass(&f.ledger, other, cap, true, true);
    assert_eq!(f.ledger.start_next_queued(host, cap, T0).unwrap(), None);
    let started = f
        .ledger
        .start_next_queued(other, cap, T0)
        .unwrap()
        .expect("c starts");
    assert_eq!(started.id, c.delegation.id);
    finish(&f.ledger, &b.delegation.id, 0, T0);
    let started = f
        .ledger
        .start_next_queued(host, cap, T0)
        .unwrap()
        .expect("d starts");
    assert_eq!(started.id, d.delegation.id);
    let listing = f.ledger.list(None, 10).unwrap();
    assert_eq!(listing.running.len(), 3);
    assert!(listing.queued.is_empty());
    assert_eq!(listing.recent.len(), 2);
    // Nothing queued any more: a host's pass says so (a slot that frees starts nothing).
    assert_pass(&f.ledger, host, cap, false, false);
}

/// A host's pass in one read (`Ledger::host_pass`) says what the separate reads say: the
/// interrupts asked of it, its placed units, whether `start_next_queued` would start one
/// (`startable`), and whether any unit is queued at all.
fn assert_pass(ledger: &Ledger, host: ProcessId, cap: Capacity, startable: bool, queued: bool) {
    let pass = ledger.host_pass(host, cap).unwrap();
    assert_eq!(pass.interrupts, ledger.interrupt_requests(host).unwrap());
    assert_eq!(pass.placed, ledger.units_of_host(host).unwrap());
    assert_eq!((pass.startable, pass.queued), (startable, queued));
}

#[test]
fn interrupting_a_queued_unit_cancels_it_with_a_terminal_event() {
    let f = fixture();
    let cap = Capacity {
        max_running: 1,
        max_queued: 5,
    };
    let host = registered_host(&f.ledger, 1);
    let mk = || NewDelegation {
        host: Some(host),
        transcript_root: Some("/tmp/t".into()),
        ..background(2)
    };
    let running = f.ledger.dispatch(mk(), cap, T0).unwrap().delegation;
    let queued = f.ledger.dispatch(mk(), cap, T0).unwrap().delegation;
    let done = f
        .ledger
        .request_interrupt(
            &InterruptTarget::Delegation(queued.id.clone()),
            "user_stop",
            T0,
        )
        .unwrap();
    assert_eq!(done.cancelled, vec![queued.id.clone()]);
    let unit = f.ledger.delegation(&queued.id).unwrap().unwrap();
    assert_eq!(unit.status, UnitStatus::Cancelled);
    let events = f.ledger.events(&queued.id).unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].key, EventKey::Terminal);
    assert!(f.ledger.is_fully_recorded(&queued.id).unwrap());
    let all = f
        .ledger
        .request_interrupt(&InterruptTarget::All, "host_shutdown", T0)
        .unwrap();
    assert_eq!(all.flagged, vec![running.id.clone()]);
    assert_eq!(
        f.ledger
            .interrupt_requests(ProcessId {
                pid: 1,
                start_time: 1
            })
            .unwrap(),
        vec![(running.id.clone(), "host_shutdown".to_owned())]
    );
    // A host's pass reads the same request, with the unit placed on it.
    let pass = f.ledger.host_pass(host, cap).unwrap();
    assert_eq!(
        pass.interrupts,
        vec![(running.id.clone(), "host_shutdown".to_owned())]
    );
    assert_eq!(
        pass.placed.iter().map(|u| &u.id).collect::<Vec<_>>(),
        vec![&running.id]
    );
}

#[test]
fn at_most_one_live_host_per_session() {
    let f = fixture();
    let a = ProcessId {
        pid: 1,
        start_time: 1,
    };
    let b = ProcessId {
        pid: 2,
        start_time: 2,
    };
    let alive = Pids(true);
    let dead = Pids(false);
    assert_eq!(
        f.ledger
            .claim_session_host(&session(), a, &alive, T0)
            .unwrap(),
        HostClaim::Acquired
    );
    assert_eq!(
        f.ledger
            .claim_session_host(&session(), a, &alive, T0)
            .unwrap(),
        HostClaim::AlreadyHeld
    );
    assert_eq!(
        f.ledger
            .claim_session_host(&session(), b, &alive, T0)
            .unwrap(),
        HostClaim::HeldBy(a)
    );
    assert_eq!(
        f.ledger
            .claim_session_host(&session(), b, &dead, T0)
            .unwrap(),
        HostClaim::Acquired
    );
}

#[test]
fn many_claims_and_acks_share_one_transaction_but_stay_independent() {
    let f = fixture();
    let a = unit(&f.ledger, 2);
    let b = unit(&f.ledger, 1);
    for i in 0..2 {
        finish(&f.ledger, &a, i, T0);
    }
    finish(&f.ledger, &b, 0, T0);
    let held = claimed(claim(&f.ledger, &[key(&b, 0)], 60_000, T0));
    let request = |keys: Vec<EventRef>| ClaimRequest {
        keys,
        consumer: "many".into(),
        session: Some(session()),
        lease_ms: 1_000,
    };
    let outcomes = f
        .ledger
        .claim_many(
            &[
                request(vec![key(&a, 0), key(&a, 1)]),
                request(vec![key(&b, 0)]),
            ],
            T0,
        )
        .unwrap();
    let first = match &outcomes[0] {
        ClaimOutcome::Claimed(c) => c.token,
        other => panic!("the free envelope is claimed: {other:?}"),
    };
    assert!(
        matches!(&outcomes[1], ClaimOutcome::Refused(why) if matches!(why[0].1, Refusal::LiveClaim { .. }))
    );
    let results = f.ledger.ack_many(&[first, held.token, first], T0).unwrap();
    assert_eq!(results[0].as_ref().unwrap().len(), 2);
    assert_eq!(results[1].as_ref().unwrap()[0].to, EventState::Delivered);
    assert_eq!(
        results[2].as_ref().unwrap(),
        results[0].as_ref().unwrap(),
        "a token acks once; named again, it finds its own ack"
    );
    for k in [key(&a, 0), key(&a, 1), key(&b, 0)] {
        assert_eq!(state(&f.ledger, &k), EventState::Delivered);
    }
}

#[test]
fn a_retired_host_gets_no_more_work_and_a_busy_one_cannot_retire() {
    let f = fixture();
    let host = registered_host(&f.ledger, 20);
    let alive = Pids(true);
    f.ledger
        .claim_session_host(&session(), host, &alive, T0)
        .unwrap();
    let to = |h: ProcessId| NewDelegation {
        host: Some(h),
        ..background(1)
    };
    let before = f.ledger.activity().unwrap();
    let unit = f
        .ledger
        .dispatch(to(host), ROOMY, T0)
        .unwrap()
        .delegation
        .id;
    assert_ne!(
        f.ledger.activity().unwrap(),
        before,
        "a dispatch is activity hosts can see"
    );
    assert!(
        !f.ledger.retire_host(host).unwrap(),
        "a host with work stays"
    );
    assert_eq!(
        f.ledger.session(&session()).unwrap().unwrap().host,
        Some(host)
    );
    finish(&f.ledger, &unit, 0, T0);
    assert!(f.ledger.retire_host(host).unwrap());
    assert_eq!(f.ledger.session(&session()).unwrap().unwrap().host, None);
    assert!(f.ledger.host(host).unwrap().is_none());
    assert!(matches!(
        f.ledger.dispatch(to(host), ROOMY, T0),
        Err(LedgerError::HostGone(h)) if h == host
    ));
    let stranger = ProcessId {
        pid: 99,
        start_time: 9,
    };
    assert!(matches!(
        f.ledger.dispatch(to(stranger), ROOMY, T0),
        Err(LedgerError::HostGone(_))
    ));
    let before = f.ledger.activity().unwrap();
    f.ledger
        .request_interrupt(&InterruptTarget::All, "host_shutdown", T0)
        .unwrap();
    assert_eq!(f.ledger.activity().unwrap(), before, "no unit, no activity");
}

#[test]
fn finishing_a_batch_reads_each_child_once_not_the_whole_batch_each_time() {
    let f = fixture();
    let n = 300;
    let id = unit(&f.ledger, n);
    let before = f.ledger.rows_read();
    let mut last = None;
    for index in (0..n).rev() {
        let status = if index % 3 == 0 {
            ChildStatus::Failed
        } else {
            ChildStatus::Completed
        };
        let done = f
            .ledger
            .finish_child(BY_HAND, &id, outcome(index, status, T0), T0)
            .unwrap();
        assert!(done.published);
        assert_eq!(
            done.unit_status.is_some(),
            index == 0,
            "only the last one settles"
        );
        last = done.unit_status;
    }
    // Each finish reads its own child; the unit is read once, when the last child ends.
    // Re-reading the batch on every finish would be n²/2 = 45,000 rows.
    let read = f.ledger.rows_read() - before;
    assert!(
        read <= 2 * u64::from(n),
        "{read} rows read for {n} children"
    );
    assert_eq!(last, Some(UnitStatus::Partial));
    let unit = f.ledger.delegation(&id).unwrap().expect("unit");
    assert_eq!(unit.status, UnitStatus::Partial);
    assert_eq!(f.ledger.events(&id).unwrap().len(), n as usize);
}

#[test]
fn a_stalling_child_is_recorded_until_it_is_final() {
    let f = fixture();
    let id = unit(&f.ledger, 2);
    let detail = ExitDetail::Stalled {
        stalled_after_quiet_seconds: 3.0,
        stall_threshold_seconds: 2.0,
        stall_phase: StallPhase::Idle,
        stall_grace_seconds: 1.0,
    };
    let stalling = Stalling {
        index: 1,
        detail: detail.clone(),
        since: T0,
    };
    assert!(
        f.ledger
            .child_stalling(owner(&f.ledger, &id), &id, &stalling)
            .unwrap()
    );
    assert_eq!(f.ledger.stalls(&id).unwrap(), vec![stalling.clone()]);
    finish(&f.ledger, &id, 0, T0);
    let stalled = ChildOutcome {
        detail,
        ..outcome(1, ChildStatus::Stalled, T0)
    };
    let done = f.ledger.finish_child(BY_HAND, &id, stalled, T0).unwrap();
    assert_eq!(done.unit_status, Some(UnitStatus::Partial));
    // A final child is not stalling any more: nothing is recorded for it.
    let late = Stalling {
        index: 0,
        ..stalling
    };
    assert!(
        !f.ledger
            .child_stalling(owner(&f.ledger, &id), &id, &late)
            .unwrap()
    );
}

#[test]
fn a_dispatch_sent_again_under_its_id_is_a_no_op_that_says_so_and_another_dispatch_is_refused() {
    let f = fixture();
    let id = f.ledger.new_delegation_id();
    let new = NewDelegation {
        id: Some(id.clone()),
        ..background(2)
    };
    assert_eq!(f.ledger.recorded_dispatch(&new).unwrap(), None);
    let first = f.ledger.dispatch(new.clone(), ROOMY, T0).unwrap();
    assert_eq!(first.delegation.id, id, "recorded under the id drawn first");
    assert!(!first.already_recorded);
    finish(&f.ledger, &id, 0, T0.plus_ms(5));
    let commits = f.ledger.commits();
    let again = f
        .ledger
        .dispatch(new.clone(), ROOMY, T0.plus_ms(10))
        .unwrap();
    assert!(again.already_recorded);
    assert_eq!(again.delegation.id, id);
    assert_eq!(
        again.delegation.dispatched_at, T0,
        "the unit as first recorded"
    );
    assert_eq!(f.ledger.commits(), commits, "nothing was written");
    assert_eq!(
        f.ledger
            .recorded_dispatch(&new)
            .unwrap()
            .map(|a| a.delegation.id),
        Some(id.clone())
    );
    assert_eq!(
        f.ledger.list(None, 10).unwrap().running.len(),
        1,
        "one unit"
    );
    // The same id for other tasks, or for another session, names another dispatch.
    let other_tasks = NewDelegation {
        spec: spec(3),
        ..new.clone()
    };
    let other_session = NewDelegation {
        session: Some(SessionId::new("t").unwrap()),
        ..new.clone()
    };
    for refused in [other_tasks, other_session] {
        let err = f.ledger.dispatch(refused.clone(), ROOMY, T0).unwrap_err();
        assert!(
            matches!(&err, LedgerError::Invalid(text) if text.contains(id.as_str())),
            "{err}"
        );
        assert!(f.ledger.recorded_dispatch(&refused).is_err());
    }
}

/// What `delegate` tries first: the dispatch reads the session's host and records the unit for
/// it only while that host is live; otherwise it writes nothing (not even a new session), and
/// a session that ended refuses.
#[test]
fn a_dispatch_to_a_sessions_host_records_only_for_a_live_host() {
    let f = fixture();
    let new = || background(1);
    let units = |ledger: &Ledger| {
        ledger.list(None, 100).unwrap().queued.len() + ledger.list(None, 100).unwrap().running.len()
    };
    assert!(
        f.ledger
            .dispatch_to_session_host(new(), ROOMY, &Pids(true), T0)
            .unwrap()
            .is_none(),
        "an unknown session has no host"
    );
    assert!(f.ledger.session(&session()).unwrap().is_none());

    let host = registered_host(&f.ledger, 21);
    f.ledger
        .claim_session_host(&session(), host, &Pids(true), T0)
        .unwrap();
    assert!(
        f.ledger
            .dispatch_to_session_host(new(), ROOMY, &Pids(false), T0)
            .unwrap()
            .is_none(),
        "a host whose process is gone gets nothing"
    );
    assert_eq!(units(&f.ledger), 0);

    let admission = f
        .ledger
        .dispatch_to_session_host(new(), ROOMY, &Pids(true), T0)
        .unwrap()
        .expect("the live host takes it");
    assert_eq!(admission.delegation.host, Some(host));
    assert_eq!(units(&f.ledger), 1);
    let recorded = f.ledger.delegation(&admission.delegation.id).unwrap();
    assert_eq!(recorded.and_then(|u| u.host), Some(host));

    f.ledger.end_session(&session(), T0).unwrap();
    assert!(matches!(
        f.ledger
            .dispatch_to_session_host(new(), ROOMY, &Pids(true), T0),
        Err(LedgerError::SessionEnded(_))
    ));
}
