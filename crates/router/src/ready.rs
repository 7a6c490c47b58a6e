//! Ready sets: what a consumer is offered at a boundary.
//!
//! Every deliverable event of the session is grouped by delegation into one [`Offer`] (one
//! envelope, claimed with one all-or-none claim). Nothing is held back: a fast child is offered
//! the moment it is ready, whatever its siblings are doing, and siblings that finish later form a
//! later boundary's envelope. At a [`Boundary::Tool`] only units dispatched with
//! `--delivery inject` are offered; the rest wait for the next [`Boundary::Turn`].
//!
//! [`plan`] is the whole pure decision for one boundary: ownership, coalescing, and which keys
//! are held elsewhere and must be deferred.

use std::collections::{BTreeMap, HashMap, HashSet};

use hermes_ledger::{
    Boundary, ClaimToken, DelegationId, DeliveryMode, Event, EventKey, EventRef, Session,
    SessionId, Timestamp, UnitRecord,
};

use crate::classify::{self, Deferral, Standing};
use crate::ownership::{self, Access};

/// One envelope to claim: a delegation and every one of its events ready at this boundary,
/// sorted by key.
#[derive(Clone, Debug, PartialEq)]
pub struct Offer {
    /// The unit.
    pub delegation: UnitRecord,
    /// Its ready events, sorted by key, each once.
    pub events: Vec<Event>,
}

impl Offer {
    /// The addresses of its events, to claim them.
    pub fn refs(&self) -> Vec<EventRef> {
        self.events.iter().map(Event::event_ref).collect()
    }

    /// Its event keys.
    pub fn keys(&self) -> Vec<EventKey> {
        self.events.iter().map(|e| e.key).collect()
    }
}

/// Coalesces deliverable events into one offer per delegation.
///
/// Groups for one delegation are merged (an event listed twice counts once), events that are
/// not deliverable at `now` are left out, and at a tool boundary only `inject` events remain.
/// Offers come in the order their units were dispatched, then by id.
pub fn ready_set(
    groups: impl IntoIterator<Item = (UnitRecord, Vec<Event>)>,
    boundary: Boundary,
    now: Timestamp,
) -> Vec<Offer> {
    let mut by_unit: BTreeMap<DelegationId, Offer> = BTreeMap::new();
    for (delegation, events) in groups {
        let offer = by_unit
            .entry(delegation.id.clone())
            .or_insert_with(|| Offer {
                delegation,
                events: Vec::new(),
            });
        offer.events.extend(events.into_iter().filter(|event| {
            event.delegation_id == offer.delegation.id
                && event.is_deliverable(now)
                && boundary.offers(event.delivery)
        }));
    }
    let mut offers: Vec<Offer> = by_unit
        .into_values()
        .filter_map(|mut offer| {
            offer.events.sort_by_key(|e| e.key);
            offer.events.dedup_by_key(|e| e.key);
            (!offer.events.is_empty()).then_some(offer)
        })
        .collect();
    offers.sort_by(|a, b| {
        (a.delegation.dispatched_at, &a.delegation.id)
            .cmp(&(b.delegation.dispatched_at, &b.delegation.id))
    });
    offers
}

/// What the ledger showed one consumer at one instant.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// The ledger's record of the consumer's session.
    pub session: Option<Session>,
    /// Every open (pending or claimed) event of the session, live leases included.
    pub events: Vec<Event>,
    /// The units those events belong to (a unit missing here makes its events wait for the
    /// next snapshot).
    pub units: Vec<UnitRecord>,
}

/// The pure decision for one boundary.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Whether the session may be offered anything.
    pub access: Access,
    /// Envelopes to render and claim, in order.
    pub offers: Vec<Offer>,
    /// Keys held by live claims elsewhere, grouped by delegation and holder expiry, with the
    /// time to re-classify them. Every delivery mode is listed, whatever the boundary.
    pub held: Vec<Deferral>,
    /// Open events in the snapshot that this session does not own (never offered).
    pub foreign: usize,
    /// Open events to drop as `session_ended`: every open event of an ended session (the ledger
    /// drops them when the session ends, so normally none).
    pub leftovers: Vec<EventRef>,
}

/// Decides what `consumer`'s session is offered at `boundary` at `now`, given a snapshot and the
/// claim tokens this consumer holds itself (`own`, never offered again nor deferred).
pub fn plan(
    snapshot: Snapshot,
    consumer: &SessionId,
    boundary: Boundary,
    now: Timestamp,
    own: &HashSet<ClaimToken>,
) -> Plan {
    let access = ownership::access(consumer, snapshot.session.as_ref());
    let mut plan = Plan {
        access,
        offers: Vec::new(),
        held: Vec::new(),
        foreign: 0,
        leftovers: Vec::new(),
    };
    match access {
        Access::Open => {}
        Access::Ended => {
            plan.leftovers = snapshot
                .events
                .iter()
                .filter(|e| e.session.as_ref() == Some(consumer) && !e.state.is_terminal())
                .map(Event::event_ref)
                .collect();
            return plan;
        }
        Access::Unknown => return plan,
    }
    let mut units: HashMap<DelegationId, UnitRecord> = snapshot
        .units
        .into_iter()
        .map(|u| (u.id.clone(), u))
        .collect();
    let mut ready: BTreeMap<DelegationId, Vec<Event>> = BTreeMap::new();
    let mut held: BTreeMap<(DelegationId, Timestamp), (DeliveryMode, Vec<EventKey>)> =
        BTreeMap::new();
    for event in snapshot.events {
        let unit = units.get(&event.delegation_id);
        if !ownership::owns(consumer, unit, &event) {
            plan.foreign += 1;
            continue;
        }
        match classify::standing(&event, now, own) {
            Standing::Ready => {
                if unit.is_some() {
                    ready
                        .entry(event.delegation_id.clone())
                        .or_default()
                        .push(event);
                }
            }
            Standing::Held { expires_at } => held
                .entry((event.delegation_id.clone(), classify::retry_at(expires_at)))
                .or_insert_with(|| (event.delivery, Vec::new()))
                .1
                .push(event.key),
            Standing::Ours | Standing::Settled(_) => {}
        }
    }
    plan.offers = ready_set(
        ready
            .into_iter()
            .filter_map(|(id, events)| units.remove(&id).map(|unit| (unit, events))),
        boundary,
        now,
    );
    plan.held = classify::deferrals(held);
    plan.held
        .sort_by(|a, b| (a.retry_at, &a.delegation_id).cmp(&(b.retry_at, &b.delegation_id)));
    plan
}

#[cfg(test)]
mod tests {
    use hermes_ledger::SessionState;

    use super::*;
    use crate::fixtures::{delegation, event, leased, sid};

    const AFTER: DeliveryMode = DeliveryMode::AfterTurn;
    const INJECT: DeliveryMode = DeliveryMode::Inject;

    fn keys(offers: &[Offer]) -> Vec<(u64, Vec<u32>)> {
        offers
            .iter()
            .map(|o| {
                let unit = o.delegation.id.as_str();
                let bits = u64::from_str_radix(&unit[6..], 16).expect("hex id");
                let tasks = o
                    .events
                    .iter()
                    .map(|e| match e.key {
                        EventKey::Task(n) => n,
                        EventKey::Terminal => u32::MAX,
                    })
                    .collect();
                (bits, tasks)
            })
            .collect()
    }

    #[test]
    fn one_offer_per_delegation_with_all_its_ready_keys() {
        let groups = vec![
            (
                delegation(2, "s", AFTER),
                vec![event(2, 1, "s", AFTER), event(2, 0, "s", AFTER)],
            ),
            (delegation(1, "s", AFTER), vec![event(1, 3, "s", AFTER)]),
            // The same unit again, with a duplicate and a new key.
            (
                delegation(2, "s", AFTER),
                vec![event(2, 0, "s", AFTER), event(2, 2, "s", AFTER)],
            ),
        ];
        let offers = ready_set(groups, Boundary::Turn, Timestamp(10));
        assert_eq!(keys(&offers), vec![(1, vec![3]), (2, vec![0, 1, 2])]);
    }

    #[test]
    fn a_tool_boundary_offers_only_inject_units() {
        let groups = || {
            vec![
                (delegation(1, "s", AFTER), vec![event(1, 0, "s", AFTER)]),
                (delegation(2, "s", INJECT), vec![event(2, 0, "s", INJECT)]),
            ]
        };
        assert_eq!(
            keys(&ready_set(groups(), Boundary::Tool, Timestamp(0))),
            vec![(2, vec![0])]
        );
        assert_eq!(
            keys(&ready_set(groups(), Boundary::Turn, Timestamp(0))),
            vec![(1, vec![0]), (2, vec![0])]
        );
    }

    #[test]
    fn events_under_a_live_lease_are_not_offered() {
        let groups = vec![(
            delegation(1, "s", AFTER),
            vec![
                leased(event(1, 0, "s", AFTER), 9, 100),
                leased(event(1, 1, "s", AFTER), 9, 50),
                event(1, 2, "s", AFTER),
            ],
        )];
        // task:1's lease ran out at 50; task:0's runs until 100.
        assert_eq!(
            keys(&ready_set(groups, Boundary::Turn, Timestamp(60))),
            vec![(1, vec![1, 2])]
        );
    }

    fn active(id: &str) -> Session {
        Session {
            id: sid(id),
            state: SessionState::Active,
            created_at: Timestamp(0),
            ended_at: None,
            host: None,
        }
    }

    #[test]
    fn plan_offers_ready_keys_and_defers_held_ones() {
        let snapshot = Snapshot {
            session: Some(active("s")),
            events: vec![
                event(1, 0, "s", AFTER),
                leased(event(1, 1, "s", AFTER), 9, 1_000),
                leased(event(1, 2, "s", AFTER), 9, 1_000),
                leased(event(2, 0, "s", INJECT), 5, 2_000),
                leased(event(3, 0, "s", AFTER), 7, 3_000),
            ],
            units: vec![
                delegation(1, "s", AFTER),
                delegation(2, "s", INJECT),
                delegation(3, "s", AFTER),
            ],
        };
        let own: HashSet<ClaimToken> = [ClaimToken(7)].into();
        let plan = plan(
            snapshot.clone(),
            &sid("s"),
            Boundary::Turn,
            Timestamp(500),
            &own,
        );
        assert_eq!(plan.access, Access::Open);
        assert_eq!(keys(&plan.offers), vec![(1, vec![0])]);
        let held: Vec<_> = plan
            .held
            .iter()
            .map(|d| (d.delegation_id.clone(), d.keys.clone(), d.retry_at))
            .collect();
        assert_eq!(
            held,
            vec![
                (
                    DelegationId::from_bits(1),
                    vec![EventKey::Task(1), EventKey::Task(2)],
                    Timestamp(1_050)
                ),
                (
                    DelegationId::from_bits(2),
                    vec![EventKey::Task(0)],
                    Timestamp(2_050)
                ),
            ],
            "our own live claim (token 7) is neither offered nor deferred"
        );
    }

    #[test]
    fn plan_is_fail_closed() {
        let events = vec![
            event(1, 0, "s", AFTER),
            event(2, 0, "other", AFTER),
            event(3, 0, "s", AFTER),
        ];
        let mut units = vec![
            delegation(1, "s", AFTER),
            delegation(2, "other", AFTER),
            // A unit record naming another session disowns its events too.
            delegation(3, "other", AFTER),
        ];
        let mut snapshot = Snapshot {
            session: Some(active("s")),
            events,
            units: units.clone(),
        };
        let own = HashSet::new();
        let now = Timestamp(0);
        let open = plan(snapshot.clone(), &sid("s"), Boundary::Turn, now, &own);
        assert_eq!(keys(&open.offers), vec![(1, vec![0])]);
        assert_eq!(open.foreign, 2);

        // An event whose unit record is not in the snapshot waits for the next one.
        units.remove(0);
        snapshot.units = units;
        assert!(
            plan(snapshot.clone(), &sid("s"), Boundary::Turn, now, &own)
                .offers
                .is_empty()
        );

        let mut ended = snapshot.clone();
        ended.units = vec![delegation(1, "s", AFTER)];
        if let Some(session) = ended.session.as_mut() {
            session.state = SessionState::Ended;
        }
        let closed = plan(ended.clone(), &sid("s"), Boundary::Turn, now, &own);
        assert_eq!(closed.access, Access::Ended);
        assert!(closed.offers.is_empty() && closed.held.is_empty());

        let mut unknown = ended.clone();
        unknown.session = None;
        assert_eq!(
            plan(unknown.clone(), &sid("s"), Boundary::Turn, now, &own).access,
            Access::Unknown
        );
        // Another consumer's session never sees these events.
        let mut b = snapshot.clone();
        b.session = Some(active("b"));
        b.units = vec![delegation(1, "s", AFTER)];
        assert!(
            plan(b.clone(), &sid("b"), Boundary::Turn, now, &own)
                .offers
                .is_empty()
        );
    }
}
