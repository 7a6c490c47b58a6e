//! Group commit: operations issued concurrently inside one process share one durable commit.
//!
//! A caller queues its operation and waits. Whoever finds no leader becomes the leader: it takes
//! everything queued, runs each operation in turn inside one write transaction — taking in
//! whatever queues while that transaction waited for the write lock (another process's commit)
//! or ran, up to 1,024 operations — commits once, hands every caller its own result, and lets
//! the next waiter lead whatever queued meanwhile (while the commit's `fdatasync`s ran). The
//! next leader yields its CPU once before it takes the queue: the callers the commit just woke
//! usually have a next write to make (a unit's children start once it is dispatched, finish
//! once they started), and on a busy host a leader that ran straight on left them all to the
//! group after its own, so units alternated between two half-full commits. A caller
//! returns only after the commit that holds its operation is durable, so `publish`, `ack` and
//! `drop` are durable when they return.
//!
//! One caller's failure never undoes another's operation. The ledger's operations validate
//! before they write, so an operation that fails has usually written nothing: it gets its error
//! and the others commit. An operation that fails *after* writing (a storage error, a damaged
//! page) taints the transaction: it is aborted, the failed operation gets its error, and the
//! others run again in a fresh transaction (operations are re-runnable closures over owned
//! values, and nothing of the aborted run survives).
//!
//! On PostgreSQL the group is one `SERIALIZABLE` transaction. Without it, the threads of one
//! host (a unit's children starting and finishing at once) ran as many transactions on the
//! same rows (the unit's tally, its children) and lost most of them to serialization failures,
//! each retried from the start; grouped, a process has one transaction in flight and only
//! other processes conflict with it. A failed statement aborts the whole transaction there, so
//! an operation whose statement failed taints the group as a partial write does on redb.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};

use hermes_stdx::lock;

use crate::error::{LedgerError, Result, StorageFault};
use crate::ledger::Ledger;
use crate::store::Writer;

/// An operation as queued: it runs inside the group's transaction, stores its own value, and
/// says whether it asks for a commit.
type Op = Box<dyn FnMut(&Ledger, &Writer<'_>) -> Result<bool> + Send>;

/// The most operations one group commits; what queues beyond leads the next group.
const MAX_GROUP: usize = 1024;

/// The queue of one ledger handle.
#[derive(Default)]
pub(crate) struct GroupCommit {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    queue: Vec<(Op, Arc<Caller>)>,
    leading: bool,
}

/// A caller waiting for its queued operation: woken once, when its result is in or when it is
/// its turn to lead, so a commit wakes only the callers it answers and the next leader (not
/// every waiting thread, which on a busy host cost more CPU than the commit itself).
#[derive(Default)]
struct Caller {
    turn: Mutex<Turn>,
    woken: Condvar,
}

#[derive(Default)]
enum Turn {
    #[default]
    Waiting,
    Lead,
    Done(Result<()>),
}

impl Caller {
    fn wake(&self, turn: Turn) {
        *lock(&self.turn) = turn;
        self.woken.notify_one();
    }
}

impl Ledger {
    /// Runs `f` inside a write transaction shared with whatever other threads of this process
    /// write at the same moment, and returns once that transaction is durable. `f` returns its
    /// value and whether it needs a commit (`false`: it wrote nothing). `f` may run more than
    /// once (see the module docs), so it must only read what it captured.
    pub(crate) fn write_grouped<T, F>(&self, mut f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut(&Ledger, &Writer<'_>) -> Result<(T, bool)> + Send + 'static,
    {
        let slot: Arc<Mutex<Option<T>>> = Arc::new(Mutex::new(None));
        let out = Arc::clone(&slot);
        let op: Op = Box::new(move |ledger, w| {
            let (value, commit) = f(ledger, w)?;
            *lock(&out) = Some(value);
            Ok(commit)
        });
        self.submit(op)?;
        let value = lock(&slot).take();
        value.ok_or_else(|| LedgerError::Invalid("a grouped write lost its result".into()))
    }

    fn submit(&self, op: Op) -> Result<()> {
        let me = Arc::new(Caller::default());
        let leads = {
            let mut state = lock(&self.group.state);
            state.queue.push((op, Arc::clone(&me)));
            !std::mem::replace(&mut state.leading, true)
        };
        if !leads {
            let mut turn = lock(&me.turn);
            loop {
                match std::mem::take(&mut *turn) {
                    Turn::Done(result) => return result,
                    Turn::Lead => break,
                    Turn::Waiting => {
                        turn = me
                            .woken
                            .wait(turn)
                            .unwrap_or_else(|poisoned| poisoned.into_inner());
                    }
                }
            }
            // Handed the lead by a commit that just woke its callers: let them run first. Their
            // next writes (the same units' next steps) then queue into this group instead of
            // waiting a whole commit for the one after it.
            std::thread::yield_now();
        }
        // Leading: everything queued so far, this caller's operation among it, and whatever
        // queues while the group waits for the write lock or runs ([`Ledger::join_queued`]).
        let mut callers = Vec::new();
        let mut batch = Vec::new();
        self.join_queued(&mut batch, &mut callers);
        // redb may panic on a damaged page, even aborting: never leave the group leaderless,
        // nor any caller that joined it unanswered.
        let results = catch_unwind(AssertUnwindSafe(|| self.run_batch(batch, &mut callers)))
            .unwrap_or_else(|_| {
                (0u64..)
                    .zip(&callers)
                    .map(|(id, _)| {
                        let err = LedgerError::EnginePanic {
                            path: self.path().to_owned(),
                            what: "while committing a group of writes".into(),
                        };
                        (id, Err(err))
                    })
                    .collect()
            });
        let mut mine = None;
        for (id, result) in results {
            let Some(caller) = usize::try_from(id).ok().and_then(|i| callers.get(i)) else {
                continue;
            };
            if Arc::ptr_eq(caller, &me) {
                mine = Some(result);
            } else {
                caller.wake(Turn::Done(result));
            }
        }
        // The lead passes to the first caller that queued meanwhile, or lapses.
        {
            let mut state = lock(&self.group.state);
            match state.queue.first() {
                Some((_, next)) => next.wake(Turn::Lead),
                None => state.leading = false,
            }
        }
        mine.unwrap_or_else(|| {
            Err(LedgerError::Invalid(
                "a grouped write lost its result".into(),
            ))
        })
    }

    /// Moves what is queued into the group: each operation into `batch`, numbered by its
    /// caller's place in `callers`. Returns how many joined; none once the group holds
    /// [`MAX_GROUP`] operations (the rest lead the next group).
    fn join_queued(&self, batch: &mut Vec<(u64, Op)>, callers: &mut Vec<Arc<Caller>>) -> usize {
        let room = MAX_GROUP.saturating_sub(callers.len());
        if room == 0 {
            return 0;
        }
        let queued = {
            let mut state = lock(&self.group.state);
            let take = room.min(state.queue.len());
            state.queue.drain(..take).collect::<Vec<_>>()
        };
        let joined = queued.len();
        for (op, caller) in queued {
            batch.push((callers.len() as u64, op));
            callers.push(caller);
        }
        joined
    }

    /// Runs a batch to completion: every operation ends with its own result. Operations that
    /// queue meanwhile join it (`callers` grows with them).
    fn run_batch(
        &self,
        mut batch: Vec<(u64, Op)>,
        callers: &mut Vec<Arc<Caller>>,
    ) -> Vec<(u64, Result<()>)> {
        let mut results = Vec::with_capacity(batch.len());
        while !batch.is_empty() {
            results.extend(self.run_once(&mut batch, callers));
        }
        results
    }

    /// One transaction over `batch`, on either backend. Returns the results it settled and
    /// leaves in `batch` only the operations to run again (after a tainted transaction). On
    /// PostgreSQL the backend runs the whole transaction again after a serialization failure
    /// (every operation with it), so what is recorded here is of the last attempt.
    ///
    /// What queued while the transaction waited for the write lock (another process's commit
    /// on redb) or while its operations ran joins it before it commits: a caller that would
    /// otherwise wait a whole commit to lead the next group is durable with this one.
    fn run_once(
        &self,
        batch: &mut Vec<(u64, Op)>,
        callers: &mut Vec<Arc<Caller>>,
    ) -> Vec<(u64, Result<()>)> {
        if let Err(err) = self.injected_failure() {
            return everyone(batch, &err);
        }
        // Per operation: None = succeeded (commit wanted or not), Some(err) = failed cleanly.
        let mut failed: Vec<Option<LedgerError>> = Vec::with_capacity(batch.len());
        let mut tainted: Option<usize> = None;
        let mut ran_all = false;
        let written = self.backend.write(&self.counters, &mut |writer| {
            failed.clear();
            tainted = None;
            ran_all = false;
            let mut commit = false;
            let mut index = 0;
            loop {
                // Late joiners first: the write lock is held now, the commit not yet made.
                if index == batch.len() && self.join_queued(batch, callers) == 0 {
                    break;
                }
                let (_, op) = &mut batch[index];
                writer.dirty().set(false);
                match self.backend.guard(|| op(self, writer)) {
                    Ok(wants) => {
                        commit |= wants;
                        failed.push(None);
                    }
                    Err(err) if !writer.dirty().get() && !writer.aborted() => {
                        failed.push(Some(err));
                    }
                    Err(err) => {
                        // Tainted: the backend aborts, the rest run again.
                        tainted = Some(index);
                        return Err(err);
                    }
                }
                index += 1;
            }
            if writer.aborted() {
                // An operation carried on after a failed statement: the server would answer
                // `COMMIT` with a rollback, so nothing of this attempt may count as written.
                return Err(LedgerError::Storage(StorageFault::Engine(
                    "a statement failed inside a group of writes".into(),
                )));
            }
            ran_all = true;
            Ok(((), commit))
        });
        match written {
            Ok(((), committed)) => {
                if committed {
                    self.commits.fetch_add(1, Ordering::Relaxed);
                }
                batch
                    .drain(..)
                    .zip(failed)
                    .map(|((id, _), failed)| (id, failed.map_or(Ok(()), Err)))
                    .collect()
            }
            Err(err) => match tainted {
                // Nothing of the aborted attempt survives: settle the tainting operation and
                // the clean failures before it, run the rest again.
                Some(index) if index < batch.len() => settle_tainted(batch, index, err, failed),
                // Every operation ran and the commit failed: the clean failures keep their own
                // errors, the others share the commit's.
                _ if ran_all => batch
                    .drain(..)
                    .zip(failed)
                    .map(|((id, _), failed)| (id, Err(failed.unwrap_or_else(|| copy_error(&err)))))
                    .collect(),
                // The storage could not be reached or the transaction not begun: everyone
                // shares that failure.
                _ => everyone(batch, &err),
            },
        }
    }
}

/// After the operation at `index` tainted the transaction with `err`: settles it and the
/// operations before it that failed cleanly (`failed`), and leaves in `batch` the ones to run
/// again in a fresh transaction.
fn settle_tainted(
    batch: &mut Vec<(u64, Op)>,
    index: usize,
    err: LedgerError,
    mut failed: Vec<Option<LedgerError>>,
) -> Vec<(u64, Result<()>)> {
    let (id, _) = batch.remove(index);
    let mut settled = vec![(id, Err(err))];
    let mut kept = Vec::with_capacity(batch.len());
    for (i, member) in std::mem::take(batch).into_iter().enumerate() {
        match failed.get_mut(i).and_then(Option::take) {
            Some(err) => settled.push((member.0, Err(err))),
            None => kept.push(member),
        }
    }
    *batch = kept;
    settled
}

/// Every operation of `batch` fails with (a copy of) `err`.
fn everyone(batch: &mut Vec<(u64, Op)>, err: &LedgerError) -> Vec<(u64, Result<()>)> {
    batch
        .drain(..)
        .map(|(id, _)| (id, Err(copy_error(err))))
        .collect()
}

/// The same failure, for each caller that shared it.
fn copy_error(err: &LedgerError) -> LedgerError {
    match err {
        LedgerError::Unavailable { path, reason } => LedgerError::Unavailable {
            path: path.clone(),
            reason: reason.clone(),
        },
        LedgerError::Damaged { path, reason } => LedgerError::Damaged {
            path: path.clone(),
            reason: reason.clone(),
        },
        LedgerError::NewerFormat {
            path,
            found,
            supported,
        } => LedgerError::NewerFormat {
            path: path.clone(),
            found: *found,
            supported: *supported,
        },
        LedgerError::EnginePanic { path, what } => LedgerError::EnginePanic {
            path: path.clone(),
            what: what.clone(),
        },
        other => LedgerError::Storage(StorageFault::Engine(other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::ledger::{LedgerConfig, TokenSource};
    use crate::model::Capacity;
    use crate::model::*;
    use crate::model::{ClaimOutcome, ClaimRequest};

    const T0: Timestamp = Timestamp(1_700_000_000_000);
    const ROOMY: Capacity = Capacity {
        max_running: 100,
        max_queued: 100,
    };

    fn session() -> SessionId {
        SessionId::new("s").expect("valid id")
    }

    /// A fresh ledger of the backend under test (`HERMES_TEST_BACKEND`): a file in `dir`, or a
    /// new database.
    fn fresh(dir: &std::path::Path) -> crate::Location {
        crate::testing::TestBackend::from_env().fresh(dir).0
    }

    /// The ledger at `location`, opened (again) with a seeded token source.
    fn open(location: &crate::Location) -> Ledger {
        let tokens = TokenSource::Seeded(3);
        match location {
            crate::Location::File(path) => Ledger::open_with(path, LedgerConfig::default(), tokens),
            crate::Location::Postgres(target) => {
                Ledger::connect(target, LedgerConfig::default(), tokens)
            }
        }
        .expect("ledger opens")
    }

    fn dispatch(ledger: &Ledger, tasks: u32) -> DelegationId {
        let new = crate::testing::background_unit(session(), crate::testing::spec(tasks));
        ledger
            .dispatch(new, ROOMY, T0)
            .expect("dispatch")
            .delegation
            .id
    }

    fn outcome(index: u32) -> ChildOutcome {
        ChildOutcome {
            exit_code: Some(0),
            started_at: Some(T0),
            result: format!("result {index}"),
            ..ChildOutcome::new(index, format!("task {index}"), ChildStatus::Completed, T0)
        }
    }

    fn claim(ledger: &Ledger, id: &DelegationId, index: u32) -> ClaimToken {
        let request = ClaimRequest {
            keys: vec![EventRef {
                delegation_id: id.clone(),
                key: EventKey::Task(index),
            }],
            consumer: "test".into(),
            session: Some(session()),
            lease_ms: 60_000,
        };
        match ledger.claim(&request, T0).expect("claim") {
            ClaimOutcome::Claimed(claim) => claim.token,
            ClaimOutcome::Refused(why) => panic!("refused: {why:?}"),
        }
    }

    /// Holds the group as if a leader were committing, until `count` operations are queued;
    /// then lets them go, so they all run in the next transaction.
    fn gather<R: Send>(
        ledger: &Ledger,
        count: usize,
        ops: Vec<Box<dyn FnOnce() -> R + Send + '_>>,
    ) -> Vec<R> {
        lock(&ledger.group.state).leading = true;
        std::thread::scope(|scope| {
            let handles: Vec<_> = ops.into_iter().map(|op| scope.spawn(op)).collect();
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut queued = 0;
            while queued < count && Instant::now() < deadline {
                std::thread::yield_now();
                queued = lock(&ledger.group.state).queue.len();
            }
            // The lead passes to the first of them, as a leader's commit would pass it; also
            // when some never queued (one panicked), so the others finish and the test fails
            // instead of hanging on them.
            let mut state = lock(&ledger.group.state);
            match state.queue.first() {
                Some((_, first)) => first.wake(Turn::Lead),
                None => state.leading = false,
            }
            drop(state);
            let results = handles
                .into_iter()
                .map(|h| h.join().expect("no panic"))
                .collect();
            assert_eq!(queued, count, "the operations never all queued");
            results
        })
    }

    #[test]
    fn concurrent_finishes_and_acks_share_one_commit_and_each_gets_its_own_result() {
        let dir = tempfile::tempdir().expect("tempdir");
        let location = fresh(dir.path());
        let ledger = open(&location);
        let unit = dispatch(&ledger, 6);
        ledger
            .finish_child(HostId(0), &unit, outcome(0), T0)
            .expect("finish 0");
        ledger
            .finish_child(HostId(0), &unit, outcome(1), T0)
            .expect("finish 1");
        let good = claim(&ledger, &unit, 0);
        let stale = claim(&ledger, &unit, 1);
        ledger.release(stale, T0).expect("released");
        let missing = DelegationId::new("deleg_000000000000").expect("valid id");

        let l = &ledger;
        let ack = move |token| format!("{:?}", l.ack(token, T0).map(|t| t.len()));
        // On PostgreSQL an ack is one statement of its own (`store::Transitions`), not an
        // operation of the group: it is made first there, and the group is the four others.
        let shared = ledger.is_shared();
        let acked_apart = shared.then(|| (ack(good), ack(stale)));
        let before = ledger.commits.load(Ordering::Relaxed);
        let (u2, u3, u4) = (unit.clone(), unit.clone(), unit.clone());
        let mut ops: Vec<Box<dyn FnOnce() -> String + Send + '_>> = vec![
            Box::new(move || {
                format!(
                    "{:?}",
                    l.finish_child(HostId(0), &u2, outcome(2), T0)
                        .map(|f| f.published)
                )
            }),
            Box::new(move || {
                format!(
                    "{:?}",
                    l.finish_child(HostId(0), &u3, outcome(3), T0)
                        .map(|f| f.published)
                )
            }),
            Box::new(move || ack(good)),
            // Fails: the token was released already.
            Box::new(move || ack(stale)),
            // Fails: no such unit.
            Box::new(move || {
                format!(
                    "{:?}",
                    l.finish_child(HostId(0), &missing, outcome(0), T0)
                        .map(|f| f.published)
                )
            }),
            Box::new(move || {
                format!(
                    "{:?}",
                    l.finish_child(HostId(0), &u4, outcome(4), T0)
                        .map(|f| f.published)
                )
            }),
        ];
        if shared {
            ops.drain(2..4);
        }
        let count = ops.len();
        let mut results = gather(&ledger, count, ops);
        if let Some((good, stale)) = acked_apart {
            results.splice(2..2, [good, stale]);
        }
        assert_eq!(results[0], "Ok(true)");
        assert_eq!(results[1], "Ok(true)");
        assert_eq!(results[2], "Ok(1)");
        assert!(results[3].contains("ClaimLost"), "{}", results[3]);
        assert!(results[4].contains("DelegationNotFound"), "{}", results[4]);
        assert_eq!(results[5], "Ok(true)");
        assert_eq!(
            ledger.commits.load(Ordering::Relaxed) - before,
            1,
            "six operations, one durable commit"
        );
        drop(ledger);

        // What the callers were told succeeded is in the ledger.
        let reopened = open(&location);
        let events = reopened.events(&unit).expect("events");
        let state = |i: u32| {
            events
                .iter()
                .find(|e| e.key == EventKey::Task(i))
                .map(|e| e.state)
        };
        assert_eq!(state(0), Some(EventState::Delivered));
        assert_eq!(state(2), Some(EventState::Pending));
        assert_eq!(state(3), Some(EventState::Pending));
        assert_eq!(state(4), Some(EventState::Pending));
        assert_eq!(state(5), None);
    }

    #[test]
    fn a_finish_that_queues_while_the_group_runs_joins_its_commit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let location = fresh(dir.path());
        let ledger = open(&location);
        let unit = dispatch(&ledger, 1);
        let commits = ledger.commits();
        let (leading, is_leading) = std::sync::mpsc::channel();
        let (first, second) = std::thread::scope(|scope| {
            let ledger = &ledger;
            let first = scope.spawn(move || {
                // A write that asks for a commit and holds its open transaction until the
                // finish below has queued.
                ledger.write_grouped(move |l, _| {
                    let _ = leading.send(());
                    let deadline = Instant::now() + Duration::from_secs(30);
                    while lock(&l.group.state).queue.is_empty() && Instant::now() < deadline {
                        std::thread::yield_now();
                    }
                    Ok(((), true))
                })
            });
            is_leading.recv().expect("the first write leads");
            let second = ledger.finish_child(HostId(0), &unit, outcome(0), T0);
            (first.join().expect("no panic"), second)
        });
        first.expect("the first write");
        second.expect("the finish");
        assert_eq!(
            ledger.commits() - commits,
            1,
            "the finish joined the open transaction instead of waiting for a commit of its own"
        );
        let unit = ledger.delegation(&unit).expect("read").expect("the unit");
        assert!(unit.status.is_terminal(), "the finish is durable: {unit:?}");
    }

    #[test]
    fn an_operation_that_fails_after_writing_undoes_nobody_elses() {
        let dir = tempfile::tempdir().expect("tempdir");
        let location = fresh(dir.path());
        let ledger = open(&location);
        let unit = dispatch(&ledger, 3);
        let before = ledger.commits.load(Ordering::Relaxed);
        let l = &ledger;
        let (u0, u1) = (unit.clone(), unit.clone());
        let ops: Vec<Box<dyn FnOnce() -> String + Send + '_>> = vec![
            Box::new(move || {
                format!(
                    "{:?}",
                    l.finish_child(HostId(0), &u0, outcome(0), T0)
                        .map(|f| f.published)
                )
            }),
            // Writes, then fails: the transaction is tainted and must not commit this write.
            Box::new(move || {
                format!(
                    "{:?}",
                    l.write_grouped(|_, w| {
                        w.set_meta("poison", 1)?;
                        Err::<((), bool), _>(LedgerError::Invalid("fails after writing".into()))
                    })
                )
            }),
            Box::new(move || {
                format!(
                    "{:?}",
                    l.finish_child(HostId(0), &u1, outcome(1), T0)
                        .map(|f| f.published)
                )
            }),
        ];
        let results = gather(&ledger, 3, ops);
        assert_eq!(results[0], "Ok(true)");
        assert!(results[1].contains("fails after writing"), "{}", results[1]);
        assert_eq!(results[2], "Ok(true)");
        let commits = ledger.commits.load(Ordering::Relaxed) - before;
        assert_eq!(commits, 1, "the others ran again and committed once");
        drop(ledger);

        let reopened = open(&location);
        assert_eq!(reopened.read(|r| r.meta("poison")).expect("meta"), None);
        let published: Vec<EventKey> = reopened
            .events(&unit)
            .expect("events")
            .iter()
            .map(|e| e.key)
            .collect();
        assert_eq!(published, vec![EventKey::Task(0), EventKey::Task(1)]);
    }

    #[test]
    fn dispatches_share_the_commit_of_the_writes_beside_them_and_a_refused_one_fails_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let location = fresh(dir.path());
        let ledger = open(&location);
        let unit = dispatch(&ledger, 2);
        let before = ledger.commits.load(Ordering::Relaxed);
        let l = &ledger;
        let dispatched = |capacity: Capacity| {
            let new = crate::testing::background_unit(session(), crate::testing::spec(1));
            format!(
                "{:?}",
                l.dispatch(new, capacity, T0).map(|a| a.delegation.status)
            )
        };
        let full = Capacity {
            max_running: 0,
            max_queued: 0,
        };
        let u0 = unit.clone();
        let ops: Vec<Box<dyn FnOnce() -> String + Send + '_>> = vec![
            Box::new(move || dispatched(ROOMY)),
            Box::new(move || {
                format!(
                    "{:?}",
                    l.finish_child(HostId(0), &u0, outcome(0), T0)
                        .map(|f| f.published)
                )
            }),
            // Refused: no slot and no room in the queue.
            Box::new(move || dispatched(full)),
            Box::new(move || dispatched(ROOMY)),
        ];
        let results = gather(&ledger, 4, ops);
        assert_eq!(results[0], "Ok(Running)");
        assert_eq!(results[1], "Ok(true)");
        assert!(results[2].contains("QueueFull"), "{}", results[2]);
        assert_eq!(results[3], "Ok(Running)");
        assert_eq!(
            ledger.commits.load(Ordering::Relaxed) - before,
            1,
            "two dispatches and a finish, one durable commit"
        );
        let units = ledger.read(|r| r.active_units()).expect("units");
        assert_eq!(units.len(), 3, "{units:?}");
    }
}
