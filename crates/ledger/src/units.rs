//! Units: dispatch under a capacity check (under an id the caller may draw first), the FIFO
//! queue, the activity counter hosts poll, and moving a unit between hosts.

use crate::error::{LedgerError, Result};
use crate::ledger::Ledger;

use crate::model::{
    Capacity, Channel, Child, ChildStatus, DelegationId, DispatchSpec, HostRecord, ProcessId,
    Progress, Session, SessionId, Timestamp, UnitRecord, UnitStatus, UnitTally,
};
use crate::rules::{self, Admit, Machines};
use crate::store::Writer;
use crate::store::{META_ACTIVITY, META_NEXT_QUEUE_SEQ};
use crate::txn::hosts::register_in;
use crate::txn::liveness::{Liveness, is_live};
use crate::txn::pool::check_pool_unit;
use crate::txn::sessions::ensure_active;

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
    pub delegation: UnitRecord,
    /// Its 1-based place in the queue when queued.
    pub queue_position: Option<u32>,
    /// The unit's id was recorded already, for this same dispatch (an earlier attempt whose
    /// outcome was unknown had landed): nothing was written now, and `delegation` is the unit
    /// as it stands.
    pub already_recorded: bool,
}

/// `existing` as the answer to dispatching `new` again under its id, or a refusal when the id
/// names another dispatch.
fn same_dispatch(existing: UnitRecord, new: &NewDelegation) -> Result<Admission> {
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
        check_new(&new)?;
        // Grouped: a host that dispatches while its children start and finish (an interactive
        // session, a worker's intake) shares their commit rather than making one of its own.
        self.write_grouped(move |ledger, w| {
            dispatch_in(ledger, w, &new, capacity, &Starting::default(), now)
        })
    }

    /// Records the background unit `new` of a session for that session's host, found in the
    /// same transaction: `None`, writing nothing, when the session is unknown, has no host or
    /// its host is not live (`liveness`, as [`Ledger::session_with_live_host`] judges it). What
    /// `delegate` does first: the usual dispatch, into a session whose host runs, needs no read
    /// before it. A session that ended is `SessionEnded`; `new.host` is ignored.
    pub fn dispatch_to_session_host(
        &self,
        new: NewDelegation,
        capacity: Capacity,
        liveness: &dyn Liveness,
        now: Timestamp,
    ) -> Result<Option<Admission>> {
        check_new(&new)?;
        let Some(session) = new.session.clone() else {
            return Err(LedgerError::Invalid(
                "a dispatch to a session's host needs a session".into(),
            ));
        };
        self.write_then(|w| {
            // What this admission reads, in one round trip where reads are round trips.
            w.admission_look(Some(&session), new.id.as_ref())?;
            let host = match w.session(&session)? {
                Some(s) if s.state == crate::model::SessionState::Ended => {
                    return Err(LedgerError::SessionEnded(session.clone()));
                }
                Some(s) => s.host,
                None => None,
            };
            let Some(host) = host else {
                return Ok((None, false));
            };
            let record = w.hosts()?.into_iter().find(|h| h.process == host);
            if !is_live(record, host, liveness, now) {
                return Ok((None, false));
            }
            let new = NewDelegation {
                host: Some(host),
                ..new.clone()
            };
            let (admission, wrote) =
                dispatch_in(self, w, &new, capacity, &Starting::default(), now)?;
            Ok((Some(admission), wrote))
        })
    }

    /// Registers `host` ([`Ledger::register_host`]) and records its first unit `new`
    /// ([`Ledger::dispatch`]) in one commit: what a one-shot run's host does, so that
    /// registering costs no durable commit of its own. Both or neither are written: a refused
    /// dispatch leaves no host record behind.
    ///
    /// An inline unit's first children (as many as `capacity.max_running`, its batch's
    /// parallelism) are recorded `running` on the host's machine, with no process yet: the host
    /// starts them as soon as this returns, and records each one's pid later (with its finish,
    /// for a short child). Should the host die first, recovery finds them running and kills
    /// whatever carries their marker (`Reaper::kill_child`), and they end `unknown`, never
    /// `cancelled`: they may have run.
    pub fn register_and_dispatch(
        &self,
        host: &HostRecord,
        new: NewDelegation,
        capacity: Capacity,
        now: Timestamp,
    ) -> Result<Admission> {
        check_new(&new)?;
        self.write_then(|w| {
            register_in(w, host)?;
            let starting = Starting {
                count: match new.channel {
                    Channel::Inline => capacity.max_running.max(1),
                    Channel::Background => 0,
                },
                machine: Some(host.locality.hostname.clone()).filter(|name| !name.is_empty()),
            };
            let (admission, _) = dispatch_in(self, w, &new, capacity, &starting, now)?;
            Ok((admission, true))
        })
    }

    /// The unit `new.id` names, if it is recorded already for this same dispatch (`None`: no
    /// id, or not recorded). An id recorded for another dispatch — another session, other
    /// tasks — is refused (`Invalid`). A read: `delegate --id` asks it before starting a host.
    pub fn recorded_dispatch(&self, new: &NewDelegation) -> Result<Option<Admission>> {
        let Some(id) = &new.id else {
            return Ok(None);
        };
        let existing = self.read_one(|r| r.delegation(id.as_str()))?;
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
    ) -> Result<Option<UnitRecord>> {
        // Pool units wait in queues of their own, for workers (`take_pool_unit`).
        let next = |active: &[UnitRecord], hosts: &[crate::model::HostRecord]| {
            rules::startable(active, &Machines::of(hosts), host, capacity).cloned()
        };
        // Queued units are active: one read of both tells whether one can start.
        let startable = self.read_one(|r| {
            let (hosts, active) = r.hosts_and_active_units()?;
            Ok(next(&active, &hosts).is_some())
        })?;
        if !startable {
            return Ok(None);
        }
        self.write_then(|w| {
            let (hosts, active) = w.hosts_and_active_units()?;
            let Some(mut unit) = next(&active, &hosts) else {
                return Ok((None, false));
            };
            unit.status = UnitStatus::Running;
            unit.started_at = Some(now);
            w.put_delegation(&unit)?;
            Ok((Some(unit), true))
        })
    }

    /// The activity counter: it changes whenever a host may have something new to do (a
    /// background dispatch, an interrupt, a session end). One cheap read to poll.
    pub fn activity(&self) -> Result<u64> {
        Ok(self.read_one(|r| r.meta(META_ACTIVITY))?.unwrap_or(0))
    }
}

/// What dispatch refuses before it opens a transaction.
fn check_new(new: &NewDelegation) -> Result<()> {
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
        check_pool_unit(pool, new.channel, new.session.as_ref())?;
    }
    Ok(())
}

/// The children a dispatch records as running: the first `count`, which the dispatching
/// process starts the moment the commit is durable, on `machine`.
#[derive(Debug, Default)]
struct Starting {
    count: u32,
    machine: Option<String>,
}

/// Records `new` inside `w` (see [`Ledger::dispatch`]); returns what was decided and whether
/// anything was written.
fn dispatch_in(
    ledger: &Ledger,
    w: &Writer<'_>,
    new: &NewDelegation,
    capacity: Capacity,
    starting: &Starting,
    now: Timestamp,
) -> Result<(Admission, bool)> {
    // A dispatch sent again under the id it was given: the first attempt landed.
    if let Some(id) = &new.id
        && let Some(existing) = w.delegation(id.as_str())?
    {
        return same_dispatch(existing, new).map(|admission| (admission, false));
    }
    let session = match &new.session {
        Some(id) => Some(ensure_active(w, id, now)?),
        None => None,
    };
    let host = host_of(w, new, session.as_ref())?;
    let id = match &new.id {
        Some(id) => id.clone(),
        None => draw_id(ledger, w)?,
    };
    let place = place(w, new, capacity)?;
    let transcript_dir = new
        .transcript_root
        .as_ref()
        .map(|root| format!("{root}/{id}"));
    let unit = UnitRecord {
        id: id.clone(),
        session: new.session.clone(),
        channel: new.channel,
        status: place.status,
        dispatched_at: now,
        started_at: (place.status == UnitStatus::Running).then_some(now),
        ended_at: None,
        host,
        queue_seq: place.queue_seq,
        interrupt: None,
        transcript_dir,
        spec: new.spec.clone(),
    };
    record_unit(w, &unit)?;
    w.put_children(&children_of(&unit, starting, now))?;
    Ok((
        Admission {
            delegation: unit,
            queue_position: place.queue_position,
            already_recorded: false,
        },
        true,
    ))
}

/// The host a new unit goes to: `new.host`, unless it is a pool unit (it has no host until a
/// worker takes it). A background unit goes to a host that is live for the ledger: registered,
/// or the session's recorded host. A host that retired (`retire_host`) gets nothing more
/// (`HostGone`), so no unit is ever left with a host that has decided to exit.
fn host_of(
    w: &Writer<'_>,
    new: &NewDelegation,
    session: Option<&Session>,
) -> Result<Option<ProcessId>> {
    let host = if new.spec.pool.is_some() {
        None
    } else {
        new.host
    };
    if let (Channel::Background, Some(host)) = (new.channel, host) {
        let hosts_session = session.is_some_and(|s| s.host == Some(host));
        if !hosts_session && w.host(host)?.is_none() {
            return Err(LedgerError::HostGone(host));
        }
    }
    Ok(host)
}

/// A delegation id no unit has yet.
fn draw_id(ledger: &Ledger, w: &Writer<'_>) -> Result<DelegationId> {
    loop {
        let id = ledger.next_delegation_id();
        if !w.delegation_exists(id.as_str())? {
            return Ok(id);
        }
    }
}

/// Where admission puts a new unit.
struct Place {
    status: UnitStatus,
    /// Its place in the FIFO order, when queued.
    queue_seq: Option<u64>,
    /// Its 1-based place in the queue, when queued.
    queue_position: Option<u32>,
}

/// Admits `new`: an inline unit runs at once; a background unit runs if a slot is free and
/// nothing waits before it, queues otherwise, and is refused past `max_queued` (`QueueFull`).
/// Session units queue per machine; each pool has a FIFO queue of its own (one table, told
/// apart by the unit's pool), and a pool unit always waits for a worker.
fn place(w: &Writer<'_>, new: &NewDelegation, capacity: Capacity) -> Result<Place> {
    let run = Place {
        status: UnitStatus::Running,
        queue_seq: None,
        queue_position: None,
    };
    if new.channel == Channel::Inline {
        return Ok(run);
    }
    let (hosts, active) = w.hosts_and_active_units()?;
    let machines = Machines::of(&hosts);
    let admit = match new.spec.pool.as_deref() {
        Some(pool) => rules::admit_to_pool(&active, pool, capacity),
        None => {
            let machine = machines.of_host(new.host);
            rules::admit(&active, &machines, machine, capacity)
        }
    };
    match admit {
        Admit::Run => Ok(run),
        Admit::Full => Err(LedgerError::QueueFull {
            max: capacity.max_queued,
        }),
        Admit::Queue { ahead } => {
            let seq = w.meta(META_NEXT_QUEUE_SEQ)?.unwrap_or(0);
            w.set_meta(META_NEXT_QUEUE_SEQ, seq + 1)?;
            Ok(Place {
                status: UnitStatus::Queued,
                queue_seq: Some(seq),
                queue_position: Some(ahead + 1),
            })
        }
    }
}

/// Writes a new unit, with its tally when it wants one, and wakes the hosts for a background
/// unit.
fn record_unit(w: &Writer<'_>, unit: &UnitRecord) -> Result<()> {
    w.put_delegation(unit)?;
    // A pool unit gets its tally when a worker takes it (see `children::check_owner`); a unit
    // of one task gets none (see `UnitTally`).
    if unit.pool().is_none() && UnitTally::wanted(unit) {
        w.put_tally(&unit.id, &UnitTally::for_unit(unit))?;
    }
    if unit.channel == Channel::Background {
        w.bump_activity()?;
    }
    Ok(())
}

/// The children of a new unit: the first `starting.count` running on `starting.machine`
/// (their dispatching process starts them the moment the commit is durable), the rest pending.
fn children_of(unit: &UnitRecord, starting: &Starting, now: Timestamp) -> Vec<Child> {
    (0..unit.task_count())
        .map(|index| {
            let starts = index < starting.count;
            Child {
                delegation_id: unit.id.clone(),
                index,
                status: if starts {
                    ChildStatus::Running
                } else {
                    ChildStatus::Pending
                },
                process: None,
                started_at: starts.then_some(now),
                ended_at: None,
                exit_code: None,
                signal: None,
                progress: Progress::default(),
                transcript: unit
                    .transcript_dir
                    .as_ref()
                    .map(|dir| format!("{dir}/task-{index}.log")),
                machine: starts.then(|| starting.machine.clone()).flatten(),
            }
        })
        .collect()
}
