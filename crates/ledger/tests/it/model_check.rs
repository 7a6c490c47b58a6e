//! Property test: random operation sequences, with an injected clock, against a small
//! in-memory model of the delivery state machine. The two must agree after every step.

use std::collections::BTreeMap;

use crate::common::*;
use hermes_ledger::*;
use proptest::prelude::*;

const TASKS: u32 = 4;
const MAX_ATTEMPTS: u32 = 2;

#[derive(Clone, Debug)]
enum Op {
    Publish(u32),
    Claim(Vec<u32>, u64),
    Renew(usize, u64),
    Ack(usize),
    Release(usize),
    Defer(usize),
    Drop(usize),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..TASKS).prop_map(Op::Publish),
        (prop::collection::vec(0..TASKS, 1..4), 1..50u64).prop_map(|(k, l)| Op::Claim(k, l)),
        (0..6usize, 1..50u64).prop_map(|(c, l)| Op::Renew(c, l)),
        (0..6usize).prop_map(Op::Ack),
        (0..6usize).prop_map(Op::Release),
        (0..6usize).prop_map(Op::Defer),
        (0..6usize).prop_map(Op::Drop),
        (0..60u64).prop_map(Op::Advance),
    ]
}

#[derive(Clone, Debug, PartialEq)]
struct ModelEvent {
    state: EventState,
    attempts: u32,
    holder: Option<usize>,
    expires: u64,
}

#[derive(Default)]
struct Model {
    events: BTreeMap<u32, ModelEvent>,
    claims: Vec<Vec<u32>>,
    /// The claims that acked: another ack by them is a no-op that says so.
    acked: Vec<bool>,
}

impl Model {
    fn holds(&self, claim: usize) -> bool {
        self.claims.get(claim).is_some_and(|keys| {
            keys.iter().all(|k| {
                self.events
                    .get(k)
                    .is_some_and(|e| e.state == EventState::Claimed && e.holder == Some(claim))
            })
        })
    }
    fn settle(&mut self, claim: usize, f: impl Fn(&mut ModelEvent)) -> bool {
        if !self.holds(claim) {
            return false;
        }
        for k in self.claims[claim].clone() {
            let e = self.events.get_mut(&k).unwrap();
            e.holder = None;
            f(e);
        }
        // A settled claim's token is gone.
        self.claims[claim].clear();
        self.claims[claim].push(u32::MAX);
        true
    }
}

/// Cases per run: 256 on redb; 64 on PostgreSQL, where every case is a database of its own and
/// every operation a network round trip (the same seeded sequence, its first 64 cases).
fn cases() -> u32 {
    if hermes_testkit::TestBackend::from_env().is_postgres() {
        64
    } else {
        256
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed),
        ..ProptestConfig::default()
    })]

    #[test]
    fn ledger_agrees_with_the_model(ops in prop::collection::vec(op(), 1..80)) {
        let f = fixture_with(LedgerConfig { max_attempts: MAX_ATTEMPTS, ..LedgerConfig::default() });
        let id = unit(&f.ledger, TASKS);
        let mut model = Model::default();
        let mut tokens: Vec<ClaimToken> = Vec::new();
        let mut now = 0u64;
        let at = |now: u64| T0.plus_ms(now);

        for op in ops {
            match op {
                Op::Publish(i) => {
                    let event = NewEvent {
                        delegation_id: id.clone(),
                        key: EventKey::Task(i),
                        payload: EventPayload::Task(outcome(i, ChildStatus::Completed, at(now))),
                    };
                    let got = f.ledger.publish(event, at(now)).unwrap();
                    let fresh = !model.events.contains_key(&i);
                    prop_assert_eq!(got == Published::Inserted, fresh);
                    model.events.entry(i).or_insert(ModelEvent { state: EventState::Pending, attempts: 0, holder: None, expires: 0 });
                }
                Op::Claim(keys, lease) => {
                    let mut keys = keys;
                    keys.sort_unstable();
                    keys.dedup();
                    let refs: Vec<EventRef> = keys.iter().map(|k| key(&id, *k)).collect();
                    let got = claim(&f.ledger, &refs, lease, at(now));
                    // Model: every key must exist, be open, not live-claimed, with attempts left.
                    let mut ok = true;
                    for k in &keys {
                        match model.events.get_mut(k) {
                            None => ok = false,
                            Some(e) if e.state.is_terminal() => ok = false,
                            Some(e) if e.holder.is_some() && e.expires > now => ok = false,
                            Some(e) if e.attempts >= MAX_ATTEMPTS => {
                                e.state = EventState::Dropped;
                                e.holder = None;
                                ok = false;
                            }
                            Some(_) => {}
                        }
                    }
                    match got {
                        ClaimOutcome::Claimed(c) => {
                            prop_assert!(ok, "ledger claimed what the model refuses");
                            let n = model.claims.len();
                            for k in &keys {
                                let e = model.events.get_mut(k).unwrap();
                                e.state = EventState::Claimed;
                                e.attempts += 1;
                                e.holder = Some(n);
                                e.expires = now + lease;
                            }
                            model.claims.push(keys.clone());
                            model.acked.push(false);
                            tokens.push(c.token);
                        }
                        ClaimOutcome::Refused(_) => prop_assert!(!ok, "ledger refused what the model allows"),
                    }
                }
                Op::Renew(c, lease) => {
                    if let Some(token) = tokens.get(c) {
                        let got = f.ledger.renew(*token, lease, at(now));
                        let holds = model.holds(c);
                        prop_assert_eq!(got.is_ok(), holds);
                        if holds {
                            for k in model.claims[c].clone() {
                                model.events.get_mut(&k).unwrap().expires = now + lease;
                            }
                        }
                    }
                }
                Op::Ack(c) => {
                    if let Some(token) = tokens.get(c) {
                        let got = f.ledger.ack_outcome(*token, at(now));
                        let repeat = model.acked[c];
                        let ok = repeat || model.settle(c, |e| e.state = EventState::Delivered);
                        model.acked[c] = ok;
                        prop_assert_eq!(got.is_ok(), ok);
                        prop_assert_eq!(got.is_ok_and(|a| a.repeated), repeat);
                    }
                }
                Op::Release(c) => {
                    if let Some(token) = tokens.get(c) {
                        let got = f.ledger.release(*token, at(now));
                        let ok = model.settle(c, |e| {
                            e.state = if e.attempts >= MAX_ATTEMPTS { EventState::Dropped } else { EventState::Pending };
                        });
                        prop_assert_eq!(got.is_ok(), ok);
                    }
                }
                Op::Defer(c) => {
                    if let Some(token) = tokens.get(c) {
                        let got = f.ledger.defer(*token);
                        let ok = model.settle(c, |e| {
                            e.state = EventState::Pending;
                            e.attempts -= 1;
                        });
                        prop_assert_eq!(got.is_ok(), ok);
                    }
                }
                Op::Drop(c) => {
                    if let Some(token) = tokens.get(c) {
                        let got = f.ledger.drop_claim(*token, DropReason::Orphaned, at(now));
                        let ok = model.settle(c, |e| e.state = EventState::Dropped);
                        prop_assert_eq!(got.is_ok(), ok);
                    }
                }
                Op::Advance(ms) => now += ms,
            }
            // After every step, every event agrees.
            for (k, want) in &model.events {
                let got = f.ledger.event(&key(&id, *k)).unwrap().unwrap();
                prop_assert_eq!(got.state, want.state, "state of task:{}", k);
                prop_assert_eq!(got.attempts, want.attempts, "attempts of task:{}", k);
                let deliverable = match want.state {
                    EventState::Pending => true,
                    EventState::Claimed => want.expires <= now,
                    _ => false,
                };
                prop_assert_eq!(got.is_deliverable(at(now)), deliverable);
            }
        }
    }
}
