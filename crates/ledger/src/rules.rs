//! The ledger's rules, written once for every backend: pure functions of what a transaction
//! read, tested on their own. Operations (`events.rs`, `units.rs`, …) read, ask these, and
//! write what they decided; a backend only stores.
//!
//! - Claims and settlements: whether a key may be claimed, and every state change of
//!   an event (take, ack, release, defer, drop) with the transition it reports.
//! - Admission: slots and queues per machine.
//!
//! Unit status from its children is `UnitStatus::from_children`/`from_counts`
//! (`model/status.rs`) and a host's death `HostRecord::is_dead` (`model/host.rs`), both pure.
//!
//! Capacity is per machine: a unit counts on the machine of its host, known by
//! the host's locality (boot id, pid namespace, host name: one process table). Units with no
//! host, or whose host record is gone, count together as one "machine" of their own, so a
//! ledger used by hand (tests, benchmarks) behaves as before.

use std::collections::HashMap;

use crate::model::{
    Capacity, Channel, ClaimToken, DropReason, Event, EventRef, EventState, HostRecord, Lease,
    Locality, ProcessId, Refusal, SessionId, Timestamp, Transition, UnitRecord, UnitStatus,
};

/// What a claim finds for one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KeyCheck {
    /// It may be taken.
    Claimable,
    /// It may not; the claim is refused for this reason.
    Refused(Refusal),
    /// Its attempts are used up: it is dropped (`attempts_exhausted`) and the claim refused.
    Exhausted,
}

/// Whether `event` may be claimed at `now` by a consumer of `session` (`None`: of any): it
/// must be pending, or claimed with an expired lease, belong to that session, and have
/// attempts left.
pub(crate) fn check_claim(
    event: &Event,
    session: Option<&SessionId>,
    max_attempts: u32,
    now: Timestamp,
) -> KeyCheck {
    if event.state.is_terminal() {
        KeyCheck::Refused(Refusal::Terminal(event.state))
    } else if session.is_some() && event.session.as_ref() != session {
        KeyCheck::Refused(Refusal::NotOwned)
    } else if let Some(lease) = event.lease.as_ref().filter(|l| l.expires_at > now) {
        KeyCheck::Refused(Refusal::LiveClaim {
            expires_at: lease.expires_at,
        })
    } else if event.attempts >= max_attempts {
        KeyCheck::Exhausted
    } else {
        KeyCheck::Claimable
    }
}

/// What a claim of some keys finds, all or none.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum KeysCheck {
    /// Every key may be taken: their events as they are now, in key order.
    Claimable(Vec<Event>),
    /// The claim is refused, per refused key in key order; `exhausted` are the events whose
    /// attempts are used up, as they are now: each is dropped (`attempts_exhausted`, its old
    /// lease's claim record removed) even though nothing is claimed.
    Refused {
        refused: Vec<(EventRef, Refusal)>,
        exhausted: Vec<Event>,
    },
}

/// [`check_claim`] over every key of one claim: `found[i]` is the event of `keys[i]` as it is
/// now (`None`: missing). The one rule for claiming; PostgreSQL's `hermes_claim` holds the
/// same in SQL, and a property test checks that the two agree.
pub(crate) fn check_keys(
    keys: &[EventRef],
    found: Vec<Option<Event>>,
    session: Option<&SessionId>,
    max_attempts: u32,
    now: Timestamp,
) -> KeysCheck {
    let mut refused = Vec::new();
    let mut exhausted = Vec::new();
    let mut claimable = Vec::new();
    for (key, event) in keys.iter().zip(found) {
        let Some(event) = event else {
            refused.push((key.clone(), Refusal::Missing));
            continue;
        };
        match check_claim(&event, session, max_attempts, now) {
            KeyCheck::Claimable => claimable.push(event),
            KeyCheck::Refused(why) => refused.push((key.clone(), why)),
            KeyCheck::Exhausted => {
                refused.push((key.clone(), Refusal::Terminal(EventState::Dropped)));
                exhausted.push(event);
            }
        }
    }
    if refused.is_empty() {
        KeysCheck::Claimable(claimable)
    } else {
        KeysCheck::Refused { refused, exhausted }
    }
}

/// Takes `event` for a new claim: claimed, one more attempt, the new lease replacing any old
/// one (whose holder is thereby fenced out). Returns the old lease's token, if any.
pub(crate) fn take(event: &mut Event, lease: Lease) -> Option<ClaimToken> {
    let old = event.lease.replace(lease).map(|l| l.token);
    event.state = EventState::Claimed;
    event.attempts += 1;
    old
}

/// Whether `token` still holds `event`.
pub(crate) fn holds(event: &Event, token: ClaimToken) -> bool {
    event.state == EventState::Claimed && event.lease.as_ref().is_some_and(|l| l.token == token)
}

/// Whether `token` acked `event`: delivered under its lease. (An event delivered by an inline
/// run, or by a hermes older than this rule, carries no lease.)
pub(crate) fn acked_by(event: &Event, token: ClaimToken) -> bool {
    event.state == EventState::Delivered && event.lease.as_ref().is_some_and(|l| l.token == token)
}

/// Where a claim stands, from the events of its record's keys as they are now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Standing {
    /// The token holds every key: it may settle them.
    Holds,
    /// The token acked every key already: another ack by it is a no-op that says so,
    /// in whatever process and however late, distinct from a lost claim.
    Acked,
    /// Fenced (another claim took a key), settled otherwise, or partly delivered by another
    /// token: the claim is lost.
    Lost,
}

/// Where the claim of `token` stands, given each of its keys' events (`None`: gone).
pub(crate) fn standing(token: ClaimToken, events: &[Option<Event>]) -> Standing {
    let every = |test: fn(&Event, ClaimToken) -> bool| {
        events
            .iter()
            .all(|e| e.as_ref().is_some_and(|e| test(e, token)))
    };
    if every(holds) {
        Standing::Holds
    } else if !events.is_empty() && every(acked_by) {
        Standing::Acked
    } else {
        Standing::Lost
    }
}

/// Ack: delivered. The lease stays on the event as the mark of the token that acked it, so a
/// repeat ack by that token is recognised later and retention finds the claim
/// record to remove with the unit. Nothing reads a delivered event's lease as a live claim:
/// a terminal event is never claimable or held.
pub(crate) fn ack(event: &mut Event, now: Timestamp) {
    event.state = EventState::Delivered;
    event.delivered_at = Some(now);
}

/// Release: back to pending with the attempt counted, or dropped (`attempts_exhausted`) once
/// the attempts reached `max_attempts`.
pub(crate) fn release(event: &mut Event, max_attempts: u32, now: Timestamp) {
    if event.attempts >= max_attempts {
        drop_event(event, DropReason::AttemptsExhausted, now);
    } else {
        event.lease = None;
        event.state = EventState::Pending;
    }
}

/// Defer: back to pending with the attempt given back (the consumer was busy).
pub(crate) fn defer(event: &mut Event) {
    event.lease = None;
    event.state = EventState::Pending;
    event.attempts = event.attempts.saturating_sub(1);
}

/// Drop: terminal, with a reason; its content stays readable.
pub(crate) fn drop_event(event: &mut Event, reason: DropReason, now: Timestamp) {
    event.state = EventState::Dropped;
    event.lease = None;
    event.dropped_at = Some(now);
    event.drop_reason = Some(reason);
}

/// The transition `event` made from `from`.
pub(crate) fn transition(event: &Event, from: EventState) -> Transition {
    Transition {
        event: event.event_ref(),
        from,
        to: event.state,
        drop_reason: event
            .drop_reason
            .clone()
            .filter(|_| event.state == EventState::Dropped),
    }
}

/// The machines of a ledger's hosts.
pub(crate) struct Machines<'h> {
    by_process: HashMap<ProcessId, &'h Locality>,
}

impl<'h> Machines<'h> {
    /// The machines of `hosts`.
    pub(crate) fn of(hosts: &'h [HostRecord]) -> Machines<'h> {
        Machines {
            by_process: hosts.iter().map(|h| (h.process, &h.locality)).collect(),
        }
    }

    /// The machine a unit's host runs on (`None`: no host, or its record is gone).
    pub(crate) fn of_unit(&self, unit: &UnitRecord) -> Option<&'h Locality> {
        self.of_host(unit.host)
    }

    /// The machine of a host.
    pub(crate) fn of_host(&self, host: Option<ProcessId>) -> Option<&'h Locality> {
        host.and_then(|p| self.by_process.get(&p).copied())
    }
}

/// What a background dispatch may do on its machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    /// A slot is free and nothing of this machine waits before it: run now.
    Run,
    /// Queue behind the machine's `ahead` waiting units.
    Queue {
        /// Units of this machine already waiting.
        ahead: u32,
    },
    /// The machine's queue is full.
    Full,
}

/// Running background units of sessions' own hosts on `machine` (the ones
/// `max_concurrent_children` counts; pool units count against their worker's capacity).
pub(crate) fn running_on(
    active: &[UnitRecord],
    machines: &Machines<'_>,
    machine: Option<&Locality>,
) -> u32 {
    active
        .iter()
        .filter(|u| u.channel == Channel::Background && u.status == UnitStatus::Running)
        .filter(|u| u.pool().is_none() && machines.of_unit(u) == machine)
        .count() as u32
}

/// Queued session units on `machine` (not pool units), oldest first.
pub(crate) fn queued_on<'a>(
    active: &'a [UnitRecord],
    machines: &Machines<'_>,
    machine: Option<&Locality>,
) -> Vec<&'a UnitRecord> {
    let mut queued: Vec<&UnitRecord> = active
        .iter()
        .filter(|u| u.status == UnitStatus::Queued && u.pool().is_none())
        .filter(|u| machines.of_unit(u) == machine)
        .collect();
    queued.sort_by_key(|u| (u.queue_seq, u.dispatched_at));
    queued
}

/// Admission of a new background unit on `machine`: FIFO per machine, `max_running` slots and
/// `max_queued` places per machine.
pub(crate) fn admit(
    active: &[UnitRecord],
    machines: &Machines<'_>,
    machine: Option<&Locality>,
    capacity: Capacity,
) -> Admit {
    let waiting = queued_on(active, machines, machine).len();
    if waiting == 0 && running_on(active, machines, machine) < capacity.max_running {
        Admit::Run
    } else if waiting >= capacity.max_queued as usize {
        Admit::Full
    } else {
        Admit::Queue {
            ahead: waiting as u32,
        }
    }
}

/// Admission of a new unit of `pool`: it always waits for a worker, behind the pool's other
/// waiting units, and is refused past `max_queued` waiting in that pool.
pub(crate) fn admit_to_pool(active: &[UnitRecord], pool: &str, capacity: Capacity) -> Admit {
    let waiting = active
        .iter()
        .filter(|u| u.status == UnitStatus::Queued && u.pool() == Some(pool))
        .count();
    if waiting >= capacity.max_queued as usize {
        Admit::Full
    } else {
        Admit::Queue {
            ahead: waiting as u32,
        }
    }
}

/// The queued unit `host` may start now: the oldest waiting on its machine, if it is the
/// host's own and the machine has a free slot.
pub(crate) fn startable<'a>(
    active: &'a [UnitRecord],
    machines: &Machines<'_>,
    host: ProcessId,
    capacity: Capacity,
) -> Option<&'a UnitRecord> {
    let machine = machines.of_host(Some(host));
    let next = *queued_on(active, machines, machine).first()?;
    (next.host == Some(host) && running_on(active, machines, machine) < capacity.max_running)
        .then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        DelegationId, DispatchSpec, HostId, HostKind, SessionId, TaskSpec, Timestamp,
    };

    fn host(pid: u32, machine: &str) -> HostRecord {
        HostRecord {
            process: ProcessId { pid, start_time: 1 },
            kind: HostKind::Headless,
            session: None,
            registered_at: Timestamp(0),
            heartbeat_at: Timestamp(0),
            host_id: HostId(u128::from(pid)),
            locality: Locality {
                boot_id: machine.into(),
                pid_namespace: "pid:[1]".into(),
                hostname: machine.into(),
            },
            lease_expires_at: Timestamp(u64::MAX),
            worker: None,
        }
    }

    fn unit(n: u64, pid: u32, status: UnitStatus, seq: Option<u64>) -> UnitRecord {
        UnitRecord {
            id: DelegationId::from_bits(n),
            session: Some(SessionId::new("s").expect("id")),
            channel: Channel::Background,
            status,
            dispatched_at: Timestamp(n),
            started_at: None,
            ended_at: None,
            host: Some(ProcessId { pid, start_time: 1 }),
            queue_seq: seq,
            interrupt: None,
            transcript_dir: None,
            spec: DispatchSpec::new("g", vec![TaskSpec::new("t", vec!["true".into()])]),
        }
    }

    fn event(state: EventState, attempts: u32, lease_until: Option<u64>) -> Event {
        Event {
            delegation_id: DelegationId::from_bits(1),
            key: crate::model::EventKey::Task(0),
            session: Some(SessionId::new("s").expect("id")),
            delivery: crate::model::DeliveryMode::default(),
            payload: crate::model::EventPayload::Task(crate::model::ChildOutcome::new(
                0,
                "t",
                crate::model::ChildStatus::Completed,
                Timestamp(1),
            )),
            state,
            attempts,
            lease: lease_until.map(|until| Lease {
                token: ClaimToken(9),
                consumer: "c".into(),
                claimed_at: Timestamp(0),
                expires_at: Timestamp(until),
            }),
            published_at: Timestamp(0),
            delivered_at: None,
            dropped_at: None,
            drop_reason: None,
        }
    }

    #[test]
    fn a_key_is_claimable_when_pending_or_its_lease_expired_and_attempts_remain() {
        let s = SessionId::new("s").expect("id");
        let other = SessionId::new("o").expect("id");
        let now = Timestamp(100);
        assert_eq!(
            check_claim(&event(EventState::Pending, 0, None), Some(&s), 8, now),
            KeyCheck::Claimable
        );
        assert_eq!(
            check_claim(&event(EventState::Claimed, 1, Some(50)), Some(&s), 8, now),
            KeyCheck::Claimable,
            "an expired lease may be taken over"
        );
        assert_eq!(
            check_claim(&event(EventState::Claimed, 1, Some(150)), None, 8, now),
            KeyCheck::Refused(Refusal::LiveClaim {
                expires_at: Timestamp(150)
            })
        );
        assert_eq!(
            check_claim(&event(EventState::Delivered, 1, None), None, 8, now),
            KeyCheck::Refused(Refusal::Terminal(EventState::Delivered))
        );
        assert_eq!(
            check_claim(&event(EventState::Pending, 0, None), Some(&other), 8, now),
            KeyCheck::Refused(Refusal::NotOwned)
        );
        assert_eq!(
            check_claim(&event(EventState::Pending, 8, None), None, 8, now),
            KeyCheck::Exhausted
        );
    }

    #[test]
    fn settlements_move_attempts_and_leases_as_the_spec_says() {
        let mut e = event(EventState::Pending, 0, None);
        let lease = Lease {
            token: ClaimToken(1),
            consumer: "a".into(),
            claimed_at: Timestamp(1),
            expires_at: Timestamp(10),
        };
        assert_eq!(take(&mut e, lease.clone()), None);
        assert!(holds(&e, ClaimToken(1)) && e.attempts == 1);
        let second = Lease {
            token: ClaimToken(2),
            ..lease
        };
        assert_eq!(
            take(&mut e, second),
            Some(ClaimToken(1)),
            "the old holder is fenced"
        );
        assert!(!holds(&e, ClaimToken(1)) && holds(&e, ClaimToken(2)));
        defer(&mut e);
        assert_eq!(
            (e.state, e.attempts, e.lease.is_none()),
            (EventState::Pending, 1, true)
        );
        release(&mut e, 8, Timestamp(5));
        assert_eq!(e.state, EventState::Pending);
        let mut spent = event(EventState::Claimed, 8, Some(10));
        release(&mut spent, 8, Timestamp(5));
        let t = transition(&spent, EventState::Claimed);
        assert_eq!(
            (t.to, t.drop_reason),
            (EventState::Dropped, Some(DropReason::AttemptsExhausted))
        );
        let mut acked = event(EventState::Claimed, 1, Some(10));
        ack(&mut acked, Timestamp(6));
        let t = transition(&acked, EventState::Claimed);
        assert_eq!(
            (t.to, t.drop_reason, acked.delivered_at),
            (EventState::Delivered, None, Some(Timestamp(6)))
        );
        assert!(acked_by(&acked, ClaimToken(9)), "the acking token is kept");
        assert!(!holds(&acked, ClaimToken(9)), "but holds nothing any more");
        assert_eq!(
            check_claim(&acked, None, 8, Timestamp(7)),
            KeyCheck::Refused(Refusal::Terminal(EventState::Delivered))
        );
    }

    #[test]
    fn a_claim_stands_held_acked_by_its_own_token_or_lost() {
        let mine = ClaimToken(9);
        let held = || Some(event(EventState::Claimed, 1, Some(10)));
        let acked = || {
            let mut e = event(EventState::Claimed, 1, Some(10));
            ack(&mut e, Timestamp(6));
            Some(e)
        };
        assert_eq!(standing(mine, &[held(), held()]), Standing::Holds);
        assert_eq!(standing(mine, &[acked(), acked()]), Standing::Acked);
        // Acked by another token, fenced, released, dropped or gone: lost.
        assert_eq!(standing(ClaimToken(8), &[acked()]), Standing::Lost);
        let mut fenced = event(EventState::Claimed, 2, Some(10));
        if let Some(lease) = fenced.lease.as_mut() {
            lease.token = ClaimToken(8);
        }
        assert_eq!(standing(mine, &[Some(fenced)]), Standing::Lost);
        let mut released = event(EventState::Claimed, 1, Some(10));
        release(&mut released, 8, Timestamp(5));
        assert_eq!(standing(mine, &[Some(released)]), Standing::Lost);
        let mut dropped = event(EventState::Claimed, 1, Some(10));
        drop_event(&mut dropped, DropReason::Orphaned, Timestamp(5));
        assert_eq!(standing(mine, &[Some(dropped)]), Standing::Lost);
        assert_eq!(standing(mine, &[acked(), None]), Standing::Lost);
        // Partly: one key acked by this token, another still held or delivered by another.
        assert_eq!(standing(mine, &[acked(), held()]), Standing::Lost);
        let mut theirs = acked();
        if let Some(lease) = theirs.as_mut().and_then(|e| e.lease.as_mut()) {
            lease.token = ClaimToken(8);
        }
        assert_eq!(standing(mine, &[acked(), theirs]), Standing::Lost);
        // An inline run's delivery (no lease) is no token's ack.
        let mut inline = event(EventState::Delivered, 1, None);
        inline.delivered_at = Some(Timestamp(6));
        assert_eq!(standing(mine, &[Some(inline)]), Standing::Lost);
    }

    const TWO: Capacity = Capacity {
        max_running: 2,
        max_queued: 1,
    };

    #[test]
    fn each_machine_has_its_own_slots_and_queue() {
        let hosts = [host(1, "a"), host(2, "b")];
        let machines = Machines::of(&hosts);
        let a = machines.of_host(Some(hosts[0].process));
        let b = machines.of_host(Some(hosts[1].process));
        let active = vec![
            unit(1, 1, UnitStatus::Running, None),
            unit(2, 1, UnitStatus::Running, None),
        ];
        assert_eq!(admit(&active, &machines, a, TWO), Admit::Queue { ahead: 0 });
        assert_eq!(
            admit(&active, &machines, b, TWO),
            Admit::Run,
            "b's slots are free"
        );
        let mut active = active;
        active.push(unit(3, 1, UnitStatus::Queued, Some(0)));
        assert_eq!(admit(&active, &machines, a, TWO), Admit::Full);
        assert_eq!(
            admit(&active, &machines, b, TWO),
            Admit::Run,
            "a's queue is not b's"
        );
    }

    #[test]
    fn a_host_starts_only_the_oldest_unit_waiting_on_its_machine() {
        let hosts = [host(1, "a"), host(2, "a"), host(3, "b")];
        let machines = Machines::of(&hosts);
        let active = vec![
            unit(1, 1, UnitStatus::Running, None),
            unit(2, 1, UnitStatus::Running, None),
            unit(3, 2, UnitStatus::Queued, Some(5)),
            unit(4, 1, UnitStatus::Queued, Some(6)),
            unit(5, 3, UnitStatus::Queued, Some(4)),
        ];
        let host1 = hosts[0].process;
        assert_eq!(
            startable(&active, &machines, host1, TWO),
            None,
            "machine a is full"
        );
        let mut active = active;
        active[0].status = UnitStatus::Completed;
        assert_eq!(
            startable(&active, &machines, host1, TWO),
            None,
            "host 2's unit waits before host 1's"
        );
        let started = startable(&active, &machines, hosts[1].process, TWO).map(|u| u.id.clone());
        assert_eq!(started, Some(DelegationId::from_bits(3)));
        let b = startable(&active, &machines, hosts[2].process, TWO).map(|u| u.id.clone());
        assert_eq!(
            b,
            Some(DelegationId::from_bits(5)),
            "b's own queue, b's own slots"
        );
    }

    #[test]
    fn units_without_a_live_host_record_count_together() {
        let hosts = [host(1, "a")];
        let machines = Machines::of(&hosts);
        let mut orphan = unit(1, 9, UnitStatus::Running, None);
        orphan.host = None;
        let active = vec![orphan, unit(2, 9, UnitStatus::Running, None)];
        assert_eq!(running_on(&active, &machines, None), 2);
        assert_eq!(
            running_on(&active, &machines, machines.of_host(Some(hosts[0].process))),
            0
        );
    }
}
