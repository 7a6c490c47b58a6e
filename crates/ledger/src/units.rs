//! Units and their children: dispatch under a capacity check, the FIFO queue, progress,
//! finalization exactly once, and interrupts.

use std::collections::BTreeSet;

use crate::error::{LedgerError, Result};
use crate::events::publish_in;
use crate::ledger::Ledger;

use crate::model::{
    Capacity, Channel, Child, ChildOutcome, ChildStatus, Delegation, DelegationId, DeliveryMode,
    DispatchSpec, EventKey, EventPayload, ExitDetail, HostId, ProcessId, Progress, SessionId,
    Stalling, Timestamp, UnitStatus, UnitTally,
};
use crate::rules::{self, Admit, Machines};
use crate::store::{META_ACTIVITY, META_NEXT_QUEUE_SEQ};
use crate::store::{Writer, is_task_of};

/// A unit to record.
#[derive(Clone, Debug, PartialEq)]
pub struct NewDelegation {
    /// Its id, when the caller drew it before the write (`Ledger::new_delegation_id`) or was
    /// given one (`delegate --id`): a dispatch whose outcome was unknown can then be sent again,
    /// and finding that id recorded for the same dispatch it is a no-op that says so
    /// ([`Admission::already_recorded`]). `None`: the ledger draws one.
    pub id: Option<DelegationId>,
    /// The session it belongs to (`None` for inline units).
    pub session: Option<SessionId>,
    /// Background or inline.
    pub channel: Channel,
    /// What to run.
    pub spec: DispatchSpec,
    /// The process that will run it.
    pub host: Option<ProcessId>,
    /// Where its transcripts go; the unit's own directory is `<root>/<delegation_id>`.
    pub transcript_root: Option<String>,
}

/// What dispatch decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Admission {
    /// The unit as recorded (status `running` or `queued`).
    pub delegation: Delegation,
    /// Its 1-based place in the queue when queued.
    pub queue_position: Option<u32>,
    /// The unit's id was recorded already, for this same dispatch (an earlier attempt whose
    /// outcome was unknown had landed): nothing was written now, and `delegation` is the unit
    /// as it stands.
    pub already_recorded: bool,
}

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
}

/// Who an event belongs to: what publishing it needs to know about its unit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Owner<'a> {
    pub(crate) id: &'a DelegationId,
    pub(crate) session: Option<&'a SessionId>,
    pub(crate) delivery: DeliveryMode,
}

impl<'a> Owner<'a> {
    pub(crate) fn of(unit: &'a Delegation) -> Owner<'a> {
        Owner {
            id: &unit.id,
            session: unit.session.as_ref(),
            delivery: unit.spec.delivery,
        }
    }
}

/// Which units an interrupt is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InterruptTarget {
    /// One unit.
    Delegation(DelegationId),
    /// Every unit of a session.
    Session(SessionId),
    /// Every active unit.
    All,
}

/// What an interrupt request did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Interrupts {
    /// Running units flagged; their host stops them.
    pub flagged: Vec<DelegationId>,
    /// Queued units cancelled at once.
    pub cancelled: Vec<DelegationId>,
}

/// `existing` as the answer to dispatching `new` again under its id, or a refusal when the id
/// names another dispatch.
fn same_dispatch(existing: Delegation, new: &NewDelegation) -> Result<Admission> {
    let id = &existing.id;
    if existing.session != new.session || existing.channel != new.channel {
        return Err(LedgerError::Invalid(format!(
            "delegation id {id} is already recorded for another session; choose another id"
        )));
    }
    if existing.spec != new.spec {
        return Err(LedgerError::Invalid(format!(
            "delegation id {id} is already recorded for a different dispatch (other tasks or options); choose another id"
        )));
    }
    Ok(Admission {
        delegation: existing,
        queue_position: None,
        already_recorded: true,
    })
}

impl Ledger {
    /// Records a new unit. A background unit runs at once if a slot is free and nothing waits
    /// before it, queues (FIFO) otherwise, and is refused past `max_queued`; running units are
    /// counted across every process in this same transaction. Inline units start at once and
    /// take no slot.
    pub fn dispatch(
        &self,
        new: NewDelegation,
        capacity: Capacity,
        now: Timestamp,
    ) -> Result<Admission> {
        if new.spec.tasks.is_empty() {
            return Err(LedgerError::Invalid(
                "a unit needs at least one task".into(),
            ));
        }
        if new.spec.tasks.len() >= 1_000_000 {
            return Err(LedgerError::Invalid(
                "a unit may have at most 999,999 tasks".into(),
            ));
        }
        if let Some(pool) = &new.spec.pool {
            crate::pools::check_pool_unit(pool, new.channel, new.session.as_ref())?;
        }
        self.write_then(|w| {
            // A dispatch sent again under the id it was given: the first attempt landed.
            if let Some(id) = &new.id
                && let Some(existing) = w.delegation(id.as_str())?
            {
                return same_dispatch(existing, &new).map(|admission| (admission, false));
            }
            let session = match &new.session {
                Some(id) => Some(crate::sessions::ensure_active(w, id, now)?),
                None => None,
            };
            // A background unit goes to a host that is live for the ledger: registered, or the
            // session's recorded host. A host that retired (`retire_host`) gets nothing more, so
            // no unit is ever left with a host that has decided to exit. A pool unit has no host
            // until a worker takes it.
            let pool = new.spec.pool.clone();
            let host = if pool.is_some() { None } else { new.host };
            if let (Channel::Background, Some(host)) = (new.channel, host) {
                let hosts_session = session.as_ref().is_some_and(|s| s.host == Some(host));
                if !hosts_session && w.host(host)?.is_none() {
                    return Err(LedgerError::HostGone(host));
                }
            }
            let id = match &new.id {
                Some(id) => id.clone(),
                None => loop {
                    let id = self.next_delegation_id();
                    if !w.delegation_exists(id.as_str())? {
                        break id;
                    }
                },
            };
            let (status, queue_seq, queue_position) = match new.channel {
                Channel::Inline => (UnitStatus::Running, None, None),
                Channel::Background => {
                    // Session units queue per machine; each pool has a FIFO queue of its own
                    // (one table, told apart by the unit's pool), and a pool unit always waits
                    // for a worker.
                    let (active, hosts) = (w.active_units()?, w.hosts()?);
                    let machines = Machines::of(&hosts);
                    let admit = match pool.as_deref() {
                        Some(pool) => rules::admit_to_pool(&active, pool, capacity),
                        None => {
                            let machine = machines.of_host(new.host);
                            rules::admit(&active, &machines, machine, capacity)
                        }
                    };
                    match admit {
                        Admit::Run => (UnitStatus::Running, None, None),
                        Admit::Full => {
                            return Err(LedgerError::QueueFull {
                                max: capacity.max_queued,
                            });
                        }
                        Admit::Queue { ahead } => {
                            let seq = w.meta(META_NEXT_QUEUE_SEQ)?.unwrap_or(0);
                            w.set_meta(META_NEXT_QUEUE_SEQ, seq + 1)?;
                            (UnitStatus::Queued, Some(seq), Some(ahead + 1))
                        }
                    }
                }
            };
            let transcript_dir = new
                .transcript_root
                .as_ref()
                .map(|root| format!("{root}/{id}"));
            let unit = Delegation {
                id: id.clone(),
                session: new.session.clone(),
                channel: new.channel,
                status,
                dispatched_at: now,
                started_at: (status == UnitStatus::Running).then_some(now),
                ended_at: None,
                host,
                queue_seq,
                interrupt: None,
                transcript_dir: transcript_dir.clone(),
                spec: new.spec.clone(),
            };
            w.put_delegation(&unit)?;
            // A pool unit gets its tally when a worker takes it (see `check_owner`).
            if unit.pool().is_none() {
                w.put_tally(&id, &UnitTally::for_unit(&unit))?;
            }
            if unit.channel == Channel::Background {
                w.bump_activity()?;
            }
            for index in 0..unit.task_count() {
                w.put_child(&Child {
                    delegation_id: id.clone(),
                    index,
                    status: ChildStatus::Pending,
                    process: None,
                    started_at: None,
                    ended_at: None,
                    exit_code: None,
                    signal: None,
                    progress: Progress::default(),
                    transcript: transcript_dir
                        .as_ref()
                        .map(|dir| format!("{dir}/task-{index}.log")),
                    machine: None,
                })?;
            }
            Ok((
                Admission {
                    delegation: unit,
                    queue_position,
                    already_recorded: false,
                },
                true,
            ))
        })
    }

    /// The unit `new.id` names, if it is recorded already for this same dispatch (`None`: no
    /// id, or not recorded). An id recorded for another dispatch — another session, other
    /// tasks — is refused (`Invalid`). A read: `delegate --id` asks it before starting a host.
    pub fn recorded_dispatch(&self, new: &NewDelegation) -> Result<Option<Admission>> {
        let Some(id) = &new.id else {
            return Ok(None);
        };
        let existing = self.read(|r| r.delegation(id.as_str()))?;
        existing.map(|unit| same_dispatch(unit, new)).transpose()
    }

    /// A fresh delegation id, for a caller that names its dispatch before writing it
    /// ([`NewDelegation::id`]) so that it can tell what happened if the write's outcome is
    /// unknown.
    pub fn new_delegation_id(&self) -> DelegationId {
        self.next_delegation_id()
    }

    /// Starts the oldest queued unit if it belongs to `host` and a slot is free. Looks first
    /// through a read, so a host polling an idle queue takes no write lock.
    pub fn start_next_queued(
        &self,
        host: ProcessId,
        capacity: Capacity,
        now: Timestamp,
    ) -> Result<Option<Delegation>> {
        // Pool units wait in queues of their own, for workers (`take_pool_unit`).
        let next = |active: &[Delegation], hosts: &[crate::model::Host]| {
            rules::startable(active, &Machines::of(hosts), host, capacity).cloned()
        };
        let startable = self.read(|r| {
            if r.queue()?.is_empty() {
                return Ok(false);
            }
            Ok(next(&r.active_units()?, &r.hosts()?).is_some())
        })?;
        if !startable {
            return Ok(None);
        }
        self.write_then(|w| {
            let Some(mut unit) = next(&w.active_units()?, &w.hosts()?) else {
                return Ok((None, false));
            };
            unit.status = UnitStatus::Running;
            unit.started_at = Some(now);
            w.put_delegation(&unit)?;
            Ok((Some(unit), true))
        })
    }

    /// Hands the unit's queued or running work to another host (used when a session's host
    /// changes, e.g. `--resume`). Returns how many units moved.
    pub fn adopt_units(&self, session: &SessionId, host: ProcessId) -> Result<usize> {
        self.write(|w| {
            let mut moved = 0;
            for mut unit in w.active_units()? {
                if unit.session.as_ref() == Some(session)
                    && unit.status == UnitStatus::Queued
                    && unit.pool().is_none()
                    && unit.host != Some(host)
                {
                    set_host(w, &mut unit, Some(host))?;
                    moved += 1;
                }
            }
            Ok(moved)
        })
    }

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
            let unit = w
                .delegation(id.as_str())?
                .ok_or_else(|| LedgerError::DelegationNotFound(id.clone()))?;
            check_owner(w, &unit, writer)?;
            let mut child = w
                .child(&id, index)?
                .ok_or_else(|| LedgerError::ChildNotFound(id.clone(), index))?;
            if child.status.is_terminal() {
                return Ok(((), false));
            }
            child.status = ChildStatus::Running;
            child.process = Some(process);
            child.started_at = Some(now);
            // Where its transcript is: the machine of the host that started it.
            child.machine = match unit.host {
                Some(host) => w.host(host)?.map(|h| h.locality.hostname),
                None => None,
            }
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
            // Units already checked this round: a unit's children come together, and its owner
            // is read once for all of them.
            let mut owned: Vec<&DelegationId> = Vec::new();
            let mut wrote = false;
            for update in &updates {
                let id = &update.delegation_id;
                if fenced.contains(id) {
                    continue;
                }
                if !owned.contains(&id) {
                    let Some(unit) = w.delegation(id.as_str())? else {
                        continue;
                    };
                    if check_owner(w, &unit, writer).is_err() {
                        fenced.push(id.clone());
                        continue;
                    }
                    owned.push(id);
                }
                if let Some(mut child) = w.child(id, update.index)?
                    && !child.status.is_terminal()
                {
                    child.progress = update.progress.clone();
                    w.put_child(&child)?;
                    wrote = true;
                    if let Some(tail) = &update.tail {
                        w.put_child_tail(id, update.index, tail)?;
                    }
                }
            }
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
        if !outcome.status.is_terminal() {
            return Err(LedgerError::Invalid(format!(
                "cannot finish task {} of {id} with status {}",
                outcome.index, outcome.status
            )));
        }
        let id = id.clone();
        self.write_grouped(move |_, w| {
            let id = &id;
            // A unit that is not terminal has a tally: this child and the tally are all that
            // is read (the tally names the unit's host too). Units recorded by an older build
            // have none and are read whole.
            let tally = w.tally(id)?;
            let unit = match tally {
                Some(_) => None,
                None => Some(
                    w.delegation(id.as_str())?
                        .ok_or_else(|| LedgerError::DelegationNotFound(id.clone()))?,
                ),
            };
            match (&tally, &unit) {
                (Some(tally), _) => check_host(w, id, tally.host, writer)?,
                (None, Some(unit)) => check_owner(w, unit, writer)?,
                (None, None) => check_host(w, id, None, writer)?,
            }
            let mut child = w
                .child(id, outcome.index)?
                .ok_or_else(|| LedgerError::ChildNotFound(id.clone(), outcome.index))?;
            if child.status.is_terminal() {
                return Ok((
                    FinishChild {
                        published: false,
                        unit_status: None,
                    },
                    false,
                ));
            }
            if let Some(progress) = progress.clone() {
                child.progress = progress;
            }
            apply_outcome(&mut child, &outcome);
            w.put_child(&child)?;
            let key = EventKey::Task(outcome.index);
            let status = outcome.status;
            let unit_status = match (tally, unit) {
                (Some(mut tally), _) => {
                    let owner = Owner {
                        id,
                        session: tally.session.as_ref(),
                        delivery: tally.delivery,
                    };
                    publish_in(w, owner, key, EventPayload::Task(outcome.clone()), now)?;
                    tally.add(status);
                    settle_tallied(w, id, tally, now)?
                }
                (None, Some(unit)) => {
                    publish_in(
                        w,
                        Owner::of(&unit),
                        key,
                        EventPayload::Task(outcome.clone()),
                        now,
                    )?;
                    settle_unit(w, unit, now)?
                }
                (None, None) => None,
            };
            Ok((
                FinishChild {
                    published: true,
                    unit_status,
                },
                true,
            ))
        })
    }

    /// Records that child `stalling.index` of `id` is stalling (SIGTERM sent), so status views
    /// show its stall fields during the grace period. Returns whether it was recorded (not if
    /// the child is already final).
    pub fn child_stalling(&self, id: &DelegationId, stalling: &Stalling) -> Result<bool> {
        self.write_then(|w| {
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
        self.read(|r| r.stalls(id))
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

    /// Asks for units to be interrupted. Queued units are cancelled at once; running ones are
    /// flagged, and their host stops them (SIGTERM, then SIGKILL) and finalizes them.
    pub fn request_interrupt(
        &self,
        target: &InterruptTarget,
        reason: &str,
        now: Timestamp,
    ) -> Result<Interrupts> {
        self.write(|w| interrupt_in(w, target, reason, now))
    }

    /// The activity counter: it changes whenever a host may have something new to do (a
    /// background dispatch, an interrupt, a session end). One cheap read to poll.
    pub fn activity(&self) -> Result<u64> {
        Ok(self.read(|r| r.meta(META_ACTIVITY))?.unwrap_or(0))
    }

    /// Running units of `host` that another process asked to interrupt, with the reason.
    pub fn interrupt_requests(&self, host: ProcessId) -> Result<Vec<(DelegationId, String)>> {
        self.read(|r| {
            Ok(r.active_units()?
                .into_iter()
                .filter(|u| u.host == Some(host) && u.status == UnitStatus::Running)
                .filter_map(|u| u.interrupt.map(|reason| (u.id, reason)))
                .collect())
        })
    }

    /// Whether every child of the unit has its own `task:N` event or is covered by the
    /// `terminal` event. Extra or out-of-range keys never make a unit look complete.
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
pub(crate) fn recorded(unit: &Delegation, events: &[crate::model::Event]) -> BTreeSet<u32> {
    let n = unit.task_count();
    let mut seen = BTreeSet::new();
    for event in events {
        match (&event.key, &event.payload) {
            (key, EventPayload::Task(outcome))
                if is_task_of(*key, n) && *key == EventKey::Task(outcome.index) =>
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

fn apply_outcome(child: &mut Child, outcome: &ChildOutcome) {
    child.status = outcome.status;
    child.ended_at = Some(outcome.ended_at);
    child.exit_code = outcome.exit_code;
    child.signal = outcome.signal;
    child.started_at = child.started_at.or(outcome.started_at);
    child.progress.api_calls = child.progress.api_calls.max(outcome.api_calls);
    child.progress.current_tool = None;
}

/// Background units currently running, across every process.
/// Refuses a host's write about `unit` unless the host (`writer`, its fencing epoch) still owns
/// it: the unit names the host's process and that process's record carries the same epoch. A
/// unit no host owns (recorded by hand, as tools and tests do) takes any writer: a host's units
/// always name it, and a dead host's units keep naming it after its record is gone. A pool unit
/// with no host waits for a worker and takes no writer (it has no tally either while it waits,
/// so `finish_child` reads it whole and checks it here).
fn check_owner(w: &Writer<'_>, unit: &Delegation, writer: HostId) -> Result<()> {
    if unit.host.is_none() && unit.pool().is_some() {
        return Err(LedgerError::Fenced {
            delegation: unit.id.clone(),
            host: writer,
        });
    }
    check_host(w, &unit.id, unit.host, writer)
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

/// Moves a unit to another host (or to none), keeping its tally in step.
pub(crate) fn set_host(
    w: &Writer<'_>,
    unit: &mut Delegation,
    host: Option<ProcessId>,
) -> Result<()> {
    unit.host = host;
    w.put_delegation(unit)?;
    if let Some(mut tally) = w.tally(&unit.id)? {
        tally.host = host;
        w.put_tally(&unit.id, &tally)?;
    }
    Ok(())
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
fn settle_unit(w: &Writer<'_>, mut unit: Delegation, now: Timestamp) -> Result<Option<UnitStatus>> {
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

/// Force-finalizes `unit` inside `w` (see `Ledger::finish_unit`).
pub(crate) fn force_finish(
    w: &Writer<'_>,
    unit: Delegation,
    missing: Vec<ChildOutcome>,
    reason: &str,
    now: Timestamp,
) -> Result<UnitStatus> {
    let mut covered = Vec::new();
    for mut child in w.children(&unit.id)? {
        if child.status.is_terminal() {
            continue;
        }
        let outcome = missing
            .iter()
            .find(|o| o.index == child.index && o.status.is_terminal())
            .cloned()
            .unwrap_or_else(|| unknown_outcome(&unit, &child, reason, now));
        apply_outcome(&mut child, &outcome);
        w.put_child(&child)?;
        covered.push(outcome);
    }
    let statuses: Vec<ChildStatus> = w.children(&unit.id)?.iter().map(|c| c.status).collect();
    let status = UnitStatus::from_children(&statuses);
    if !covered.is_empty() {
        let payload = EventPayload::Terminal {
            unit_status: status,
            reason: reason.to_owned(),
            children: covered,
        };
        publish_in(w, Owner::of(&unit), EventKey::Terminal, payload, now)?;
    }
    w.remove_tally(&unit.id)?;
    let mut unit = unit;
    unit.status = status;
    unit.ended_at = Some(now);
    w.put_delegation(&unit)?;
    Ok(status)
}

/// The outcome recorded for a child whose fate is not known.
pub(crate) fn unknown_outcome(
    unit: &Delegation,
    child: &Child,
    reason: &str,
    now: Timestamp,
) -> ChildOutcome {
    let started = child.status == ChildStatus::Running;
    ChildOutcome {
        index: child.index,
        goal: unit
            .spec
            .tasks
            .get(child.index as usize)
            .map(|t| t.goal.clone())
            .unwrap_or_default(),
        status: if started {
            ChildStatus::Unknown
        } else {
            ChildStatus::Cancelled
        },
        exit_code: None,
        signal: None,
        started_at: child.started_at,
        ended_at: now,
        api_calls: child.progress.api_calls,
        result: String::new(),
        stderr_tail: None,
        transcript_tail: None,
        transcript: child.transcript.clone().unwrap_or_default(),
        detail: if started {
            ExitDetail::Unknown {
                reason: reason.to_owned(),
            }
        } else {
            ExitDetail::Cancelled {
                reason: reason.to_owned(),
            }
        },
        model: None,
        usage: None,
    }
}

/// Interrupts units inside `w` (see `Ledger::request_interrupt`).
pub(crate) fn interrupt_in(
    w: &Writer<'_>,
    target: &InterruptTarget,
    reason: &str,
    now: Timestamp,
) -> Result<Interrupts> {
    let mut done = Interrupts::default();
    let units = match target {
        InterruptTarget::Delegation(id) => {
            let unit = w
                .delegation(id.as_str())?
                .ok_or_else(|| LedgerError::DelegationNotFound(id.clone()))?;
            vec![unit]
        }
        InterruptTarget::Session(session) => w
            .active_units()?
            .into_iter()
            .filter(|u| u.session.as_ref() == Some(session))
            .collect(),
        InterruptTarget::All => w.active_units()?,
    };
    if !units.is_empty() {
        w.bump_activity()?;
    }
    for mut unit in units {
        match unit.status {
            UnitStatus::Queued => {
                let id = unit.id.clone();
                force_finish(w, unit, Vec::new(), reason, now)?;
                done.cancelled.push(id);
            }
            UnitStatus::Running => {
                unit.interrupt.get_or_insert_with(|| reason.to_owned());
                w.put_delegation(&unit)?;
                done.flagged.push(unit.id);
            }
            _ => {}
        }
    }
    Ok(done)
}
