//! Children: their start, progress and stalls, finalization exactly once (a per-unit tally
//! row keeps finishing a child O(1) in the batch's size), and the fencing check on every host
//! write (`check_owner`).

use crate::error::{LedgerError, Result};
use crate::ledger::Ledger;

use crate::model::{
    Child, ChildOutcome, ChildStatus, DelegationId, EventKey, EventPayload, HostId, ProcessId,
    Progress, Stalling, Timestamp, UnitRecord, UnitStatus, UnitTally,
};
use crate::store::Writer;
use crate::txn::finalize::{apply_outcome, force_finish};
use crate::txn::hosts::release_host;
use crate::txn::inline::deliver_inline;
use crate::txn::publish::{Owner, add_in};

/// A batch of progress to persist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgressUpdate {
    /// The unit.
    pub delegation_id: DelegationId,
    /// The child.
    pub index: u32,
    /// Its token now.
    pub progress: Progress,
    /// Its last output (at most `TAIL_CHARS`), if it changed: stored so that recovery on any
    /// machine has a tail even where the transcript is out of reach.
    pub tail: Option<String>,
}

/// What finishing a child did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinishChild {
    /// Whether its `task:N` event was published now (false: it was already final, nothing
    /// happened).
    pub published: bool,
    /// The unit's status when this made the unit terminal.
    pub unit_status: Option<UnitStatus>,
    /// Whether the unit's host left in this commit ([`FinishAs::leaving`]): the unit ended, its
    /// events were settled as delivered and the host's record removed.
    pub left: bool,
}

/// How a host finishes a child ([`Ledger::finish_child_as`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FinishAs {
    /// The child's process, when its start was never recorded on its own (a short child that
    /// its inline unit's dispatch recorded running): it goes in with the outcome.
    pub started: Option<ProcessId>,
    /// The finishing host, when it runs this one inline unit only and leaves with it (`-z`,
    /// cron): the commit that ends the unit also settles its events as delivered — to this
    /// process, which shows them next; no consumer can claim an inline unit's events — and
    /// removes the host's record, so the run needs no commit after its last child's.
    pub leaving: Option<ProcessId>,
}

impl Ledger {
    /// Records that a child's process started; `writer` is the host's fencing epoch.
    pub fn child_started(
        &self,
        writer: HostId,
        id: &DelegationId,
        index: u32,
        process: ProcessId,
        now: Timestamp,
    ) -> Result<()> {
        let id = id.clone();
        self.write_grouped(move |_, w| {
            // Read first, checked last: a backend may bring the unit and its host along.
            let child = w.child(&id, index)?;
            let unit = w
                .delegation(id.as_str())?
                .ok_or_else(|| LedgerError::DelegationNotFound(id.clone()))?;
            // The host's record, read once: the fencing check and the child's machine.
            let host = match unit.host {
                Some(process) => w.host(process)?,
                None => None,
            };
            check_owner_as(&unit, writer, host.as_ref())?;
            let mut child = child.ok_or_else(|| LedgerError::ChildNotFound(id.clone(), index))?;
            if child.status.is_terminal() {
                return Ok(((), false));
            }
            child.status = ChildStatus::Running;
            child.process = Some(process);
            child.started_at = Some(now);
            // Where its transcript is: the machine of the host that started it.
            child.machine = host
                .map(|h| h.locality.hostname)
                .filter(|name| !name.is_empty());
            w.put_child(&child)?;
            Ok(((), true))
        })
    }

    /// Persists progress tokens (and tails) of running children, in one transaction. Updates
    /// about units `writer` no longer owns are not applied; their units are returned.
    pub fn record_progress(
        &self,
        writer: HostId,
        updates: &[ProgressUpdate],
    ) -> Result<Vec<DelegationId>> {
        if updates.is_empty() {
            return Ok(Vec::new());
        }
        let updates = updates.to_vec();
        self.write_grouped(move |_, w| {
            let mut fenced: Vec<DelegationId> = Vec::new();
            let mut changed: Vec<Child> = Vec::new();
            // A unit's children come together: its owner is checked once, and its children
            // read in one read and written in one write (one statement each on PostgreSQL).
            let mut units: Vec<&DelegationId> = Vec::new();
            for update in &updates {
                if !units.contains(&&update.delegation_id) {
                    units.push(&update.delegation_id);
                }
            }
            for id in units {
                let Some(unit) = w.delegation(id.as_str())? else {
                    continue;
                };
                if check_owner(w, &unit, writer).is_err() {
                    fenced.push(id.clone());
                    continue;
                }
                let mine: Vec<&ProgressUpdate> =
                    updates.iter().filter(|u| &u.delegation_id == id).collect();
                let indexes: Vec<u32> = mine.iter().map(|u| u.index).collect();
                for mut child in w.children_at(id, &indexes)? {
                    if child.status.is_terminal() {
                        continue;
                    }
                    // The last update of a child wins, as when they were applied in turn.
                    let Some(update) = mine.iter().rev().find(|u| u.index == child.index) else {
                        continue;
                    };
                    child.progress = update.progress.clone();
                    if let Some(tail) = &update.tail {
                        w.put_child_tail(id, update.index, tail)?;
                    }
                    changed.push(child);
                }
            }
            let wrote = !changed.is_empty();
            w.put_children(&changed)?;
            Ok((fenced, wrote))
        })
    }

    /// Finalizes one child exactly once: marks it terminal and publishes its `task:N` event in
    /// one transaction. A child that is already final (force-finalized, say) publishes nothing.
    /// The unit becomes terminal when its last child does.
    ///
    /// `writer` is the finishing host's fencing epoch: a host that no longer owns the unit (it
    /// was recovered, or handed over) gets `LedgerError::Fenced` and nothing is written.
    pub fn finish_child(
        &self,
        writer: HostId,
        id: &DelegationId,
        outcome: ChildOutcome,
        now: Timestamp,
    ) -> Result<FinishChild> {
        self.finish_child_with_progress(writer, id, outcome, None, now)
    }

    /// [`Ledger::finish_child`], persisting the child's final progress token in the same
    /// transaction, so `delegation status` shows what the child really did last rather than
    /// the last periodic snapshot.
    pub fn finish_child_with_progress(
        &self,
        writer: HostId,
        id: &DelegationId,
        outcome: ChildOutcome,
        progress: Option<Progress>,
        now: Timestamp,
    ) -> Result<FinishChild> {
        self.finish_child_as(writer, id, outcome, progress, FinishAs::default(), now)
    }

    /// [`Ledger::finish_child_with_progress`] for a child whose process was never recorded
    /// ([`Ledger::child_started`]): a short child of an inline unit, recorded running by its
    /// dispatch ([`Ledger::register_and_dispatch`]), whose pid goes in with its outcome, in
    /// the same commit.
    #[cfg(any(test, feature = "testing"))]
    pub fn finish_started_child(
        &self,
        writer: HostId,
        id: &DelegationId,
        process: ProcessId,
        outcome: ChildOutcome,
        progress: Option<Progress>,
        now: Timestamp,
    ) -> Result<FinishChild> {
        let how = FinishAs {
            started: Some(process),
            leaving: None,
        };
        self.finish_child_as(writer, id, outcome, progress, how, now)
    }

    /// [`Ledger::finish_child_with_progress`], as `how` says: with the child's process
    /// ([`FinishAs::started`]), and with the host leaving when this child ends its unit
    /// ([`FinishAs::leaving`]).
    pub fn finish_child_as(
        &self,
        writer: HostId,
        id: &DelegationId,
        outcome: ChildOutcome,
        progress: Option<Progress>,
        how: FinishAs,
        now: Timestamp,
    ) -> Result<FinishChild> {
        if !outcome.status.is_terminal() {
            return Err(LedgerError::Invalid(format!(
                "cannot finish task {} of {id} with status {}",
                outcome.index, outcome.status
            )));
        }
        let id = id.clone();
        self.write_grouped(move |_, w| {
            finish_in(w, &id, writer, &outcome, progress.clone(), how, now)
        })
    }

    /// Records that child `stalling.index` of `id` is stalling (SIGTERM sent), so status views
    /// show its stall fields during the grace period. Returns whether it was recorded (not if
    /// the child is already final). `writer` is the host's fencing epoch, checked as for
    /// [`Ledger::child_started`].
    pub fn child_stalling(
        &self,
        writer: HostId,
        id: &DelegationId,
        stalling: &Stalling,
    ) -> Result<bool> {
        self.write_then(|w| {
            let unit = w
                .delegation(id.as_str())?
                .ok_or_else(|| LedgerError::DelegationNotFound(id.clone()))?;
            check_owner(w, &unit, writer)?;
            let recorded = w
                .child(id, stalling.index)?
                .is_some_and(|c| !c.status.is_terminal());
            if recorded {
                w.put_stall(id, stalling)?;
            }
            Ok((recorded, recorded))
        })
    }

    /// The children of a unit that were found stalling, by index (a child that ended since
    /// keeps its record; its outcome says how it ended).
    pub fn stalls(&self, id: &DelegationId) -> Result<Vec<Stalling>> {
        self.read_one(|r| r.stalls(id))
    }

    /// Force-finalizes a unit: every child not yet final gets the outcome given for it in
    /// `missing` (or `unknown` if none was given), all in one `terminal` event. Returns the
    /// unit's status, or `None` if it was already terminal.
    /// `writer` is the host's fencing epoch, checked as for [`Ledger::finish_child`].
    pub fn finish_unit(
        &self,
        writer: HostId,
        id: &DelegationId,
        missing: Vec<ChildOutcome>,
        reason: &str,
        now: Timestamp,
    ) -> Result<Option<UnitStatus>> {
        self.write_then(|w| {
            let unit = w
                .delegation(id.as_str())?
                .ok_or_else(|| LedgerError::DelegationNotFound(id.clone()))?;
            check_owner(w, &unit, writer)?;
            if unit.status.is_terminal() {
                return Ok((None, false));
            }
            let status = force_finish(w, unit, missing.clone(), reason, now)?;
            Ok((Some(status), true))
        })
    }

    /// Whether every child of the unit has its own `task:N` event or is covered by the
    /// `terminal` event. Extra or out-of-range keys never make a unit look complete.
    #[cfg(any(test, feature = "testing"))]
    pub fn is_fully_recorded(&self, id: &DelegationId) -> Result<bool> {
        self.read(|r| {
            let unit = r
                .delegation(id.as_str())?
                .ok_or_else(|| LedgerError::DelegationNotFound(id.clone()))?;
            let events = r.events(id)?;
            Ok(recorded(&unit, &events).len() == unit.task_count() as usize)
        })
    }
}

/// The children of `unit` that `events` account for.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn recorded(
    unit: &UnitRecord,
    events: &[crate::model::Event],
) -> std::collections::BTreeSet<u32> {
    let n = unit.task_count();
    let mut seen = std::collections::BTreeSet::new();
    for event in events {
        match (&event.key, &event.payload) {
            (key, EventPayload::Task(outcome))
                if crate::store::is_task_of(*key, n) && *key == EventKey::Task(outcome.index) =>
            {
                seen.insert(outcome.index);
            }
            (EventKey::Terminal, EventPayload::Terminal { children, .. }) => {
                seen.extend(children.iter().map(|c| c.index).filter(|i| *i < n));
            }
            _ => {}
        }
    }
    seen
}

/// What a child's finish reads of its unit: a unit of several tasks that is not terminal has
/// a tally (which names the unit's host too), and that is all it reads; a unit of one task,
/// and units recorded by an older build, have none and are read whole.
enum Finishing {
    Tallied(UnitTally),
    Whole(Box<UnitRecord>),
}

impl Finishing {
    /// Whether the unit is inline (it has no session).
    fn is_inline(&self) -> bool {
        match self {
            Finishing::Tallied(tally) => tally.session.is_none(),
            Finishing::Whole(unit) => unit.session.is_none(),
        }
    }
}

/// Finishes child `outcome.index` of `id` inside `w` (see [`Ledger::finish_child_as`]);
/// returns what it did and whether anything was written.
fn finish_in(
    w: &Writer<'_>,
    id: &DelegationId,
    writer: HostId,
    outcome: &ChildOutcome,
    progress: Option<Progress>,
    how: FinishAs,
    now: Timestamp,
) -> Result<(FinishChild, bool)> {
    w.finish_look(id, outcome.index)?;
    let finishing = finishing(w, id, writer)?;
    let mut child = w
        .child(id, outcome.index)?
        .ok_or_else(|| LedgerError::ChildNotFound(id.clone(), outcome.index))?;
    if child.status.is_terminal() {
        let nothing = FinishChild {
            published: false,
            unit_status: None,
            left: false,
        };
        return Ok((nothing, false));
    }
    record_final(&mut child, outcome, progress, how.started);
    w.put_child(&child)?;
    let inline = finishing.is_inline();
    let unit_status = publish_and_settle(w, id, finishing, outcome, now)?;
    let left = match (unit_status, how.leaving) {
        (Some(_), Some(host)) if inline => {
            deliver_inline(w, id, now)?;
            release_host(w, host)?;
            true
        }
        _ => false,
    };
    let finished = FinishChild {
        published: true,
        unit_status,
        left,
    };
    Ok((finished, true))
}

/// What finishing a child of `id` reads of its unit, once `writer` is found to own it.
fn finishing(w: &Writer<'_>, id: &DelegationId, writer: HostId) -> Result<Finishing> {
    match w.tally(id)? {
        Some(tally) => {
            check_host(w, id, tally.host, writer)?;
            Ok(Finishing::Tallied(tally))
        }
        None => {
            let unit = w
                .delegation(id.as_str())?
                .ok_or_else(|| LedgerError::DelegationNotFound(id.clone()))?;
            check_owner(w, &unit, writer)?;
            Ok(Finishing::Whole(Box::new(unit)))
        }
    }
}

/// Applies a finished child's outcome, final progress and process (`started`) to its record.
fn record_final(
    child: &mut Child,
    outcome: &ChildOutcome,
    progress: Option<Progress>,
    started: Option<ProcessId>,
) {
    if let Some(progress) = progress {
        child.progress = progress;
    }
    match started {
        Some(process) => {
            child.process.get_or_insert(process);
            // The child's own start, not its dispatch's.
            child.started_at = outcome.started_at.or(child.started_at);
        }
        // Recorded running by its dispatch but never started (it could not, or its unit was
        // interrupted first): its outcome says whether it ever ran.
        None if child.process.is_none() => child.started_at = outcome.started_at,
        None => {}
    }
    apply_outcome(child, outcome);
}

/// Publishes a finished child's `task:N` event and settles its unit: returns the unit's final
/// status if this child was its last.
fn publish_and_settle(
    w: &Writer<'_>,
    id: &DelegationId,
    finishing: Finishing,
    outcome: &ChildOutcome,
    now: Timestamp,
) -> Result<Option<UnitStatus>> {
    let key = EventKey::Task(outcome.index);
    let payload = EventPayload::Task(outcome.clone());
    match finishing {
        Finishing::Tallied(mut tally) => {
            let owner = Owner {
                id,
                session: tally.session.as_ref(),
                delivery: tally.delivery,
            };
            add_in(w, owner, key, payload, now)?;
            tally.add(outcome.status);
            settle_tallied(w, id, tally, now)
        }
        Finishing::Whole(unit) => {
            add_in(w, Owner::of(&unit), key, payload, now)?;
            settle_unit(w, *unit, now)
        }
    }
}

/// Refuses a host's write about `unit` unless the host (`writer`, its fencing epoch) still owns
/// it: the unit names the host's process and that process's record carries the same epoch. A
/// unit no host owns (recorded by hand, as tools and tests do) takes any writer: a host's units
/// always name it, and a dead host's units keep naming it after its record is gone. A pool unit
/// with no host waits for a worker and takes no writer (it has no tally either while it waits,
/// so `finish_child` reads it whole and checks it here).
fn check_owner(w: &Writer<'_>, unit: &UnitRecord, writer: HostId) -> Result<()> {
    if unit.host.is_none() && unit.pool().is_some() {
        return Err(LedgerError::Fenced {
            delegation: unit.id.clone(),
            host: writer,
        });
    }
    check_host(w, &unit.id, unit.host, writer)
}

/// [`check_owner`] with the record of the unit's host read already (`None`: no such record).
fn check_owner_as(
    unit: &UnitRecord,
    writer: HostId,
    host: Option<&crate::model::HostRecord>,
) -> Result<()> {
    let owns = match unit.host {
        Some(_) => host.is_some_and(|h| h.host_id == writer),
        None => unit.pool().is_none(),
    };
    if owns {
        Ok(())
    } else {
        Err(LedgerError::Fenced {
            delegation: unit.id.clone(),
            host: writer,
        })
    }
}

/// [`check_owner`] for the unit `id` whose host is `host`.
fn check_host(
    w: &Writer<'_>,
    id: &DelegationId,
    host: Option<ProcessId>,
    writer: HostId,
) -> Result<()> {
    let owns = match host {
        Some(process) => w.host(process)?.is_some_and(|h| h.host_id == writer),
        None => true,
    };
    if owns {
        Ok(())
    } else {
        Err(LedgerError::Fenced {
            delegation: id.clone(),
            host: writer,
        })
    }
}

/// Records the tally; once every child finished, marks the unit terminal (reading it once)
/// and returns its final status.
fn settle_tallied(
    w: &Writer<'_>,
    id: &DelegationId,
    tally: UnitTally,
    now: Timestamp,
) -> Result<Option<UnitStatus>> {
    if tally.finished_count() < u64::from(tally.task_count) {
        w.put_tally(id, &tally)?;
        return Ok(None);
    }
    w.remove_tally(id)?;
    let Some(mut unit) = w.delegation(id.as_str())? else {
        return Ok(None);
    };
    if unit.status.is_terminal() {
        return Ok(None);
    }
    unit.status = UnitStatus::from_counts(&tally.finished);
    unit.ended_at = Some(now);
    w.put_delegation(&unit)?;
    Ok(Some(unit.status))
}

/// Marks the unit terminal if every child is; returns its final status if it became terminal.
fn settle_unit(w: &Writer<'_>, mut unit: UnitRecord, now: Timestamp) -> Result<Option<UnitStatus>> {
    if unit.status.is_terminal() {
        return Ok(None);
    }
    let children = w.children(&unit.id)?;
    if children.iter().any(|c| !c.status.is_terminal()) {
        return Ok(None);
    }
    let statuses: Vec<ChildStatus> = children.iter().map(|c| c.status).collect();
    unit.status = UnitStatus::from_children(&statuses);
    unit.ended_at = Some(now);
    w.put_delegation(&unit)?;
    Ok(Some(unit.status))
}
