//! A repeat ack from another process (issue #22 defect 3): the token that acked is
//! remembered while the unit is kept, so an ack repeated by a process that knows nothing of the
//! first (its acker died with the answer lost, a hook or MCP call ran again) is a no-op that
//! says so — never "fenced" — while a token that really lost its claim is still `ClaimLost`.
//! Two handles on one ledger stand for two processes.

use crate::common::*;
use hermes_ledger::*;

/// A finished unit of `tasks` children, all their events claimed by one token for a minute.
fn claimed_unit(ledger: &Ledger, tasks: u32) -> (DelegationId, Claim) {
    let id = unit(ledger, tasks);
    for i in 0..tasks {
        finish(ledger, &id, i, T0);
    }
    let keys: Vec<EventRef> = (0..tasks).map(|i| key(&id, i)).collect();
    (id, claimed(claim(ledger, &keys, 60_000, T0)))
}

#[test]
fn an_ack_repeated_by_another_process_is_a_no_op_that_says_so() {
    let f = fixture();
    let (id, c) = claimed_unit(&f.ledger, 2);
    let first = f.ledger.ack_outcome(c.token, T0.plus_ms(10)).unwrap();
    assert!(!first.repeated);
    assert_eq!(first.transitions.len(), 2);
    let before: Vec<Event> = f.ledger.events(&id).unwrap();

    // Another process, an hour later, acks with the same token.
    let other = f.reopen();
    let commits = other.commits();
    let again = other.ack_outcome(c.token, T0.plus_ms(3_600_000)).unwrap();
    assert!(again.repeated, "already acked by this token");
    assert_eq!(
        again.transitions, first.transitions,
        "what the first ack did"
    );
    assert_eq!(other.commits(), commits, "nothing was written");
    assert_eq!(other.events(&id).unwrap(), before, "nothing changed");
    // And again, through the batch path every consumer uses.
    let slots = other.ack_many(&[c.token], T0.plus_ms(3_600_001)).unwrap();
    assert_eq!(slots[0].as_ref().unwrap(), &first.transitions);
    assert_eq!(other.commits(), commits, "still nothing written");

    // Delivered once: never offered again, and the status views show no live claim.
    for i in 0..2 {
        assert_eq!(
            claim(&other, &[key(&id, i)], 60_000, T0.plus_ms(7_200_000)),
            ClaimOutcome::Refused(vec![(
                key(&id, i),
                Refusal::Terminal(EventState::Delivered)
            )])
        );
    }
    assert!(other.open_events(&session()).unwrap().is_empty());
    assert!(
        other
            .deliverable(&session(), T0.plus_ms(7_200_000))
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_token_that_acked_cannot_release_defer_drop_or_renew_and_changes_nothing_trying() {
    let f = fixture();
    let (id, c) = claimed_unit(&f.ledger, 1);
    f.ledger.ack(c.token, T0.plus_ms(10)).unwrap();
    let before = f.ledger.events(&id).unwrap();
    let other = f.reopen();
    let at = T0.plus_ms(20);
    let lost = |result: Result<Vec<Transition>>| {
        assert!(
            matches!(result, Err(LedgerError::ClaimLost(t)) if t == c.token),
            "{result:?}"
        );
    };
    lost(other.release(c.token, at));
    lost(other.defer(c.token));
    lost(other.drop_claim(c.token, DropReason::Orphaned, at));
    assert!(matches!(
        other.renew(c.token, 60_000, at),
        Err(LedgerError::ClaimLost(_))
    ));
    assert_eq!(other.events(&id).unwrap(), before, "still delivered");
    assert!(other.ack_outcome(c.token, at).unwrap().repeated);
}

#[test]
fn a_token_fenced_before_it_acked_is_still_lost_in_another_process() {
    let f = fixture();
    let id = unit(&f.ledger, 1);
    finish(&f.ledger, &id, 0, T0);
    let old = claimed(claim(&f.ledger, &[key(&id, 0)], 1_000, T0));
    // Its lease runs out, another consumer takes the result and acks it.
    let new = claimed(claim(&f.ledger, &[key(&id, 0)], 60_000, T0.plus_ms(1_000)));
    f.ledger.ack(new.token, T0.plus_ms(1_001)).unwrap();
    let other = f.reopen();
    let err = other.ack(old.token, T0.plus_ms(1_002)).unwrap_err();
    assert!(
        matches!(err, LedgerError::ClaimLost(t) if t == old.token),
        "{err}"
    );
    assert!(
        other
            .ack_outcome(new.token, T0.plus_ms(1_003))
            .unwrap()
            .repeated
    );
}

#[test]
fn a_token_released_or_given_back_then_acked_again_is_lost() {
    let f = fixture();
    let id = unit(&f.ledger, 1);
    finish(&f.ledger, &id, 0, T0);
    let released = claimed(claim(&f.ledger, &[key(&id, 0)], 60_000, T0));
    f.ledger.release(released.token, T0.plus_ms(1)).unwrap();
    let deferred = claimed(claim(&f.ledger, &[key(&id, 0)], 60_000, T0.plus_ms(2)));
    f.ledger.defer(deferred.token).unwrap();
    let other = f.reopen();
    for token in [released.token, deferred.token] {
        assert!(matches!(
            other.ack(token, T0.plus_ms(3)),
            Err(LedgerError::ClaimLost(t)) if t == token
        ));
    }
    assert_eq!(state(&other, &key(&id, 0)), EventState::Pending);
}

#[test]
fn a_claim_partly_delivered_by_another_token_is_lost_not_already_acked() {
    let f = fixture();
    let id = unit(&f.ledger, 2);
    finish(&f.ledger, &id, 0, T0);
    finish(&f.ledger, &id, 1, T0);
    let both = claimed(claim(&f.ledger, &[key(&id, 0), key(&id, 1)], 1_000, T0));
    // After its lease, another consumer takes one of its keys and acks it.
    let one = claimed(claim(&f.ledger, &[key(&id, 1)], 60_000, T0.plus_ms(1_000)));
    f.ledger.ack(one.token, T0.plus_ms(1_001)).unwrap();
    let other = f.reopen();
    assert!(matches!(
        other.ack_outcome(both.token, T0.plus_ms(1_002)),
        Err(LedgerError::ClaimLost(t)) if t == both.token
    ));
    // The key nobody acked is still to be delivered.
    let event = other.event(&key(&id, 0)).unwrap().unwrap();
    assert_eq!(event.state, EventState::Claimed);
    assert!(event.is_deliverable(T0.plus_ms(1_002)));
}

struct NobodyAlive;

impl Liveness for NobodyAlive {
    fn locality(&self) -> Locality {
        Locality::default()
    }
    fn is_alive(&self, _: ProcessId) -> bool {
        false
    }
}

impl Reaper for NobodyAlive {
    fn kill_child(&self, _: &DelegationId, _: &Child) {}
    fn transcript_tail(&self, _: &str) -> Option<String> {
        None
    }
}

#[test]
fn once_retention_purged_the_unit_the_token_is_forgotten_with_it() {
    let f = fixture_with(LedgerConfig {
        retention_ms: 5_000,
        ..LedgerConfig::default()
    });
    let (id, c) = claimed_unit(&f.ledger, 1);
    f.ledger.ack(c.token, T0.plus_ms(10)).unwrap();
    assert!(
        f.ledger.claim_record(c.token).unwrap().is_some(),
        "kept, the mark of the ack"
    );
    let other = f.reopen();
    assert!(
        other
            .ack_outcome(c.token, T0.plus_ms(4_000))
            .unwrap()
            .repeated
    );
    let report = f
        .ledger
        .recover(&NobodyAlive, T0.plus_ms(60_000), Sweep::Now)
        .unwrap();
    assert_eq!(report.purged_units, 1);
    assert!(f.ledger.delegation(&id).unwrap().is_none());
    assert!(
        other.claim_record(c.token).unwrap().is_none(),
        "retention removed the claim record with the unit"
    );
    assert!(matches!(
        other.ack(c.token, T0.plus_ms(60_001)),
        Err(LedgerError::ClaimLost(t)) if t == c.token
    ));
}
