//! Read-only views for `delegation list/status` and `session list`: each reads what it shows
//! and a bounded page of the history, never the whole of it.

use crate::error::Result;
use crate::ledger::Ledger;
use crate::model::{
    Capacity, Child, DelegationId, ProcessId, SessionId, SessionState, Timestamp, UnitRecord,
    UnitStatus,
};
use crate::rules::{self, Machines};

/// Units by state, for `delegation list`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Listing {
    /// Running units, oldest first.
    pub running: Vec<UnitRecord>,
    /// Queued units in FIFO order.
    pub queued: Vec<UnitRecord>,
    /// The most recent terminal units, newest first.
    pub recent: Vec<UnitRecord>,
    /// How many terminal units there are in all (`recent` holds at most the limit asked for),
    /// counted up to [`COUNT_LIMIT`].
    pub recent_total: usize,
    /// Whether there are more than [`COUNT_LIMIT`] terminal units (then `recent_total` is
    /// that limit): counting further would read the whole history.
    pub recent_more: bool,
}

/// Terminal units [`Ledger::list`] counts at most.
pub const COUNT_LIMIT: usize = 10_000;

/// Where a page of `delegation list --since` starts: after a unit, or at a time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Since {
    /// The units dispatched after this one (by dispatch time, then id): the next page after a
    /// page that ended with it.
    Unit(DelegationId),
    /// The units dispatched at or after this time.
    Time(Timestamp),
}

/// The most units of the by-time index one step of [`Ledger::list_since`] reads.
const SINCE_STEP: usize = 1_000;

/// One session with its counts, for `session list`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSummary {
    /// The session.
    pub id: SessionId,
    /// Active or ended.
    pub state: SessionState,
    /// Its recorded host's pid.
    pub host_pid: Option<u32>,
    /// Running units.
    pub running: usize,
    /// Queued units.
    pub queued: usize,
    /// Pending or claimed events.
    pub pending: usize,
}

/// What a host's pass over the ledger reads, in one read ([`Ledger::host_pass`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostPass {
    /// Running units of the host that another process asked to interrupt, with the reason
    /// (what [`Ledger::interrupt_requests`] answers).
    pub interrupts: Vec<(DelegationId, String)>,
    /// Whether the oldest queued unit is the host's and a slot is free, so that
    /// [`Ledger::start_next_queued`] would start one.
    pub startable: bool,
    /// Whether any unit (of any host) was queued: while none is, a slot that frees starts
    /// nothing.
    pub queued: bool,
    /// The unfinished units placed on the host (what [`Ledger::units_of_host`] answers).
    pub placed: Vec<UnitRecord>,
}

impl Ledger {
    /// A host's pass in one read (one snapshot of the active units and the hosts): its
    /// interrupt requests, whether a queued unit of its is startable,
    /// and the units placed on it. The three separate reads cost three transactions a pass.
    pub fn host_pass(&self, host: ProcessId, capacity: Capacity) -> Result<HostPass> {
        self.read_one(|r| {
            let (hosts, active) = r.hosts_and_active_units()?;
            let queued = active.iter().any(|u| u.status == UnitStatus::Queued);
            let startable = queued
                && rules::startable(&active, &Machines::of(&hosts), host, capacity).is_some();
            let interrupts = active
                .iter()
                .filter(|u| u.host == Some(host) && u.status == UnitStatus::Running)
                .filter_map(|u| u.interrupt.clone().map(|reason| (u.id.clone(), reason)))
                .collect();
            let placed = active
                .into_iter()
                .filter(|u| u.host == Some(host))
                .collect();
            Ok(HostPass {
                interrupts,
                startable,
                queued,
                placed,
            })
        })
    }

    /// A unit.
    pub fn delegation(&self, id: &DelegationId) -> Result<Option<UnitRecord>> {
        self.read_one(|r| r.delegation(id.as_str()))
    }

    /// A unit's children, by index.
    pub fn children(&self, id: &DelegationId) -> Result<Vec<Child>> {
        self.read_one(|r| r.children(id))
    }

    /// What the ledger holds of a child's output, for a reader on a machine without its
    /// transcript: the tail its host stored while it ran, else the result (or tail) its event
    /// carries; and the host name of the machine that runs it, while its host is registered.
    pub fn stored_output(
        &self,
        id: &DelegationId,
        index: u32,
    ) -> Result<(Option<String>, Option<String>)> {
        self.read(|r| {
            // The machine recorded when it started; else its host's, while registered.
            let recorded = r.child(id, index)?.and_then(|c| c.machine);
            let machine = match (recorded, r.delegation(id.as_str())?.and_then(|u| u.host)) {
                (Some(machine), _) => Some(machine),
                (None, Some(host)) => r.host(host)?.map(|h| h.locality.hostname),
                (None, None) => None,
            };
            let mut text = r.child_tail(id, index)?;
            for key in [
                crate::model::EventKey::Task(index),
                crate::model::EventKey::Terminal,
            ] {
                if text.is_some() {
                    break;
                }
                let event = r.event(&crate::model::EventRef {
                    delegation_id: id.clone(),
                    key,
                })?;
                text = event.and_then(|e| {
                    e.payload
                        .outcomes()
                        .iter()
                        .find(|c| c.index == index)
                        .map(|c| c.result.clone())
                });
            }
            Ok((text, machine))
        })
    }

    /// The unfinished units placed on the host `process` (queued or running), in one read:
    /// what a host adopts, cancels on shutdown, or waits for before it may exit.
    pub fn units_of_host(&self, process: ProcessId) -> Result<Vec<UnitRecord>> {
        self.read_one(|r| {
            Ok(r.active_units()?
                .into_iter()
                .filter(|u| u.host == Some(process))
                .collect())
        })
    }

    /// Running, queued and `recent_limit` recent terminal units, of one session or all.
    pub fn list(&self, session: Option<&SessionId>, recent_limit: usize) -> Result<Listing> {
        self.read(|r| {
            let mine = |u: &UnitRecord| session.is_none_or(|s| u.session.as_ref() == Some(s));
            let mut listing = Listing::default();
            for unit in r.active_units()?.into_iter().filter(mine) {
                match unit.status {
                    UnitStatus::Queued => listing.queued.push(unit),
                    _ => listing.running.push(unit),
                }
            }
            listing
                .running
                .sort_by_key(|u| (u.started_at, u.dispatched_at));
            listing.queued.sort_by_key(|u| u.queue_seq);
            let extra = listing.running.len() + listing.queued.len();
            if recent_limit > 0 {
                listing.recent = r.recent_ended_units(session, recent_limit, extra)?;
            }
            let counted = r
                .unit_count(session, COUNT_LIMIT + extra + 1)?
                .saturating_sub(extra);
            listing.recent_total = counted.min(COUNT_LIMIT);
            listing.recent_more = counted > COUNT_LIMIT;
            Ok(listing)
        })
    }

    /// At most `limit` terminal units dispatched since `since`, of one session or all,
    /// oldest first: one page of the whole history, read in bounded steps of the by-time
    /// index, never all of it. `None`: `since` names a unit the ledger does not keep.
    pub fn list_since(
        &self,
        session: Option<&SessionId>,
        since: &Since,
        limit: usize,
    ) -> Result<Option<Vec<UnitRecord>>> {
        self.read(|r| {
            let mut position = match since {
                Since::Unit(id) => match r.delegation(id.as_str())? {
                    Some(unit) => (unit.dispatched_at.0, unit.id.to_string()),
                    None => return Ok(None),
                },
                // Ids are never empty: every unit of that time sorts after it.
                Since::Time(at) => (at.0, String::new()),
            };
            let mut out = Vec::new();
            // A page of the whole history is mostly what it reads (most units ended): the
            // first step reads as many as are wanted, and each further one twice as many.
            let mut step_size = limit.clamp(1, SINCE_STEP);
            while out.len() < limit {
                // Beyond any time, and within every backend's integers.
                let step =
                    r.units_before(Timestamp(i64::MAX as u64), Some(&position), step_size)?;
                let Some(last) = step.last().cloned() else {
                    break;
                };
                let ids: Vec<DelegationId> =
                    step.iter().filter_map(|(_, id)| id.parse().ok()).collect();
                let mut units = r.delegations_of(&ids)?;
                units.sort_by(|a, b| (a.dispatched_at, &a.id).cmp(&(b.dispatched_at, &b.id)));
                let wanted = limit - out.len();
                out.extend(
                    units
                        .into_iter()
                        .filter(|u| u.status.is_terminal())
                        .filter(|u| session.is_none_or(|s| u.session.as_ref() == Some(s)))
                        .take(wanted),
                );
                if step.len() < step_size {
                    break;
                }
                position = last;
                step_size = (step_size * 2).min(SINCE_STEP);
            }
            Ok(Some(out))
        })
    }

    /// Every session with its counts.
    pub fn sessions(&self) -> Result<Vec<SessionSummary>> {
        self.read(|r| {
            let active = r.active_units()?;
            let mut out = Vec::new();
            for session in r.sessions()? {
                let of = |status: UnitStatus| {
                    active
                        .iter()
                        .filter(|u| u.session.as_ref() == Some(&session.id) && u.status == status)
                        .count()
                };
                out.push(SessionSummary {
                    running: of(UnitStatus::Running),
                    queued: of(UnitStatus::Queued),
                    pending: r.open_events(Some(&session.id))?.len(),
                    host_pid: session.host.map(|h| h.pid),
                    state: session.state,
                    id: session.id,
                });
            }
            Ok(out)
        })
    }
}
