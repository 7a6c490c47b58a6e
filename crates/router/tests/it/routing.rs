//! The router over a real ledger, with an injected clock: ready sets at boundaries, deferral to
//! live claims of others (restart, renew, ack), the scheduler's wake-ups, two consumer paths in
//! one process, ownership, rendering before claiming, and two-phase delivery.

use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;
use hermes_ledger::{
    DelegationId, DeliveryMode, DropReason, Event, EventKey, EventState, Ledger, Timestamp,
};
use hermes_router::{
    AfterShown, Boundary, Clock, Discard, ManualClock, Router, RouterConfig, RouterError,
    SystemClock,
};

const AFTER: DeliveryMode = DeliveryMode::AfterTurn;
const INJECT: DeliveryMode = DeliveryMode::Inject;

fn keys(list: &[&[&str]]) -> Vec<Vec<String>> {
    list.iter()
        .map(|keys| keys.iter().map(|k| (*k).to_owned()).collect())
        .collect()
}

fn at_seconds(s: f64) -> Timestamp {
    T0.plus_ms((s * 1_000.0) as u64)
}

#[test]
fn each_boundary_carries_the_children_that_finished_before_it() {
    let f = fixture();
    let consumer = router(&f.ledger, "s", "drain");
    let id = unit(&f.ledger, "s", 3, AFTER);
    let finishes = [(0, 1.0), (1, 2.0), (2, 5.0)];
    let mut next = 0;
    let mut envelopes = Vec::new();
    for boundary in [1.5, 3.0, 6.0] {
        while next < finishes.len() && finishes[next].1 < boundary {
            finish(
                &f.ledger,
                &id,
                finishes[next].0,
                at_seconds(finishes[next].1),
            );
            next += 1;
        }
        let now = at_seconds(boundary);
        let out = consumer.take_ready(Boundary::Turn, now, render).unwrap();
        for envelope in &out.delivered {
            consumer.ack(envelope.token, now).unwrap();
        }
        envelopes.extend(delivered_keys(&out));
    }
    assert_eq!(envelopes, keys(&[&["task:0"], &["task:1"], &["task:2"]]));
}

#[test]
fn children_ready_at_one_boundary_share_one_envelope() {
    let f = fixture();
    let consumer = router(&f.ledger, "s", "drain");
    let batch = unit(&f.ledger, "s", 3, AFTER);
    let single = unit(&f.ledger, "s", 1, AFTER);
    for (i, s) in [(2, 5.0), (0, 1.0), (1, 2.0)] {
        finish(&f.ledger, &batch, i, at_seconds(s));
    }
    finish(&f.ledger, &single, 0, at_seconds(3.0));
    let out = consumer
        .take_ready(Boundary::Turn, at_seconds(6.0), render)
        .unwrap();
    let mut got: Vec<(DelegationId, Vec<String>)> = out
        .delivered
        .iter()
        .map(|e| {
            (
                e.delegation.id.clone(),
                e.keys().iter().map(|k| k.to_string()).collect(),
            )
        })
        .collect();
    got.sort();
    let mut want = vec![
        (
            batch.clone(),
            keys(&[&["task:0", "task:1", "task:2"]]).remove(0),
        ),
        (single.clone(), keys(&[&["task:0"]]).remove(0)),
    ];
    want.sort();
    assert_eq!(got, want, "one envelope, one claim, per delegation");
    assert!(out.delivered.iter().all(|e| e.attempts() == 1));
    assert_ne!(out.delivered[0].token, out.delivered[1].token);
}

#[test]
fn a_restarted_consumer_waits_out_a_live_claim_and_nothing_is_delivered_twice() {
    let f = fixture();
    let id = unit(&f.ledger, "s", 1, AFTER);
    finish(&f.ledger, &id, 0, T0);

    // The first consumer claims with the default 300 s lease, then dies without settling.
    let first = router(&f.ledger, "s", "interactive");
    let taken = first.take_ready(Boundary::Turn, T0, render).unwrap();
    assert_eq!(delivered_keys(&taken), keys(&[&["task:0"]]));
    let old = taken.delivered[0].token;
    let expires = taken.delivered[0].expires_at;
    assert_eq!(expires, T0.plus_ms(300 * SEC));

    // Its restart sees the live claim and defers to its expiry + 50 ms.
    let restarted = router(&f.ledger, "s", "interactive");
    let clock = ManualClock::new(T0.plus_ms(SEC));
    let now = restarted
        .take_ready(Boundary::Turn, clock.now(), render)
        .unwrap();
    assert!(now.delivered.is_empty());
    assert_eq!(now.deferred.len(), 1);
    assert_eq!(now.deferred[0].keys, vec![EventKey::Task(0)]);
    assert_eq!(now.deferred[0].retry_at, expires.plus_ms(50));

    let out = restarted
        .wait_ready(Boundary::Turn, T0.plus_ms(900 * SEC), &clock, render)
        .unwrap();
    assert_eq!(
        clock.sleeps(),
        vec![expires.plus_ms(50)],
        "one sleep, to the retry time"
    );
    assert_eq!(delivered_keys(&out), keys(&[&["task:0"]]));
    assert_eq!(out.delivered[0].attempts(), 2);

    // The dead holder's token is fenced: it can no longer settle what it never acked.
    assert!(matches!(first.ack(old, clock.now()), Err(RouterError::ClaimLost(t)) if t == old));
    let transitions = restarted.ack(out.delivered[0].token, clock.now()).unwrap();
    assert_eq!(transitions.len(), 1);
    assert_eq!(state(&f.ledger, &key(&id, 0)), EventState::Delivered);
    assert!(restarted.deferred().is_empty());
}

#[test]
fn a_renewed_lease_is_deferred_again_to_its_new_expiry() {
    let f = fixture();
    let id = unit(&f.ledger, "s", 1, AFTER);
    finish(&f.ledger, &id, 0, T0);
    let held = hold(&f.ledger, "s", &[key(&id, 0)], 300 * SEC, T0);

    let consumer = router(&f.ledger, "s", "drain");
    let clock = ManualClock::new(T0.plus_ms(SEC));
    let out = consumer
        .take_ready(Boundary::Turn, clock.now(), render)
        .unwrap();
    assert_eq!(out.deferred[0].retry_at, T0.plus_ms(300_050));

    // While the consumer sleeps, the holder renews (at 299 s, for another 300 s).
    let ledger = Arc::clone(&f.ledger);
    let renewed = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&renewed);
    clock.on_sleep(move |_| {
        if !flag.swap(true, Ordering::SeqCst) {
            ledger
                .renew(held.token, 300 * SEC, T0.plus_ms(299 * SEC))
                .expect("holder renews");
        }
    });
    let out = consumer
        .wait_ready(Boundary::Turn, T0.plus_ms(900 * SEC), &clock, render)
        .unwrap();
    assert!(renewed.load(Ordering::SeqCst));
    assert_eq!(
        clock.sleeps(),
        vec![T0.plus_ms(300_050), T0.plus_ms(599_050)],
        "woke at the old retry time, re-classified, deferred to the new expiry"
    );
    assert_eq!(delivered_keys(&out), keys(&[&["task:0"]]));
}

#[test]
fn an_acked_lease_discards_the_deferred_entry() {
    let f = fixture();
    let id = unit(&f.ledger, "s", 1, AFTER);
    finish(&f.ledger, &id, 0, T0);
    let held = hold(&f.ledger, "s", &[key(&id, 0)], 300 * SEC, T0);

    let consumer = router(&f.ledger, "s", "drain");
    let clock = ManualClock::new(T0.plus_ms(SEC));
    consumer
        .take_ready(Boundary::Turn, clock.now(), render)
        .unwrap();
    assert_eq!(consumer.deferred().len(), 1);

    // The holder acks while the consumer sleeps: on waking it finds nothing to retry.
    let ledger = Arc::clone(&f.ledger);
    clock.on_sleep(move |_| {
        let _ = ledger.ack(held.token, T0.plus_ms(100 * SEC));
    });
    let deadline = T0.plus_ms(400 * SEC);
    let out = consumer
        .wait_ready(Boundary::Turn, deadline, &clock, render)
        .unwrap();
    assert!(out.delivered.is_empty() && out.deferred.is_empty());
    assert_eq!(clock.sleeps(), vec![T0.plus_ms(300_050), deadline]);
    assert!(consumer.deferred().is_empty(), "the entry was discarded");
    assert_eq!(state(&f.ledger, &key(&id, 0)), EventState::Delivered);
}

#[test]
fn a_wait_never_wakes_before_the_earliest_deadline() {
    let f = fixture();
    let mut expiries = Vec::new();
    for lease_s in [30, 10, 20] {
        let id = unit(&f.ledger, "s", 1, AFTER);
        finish(&f.ledger, &id, 0, T0);
        expiries.push(hold(&f.ledger, "s", &[key(&id, 0)], lease_s * SEC, T0).expires_at);
    }
    expiries.sort();
    let consumer = router(&f.ledger, "s", "drain");
    let clock = ManualClock::new(T0);
    let deadline = T0.plus_ms(60 * SEC);
    let mut woke_with = Vec::new();
    for _ in 0..3 {
        let out = consumer
            .wait_ready(Boundary::Turn, deadline, &clock, render)
            .unwrap();
        assert_eq!(out.delivered.len(), 1);
        woke_with.push(clock.now());
    }
    let retries: Vec<Timestamp> = expiries.iter().map(|e| e.plus_ms(50)).collect();
    assert_eq!(clock.sleeps(), retries, "exactly one sleep per deadline");
    assert_eq!(woke_with, retries);
    let stats = consumer.wait_stats();
    assert_eq!((stats.wakeups, stats.idle_wakeups), (3, 0));
}

#[test]
fn a_polling_wait_wakes_at_poll_ticks_and_at_the_deferral_deadline() {
    let f = fixture();
    let id = unit(&f.ledger, "s", 1, AFTER);
    finish(&f.ledger, &id, 0, T0);
    hold(&f.ledger, "s", &[key(&id, 0)], 2_500, T0);
    let mut config = RouterConfig::new(sid("s"), "idle");
    config.poll_interval_ms = Some(1_000);
    let consumer = Router::new(Arc::clone(&f.ledger), config);
    let clock = ManualClock::new(T0);
    let out = consumer
        .wait_ready(Boundary::Turn, T0.plus_ms(60 * SEC), &clock, render)
        .unwrap();
    assert_eq!(out.delivered.len(), 1);
    // Polled every second; a consumer woken by the ledger's notifications (PostgreSQL) polls
    // only every two, as a safety net.
    let expected = if consumer.follows_notifications() {
        vec![T0.plus_ms(2_000), T0.plus_ms(2_550)]
    } else {
        vec![T0.plus_ms(1_000), T0.plus_ms(2_000), T0.plus_ms(2_550)]
    };
    assert_eq!(clock.sleeps(), expected);
    assert_eq!(consumer.wait_stats().idle_wakeups, 0);
}

#[test]
fn one_scheduler_entry_per_envelope_however_often_it_is_deferred() {
    let f = fixture();
    let id = unit(&f.ledger, "s", 2, AFTER);
    finish(&f.ledger, &id, 0, T0);
    finish(&f.ledger, &id, 1, T0);
    let held = hold(&f.ledger, "s", &[key(&id, 0), key(&id, 1)], 10 * SEC, T0);
    let consumer = router(&f.ledger, "s", "drain");
    for i in 1..=50u64 {
        let now = T0.plus_ms(i * 5 * SEC);
        let expires = f.ledger.renew(held.token, 10 * SEC, now).unwrap();
        let out = consumer
            .take_ready(Boundary::Turn, now.plus_ms(1), render)
            .unwrap();
        assert!(out.delivered.is_empty());
        let deferred = consumer.deferred();
        assert_eq!(deferred.len(), 1, "round {i}");
        assert_eq!(
            deferred[0].0.keys(),
            &[EventKey::Task(0), EventKey::Task(1)]
        );
        assert_eq!(deferred[0].1, expires.plus_ms(50));
        assert_eq!(consumer.next_deadline(), Some(expires.plus_ms(50)));
    }
}

#[test]
fn two_paths_in_one_process_take_every_event_exactly_once() {
    for seed in 1..=6u64 {
        two_paths_round(seed);
    }
}

/// A tiny deterministic generator, so each round interleaves differently but reproducibly.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn two_paths_round(seed: u64) {
    const UNITS: u32 = 6;
    const TASKS: u32 = 5;
    let f = fixture();
    let ids: Vec<DelegationId> = (0..UNITS)
        .map(|i| {
            let mode = if i % 2 == 0 { AFTER } else { INJECT };
            unit(&f.ledger, "s", TASKS, mode)
        })
        .collect();
    let mut config = RouterConfig::new(sid("s"), "interactive");
    config.poll_interval_ms = Some(5);
    let consumer = Arc::new(Router::new(Arc::clone(&f.ledger), config));
    let done = Arc::new(AtomicBool::new(false));
    let taken: Arc<Mutex<Vec<(String, &'static str)>>> = Arc::default();

    let path = |name: &'static str, idle: bool, rng_seed: u64| {
        let consumer = Arc::clone(&consumer);
        let done = Arc::clone(&done);
        let taken = Arc::clone(&taken);
        thread::spawn(move || {
            let mut rng = Rng(rng_seed);
            let clock = SystemClock;
            while !done.load(Ordering::SeqCst) {
                let boundary = if rng.below(3) == 0 {
                    Boundary::Tool
                } else {
                    Boundary::Turn
                };
                let out = if idle {
                    let deadline = clock.now().plus_ms(20);
                    consumer.wait_ready(boundary, deadline, &clock, render)
                } else {
                    consumer.take_ready(boundary, clock.now(), render)
                }
                .expect("boundary runs");
                for envelope in out.delivered {
                    // Sometimes the presentation is interrupted before anything was shown.
                    if rng.below(5) == 0 {
                        consumer.defer(envelope.token).expect("defer");
                        continue;
                    }
                    consumer.ack(envelope.token, clock.now()).expect("ack");
                    let mut taken = taken.lock().unwrap();
                    for event in &envelope.events {
                        taken.push((event.event_ref().to_string(), name));
                    }
                }
                thread::sleep(Duration::from_micros(rng.below(3_000)));
            }
        })
    };
    let poller = path("idle poller", true, seed * 7 + 1);
    let drain = path("post-turn drain", false, seed * 13 + 5);

    // Children finish in a seeded order while both paths consume.
    let mut rng = Rng(seed * 31 + 3);
    let mut pending: Vec<(usize, u32)> = (0..ids.len())
        .flat_map(|u| (0..TASKS).map(move |t| (u, t)))
        .collect();
    while !pending.is_empty() {
        let (u, t) = pending.remove(rng.below(pending.len() as u64) as usize);
        finish(&f.ledger, &ids[u], t, SystemClock.now());
        if rng.below(4) == 0 {
            thread::sleep(Duration::from_micros(rng.below(4_000)));
        }
    }
    let all: BTreeSet<String> = ids
        .iter()
        .flat_map(|id| (0..TASKS).map(move |t| key(id, t).to_string()))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while taken.lock().unwrap().len() < all.len() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    done.store(true, Ordering::SeqCst);
    consumer.interrupt_waits();
    poller.join().unwrap();
    drain.join().unwrap();

    let taken = taken.lock().unwrap();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for (event, _) in taken.iter() {
        *counts.entry(event.as_str()).or_default() += 1;
    }
    assert!(
        counts.values().all(|&n| n == 1),
        "seed {seed}: taken twice: {counts:?}"
    );
    let got: BTreeSet<String> = counts.keys().map(|k| (*k).to_owned()).collect();
    assert_eq!(got, all, "seed {seed}: every event taken");
    for id in &ids {
        for t in 0..TASKS {
            assert_eq!(state(&f.ledger, &key(id, t)), EventState::Delivered);
        }
    }
}

#[test]
fn a_session_is_never_offered_another_sessions_events() {
    let f = fixture();
    let a = unit(&f.ledger, "a", 2, AFTER);
    let b = unit(&f.ledger, "b", 1, INJECT);
    finish(&f.ledger, &a, 0, T0);
    finish(&f.ledger, &a, 1, T0);
    finish(&f.ledger, &b, 0, T0);
    let for_b = router(&f.ledger, "b", "drain");
    let for_a = router(&f.ledger, "a", "drain");
    for boundary in [Boundary::Tool, Boundary::Turn] {
        let plan = for_b.preview(boundary, T0).unwrap();
        assert!(plan.offers.iter().all(|o| o.delegation.id == b));
    }
    let out = for_b.take_ready(Boundary::Turn, T0, render).unwrap();
    assert_eq!(out.delivered.len(), 1);
    assert_eq!(out.delivered[0].delegation.id, b);
    let out = for_a.take_ready(Boundary::Turn, T0, render).unwrap();
    assert_eq!(out.delivered.len(), 1);
    assert_eq!(out.delivered[0].delegation.id, a);
    // Nothing of a's was touched by b's consumer.
    assert_eq!(out.delivered[0].attempts(), 1);
}

#[test]
fn an_ended_sessions_events_are_dropped_and_offered_nowhere() {
    let f = fixture();
    let a = unit(&f.ledger, "a", 3, AFTER);
    unit(&f.ledger, "b", 1, AFTER);
    for t in 0..3 {
        finish(&f.ledger, &a, t, T0);
    }
    let held = hold(&f.ledger, "a", &[key(&a, 2)], 300 * SEC, T0);
    let for_a = router(&f.ledger, "a", "drain");
    let out = for_a
        .take_ready(
            Boundary::Turn,
            T0,
            |_: &hermes_ledger::UnitRecord, _: &[Event]| Err::<String, _>("not now"),
        )
        .unwrap();
    assert_eq!(out.failed.len(), 1, "task:0 and task:1 were ready");
    assert_eq!(for_a.deferred().len(), 1, "task:2 is held");

    f.ledger.end_session(&sid("a"), T0.plus_ms(SEC)).unwrap();
    let err = for_a
        .take_ready(Boundary::Turn, T0.plus_ms(2 * SEC), render)
        .unwrap_err();
    assert!(
        matches!(err, RouterError::SessionEnded(ref s) if s.as_str() == "a"),
        "{err}"
    );
    assert!(
        for_a.deferred().is_empty(),
        "deferred entries are forgotten"
    );
    let clock = ManualClock::new(T0.plus_ms(2 * SEC));
    assert!(matches!(
        for_a.wait_ready(Boundary::Turn, T0.plus_ms(60 * SEC), &clock, render),
        Err(RouterError::SessionEnded(_))
    ));
    assert!(clock.sleeps().is_empty());
    for t in 0..3 {
        let event = f.ledger.event(&key(&a, t)).unwrap().unwrap();
        assert_eq!(event.state, EventState::Dropped);
        assert_eq!(event.drop_reason, Some(DropReason::SessionEnded));
    }
    assert!(matches!(
        f.ledger.ack(held.token, T0.plus_ms(3 * SEC)),
        Err(hermes_ledger::LedgerError::ClaimLost(_))
    ));
    // Not offered anywhere else either.
    let for_b = router(&f.ledger, "b", "drain");
    let plan = for_b.preview(Boundary::Turn, T0.plus_ms(2 * SEC)).unwrap();
    assert!(plan.offers.is_empty() && plan.foreign == 0);
}

#[test]
fn an_unknown_session_has_nothing_and_is_not_an_error() {
    let f = fixture();
    let consumer = router(&f.ledger, "nobody", "drain");
    let out = consumer.take_ready(Boundary::Turn, T0, render).unwrap();
    assert!(out.delivered.is_empty() && out.deferred.is_empty());
    assert_eq!(
        consumer.preview(Boundary::Turn, T0).unwrap().access,
        hermes_router::Access::Unknown
    );
}

#[test]
fn a_tool_boundary_offers_only_inject_units_and_the_next_turn_takes_the_rest() {
    let f = fixture();
    let inject = unit(&f.ledger, "s", 1, INJECT);
    let after = unit(&f.ledger, "s", 1, AFTER);
    let held_inject = unit(&f.ledger, "s", 1, INJECT);
    let held_after = unit(&f.ledger, "s", 1, AFTER);
    for id in [&inject, &after, &held_inject, &held_after] {
        finish(&f.ledger, id, 0, T0);
    }
    hold(&f.ledger, "s", &[key(&held_inject, 0)], 300 * SEC, T0);
    hold(&f.ledger, "s", &[key(&held_after, 0)], 300 * SEC, T0);
    let consumer = router(&f.ledger, "s", "interactive");

    let tool = consumer.take_ready(Boundary::Tool, T0, render).unwrap();
    assert_eq!(tool.delivered.len(), 1);
    assert_eq!(tool.delivered[0].delegation.id, inject);
    let deferred: Vec<&DelegationId> = tool.deferred.iter().map(|d| &d.delegation_id).collect();
    assert_eq!(
        deferred,
        vec![&held_inject],
        "a tool boundary reports what it could offer"
    );
    assert_eq!(
        consumer.deferred().len(),
        2,
        "but the scheduler tracks both"
    );

    let turn = consumer.take_ready(Boundary::Turn, T0, render).unwrap();
    assert_eq!(turn.delivered.len(), 1);
    assert_eq!(turn.delivered[0].delegation.id, after);
    assert_eq!(turn.deferred.len(), 2);
}

#[test]
fn a_render_failure_leaves_the_envelope_unclaimed_and_spends_no_attempt() {
    let f = fixture();
    let bad = unit(&f.ledger, "s", 1, AFTER);
    let good = unit(&f.ledger, "s", 1, AFTER);
    finish(&f.ledger, &bad, 0, T0);
    finish(&f.ledger, &good, 0, T0);
    let consumer = router(&f.ledger, "s", "drain");
    let out = consumer
        .take_ready(
            Boundary::Turn,
            T0,
            |unit: &hermes_ledger::UnitRecord, events: &[Event]| {
                if unit.id == bad {
                    Err(format!("cannot render {}", unit.id))
                } else {
                    Ok(render(unit, events).unwrap_or_default())
                }
            },
        )
        .unwrap();
    assert_eq!(out.delivered.len(), 1);
    assert_eq!(out.delivered[0].delegation.id, good);
    assert_eq!(out.failed.len(), 1);
    assert_eq!(out.failed[0].delegation_id, bad);
    assert_eq!(out.failed[0].keys, vec![EventKey::Task(0)]);
    let event = f.ledger.event(&key(&bad, 0)).unwrap().unwrap();
    assert_eq!((event.state, event.attempts), (EventState::Pending, 0));

    let again = consumer.take_ready(Boundary::Turn, T0, render).unwrap();
    assert_eq!(again.delivered.len(), 1);
    assert_eq!(again.delivered[0].delegation.id, bad);
    assert_eq!(again.delivered[0].attempts(), 1);
}

#[test]
fn a_claim_lost_to_a_race_is_classified_key_by_key() {
    let f = fixture();
    let id = unit(&f.ledger, "s", 4, AFTER);
    for t in 0..4 {
        finish(&f.ledger, &id, t, T0);
    }
    let consumer = router(&f.ledger, "s", "drain");
    let ledger: &Ledger = &f.ledger;
    let mut calls: Vec<Vec<EventKey>> = Vec::new();
    let mut raced = None;
    // Between rendering and claiming, other consumers take task:0 (and keep it) and task:1
    // (and deliver it).
    let out = consumer
        .take_ready(
            Boundary::Turn,
            T0,
            |unit: &hermes_ledger::UnitRecord, events: &[Event]| {
                calls.push(events.iter().map(|e| e.key).collect());
                if raced.is_none() {
                    raced = Some(hold(ledger, "s", &[key(&id, 0)], 300 * SEC, T0));
                    let other = hold(ledger, "s", &[key(&id, 1)], 300 * SEC, T0);
                    ledger.ack(other.token, T0).expect("other acks");
                }
                render(unit, events)
            },
        )
        .unwrap();
    assert_eq!(
        calls,
        vec![
            (0..4).map(EventKey::Task).collect::<Vec<_>>(),
            vec![EventKey::Task(2), EventKey::Task(3)],
        ],
        "the rest of the envelope is claimed at once, not held back"
    );
    assert_eq!(delivered_keys(&out), keys(&[&["task:2", "task:3"]]));
    assert_eq!(
        out.discarded,
        vec![(key(&id, 1), Discard::Terminal(EventState::Delivered))]
    );
    assert_eq!(out.deferred.len(), 1);
    assert_eq!(out.deferred[0].keys, vec![EventKey::Task(0)]);
    let expires = raced.map(|c| c.expires_at).unwrap();
    assert_eq!(out.deferred[0].retry_at, expires.plus_ms(50));
    assert_eq!(consumer.next_deadline(), Some(expires.plus_ms(50)));
}

#[test]
fn release_counts_the_attempt_and_defer_gives_it_back() {
    let f = fixture();
    let id = unit(&f.ledger, "s", 1, AFTER);
    finish(&f.ledger, &id, 0, T0);
    let consumer = router(&f.ledger, "s", "drain");
    let take = |now| {
        let out = consumer.take_ready(Boundary::Turn, now, render).unwrap();
        assert_eq!(out.delivered.len(), 1);
        (out.delivered[0].token, out.delivered[0].attempts())
    };
    let (token, attempts) = take(T0);
    assert_eq!(attempts, 1);
    consumer.release(token, T0).unwrap();
    let (token, attempts) = take(T0);
    assert_eq!(attempts, 2, "an interrupted presentation counts");
    consumer.defer(token).unwrap();
    let event = f.ledger.event(&key(&id, 0)).unwrap().unwrap();
    assert_eq!((event.state, event.attempts), (EventState::Pending, 1));
    assert!(matches!(
        consumer.defer(token),
        Err(RouterError::ClaimLost(_))
    ));
}

#[test]
fn renew_if_due_renews_on_the_heartbeat() {
    let f = fixture();
    let id = unit(&f.ledger, "s", 1, AFTER);
    finish(&f.ledger, &id, 0, T0);
    let consumer = router(&f.ledger, "s", "interactive");
    let out = consumer.take_ready(Boundary::Turn, T0, render).unwrap();
    let token = out.delivered[0].token;
    let mut beat = consumer.heartbeat(T0);
    assert_eq!(
        consumer
            .renew_if_due(token, &mut beat, T0.plus_ms(59 * SEC))
            .unwrap(),
        None
    );
    assert_eq!(
        consumer
            .renew_if_due(token, &mut beat, T0.plus_ms(60 * SEC))
            .unwrap(),
        Some(T0.plus_ms(360 * SEC))
    );
    assert_eq!(beat.next_at(), T0.plus_ms(120 * SEC));
    // Past the first lease, the claim still stands: another consumer defers to it.
    let other = router(&f.ledger, "s", "drain");
    let late = other
        .take_ready(Boundary::Turn, T0.plus_ms(301 * SEC), render)
        .unwrap();
    assert!(late.delivered.is_empty());
    assert_eq!(late.deferred[0].retry_at, T0.plus_ms(360_050));
    consumer.ack(token, T0.plus_ms(302 * SEC)).unwrap();
}

#[test]
fn keep_alive_holds_a_claim_while_presenting_and_reports_a_lost_one() {
    let f = fixture();
    let id = unit(&f.ledger, "s", 1, AFTER);
    finish(&f.ledger, &id, 0, T0);
    let mut config = RouterConfig::new(sid("s"), "interactive");
    config.lease_ms = 1_000;
    config.heartbeat_ms = 100;
    config.poll_interval_ms = None;
    let consumer = Router::new(Arc::clone(&f.ledger), config);
    let clock = SystemClock;
    let out = consumer
        .take_ready(Boundary::Turn, clock.now(), render)
        .unwrap();
    let envelope = &out.delivered[0];
    let guard = consumer
        .keep_alive(envelope.token, Arc::new(SystemClock))
        .unwrap();
    // Present for well past the original lease; nobody else may take it meanwhile.
    let other = router(&f.ledger, "s", "drain");
    let until = envelope.expires_at.plus_ms(1_500);
    while clock.now() < until {
        let late = other
            .take_ready(Boundary::Turn, clock.now(), render)
            .unwrap();
        assert!(late.delivered.is_empty(), "taken while still presented");
        thread::sleep(Duration::from_millis(20));
    }
    let renewals = guard.stop().unwrap();
    assert!(renewals >= 2, "{renewals} renewals");
    consumer.ack(envelope.token, clock.now()).unwrap();

    // A claim whose lease ran out and was taken over: the heartbeat reports it lost.
    let id = unit(&f.ledger, "s", 1, AFTER);
    finish(&f.ledger, &id, 0, T0);
    let stale = consumer
        .take_ready(Boundary::Turn, clock.now().minus_ms(10 * SEC), render)
        .unwrap();
    let token = stale.delivered[0].token;
    let taken = other
        .take_ready(Boundary::Turn, clock.now(), render)
        .unwrap();
    assert_eq!(taken.delivered.len(), 1);
    let mut config = RouterConfig::new(sid("s"), "interactive");
    config.heartbeat_ms = 1;
    let eager = Router::new(Arc::clone(&f.ledger), config);
    let guard = eager.keep_alive(token, Arc::new(SystemClock)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    // The thread ends by itself once renewing fails.
    while !guard.is_finished() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    let result = guard.stop();
    assert!(
        matches!(result, Err(RouterError::ClaimLost(t)) if t == token),
        "{result:?}"
    );
}

#[test]
fn interrupt_ends_a_wait_at_once() {
    let f = fixture();
    unit(&f.ledger, "s", 1, AFTER);
    let consumer = Arc::new(router(&f.ledger, "s", "idle"));
    let waiter = {
        let consumer = Arc::clone(&consumer);
        thread::spawn(move || {
            let clock = SystemClock;
            let deadline = clock.now().plus_ms(60 * SEC);
            consumer.wait_ready(Boundary::Turn, deadline, &clock, render)
        })
    };
    let start = Instant::now();
    while !waiter.is_finished() && start.elapsed() < Duration::from_secs(30) {
        consumer.interrupt_waits();
        thread::sleep(Duration::from_millis(10));
    }
    let out = waiter.join().unwrap().unwrap();
    assert!(out.delivered.is_empty());
    assert!(start.elapsed() < Duration::from_secs(30));
}

#[test]
fn a_nudge_wakes_a_wait_for_an_event_published_in_process() {
    let f = fixture();
    let id = unit(&f.ledger, "s", 1, AFTER);
    let consumer = Arc::new(router(&f.ledger, "s", "idle"));
    let waiter = {
        let consumer = Arc::clone(&consumer);
        thread::spawn(move || {
            let clock = SystemClock;
            let deadline = clock.now().plus_ms(60 * SEC);
            consumer.wait_ready(Boundary::Turn, deadline, &clock, render)
        })
    };
    finish(&f.ledger, &id, 0, SystemClock.now());
    let start = Instant::now();
    while !waiter.is_finished() && start.elapsed() < Duration::from_secs(30) {
        consumer.nudge();
        thread::sleep(Duration::from_millis(10));
    }
    let out = waiter.join().unwrap().unwrap();
    assert_eq!(delivered_keys(&out), keys(&[&["task:0"]]));
    assert!(start.elapsed() < Duration::from_secs(30));
}

#[test]
fn render_sees_the_events_before_the_claim() {
    let f = fixture();
    let id = unit(&f.ledger, "s", 2, AFTER);
    finish(&f.ledger, &id, 0, T0);
    finish(&f.ledger, &id, 1, T0);
    let consumer = router(&f.ledger, "s", "drain");
    let out = consumer
        .take_ready(
            Boundary::Turn,
            T0,
            |_: &hermes_ledger::UnitRecord, events: &[Event]| {
                assert!(events.iter().all(|e| e.state == EventState::Pending));
                Ok::<_, Infallible>(events.len())
            },
        )
        .unwrap();
    assert_eq!(out.delivered[0].rendered, 2);
    assert!(
        out.delivered[0]
            .events
            .iter()
            .all(|e| e.state == EventState::Claimed)
    );
}

#[test]
fn a_claim_given_back_by_one_path_is_taken_by_the_other_at_once() {
    let f = fixture();
    let id = unit(&f.ledger, "s", 1, AFTER);
    finish(&f.ledger, &id, 0, T0);
    // Polling is off: only a nudge (or the 60 s deadline) can wake the idle path.
    let consumer = Arc::new(router(&f.ledger, "s", "interactive"));
    let clock = SystemClock;
    let drain = consumer
        .take_ready(Boundary::Turn, clock.now(), render)
        .unwrap();
    let token = drain.delivered[0].token;

    let asleep = Arc::new(AtomicBool::new(false));
    let idle = {
        let consumer = Arc::clone(&consumer);
        let clock = Noting(Arc::clone(&asleep));
        thread::spawn(move || {
            let deadline = clock.now().plus_ms(60 * SEC);
            consumer.wait_ready(Boundary::Turn, deadline, &clock, render)
        })
    };
    // The idle path sees the event as this process's own claim: not offered, not deferred, so
    // it goes to sleep until its deadline.
    let start = Instant::now();
    while !asleep.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(30) {
        thread::sleep(Duration::from_millis(1));
    }
    assert!(asleep.load(Ordering::SeqCst));
    assert!(consumer.deferred().is_empty());
    // The post-turn path is interrupted before showing anything and gives the claim back.
    consumer.defer(token).unwrap();
    let out = idle.join().unwrap().unwrap();
    assert_eq!(delivered_keys(&out), keys(&[&["task:0"]]));
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "woken by the nudge, not the deadline"
    );
    assert_eq!(
        out.delivered[0].attempts(),
        1,
        "the deferred attempt was given back"
    );
}

/// The system clock, noting when a sleeper goes to sleep.
#[derive(Debug)]
struct Noting(Arc<AtomicBool>);

impl Clock for Noting {
    fn now(&self) -> Timestamp {
        SystemClock.now()
    }

    fn sleep_until(&self, until: Timestamp, watch: &hermes_router::Watch<'_>) {
        self.0.store(true, Ordering::SeqCst);
        SystemClock.sleep_until(until, watch);
    }
}

#[test]
fn present_acks_every_shown_claim_in_one_commit_and_gives_all_back_when_showing_failed() {
    let f = fixture();
    let (a, b) = (
        unit(&f.ledger, "s", 1, AFTER),
        unit(&f.ledger, "s", 1, AFTER),
    );
    finish(&f.ledger, &a, 0, T0);
    finish(&f.ledger, &b, 0, T0);
    let consumer = router(&f.ledger, "s", "interactive");
    let clock = SystemClock;

    // Showing failed: both go back unshown, their attempt given back.
    let out = consumer
        .take_ready(Boundary::Turn, clock.now(), render)
        .unwrap();
    let tokens: Vec<_> = out.delivered.iter().map(|c| c.token).collect();
    assert_eq!(tokens.len(), 2);
    let shown = consumer
        .present(&tokens, AfterShown::Ack, || {
            Err::<(), _>("the terminal went away")
        })
        .unwrap();
    assert_eq!(shown, Err("the terminal went away"));
    for id in [&a, &b] {
        assert_eq!(state(&f.ledger, &key(id, 0)), EventState::Pending);
        let event = f.ledger.event(&key(id, 0)).unwrap().unwrap();
        assert_eq!(event.attempts, 0, "a give-back counts no attempt");
    }

    // Held: shown, still claimed.
    let out = consumer
        .take_ready(Boundary::Turn, clock.now(), render)
        .unwrap();
    let tokens: Vec<_> = out.delivered.iter().map(|c| c.token).collect();
    consumer
        .present(&tokens, AfterShown::Hold, || Ok::<_, ()>(()))
        .unwrap()
        .unwrap();
    assert_eq!(state(&f.ledger, &key(&a, 0)), EventState::Claimed);

    // Shown: acked, except a claim that no longer holds, which is the error once the other
    // was acked.
    consumer.release(tokens[0], clock.now()).unwrap();
    let settled = consumer.present(&tokens, AfterShown::Ack, || Ok::<_, ()>(7));
    assert!(
        matches!(settled, Err(RouterError::ClaimLost(t)) if t == tokens[0]),
        "{settled:?}"
    );
    let (lost, kept) = if out.delivered[0].delegation.id == a {
        (&a, &b)
    } else {
        (&b, &a)
    };
    assert_eq!(state(&f.ledger, &key(lost, 0)), EventState::Pending);
    assert_eq!(state(&f.ledger, &key(kept, 0)), EventState::Delivered);
}

#[test]
fn present_finding_its_claim_acked_already_by_the_same_token_is_no_lost_claim() {
    let f = fixture();
    let a = unit(&f.ledger, "s", 1, AFTER);
    finish(&f.ledger, &a, 0, T0);
    let consumer = router(&f.ledger, "s", "interactive");
    let clock = SystemClock;
    let out = consumer
        .take_ready(Boundary::Turn, clock.now(), render)
        .unwrap();
    let tokens: Vec<_> = out.delivered.iter().map(|c| c.token).collect();
    assert_eq!(tokens.len(), 1);
    // The same token's ack landed already (an earlier attempt whose answer was lost).
    f.ledger.ack(tokens[0], clock.now()).unwrap();
    let shown = consumer
        .present(&tokens, AfterShown::Ack, || Ok::<_, ()>(7))
        .unwrap();
    assert_eq!(shown, Ok(7), "acked: not reported as a lost claim");
    let event = f.ledger.event(&key(&a, 0)).unwrap().unwrap();
    assert_eq!((event.state, event.attempts), (EventState::Delivered, 1));
}
