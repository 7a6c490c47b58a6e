//! The one-statement transitions of `store/pg/transitions.sql` against the rules they stand
//! for (a test beside the operations, not in `store/`, which imports none of them): on
//! random states, a claim, an ack and a publish give the same outcome and leave the same events
//! and claims on PostgreSQL (the SQL functions) as on redb (the operations of `events.rs` and
//! `ack.rs` over `rules.rs`, the spec). Every case starts both ledgers from the same state,
//! written record by record through the store, on units of its own. And a read begun as one
//! statement (`Ledger::read_one`) answers as a read transaction does on both.

use std::sync::atomic::{AtomicU32, Ordering};

use proptest::prelude::*;

use crate::model::{
    ChildOutcome, ChildStatus, ClaimRecord, ClaimRequest, ClaimToken, DelegationId, DeliveryMode,
    Event, EventKey, EventPayload, EventRef, EventState, ExitDetail, Lease, Session, SessionId,
    SessionState, Timestamp,
};
use crate::testing::{TestBackend, fresh_database, pg_admin_url, running_unit, spec};
use crate::{Ledger, LedgerConfig, Location, PgTarget, TokenSource};

const NOW: Timestamp = Timestamp(1_000_000);
const KEYS: [EventKey; 3] = [EventKey::Task(0), EventKey::Task(1), EventKey::Terminal];

/// One key's event, if it exists: state, session (0, 1: `s0`, `s1`; 2: none), attempts, and
/// a lease (token number, expiry before, at or after `NOW`).
type EventSpec = Option<(u8, u8, u32, Option<(u8, i8)>)>;

/// Weighted towards claimable events (pending, no attempt yet, no lease), so that claims of
/// several keys are often taken, not only refused.
fn event_spec() -> impl Strategy<Value = EventSpec> {
    proptest::option::weighted(
        0.85,
        (
            prop_oneof![2 => Just(0u8), 1 => 0u8..4],
            0u8..3,
            prop_oneof![2 => Just(0u32), 1 => 0u32..4],
            proptest::option::weighted(0.3, (0u8..3, -1i8..=1)),
        ),
    )
}

/// A case's world: six keys (two units × `KEYS`), three tokens' claim records (each a subset
/// of the keys, or none).
#[derive(Clone, Debug)]
struct World {
    events: Vec<EventSpec>,
    claims: Vec<Option<Vec<usize>>>,
}

fn world() -> impl Strategy<Value = World> {
    (
        proptest::collection::vec(event_spec(), 6),
        proptest::collection::vec(
            proptest::option::of(proptest::collection::vec(0usize..6, 1..4)),
            3,
        ),
    )
        .prop_map(|(events, claims)| World { events, claims })
}

/// Two ledgers, one per backend, and the next case's number (for units and tokens of its own).
struct Pair {
    redb: Location,
    pg: Location,
    _dir: tempfile::TempDir,
}

fn pair() -> &'static Pair {
    static PAIR: std::sync::OnceLock<Pair> = std::sync::OnceLock::new();
    PAIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let (redb, _) = TestBackend::Redb.fresh(dir.path());
        let url = fresh_database(&pg_admin_url());
        let target = PgTarget::parse(&url, None).expect("the test URL parses");
        Pair {
            redb,
            pg: Location::Postgres(Box::new(target)),
            _dir: dir,
        }
    })
}

static CASE: AtomicU32 = AtomicU32::new(1);

/// The case's ledgers, opened afresh with the same token seed.
fn ledgers(case: u32, max_attempts: u32) -> [Ledger; 2] {
    let config = LedgerConfig {
        max_attempts,
        ..LedgerConfig::default()
    };
    let open = |location: &Location| {
        match location {
            Location::File(path) => {
                Ledger::open_with(path, config.clone(), TokenSource::Seeded(u64::from(case)))
            }
            Location::Postgres(target) => {
                Ledger::connect(target, config.clone(), TokenSource::Seeded(u64::from(case)))
            }
        }
        .expect("the ledger opens")
    };
    [open(&pair().redb), open(&pair().pg)]
}

fn session(n: u8) -> Option<SessionId> {
    (n < 2).then(|| SessionId::new(format!("s{n}")).expect("valid"))
}

fn unit_id(case: u32, unit: usize) -> DelegationId {
    DelegationId::new(format!("deleg_{case:010x}{unit:02x}")).expect("valid")
}

fn key(case: u32, k: usize) -> EventRef {
    EventRef {
        delegation_id: unit_id(case, k / 3),
        key: KEYS[k % 3],
    }
}

fn token(case: u32, n: u8) -> ClaimToken {
    ClaimToken((u128::from(case) << 8) | u128::from(n) | (1 << 100))
}

fn payload(index: u32, interrupted_by_session_end: bool) -> EventPayload {
    let mut outcome = ChildOutcome::new(index, "goal", ChildStatus::Completed, NOW);
    if interrupted_by_session_end {
        outcome.status = ChildStatus::Interrupted;
        outcome.detail = ExitDetail::Interrupted {
            reason: crate::txn::sessions::SESSION_END.into(),
        };
    }
    EventPayload::Task(outcome)
}

/// Writes the case's world into `ledger`, record by record.
fn plant(ledger: &Ledger, case: u32, world: &World) {
    ledger
        .write(|w| {
            for (k, spec) in world.events.iter().enumerate() {
                let Some((state, owner, attempts, lease)) = *spec else {
                    continue;
                };
                let state = [
                    EventState::Pending,
                    EventState::Claimed,
                    EventState::Delivered,
                    EventState::Dropped,
                ][usize::from(state)];
                let event_ref = key(case, k);
                w.put_event(&Event {
                    delegation_id: event_ref.delegation_id.clone(),
                    key: event_ref.key,
                    session: session(owner),
                    delivery: DeliveryMode::AfterTurn,
                    payload: payload(u32::try_from(k).unwrap_or(0), false),
                    state,
                    attempts,
                    lease: lease.map(|(n, when)| Lease {
                        token: token(case, n),
                        consumer: format!("c{n}"),
                        claimed_at: Timestamp(NOW.0 - 100),
                        expires_at: Timestamp(NOW.0.saturating_add_signed(i64::from(when) * 10)),
                    }),
                    published_at: Timestamp(NOW.0 - 1_000),
                    delivered_at: (state == EventState::Delivered).then_some(NOW),
                    dropped_at: (state == EventState::Dropped).then_some(NOW),
                    drop_reason: (state == EventState::Dropped)
                        .then_some(crate::model::DropReason::Orphaned),
                })?;
            }
            for (n, keys) in world.claims.iter().enumerate() {
                let Some(keys) = keys else { continue };
                let mut keys: Vec<EventRef> = keys.iter().map(|&k| key(case, k)).collect();
                keys.sort();
                keys.dedup();
                let n = u8::try_from(n).unwrap_or(0);
                w.put_claim(&ClaimRecord {
                    token: token(case, n),
                    keys,
                    consumer: format!("c{n}"),
                    claimed_at: Timestamp(NOW.0 - 100),
                    expires_at: NOW,
                })?;
            }
            Ok(())
        })
        .expect("the world is written");
}

/// Every event and claim record of the case, as the ledger has them now (`extra`: tokens
/// issued during the case).
fn observe(
    ledger: &Ledger,
    case: u32,
    extra: &[ClaimToken],
) -> (Vec<Option<Event>>, Vec<Option<ClaimRecord>>) {
    let events = (0..6)
        .map(|k| ledger.event(&key(case, k)).expect("reads"))
        .collect();
    let claims = (0..3)
        .map(|n| token(case, n))
        .chain(extra.iter().copied())
        .map(|t| ledger.claim_record(t).expect("reads"))
        .collect();
    (events, claims)
}

fn next_case() -> u32 {
    CASE.fetch_add(1, Ordering::Relaxed)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 96,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x2323),
        ..ProptestConfig::default()
    })]

    /// `hermes_claim` is `rules::check_keys` + `rules::take` (or the exhausted keys dropped):
    /// the same outcome per request, the same events and claim records after.
    #[test]
    fn a_claim_in_sql_agrees_with_the_rule(
        world in world(),
        requests in proptest::collection::vec(
            (
                proptest::collection::vec(0usize..6, 1..4),
                prop_oneof![2 => Just(2u8), 1 => 0u8..3],
                prop_oneof![Just(0u64), Just(5_000u64)],
            ),
            1..3,
        ),
        max_attempts in 1u32..4,
    ) {
        let case = next_case();
        let requests: Vec<ClaimRequest> = requests
            .iter()
            .map(|(keys, owner, lease_ms)| ClaimRequest {
                keys: keys.iter().map(|&k| key(case, k)).collect(),
                consumer: "me".into(),
                session: session(*owner),
                lease_ms: *lease_ms,
            })
            .collect();
        let mut seen = Vec::new();
        for ledger in ledgers(case, max_attempts) {
            plant(&ledger, case, &world);
            let outcomes = ledger.claim_many(&requests, NOW).expect("claims");
            let issued: Vec<ClaimToken> = outcomes
                .iter()
                .filter_map(|o| match o {
                    crate::model::ClaimOutcome::Claimed(claim) => Some(claim.token),
                    crate::model::ClaimOutcome::Refused(_) => None,
                })
                .collect();
            seen.push((outcomes, observe(&ledger, case, &issued)));
        }
        prop_assert_eq!(&seen[0], &seen[1]);
    }

    /// `hermes_ack` is `rules::standing` + `rules::ack`: the same answer per token (acked,
    /// repeated, lost), the same events and claim records after, whether the tokens come one
    /// call each or all in one.
    #[test]
    fn an_ack_in_sql_agrees_with_the_rule(
        world in world(),
        tokens in proptest::collection::vec(0u8..4, 1..4),
        together in any::<bool>(),
    ) {
        let case = next_case();
        let tokens: Vec<ClaimToken> = tokens.iter().map(|&n| token(case, n)).collect();
        let mut seen = Vec::new();
        for ledger in ledgers(case, 3) {
            plant(&ledger, case, &world);
            // One call per token, or all of them in one call (one function call on PostgreSQL).
            let acked: Vec<String> = if together {
                ledger
                    .ack_many(&tokens, NOW)
                    .expect("acks")
                    .into_iter()
                    .map(|one| format!("{one:?}"))
                    .collect()
            } else {
                tokens
                    .iter()
                    .map(|t| format!("{:?}", ledger.ack_outcome(*t, NOW)))
                    .collect()
            };
            seen.push((acked, observe(&ledger, case, &[])));
        }
        prop_assert_eq!(&seen[0], &seen[1]);
    }

    /// `hermes_publish` is `txn::publish::publish_in`: unit missing, event present, the session
    /// ended or the payload interrupted by its end give the same answer and the same event.
    #[test]
    fn a_publish_in_sql_agrees_with_the_operation(
        unit_exists in any::<bool>(),
        owner in 0u8..3,
        ended in any::<bool>(),
        inject in any::<bool>(),
        present in any::<bool>(),
        interrupted in any::<bool>(),
    ) {
        let case = next_case();
        let id = unit_id(case, 0);
        let mut seen = Vec::new();
        for ledger in ledgers(case, 3) {
            ledger
                .write(|w| {
                    if let Some(session) = session(owner) {
                        w.put_session(&Session {
                            id: session,
                            state: if ended { SessionState::Ended } else { SessionState::Active },
                            created_at: NOW,
                            ended_at: ended.then_some(NOW),
                            host: None,
                        })?;
                    }
                    if unit_exists {
                        let mut unit = running_unit(id.clone(), spec(1), NOW);
                        unit.session = session(owner);
                        if inject {
                            unit.spec.delivery = DeliveryMode::Inject;
                        }
                        w.put_delegation(&unit)?;
                    }
                    Ok(())
                })
                .expect("the world is written");
            let publish = |p| {
                ledger
                    .publish(
                        crate::NewEvent {
                            delegation_id: id.clone(),
                            key: EventKey::Task(0),
                            payload: p,
                        },
                        NOW,
                    )
                    .map_err(|err| err.to_string())
            };
            let first = present.then(|| publish(payload(0, false)));
            let answer = publish(payload(0, interrupted));
            let event = ledger
                .event(&EventRef { delegation_id: id.clone(), key: EventKey::Task(0) })
                .expect("reads");
            seen.push((first, answer, event));
        }
        prop_assert_eq!(&seen[0], &seen[1]);
    }

    /// A boundary's one-statement read is the read-only transaction's: the same session,
    /// open events and claimable units.
    #[test]
    fn a_boundary_read_in_one_statement_agrees_with_the_transaction(
        world in world(),
        ended in any::<bool>(),
        known in any::<bool>(),
    ) {
        let case = next_case();
        // A session of this case's own, so that another case's events are not its.
        let me = SessionId::new(format!("b{case}")).expect("valid");
        let world = World {
            events: world
                .events
                .iter()
                .map(|e| e.map(|(state, owner, attempts, lease)| (state, owner.min(1), attempts, lease)))
                .collect(),
            ..world
        };
        let mut seen = Vec::new();
        for ledger in ledgers(case, 3) {
            plant(&ledger, case, &world);
            ledger
                .write(|w| {
                    // The events of session `s0` become this case's session's.
                    for k in 0..6 {
                        if let Some(mut event) = w.event(&key(case, k))?
                            && event.session == session(0)
                        {
                            event.session = Some(me.clone());
                            w.put_event(&event)?;
                        }
                    }
                    if known {
                        w.put_session(&Session {
                            id: me.clone(),
                            state: if ended { SessionState::Ended } else { SessionState::Active },
                            created_at: NOW,
                            ended_at: None,
                            host: None,
                        })?;
                    }
                    for unit in 0..2 {
                        let mut record = running_unit(unit_id(case, unit), spec(2), NOW);
                        record.session = Some(me.clone());
                        w.put_delegation(&record)?;
                    }
                    Ok(())
                })
                .expect("the world is written");
            seen.push(ledger.boundary_view(&me, NOW).expect("reads"));
        }
        prop_assert_eq!(&seen[0], &seen[1]);
    }
}

/// A read begun as one statement (`Ledger::read_one`) answers what a read transaction does,
/// whether it reads once or goes on to read more (then it runs again in a transaction), on
/// both backends; and what it read in the aborted attempt is not what it answers.
#[test]
fn a_read_of_one_statement_answers_as_a_transaction_whether_it_reads_once_or_more() {
    let case = next_case();
    let world = World {
        events: vec![Some((0, 0, 0, None)); 6],
        claims: vec![Some(vec![0, 1]), None, None],
    };
    for ledger in ledgers(case, 3) {
        plant(&ledger, case, &world);
        let once = ledger
            .read_one(|r| r.event(&key(case, 0)))
            .expect("reads once");
        assert_eq!(once, ledger.event(&key(case, 0)).expect("reads"));
        let mut attempts = 0;
        let more = ledger
            .read_one(|r| {
                attempts += 1;
                let first = r.event(&key(case, 1))?;
                let second = r.claim_record(token(case, 0))?;
                Ok((attempts, first, second))
            })
            .expect("reads more");
        let whole = ledger
            .read(|r| Ok((r.event(&key(case, 1))?, r.claim_record(token(case, 0))?)))
            .expect("reads");
        assert_eq!((more.1, more.2), whole);
        assert!(whole.1.is_some(), "the claim record was planted");
        // On PostgreSQL the second statement sent it back to run in a transaction.
        let expected = if ledger.backend.pg().is_some() { 2 } else { 1 };
        assert_eq!(more.0, expected, "runs of the closure");
    }
}
