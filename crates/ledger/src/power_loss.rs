//! The power-loss test: a fault-injecting storage layer under redb, cut at random moments.
//!
//! A SIGKILL leaves the page cache intact, so a crash test with `kill -9` would pass with no
//! fsync at all. Here the storage is a `PowerCutBackend` (`power_loss/disk.rs`):
//! written-but-unsynced data is volatile, and at a random cut (the n-th write or sync, drawn
//! from a seeded RNG) everything not yet synced is lost, except a random prefix of the last
//! unsynced write (a torn write). The ledger runs in `ConcurrencyMode::MultiWriter` on it, as
//! in production: byte-range locks are delegated to redb's `FileBackend` on a scratch file,
//! data lives in memory.
//!
//! After each cut the surviving image is reopened and checked: it opens, every operation that
//! returned success before the cut is there (published stays published, acked stays delivered,
//! a fenced token stays fenced), and the ledger's invariants hold. A disk that lies about
//! `fsync` must be caught by the same checks (`a_disk_that_ignores_fsync_is_caught`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use redb::backends::FileBackend;

use crate::error::LedgerError;
use crate::ledger::{Ledger, LedgerConfig, TokenSource};
use crate::model::Capacity;
use crate::model::*;
use crate::model::{ClaimOutcome, ClaimRequest};
use crate::testing::{background_unit, spec};

mod disk;

use disk::{Disk, PowerCutBackend, lock};

const T0: Timestamp = Timestamp(1_700_000_000_000);
const LEASE_MS: u64 = 60_000;
const ROOMY: Capacity = Capacity {
    max_running: 1_000,
    max_queued: 1_000,
};

fn session() -> SessionId {
    SessionId::new("s").expect("valid id")
}

/// A ledger on `disk`, with its locks on a fresh scratch file in `scratch`.
fn open_on(disk: &Arc<Mutex<Disk>>, scratch: &Path, name: &str) -> Result<Ledger, LedgerError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(scratch.join(name))
        .expect("scratch lock file");
    let backend = PowerCutBackend {
        disk: Arc::clone(disk),
        locks: FileBackend::new(file).expect("file backend"),
    };
    Ledger::open_backend(
        backend,
        &scratch.join("ledger.redb"),
        LedgerConfig::default(),
        TokenSource::Seeded(1),
    )
}

/// What the operations that returned success promise.
#[derive(Debug, Default)]
struct Promises {
    units: BTreeMap<DelegationId, u32>,
    published: BTreeSet<EventRef>,
    delivered: BTreeSet<EventRef>,
    /// Tokens that were fenced (a newer claim took a key) or settled, each with whether it acked.
    dead_tokens: BTreeMap<ClaimToken, bool>,
    /// Live claims: token → keys.
    live: BTreeMap<ClaimToken, Vec<EventRef>>,
    /// The holder of each claimed key.
    holder: BTreeMap<EventRef, ClaimToken>,
    /// Finished children not yet claimed or delivered (pending as far as we know).
    pending: BTreeSet<EventRef>,
}

/// Runs a random sequence of operations until the power goes (or the sequence ends); returns
/// the promises of every operation that succeeded.
fn run_until_cut(ledger: &Ledger, rng: &mut fastrand::Rng, steps: usize) -> Promises {
    let mut run = Run {
        ledger,
        p: Promises::default(),
        now: T0,
    };
    for _ in 0..steps {
        run.now = run.now.plus_ms(1);
        let result = match rng.u8(0..10) {
            0 | 1 => Some(run.dispatch(rng)),
            2..=4 => run.finish_some_child(rng),
            5 | 6 => run.claim_pending(rng),
            7 => run.fence_a_claim(),
            _ => run.settle_a_claim(rng),
        };
        // `None`: there was nothing to do this step.
        if result.is_some_and(|r| r.is_err()) {
            // The power went during this operation: it may or may not have happened.
            return run.p;
        }
    }
    run.p
}

/// A random run in progress: the ledger under test, what its successful operations promise,
/// and the time of the current step. Each step returns `None` when it had nothing to do, or
/// what the ledger answered.
struct Run<'a> {
    ledger: &'a Ledger,
    p: Promises,
    now: Timestamp,
}

impl Run<'_> {
    /// Dispatches a unit of one to three children.
    fn dispatch(&mut self, rng: &mut fastrand::Rng) -> Result<(), LedgerError> {
        let tasks = rng.u32(1..4);
        let new = background_unit(session(), spec(tasks));
        self.ledger.dispatch(new, ROOMY, self.now).map(|a| {
            self.p.units.insert(a.delegation.id, tasks);
        })
    }

    /// Finishes some unfinished child.
    fn finish_some_child(&mut self, rng: &mut fastrand::Rng) -> Option<Result<(), LedgerError>> {
        let p = &mut self.p;
        let open: Vec<EventRef> = p
            .units
            .iter()
            .flat_map(|(id, n)| {
                (0..*n).map(|i| EventRef {
                    delegation_id: id.clone(),
                    key: EventKey::Task(i),
                })
            })
            .filter(|e| !p.published.contains(e))
            .collect();
        if open.is_empty() {
            return None;
        }
        let key = open[rng.usize(..open.len())].clone();
        let EventKey::Task(index) = key.key else {
            return None;
        };
        let outcome = ChildOutcome {
            exit_code: Some(0),
            started_at: Some(T0),
            result: "x".repeat(rng.usize(0..3000)),
            ..ChildOutcome::new(index, "task", ChildStatus::Completed, self.now)
        };
        let finished = self
            .ledger
            .finish_child(HostId(0), &key.delegation_id, outcome, self.now);
        Some(finished.map(|finish| {
            assert!(finish.published, "a first finish publishes");
            p.published.insert(key.clone());
            p.pending.insert(key);
        }))
    }

    /// Claims one or two pending events (expired-lease claims are not made here: leases are
    /// long).
    fn claim_pending(&mut self, rng: &mut fastrand::Rng) -> Option<Result<(), LedgerError>> {
        let p = &mut self.p;
        let candidates: Vec<EventRef> = p.pending.iter().cloned().collect();
        if candidates.is_empty() {
            return None;
        }
        let first = candidates[rng.usize(..candidates.len())].clone();
        let mut keys = vec![first.clone()];
        let second = candidates[rng.usize(..candidates.len())].clone();
        if second != first {
            keys.push(second);
        }
        let request = ClaimRequest {
            keys: keys.clone(),
            consumer: "test".into(),
            session: Some(session()),
            lease_ms: LEASE_MS,
        };
        Some(
            self.ledger
                .claim(&request, self.now)
                .map(|outcome| match outcome {
                    ClaimOutcome::Claimed(claim) => {
                        for key in &keys {
                            p.pending.remove(key);
                            p.holder.insert(key.clone(), claim.token);
                        }
                        p.live.insert(claim.token, keys);
                    }
                    // Attempts used up: the claim dropped them instead.
                    ClaimOutcome::Refused(why) => {
                        for (key, _) in why {
                            p.pending.remove(&key);
                        }
                    }
                }),
        )
    }

    /// Fences: claims a claimed event whose lease has run out (time jumps past it).
    fn fence_a_claim(&mut self) -> Option<Result<(), LedgerError>> {
        let p = &mut self.p;
        let (key, old) = p.holder.iter().next().map(|(k, t)| (k.clone(), *t))?;
        self.now = self.now.plus_ms(LEASE_MS + 1);
        let request = ClaimRequest {
            keys: vec![key.clone()],
            consumer: "fencer".into(),
            session: Some(session()),
            lease_ms: LEASE_MS,
        };
        Some(
            self.ledger
                .claim(&request, self.now)
                .map(|outcome| match outcome {
                    ClaimOutcome::Claimed(claim) => {
                        // The old token loses every key it held.
                        if let Some(keys) = p.live.remove(&old) {
                            for k in keys {
                                if k != key {
                                    p.holder.remove(&k);
                                    p.pending.insert(k);
                                }
                            }
                        }
                        p.dead_tokens.insert(old, false);
                        p.holder.insert(key.clone(), claim.token);
                        p.live.insert(claim.token, vec![key]);
                    }
                    ClaimOutcome::Refused(_) => {}
                }),
        )
    }

    /// Acks or releases a live claim.
    fn settle_a_claim(&mut self, rng: &mut fastrand::Rng) -> Option<Result<(), LedgerError>> {
        let p = &mut self.p;
        let token = p
            .live
            .keys()
            .nth(rng.usize(..p.live.len().max(1)))
            .copied()?;
        let ack = rng.bool();
        let settled = if ack {
            self.ledger.ack(token, self.now)
        } else {
            self.ledger.release(token, self.now)
        };
        Some(settled.map(|_| {
            let keys = p.live.remove(&token).unwrap_or_default();
            p.dead_tokens.insert(token, ack);
            for key in keys {
                p.holder.remove(&key);
                if ack {
                    p.delivered.insert(key);
                } else {
                    p.pending.insert(key);
                }
            }
        }))
    }
}

/// Checks a reopened ledger against the promises; returns what does not hold.
fn violations(ledger: &Ledger, p: &Promises) -> Vec<String> {
    let mut bad = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            bad.push(what);
        }
    };
    for (id, tasks) in &p.units {
        unit_violations(ledger, id, *tasks, &mut check);
    }
    promise_violations(ledger, p, &mut check);
    index_violations(ledger, p, &mut check);
    // Last: settling mutates.
    token_violations(ledger, p, &mut check);
    // And the reopened file takes writes.
    let new = background_unit(
        session(),
        DispatchSpec::new("after", vec![TaskSpec::new("t", vec!["true".into()])]),
    );
    let dispatched = ledger.dispatch(new, ROOMY, T0.plus_ms(20_000_000));
    check(
        dispatched.is_ok(),
        format!("a write after reopening failed: {dispatched:?}"),
    );
    bad
}

/// What a check of the reopened ledger reports: whether it holds, and what it says if not.
type Check<'c> = dyn FnMut(bool, String) + 'c;

/// A promised unit is there with its children, and its children's and events' records agree.
fn unit_violations(ledger: &Ledger, id: &DelegationId, tasks: u32, check: &mut Check<'_>) {
    let unit = ledger.delegation(id);
    check(
        matches!(unit, Ok(Some(_))),
        format!("unit {id} lost: {unit:?}"),
    );
    let Ok(events) = ledger.events(id) else {
        check(false, format!("events of {id} unreadable"));
        return;
    };
    let Ok(children) = ledger.children(id) else {
        check(false, format!("children of {id} unreadable"));
        return;
    };
    check(
        children.len() == tasks as usize,
        format!("{id} has {} children", children.len()),
    );
    for child in &children {
        let has_event = events.iter().any(|e| e.key == EventKey::Task(child.index));
        check(
            child.status.is_terminal() == has_event,
            format!(
                "{id} task {} is {} but its event exists: {has_event}",
                child.index, child.status
            ),
        );
    }
    for event in &events {
        event_violations(ledger, event, check);
    }
}

/// An event's state, lease, claim record and delivery time agree.
fn event_violations(ledger: &Ledger, event: &Event, check: &mut Check<'_>) {
    let key = event.event_ref();
    // A delivered event may keep the lease of the claim that acked it.
    let claimed = event.state == EventState::Claimed;
    check(
        claimed == event.lease.is_some() || event.state == EventState::Delivered,
        format!("{key:?} is {:?} with lease {:?}", event.state, event.lease),
    );
    // A claim record lists every key its token holds. (A fenced token's record is gone while
    // its other keys still carry its expired lease: that is by design.)
    if let Some(lease) = &event.lease
        && let Ok(Some(record)) = ledger.claim_record(lease.token)
    {
        check(
            record.keys.contains(&key),
            format!("{key:?} is held by {} whose record omits it", lease.token),
        );
    }
    check(
        (event.state == EventState::Delivered) == event.delivered_at.is_some(),
        format!("{key:?} delivered_at does not match its state"),
    );
}

/// Published stays published, acked stays delivered.
fn promise_violations(ledger: &Ledger, p: &Promises, check: &mut Check<'_>) {
    for key in &p.published {
        let event = ledger.event(key);
        check(
            matches!(event, Ok(Some(_))),
            format!("published {key:?} lost: {event:?}"),
        );
    }
    for key in &p.delivered {
        let state = ledger.event(key).ok().flatten().map(|e| e.state);
        check(
            state == Some(EventState::Delivered),
            format!("acked {key:?} is {state:?}"),
        );
    }
}

/// The index of open events holds exactly the events that are not terminal.
fn index_violations(ledger: &Ledger, p: &Promises, check: &mut Check<'_>) {
    let open: BTreeSet<EventRef> = ledger
        .open_events(&session())
        .unwrap_or_default()
        .iter()
        .map(Event::event_ref)
        .collect();
    for id in p.units.keys() {
        for event in ledger.events(id).unwrap_or_default() {
            check(
                open.contains(&event.event_ref()) != event.state.is_terminal(),
                format!(
                    "{:?} is {:?} but indexed open: {}",
                    event.event_ref(),
                    event.state,
                    open.contains(&event.event_ref())
                ),
            );
        }
    }
}

/// A fenced or settled token stays dead; one that acked finds its own ack (a no-op that says
/// so). Settling mutates: this runs after the other checks.
fn token_violations(ledger: &Ledger, p: &Promises, check: &mut Check<'_>) {
    for (token, acked) in &p.dead_tokens {
        let again = ledger.ack_outcome(*token, T0.plus_ms(10_000_000));
        check(
            match &again {
                Ok(outcome) => *acked && outcome.repeated,
                Err(err) => !acked && matches!(err, LedgerError::ClaimLost(_)),
            },
            format!("dead token {token} (acked: {acked}) settled again: {again:?}"),
        );
    }
}

/// One trial: run, cut, reopen, check. `Err` says what broke.
fn trial(seed: u64, lying: bool, scratch: &Path) -> Result<(), String> {
    let mut rng = fastrand::Rng::with_seed(seed);
    // A ledger's creation and ~40 operations take a few hundred writes and syncs; cut anywhere
    // in them (past the end: after the last operation returned).
    let cut_at = rng.u64(1..400);
    let disk = Arc::new(Mutex::new(Disk::new(Vec::new(), cut_at, lying, seed)));
    let promises = match open_on(&disk, scratch, "locks-a") {
        Ok(ledger) => {
            let promises = run_until_cut(&ledger, &mut rng, 40);
            lock(&disk).power_cut();
            drop(ledger);
            promises
        }
        // The power went while the file was being created. `Ledger::open` creates a new file
        // under a temporary name and links it into place only once it is durable, so nothing
        // of it is at the ledger's path: the next open starts afresh.
        Err(_) => {
            let mut disk = lock(&disk);
            disk.power_cut();
            disk.survivor = Some(Vec::new());
            Promises::default()
        }
    };
    let survivor = lock(&disk).survivor.take().unwrap_or_default();
    let after = Arc::new(Mutex::new(Disk::new(survivor, 0, false, seed)));
    let reopened = open_on(&after, scratch, "locks-b")
        .map_err(|err| format!("seed {seed} (cut at op {cut_at}): does not reopen: {err}"))?;
    let bad = violations(&reopened, &promises);
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "seed {seed} (cut at op {cut_at}): {}",
            bad.join("; ")
        ))
    }
}

#[test]
fn every_promise_survives_power_cuts_at_random_moments() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut failures = Vec::new();
    for seed in 0..600 {
        if let Err(why) = trial(seed, false, scratch.path()) {
            failures.push(why);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of 600 cuts broke a promise:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn a_disk_that_ignores_fsync_is_caught() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let caught = (0..100)
        .filter(|seed| trial(*seed, true, scratch.path()).is_err())
        .count();
    assert!(
        caught > 50,
        "a lying disk broke promises in only {caught} of 100 cuts: the checks are too weak"
    );
}
