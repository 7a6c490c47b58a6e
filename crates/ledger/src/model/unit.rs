//! Units (delegations) and their children as recorded.

use serde::{Deserialize, Serialize};

use super::{
    Channel, ChildStatus, DelegationId, DeliveryMode, DispatchSpec, ExitDetail, ProcessId,
    Progress, SessionId, Timestamp, UnitStatus,
};

/// A unit as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnitRecord {
    /// Its id.
    pub id: DelegationId,
    /// The session it belongs to (`None` for inline units).
    pub session: Option<SessionId>,
    /// Background or inline.
    pub channel: Channel,
    /// What was dispatched.
    pub spec: DispatchSpec,
    /// Its status.
    pub status: UnitStatus,
    /// When it was dispatched.
    pub dispatched_at: Timestamp,
    /// When it started running.
    pub started_at: Option<Timestamp>,
    /// When it ended.
    pub ended_at: Option<Timestamp>,
    /// The process that runs (or will run) it.
    pub host: Option<ProcessId>,
    /// Its place in the FIFO queue while queued.
    pub queue_seq: Option<u64>,
    /// An interrupt asked for by another process (the host acts on it), with its reason.
    pub interrupt: Option<String>,
    /// Directory of its transcripts.
    pub transcript_dir: Option<String>,
}

impl UnitRecord {
    /// How many children it has.
    pub fn task_count(&self) -> u32 {
        self.spec.tasks.len() as u32
    }

    /// The goal of its child `index` (empty when it has no such task).
    pub fn goal_of(&self, index: u32) -> &str {
        self.spec
            .tasks
            .get(index as usize)
            .map_or("", |t| t.goal.as_str())
    }

    /// The worker pool that runs it, if it is a pool unit.
    pub fn pool(&self) -> Option<&str> {
        self.spec.pool.as_deref()
    }
}

/// A child found stalling: SIGTERM went to its process group, SIGKILL follows at the end of
/// the grace period unless it exits first. Recorded the moment SIGTERM is sent, so
/// `delegation status` shows the stall fields during the grace period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stalling {
    /// The child's index in its unit.
    pub index: u32,
    /// The stall fields ([`ExitDetail::Stalled`]).
    pub detail: ExitDetail,
    /// When SIGTERM was sent.
    pub since: Timestamp,
}

/// One child as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Child {
    /// Its unit.
    pub delegation_id: DelegationId,
    /// Its index in the unit.
    pub index: u32,
    /// Its status.
    pub status: ChildStatus,
    /// Its process (the leader of its own process group), while it has one.
    pub process: Option<ProcessId>,
    /// When it started.
    pub started_at: Option<Timestamp>,
    /// When it ended.
    pub ended_at: Option<Timestamp>,
    /// Its exit code.
    pub exit_code: Option<i32>,
    /// The signal that ended it.
    pub signal: Option<i32>,
    /// Its latest persisted progress.
    pub progress: Progress,
    /// Path of its transcript.
    pub transcript: Option<String>,
    /// The host name of the machine that ran it (the host that started it), where its
    /// transcript is; `None` until it started, and for children recorded by formats 1 and 2.
    pub machine: Option<String>,
}

/// Limits on background work across every process of a home.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// Running background units at most (`max_concurrent_children`).
    pub max_running: u32,
    /// Queued units at most (`max_queued`).
    pub max_queued: u32,
}

/// What finishing a child needs to know about its unit, kept beside it while it is not
/// terminal: its children's statuses so far as counts, and what publishing an event needs.
/// Finishing a child reads this row and that child only, never the whole batch. A unit of one
/// task has none: its child's finish reads the unit and its one child, as many rows as the
/// tally's and the unit's would be, and dispatching and finishing write one row fewer each.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct UnitTally {
    /// How many children the unit has.
    pub(crate) task_count: u32,
    /// The unit's session.
    pub(crate) session: Option<SessionId>,
    /// The unit's delivery mode.
    pub(crate) delivery: DeliveryMode,
    /// The unit's host, kept in step with the unit's own (fencing reads it here).
    pub(crate) host: Option<ProcessId>,
    /// How many children finished with each status.
    pub(crate) finished: Vec<(ChildStatus, u32)>,
}

impl UnitTally {
    /// Whether `unit` keeps a tally (more than one task).
    pub(crate) fn wanted(unit: &UnitRecord) -> bool {
        unit.task_count() > 1
    }

    pub(crate) fn for_unit(unit: &UnitRecord) -> UnitTally {
        UnitTally {
            task_count: unit.task_count(),
            session: unit.session.clone(),
            delivery: unit.spec.delivery,
            host: unit.host,
            finished: Vec::new(),
        }
    }

    pub(crate) fn add(&mut self, status: ChildStatus) {
        match self.finished.iter_mut().find(|(s, _)| *s == status) {
            Some((_, n)) => *n += 1,
            None => self.finished.push((status, 1)),
        }
    }

    pub(crate) fn finished_count(&self) -> u64 {
        self.finished.iter().map(|(_, n)| u64::from(*n)).sum()
    }
}
