//! Group commit: operations issued concurrently inside one process share one durable commit.
//!
//! A caller queues its operation and waits. Whoever finds no leader becomes the leader: it takes
//! everything queued, runs each operation in turn inside one write transaction, commits once,
//! hands every caller its own result, and lets the next waiter lead whatever queued meanwhile
//! (while the commit's `fdatasync`s ran). A caller returns only after the commit that holds its
//! operation is durable, so `publish`, `ack` and `drop` keep SPEC §4's promise.
//!
//! One caller's failure never undoes another's operation. The ledger's operations validate
//! before they write, so an operation that fails has usually written nothing: it gets its error
//! and the others commit. An operation that fails *after* writing (a storage error, a damaged
//! page) taints the transaction: it is aborted, the failed operation gets its error, and the
//! others run again in a fresh transaction (operations are re-runnable closures over owned
//! values, and nothing of the aborted run survives).

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::error::{LedgerError, Result};
use crate::ledger::Ledger;
use crate::store::{Writer, storage};

/// An operation as queued: it runs inside the group's transaction, stores its own value, and
/// says whether it asks for a commit.
type Op = Box<dyn FnMut(&Ledger, &Writer<'_>) -> Result<bool> + Send>;

/// The queue of one ledger handle.
#[derive(Default)]
pub(crate) struct GroupCommit {
    state: Mutex<State>,
    turn: Condvar,
}

#[derive(Default)]
struct State {
    queue: Vec<(u64, Op)>,
    done: HashMap<u64, Result<()>>,
    leading: bool,
    next_id: u64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
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
        let group = &self.group;
        let mut state = lock(&group.state);
        let id = state.next_id;
        state.next_id += 1;
        state.queue.push((id, op));
        loop {
            if let Some(result) = state.done.remove(&id) {
                return result;
            }
            if state.leading {
                state = group
                    .turn
                    .wait(state)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                continue;
            }
            state.leading = true;
            let batch = std::mem::take(&mut state.queue);
            drop(state);
            let results = self.run_batch(batch);
            state = lock(&group.state);
            state.leading = false;
            state.done.extend(results);
            group.turn.notify_all();
        }
    }

    /// Runs a batch to completion: every operation ends with its own result.
    fn run_batch(&self, mut batch: Vec<(u64, Op)>) -> Vec<(u64, Result<()>)> {
        let mut results = Vec::with_capacity(batch.len());
        while !batch.is_empty() {
            results.extend(self.run_once(&mut batch));
        }
        results
    }

    /// One transaction over `batch`. Returns the results it settled and leaves in `batch` only
    /// the operations to run again (after a tainted transaction).
    fn run_once(&self, batch: &mut Vec<(u64, Op)>) -> Vec<(u64, Result<()>)> {
        let everyone = |batch: &mut Vec<(u64, Op)>, err: &LedgerError| {
            batch
                .drain(..)
                .map(|(id, _)| (id, Err(copy_error(err))))
                .collect::<Vec<_>>()
        };
        let db = match self.writable() {
            Ok(db) => db,
            Err(err) => return everyone(batch, &err),
        };
        let txn = match self.guard(|| db.begin_write().map_err(storage)) {
            Ok(txn) => txn,
            Err(err) => return everyone(batch, &err),
        };
        let writer = Writer::new(txn, &self.path);
        // Per operation: None = succeeded (commit wanted or not), Some(err) = failed cleanly.
        let mut failed: Vec<Option<LedgerError>> = Vec::with_capacity(batch.len());
        let mut commit = false;
        for (index, (_, op)) in batch.iter_mut().enumerate() {
            writer.dirty.set(false);
            match self.guard(|| op(self, &writer)) {
                Ok(wants) => {
                    commit |= wants;
                    failed.push(None);
                }
                Err(err) if !writer.dirty.get() => failed.push(Some(err)),
                Err(err) => {
                    // Tainted: abort, settle the failures, run the rest again.
                    drop(writer);
                    let mut settled = Vec::new();
                    let (id, _) = batch.remove(index);
                    settled.push((id, Err(err)));
                    let mut kept = Vec::with_capacity(batch.len());
                    for (i, member) in std::mem::take(batch).into_iter().enumerate() {
                        match failed.get_mut(i).and_then(Option::take) {
                            Some(err) => settled.push((member.0, Err(err))),
                            None => kept.push(member),
                        }
                    }
                    *batch = kept;
                    return settled;
                }
            }
        }
        let committed = if commit { writer.commit() } else { Ok(()) };
        batch
            .drain(..)
            .zip(failed)
            .map(|((id, _), failed)| match (failed, &committed) {
                (Some(err), _) => (id, Err(err)),
                (None, Ok(())) => (id, Ok(())),
                (None, Err(err)) => (id, Err(copy_error(err))),
            })
            .collect()
    }
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
        other => LedgerError::Storage(other.to_string()),
    }
}
