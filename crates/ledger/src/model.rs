//! The ledger's data types: what is stored, and what the other crates read.
//!
//! Everything here is plain data (serde-encoded with postcard behind a format version, see
//! `codec.rs`). Times are [`Timestamp`]s: milliseconds since the Unix epoch, always passed in by
//! the caller, never read from a clock here.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch (UTC).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The timestamp `ms` milliseconds later (saturating).
    pub fn plus_ms(self, ms: u64) -> Timestamp {
        Timestamp(self.0.saturating_add(ms))
    }

    /// The timestamp `ms` milliseconds earlier (saturating at the epoch).
    pub fn minus_ms(self, ms: u64) -> Timestamp {
        Timestamp(self.0.saturating_sub(ms))
    }

    /// Milliseconds from `earlier` to `self`, zero if `earlier` is later.
    pub fn ms_since(self, earlier: Timestamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// Whole milliseconds since the epoch.
    pub fn as_millis(self) -> u64 {
        self.0
    }
}

/// A parent conversation's id: `[A-Za-z0-9._:-]{1,128}`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SessionId(String);

/// Why a string is not a valid id.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// A session id outside `[A-Za-z0-9._:-]{1,128}`.
    #[error("invalid session id {0:?}: use 1 to 128 characters from A-Z a-z 0-9 . _ : -")]
    Session(String),
    /// A delegation id that is not `deleg_` and 12 lowercase hex digits.
    #[error("invalid delegation id {0:?}: expected deleg_ followed by 12 lowercase hex digits")]
    Delegation(String),
    /// An event key that is neither `task:N` nor `terminal`.
    #[error("invalid event key {0:?}: expected task:N or terminal")]
    EventKey(String),
    /// A claim token that is not 32 hex digits.
    #[error("invalid claim token {0:?}: expected 32 hex digits")]
    ClaimToken(String),
    /// A worker pool name outside `[A-Za-z0-9._:-]{1,128}`.
    #[error("invalid pool name {0:?}: use 1 to 128 characters from A-Z a-z 0-9 . _ : -")]
    Pool(String),
}

impl SessionId {
    /// Validates and wraps a session id.
    pub fn new(id: impl Into<String>) -> Result<SessionId, IdError> {
        let id = id.into();
        let valid = !id.is_empty()
            && id.len() <= 128
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
        if valid {
            Ok(SessionId(id))
        } else {
            Err(IdError::Session(id))
        }
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for SessionId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SessionId::new(s)
    }
}

/// A delegation's id: `deleg_` followed by 12 lowercase hex digits.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DelegationId(String);

impl DelegationId {
    /// The id for 48 random bits.
    pub fn from_bits(bits: u64) -> DelegationId {
        DelegationId(format!("deleg_{:012x}", bits & 0xffff_ffff_ffff))
    }

    /// Validates and wraps a delegation id.
    pub fn new(id: impl Into<String>) -> Result<DelegationId, IdError> {
        let id = id.into();
        let valid = id.len() == 18
            && id.starts_with("deleg_")
            && id[6..]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if valid {
            Ok(DelegationId(id))
        } else {
            Err(IdError::Delegation(id))
        }
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DelegationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for DelegationId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DelegationId::new(s)
    }
}

/// What an event is about: one child finished (`task:N`), or the unit ended without a row for
/// every child (`terminal`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EventKey {
    /// Child `N` finished.
    Task(u32),
    /// The unit ended without an event for every child.
    Terminal,
}

impl fmt::Display for EventKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventKey::Task(n) => write!(f, "task:{n}"),
            EventKey::Terminal => f.write_str("terminal"),
        }
    }
}

impl FromStr for EventKey {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "terminal" {
            return Ok(EventKey::Terminal);
        }
        s.strip_prefix("task:")
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse().ok())
            .filter(|n| *n != u32::MAX)
            .map(EventKey::Task)
            .ok_or_else(|| IdError::EventKey(s.to_owned()))
    }
}

/// The full address of one event.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EventRef {
    /// The delegation the event belongs to.
    pub delegation_id: DelegationId,
    /// Which event of that delegation.
    pub key: EventKey,
}

impl fmt::Display for EventRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.delegation_id, self.key)
    }
}

/// A claim's fencing token: 128 random bits, shown as 32 lowercase hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClaimToken(pub u128);

impl fmt::Display for ClaimToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl FromStr for ClaimToken {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(IdError::ClaimToken(s.to_owned()));
        }
        u128::from_str_radix(s, 16)
            .map(ClaimToken)
            .map_err(|_| IdError::ClaimToken(s.to_owned()))
    }
}

/// A process identity that survives pid reuse: the pid and the process's start time (clock ticks
/// since boot, as `/proc/<pid>/stat` reports it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProcessId {
    /// The operating system's process id.
    pub pid: u32,
    /// The process start time in clock ticks since boot.
    pub start_time: u64,
}

impl fmt::Display for ProcessId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.pid, self.start_time)
    }
}

/// Where a process lives. Two processes of the same locality see the same process table, so
/// one may judge the other by pid and start time; across localities (another pid namespace,
/// another boot, another machine) only a lease says whether a host is alive.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Locality {
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
    /// The pid namespace (`pid:[4026531836]`).
    pub pid_namespace: String,
    /// The host name.
    pub hostname: String,
}

/// What kind of process hosts units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HostKind {
    /// An interactive `hermes` session.
    Interactive,
    /// A headless `hermes host --session S`.
    Headless,
    /// A `hermes -z` or `hermes cron run` process running its own inline unit.
    Inline,
    /// A `hermes worker`: bound to no session, it runs the units of one pool (SPEC §12).
    Worker,
}

impl HostKind {
    /// `interactive`, `headless`, `inline` or `worker`.
    pub fn as_str(self) -> &'static str {
        match self {
            HostKind::Interactive => "interactive",
            HostKind::Headless => "headless",
            HostKind::Inline => "inline",
            HostKind::Worker => "worker",
        }
    }
}

/// What a worker host serves: its pool and how many of the pool's units it runs at once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerPool {
    /// The pool's name (any non-empty name: a pool exists when named).
    pub pool: String,
    /// Units of the pool it runs at once, at least one.
    pub capacity: u32,
}

/// A host's fencing epoch: random and fresh every time a process registers as a host. Every
/// write a host makes about a unit carries it; once the host was judged dead (its record gone)
/// or its units adopted, the writes of that epoch are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HostId(pub u128);

impl fmt::Display for HostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "host_{:032x}", self.0)
    }
}

/// A live (or once-live) host process and its lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    /// Who the host is.
    pub process: ProcessId,
    /// What kind of host.
    pub kind: HostKind,
    /// The session it hosts, if any (inline hosts have none).
    pub session: Option<SessionId>,
    /// When it registered.
    pub registered_at: Timestamp,
    /// Its last lease renewal.
    pub heartbeat_at: Timestamp,
    /// Its fencing epoch.
    pub host_id: HostId,
    /// Where it runs; only a process of the same locality judges it by pid.
    pub locality: Locality,
    /// When its lease runs out unless renewed: past it the host is dead wherever it runs.
    pub lease_expires_at: Timestamp,
    /// For a worker (`HostKind::Worker`), the pool it serves and its capacity. Added in
    /// format 3.
    pub worker: Option<WorkerPool>,
}

/// A host record as format 2 stored it (no worker pool).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HostV2 {
    pub process: ProcessId,
    pub kind: HostKind,
    pub session: Option<SessionId>,
    pub registered_at: Timestamp,
    pub heartbeat_at: Timestamp,
    pub host_id: HostId,
    pub locality: Locality,
    pub lease_expires_at: Timestamp,
}

impl From<HostV2> for Host {
    fn from(old: HostV2) -> Host {
        Host {
            process: old.process,
            kind: old.kind,
            session: old.session,
            registered_at: old.registered_at,
            heartbeat_at: old.heartbeat_at,
            host_id: old.host_id,
            locality: old.locality,
            lease_expires_at: old.lease_expires_at,
            worker: None,
        }
    }
}

/// A host record as format 1 stored it (no fencing epoch, no locality, no lease): read from
/// older files and judged by pid alone, as format 1 did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HostV1 {
    pub process: ProcessId,
    pub kind: HostKind,
    pub session: Option<SessionId>,
    pub registered_at: Timestamp,
    pub heartbeat_at: Timestamp,
}

impl From<HostV1> for Host {
    fn from(old: HostV1) -> Host {
        Host {
            process: old.process,
            kind: old.kind,
            session: old.session,
            registered_at: old.registered_at,
            heartbeat_at: old.heartbeat_at,
            host_id: HostId(0),
            locality: Locality::default(),
            lease_expires_at: Timestamp(u64::MAX),
            worker: None,
        }
    }
}

impl Host {
    /// Whether this host is dead, judged from `here` at `now`: its lease ran out, or — only if
    /// it runs in the same locality, where pids mean the same thing — its process (pid and start
    /// time) is gone. A record with no locality (format 1) is judged by pid alone.
    pub fn is_dead(
        &self,
        here: &Locality,
        now: Timestamp,
        alive: &dyn Fn(ProcessId) -> bool,
    ) -> bool {
        if now >= self.lease_expires_at {
            return true;
        }
        let judged_by_pid = self.locality == Locality::default() || self.locality == *here;
        judged_by_pid && !alive(self.process)
    }
}

/// A session's lifecycle state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionState {
    /// Accepting dispatches and deliveries.
    Active,
    /// Ended: dispatches refused, pending events dropped.
    Ended,
}

impl SessionState {
    /// `active` or `ended`.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Active => "active",
            SessionState::Ended => "ended",
        }
    }
}

/// A parent conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// Its id.
    pub id: SessionId,
    /// Active or ended.
    pub state: SessionState,
    /// When the ledger first saw it.
    pub created_at: Timestamp,
    /// When it ended.
    pub ended_at: Option<Timestamp>,
    /// The process hosting its children, if one is registered.
    pub host: Option<ProcessId>,
}

/// When a unit's results may be offered to its session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeliveryMode {
    /// At the next turn boundary.
    #[default]
    AfterTurn,
    /// Also at tool boundaries inside a turn.
    Inject,
}

impl DeliveryMode {
    /// `after_turn` or `inject`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryMode::AfterTurn => "after_turn",
            DeliveryMode::Inject => "inject",
        }
    }
}

/// Where in the parent's conversation results are offered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Boundary {
    /// Between two turns of the parent: every unit may be offered.
    Turn,
    /// After a complete tool call, inside a turn: only `inject` units.
    Tool,
}

impl Boundary {
    /// `turn` or `tool`.
    pub fn as_str(self) -> &'static str {
        match self {
            Boundary::Turn => "turn",
            Boundary::Tool => "tool",
        }
    }

    /// Whether events of a unit delivered in `mode` may be offered at this boundary.
    pub fn offers(self, mode: DeliveryMode) -> bool {
        match self {
            Boundary::Turn => true,
            Boundary::Tool => mode == DeliveryMode::Inject,
        }
    }
}

impl fmt::Display for Boundary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which channel a unit was dispatched on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Channel {
    /// Background dispatch into a session; results are delivered at boundaries.
    Background,
    /// Inline run (`-z`, cron): the dispatching process runs it and settles its events itself.
    Inline,
}

/// The role a child plays for its parent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// Does the work itself.
    #[default]
    Leaf,
    /// May delegate further.
    Orchestrator,
}

impl Role {
    /// `leaf` or `orchestrator`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Leaf => "leaf",
            Role::Orchestrator => "orchestrator",
        }
    }
}

/// One child as dispatched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// What the child is for.
    pub goal: String,
    /// The argv, exactly as given.
    pub command: Vec<String>,
    /// Extra context the parent provided.
    pub context: Option<String>,
    /// Toolsets the child may use.
    pub toolsets: Vec<String>,
    /// Its role.
    pub role: Role,
    /// The model it runs, if known.
    pub model: Option<String>,
    /// The agent profile its command was built from (`claude`, `codex`, …; SPEC §14), if any.
    /// Added in format 4.
    pub agent: Option<String>,
    /// The stream adapter that reads its stdout (`plain`, `claude`, `codex`, `gemini`); `None`:
    /// recognised from its command. Added in format 4.
    pub adapter: Option<String>,
}

impl TaskSpec {
    /// A leaf child running `command` for `goal`, with no context, toolsets or model.
    ///
    /// Set anything else with struct-update syntax:
    ///
    /// ```
    /// use ledger::{Role, TaskSpec};
    ///
    /// let task = TaskSpec::new("count lines", vec!["wc".into(), "-l".into()]);
    /// assert_eq!(task.goal, "count lines");
    /// assert_eq!(task.role, Role::Leaf);
    /// assert!(task.context.is_none() && task.toolsets.is_empty() && task.model.is_none());
    ///
    /// let orchestrator = TaskSpec {
    ///     role: Role::Orchestrator,
    ///     ..TaskSpec::new("plan", vec!["planner".into()])
    /// };
    /// assert_eq!(orchestrator.role, Role::Orchestrator);
    /// ```
    pub fn new(goal: impl Into<String>, command: Vec<String>) -> TaskSpec {
        TaskSpec {
            goal: goal.into(),
            command,
            context: None,
            toolsets: Vec::new(),
            role: Role::Leaf,
            model: None,
            agent: None,
            adapter: None,
        }
    }
}

/// Everything known about a unit at dispatch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchSpec {
    /// The unit's goal (for a batch, the parent's summary; for one child, the child's goal).
    pub goal: String,
    /// Context for the whole unit.
    pub context: Option<String>,
    /// Toolsets for the whole unit.
    pub toolsets: Vec<String>,
    /// Role of the unit.
    pub role: Role,
    /// Model of the unit.
    pub model: Option<String>,
    /// When its results may be offered.
    pub delivery: DeliveryMode,
    /// Per-child wall-clock timeout in milliseconds (`None` = off).
    pub timeout_ms: Option<u64>,
    /// Working directory for the children (`None` = inherited).
    pub cwd: Option<String>,
    /// A free-form group name.
    pub group: Option<String>,
    /// The children.
    pub tasks: Vec<TaskSpec>,
    /// The worker pool that runs it (SPEC §12); `None`: the session's own host runs it. Added
    /// in format 3.
    pub pool: Option<String>,
    /// How deep in a chain of delegations its children are: 1 for a unit dispatched from
    /// outside any child, one more for each agent child in between (SPEC §14,
    /// `delegation.max_depth`). Added in format 4; older units read as 1.
    pub depth: u32,
}

/// A dispatch as formats 1 and 2 stored it (no pool).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DispatchSpecV2 {
    pub goal: String,
    pub context: Option<String>,
    pub toolsets: Vec<String>,
    pub role: Role,
    pub model: Option<String>,
    pub delivery: DeliveryMode,
    pub timeout_ms: Option<u64>,
    pub cwd: Option<String>,
    pub group: Option<String>,
    pub tasks: Vec<crate::model_v3::TaskSpecV3>,
}

impl From<DispatchSpecV2> for DispatchSpec {
    fn from(old: DispatchSpecV2) -> DispatchSpec {
        DispatchSpec {
            goal: old.goal,
            context: old.context,
            toolsets: old.toolsets,
            role: old.role,
            model: old.model,
            delivery: old.delivery,
            timeout_ms: old.timeout_ms,
            cwd: old.cwd,
            group: old.group,
            tasks: old.tasks.into_iter().map(TaskSpec::from).collect(),
            pool: None,
            depth: 1,
        }
    }
}

impl DispatchSpec {
    /// A leaf unit of `tasks` for `goal`, delivered after the turn, with no context, toolsets,
    /// model, timeout, working directory or group.
    ///
    /// Set anything else with struct-update syntax:
    ///
    /// ```
    /// use ledger::{DeliveryMode, DispatchSpec, Role, TaskSpec};
    ///
    /// let spec = DispatchSpec::new("tidy up", vec![TaskSpec::new("lint", vec!["true".into()])]);
    /// assert_eq!(spec.goal, "tidy up");
    /// assert_eq!(spec.tasks.len(), 1);
    /// assert_eq!(spec.role, Role::Leaf);
    /// assert_eq!(spec.delivery, DeliveryMode::AfterTurn);
    /// assert!(spec.context.is_none() && spec.toolsets.is_empty() && spec.model.is_none());
    /// assert!(spec.timeout_ms.is_none() && spec.cwd.is_none() && spec.group.is_none());
    ///
    /// let inject = DispatchSpec {
    ///     delivery: DeliveryMode::Inject,
    ///     timeout_ms: Some(30_000),
    ///     ..DispatchSpec::new("watch", Vec::new())
    /// };
    /// assert_eq!(inject.delivery, DeliveryMode::Inject);
    /// ```
    pub fn new(goal: impl Into<String>, tasks: Vec<TaskSpec>) -> DispatchSpec {
        DispatchSpec {
            goal: goal.into(),
            context: None,
            toolsets: Vec::new(),
            role: Role::Leaf,
            model: None,
            delivery: DeliveryMode::AfterTurn,
            timeout_ms: None,
            cwd: None,
            group: None,
            tasks,
            pool: None,
            depth: 1,
        }
    }
}

/// A unit's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnitStatus {
    /// Waiting for a capacity slot.
    Queued,
    /// Its children are running.
    Running,
    /// Every child completed.
    Completed,
    /// No child completed.
    Failed,
    /// Some children completed.
    Partial,
    /// Interrupted while running.
    Interrupted,
    /// A child stalled.
    Stalled,
    /// A child timed out.
    Timeout,
    /// Interrupted while queued.
    Cancelled,
    /// Its owner died.
    Unknown,
}

impl UnitStatus {
    /// Whether the unit has ended.
    pub fn is_terminal(self) -> bool {
        !matches!(self, UnitStatus::Queued | UnitStatus::Running)
    }

    /// The lowercase name used in JSON and text.
    pub fn as_str(self) -> &'static str {
        match self {
            UnitStatus::Queued => "queued",
            UnitStatus::Running => "running",
            UnitStatus::Completed => "completed",
            UnitStatus::Failed => "failed",
            UnitStatus::Partial => "partial",
            UnitStatus::Interrupted => "interrupted",
            UnitStatus::Stalled => "stalled",
            UnitStatus::Timeout => "timeout",
            UnitStatus::Cancelled => "cancelled",
            UnitStatus::Unknown => "unknown",
        }
    }

    /// The unit status that follows from its children's final statuses (SPEC §5: `completed` if
    /// every child completed, `failed` if none did, `partial` otherwise), unless something
    /// stronger happened: a unit whose children were interrupted, stalled or timed out, or whose
    /// owner died, says so.
    pub fn from_children(children: &[ChildStatus]) -> UnitStatus {
        let mut counts: Vec<(ChildStatus, u32)> = Vec::new();
        for status in children {
            match counts.iter_mut().find(|(s, _)| s == status) {
                Some((_, n)) => *n += 1,
                None => counts.push((*status, 1)),
            }
        }
        UnitStatus::from_counts(&counts)
    }

    /// [`UnitStatus::from_children`] from how many children ended with each status.
    pub fn from_counts(counts: &[(ChildStatus, u32)]) -> UnitStatus {
        let count = |status: ChildStatus| -> u64 {
            counts
                .iter()
                .filter(|(s, _)| *s == status)
                .map(|(_, n)| u64::from(*n))
                .sum()
        };
        let total: u64 = counts.iter().map(|(_, n)| u64::from(*n)).sum();
        let completed = count(ChildStatus::Completed);
        let any = |s: ChildStatus| count(s) > 0;
        if total > 0 && completed == total {
            UnitStatus::Completed
        } else if any(ChildStatus::Unknown) {
            UnitStatus::Unknown
        } else if any(ChildStatus::Cancelled) && completed == 0 {
            UnitStatus::Cancelled
        } else if any(ChildStatus::Interrupted) {
            UnitStatus::Interrupted
        } else if any(ChildStatus::Stalled) && completed == 0 {
            UnitStatus::Stalled
        } else if any(ChildStatus::Timeout) && completed == 0 {
            UnitStatus::Timeout
        } else if completed == 0 {
            UnitStatus::Failed
        } else {
            UnitStatus::Partial
        }
    }
}

impl fmt::Display for UnitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A child's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ChildStatus {
    /// Not started yet (its unit is queued, or waiting for batch parallelism).
    Pending,
    /// Running.
    Running,
    /// Exited 0.
    Completed,
    /// Exited non-zero or was killed by a signal it was not sent by us.
    Failed,
    /// Could not be started.
    Error,
    /// Stopped for making no progress.
    Stalled,
    /// Stopped at its timeout.
    Timeout,
    /// Interrupted by a stop, a session end or a host shutdown.
    Interrupted,
    /// Never started: its unit was cancelled while queued.
    Cancelled,
    /// Its host died; what happened is not known.
    Unknown,
}

impl ChildStatus {
    /// Whether the child has ended.
    pub fn is_terminal(self) -> bool {
        !matches!(self, ChildStatus::Pending | ChildStatus::Running)
    }

    /// The lowercase name used in JSON and text.
    pub fn as_str(self) -> &'static str {
        match self {
            ChildStatus::Pending => "pending",
            ChildStatus::Running => "running",
            ChildStatus::Completed => "completed",
            ChildStatus::Failed => "failed",
            ChildStatus::Error => "error",
            ChildStatus::Stalled => "stalled",
            ChildStatus::Timeout => "timeout",
            ChildStatus::Interrupted => "interrupted",
            ChildStatus::Cancelled => "cancelled",
            ChildStatus::Unknown => "unknown",
        }
    }
}

impl fmt::Display for ChildStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A child's progress token, plus when it last changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// API calls the child reported.
    pub api_calls: u64,
    /// The tool it is inside, if any.
    pub current_tool: Option<String>,
    /// Bytes written to stdout and stderr.
    pub output_bytes: u64,
    /// Progress messages received (any line on the progress pipe, malformed ones included).
    pub progress_seq: u64,
    /// When the token last changed.
    pub last_activity_at: Option<Timestamp>,
}

/// Whether a stall happened in a quiet phase or inside a tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StallPhase {
    /// No tool was running.
    Idle,
    /// A tool was running (`current_tool` set).
    InTool,
}

impl StallPhase {
    /// `idle` or `in_tool`.
    pub fn as_str(self) -> &'static str {
        match self {
            StallPhase::Idle => "idle",
            StallPhase::InTool => "in_tool",
        }
    }
}

/// Whether a timeout hit before or after the child's first progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimeoutPhase {
    /// The child had shown no progress.
    BeforeFirstProgress,
    /// The child had shown progress.
    AfterProgress,
}

impl TimeoutPhase {
    /// `before_first_progress` or `after_progress`.
    pub fn as_str(self) -> &'static str {
        match self {
            TimeoutPhase::BeforeFirstProgress => "before_first_progress",
            TimeoutPhase::AfterProgress => "after_progress",
        }
    }
}

/// What is known about how a child ended, beyond its status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ExitDetail {
    /// Nothing more to say (completed or failed by its own exit).
    None,
    /// Could not be started; the OS reason.
    SpawnError {
        /// The operating system's message.
        reason: String,
    },
    /// Stopped for making no progress.
    Stalled {
        /// How long it had been quiet when it was stopped.
        stalled_after_quiet_seconds: f64,
        /// The threshold that applied.
        stall_threshold_seconds: f64,
        /// Idle or in a tool.
        stall_phase: StallPhase,
        /// The grace period between SIGTERM and SIGKILL.
        stall_grace_seconds: f64,
    },
    /// Stopped at its timeout.
    Timeout {
        /// The configured timeout.
        timeout_seconds: f64,
        /// How long it had run.
        timed_out_after_seconds: f64,
        /// Before or after its first progress.
        timeout_phase: TimeoutPhase,
    },
    /// Interrupted on purpose.
    Interrupted {
        /// Why (`session_end`, `user_stop`, `host_shutdown`, …).
        reason: String,
    },
    /// Cancelled before it started.
    Cancelled {
        /// Why.
        reason: String,
    },
    /// Its host died; the end of its transcript is all that is known.
    Unknown {
        /// Why the outcome is unknown (e.g. `owner_died`).
        reason: String,
    },
}

/// How one child ended: the content of a `task:N` event, and of each missing child in a
/// `terminal` event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChildOutcome {
    /// The child's index in its unit.
    pub index: u32,
    /// Its goal.
    pub goal: String,
    /// Its final status.
    pub status: ChildStatus,
    /// Its exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if any.
    pub signal: Option<i32>,
    /// When it started, if it did.
    pub started_at: Option<Timestamp>,
    /// When it ended.
    pub ended_at: Timestamp,
    /// API calls it reported.
    pub api_calls: u64,
    /// Its result: the `{"result"}` message, else its stdout, bounded (head and tail).
    pub result: String,
    /// The last 2 KiB of stderr, on failure.
    pub stderr_tail: Option<String>,
    /// The end of its transcript (last 20 lines, at most 2,000 chars), for unknown/stalled bodies.
    pub transcript_tail: Option<String>,
    /// Path of its live transcript.
    pub transcript: String,
    /// Status-specific detail.
    pub detail: ExitDetail,
    /// The model an agent child said it runs (its stream's init event; SPEC §14). Added in
    /// format 4.
    pub model: Option<String>,
    /// The tokens and cost an agent child reported (boxed: most children have none). Added in
    /// format 4.
    pub usage: Option<Box<Usage>>,
}

/// Token usage and cost, as an agent child's stream reported them (SPEC §14).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens (cached ones included where the agent counts them apart).
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens read from a prompt cache.
    pub cached_input_tokens: u64,
    /// Cost in US dollars, if the agent reports one.
    pub cost_usd: Option<f64>,
}

impl ChildOutcome {
    /// Child `index` with `goal` that ended with `status` at `ended_at`, and nothing else known:
    /// no exit code, signal or start time, no API calls, an empty result and transcript path, no
    /// stderr or transcript tail, and [`ExitDetail::None`].
    ///
    /// Set anything else with struct-update syntax:
    ///
    /// ```
    /// use ledger::{ChildOutcome, ChildStatus, ExitDetail, Timestamp};
    ///
    /// let bare = ChildOutcome::new(2, "build", ChildStatus::Cancelled, Timestamp(5_000));
    /// assert_eq!((bare.index, bare.goal.as_str()), (2, "build"));
    /// assert_eq!(bare.status, ChildStatus::Cancelled);
    /// assert_eq!(bare.ended_at, Timestamp(5_000));
    /// assert!(bare.exit_code.is_none() && bare.signal.is_none() && bare.started_at.is_none());
    /// assert_eq!(bare.api_calls, 0);
    /// assert!(bare.result.is_empty() && bare.transcript.is_empty());
    /// assert!(bare.stderr_tail.is_none() && bare.transcript_tail.is_none());
    /// assert_eq!(bare.detail, ExitDetail::None);
    ///
    /// let done = ChildOutcome {
    ///     exit_code: Some(0),
    ///     started_at: Some(Timestamp(1_000)),
    ///     result: "ok".into(),
    ///     ..ChildOutcome::new(0, "build", ChildStatus::Completed, Timestamp(5_000))
    /// };
    /// assert_eq!(done.duration_seconds(), 4.0);
    /// ```
    pub fn new(
        index: u32,
        goal: impl Into<String>,
        status: ChildStatus,
        ended_at: Timestamp,
    ) -> ChildOutcome {
        ChildOutcome {
            index,
            goal: goal.into(),
            status,
            exit_code: None,
            signal: None,
            started_at: None,
            ended_at,
            api_calls: 0,
            result: String::new(),
            stderr_tail: None,
            transcript_tail: None,
            transcript: String::new(),
            detail: ExitDetail::None,
            model: None,
            usage: None,
        }
    }

    /// Seconds from start to end (zero if it never started).
    pub fn duration_seconds(&self) -> f64 {
        self.started_at
            .map(|s| self.ended_at.ms_since(s) as f64 / 1000.0)
            .unwrap_or(0.0)
    }
}

/// What an event carries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum EventPayload {
    /// One child finished.
    Task(ChildOutcome),
    /// The unit ended without an event for every child; these are the missing children.
    Terminal {
        /// The unit's final status.
        unit_status: UnitStatus,
        /// Why the unit ended this way (`owner_died`, `session_end`, …).
        reason: String,
        /// The children that had no event of their own.
        children: Vec<ChildOutcome>,
    },
}

impl EventPayload {
    /// The child outcomes this event carries.
    pub fn outcomes(&self) -> &[ChildOutcome] {
        match self {
            EventPayload::Task(outcome) => std::slice::from_ref(outcome),
            EventPayload::Terminal { children, .. } => children,
        }
    }
}

/// An event's delivery state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventState {
    /// Waiting for a consumer.
    Pending,
    /// Leased to a consumer (possibly with an expired lease).
    Claimed,
    /// The consumer has it. Terminal.
    Delivered,
    /// Given up, with a reason. Terminal; the content stays readable.
    Dropped,
}

impl EventState {
    /// Whether no further transition is possible.
    pub fn is_terminal(self) -> bool {
        matches!(self, EventState::Delivered | EventState::Dropped)
    }

    /// The lowercase name used in JSON and text.
    pub fn as_str(self) -> &'static str {
        match self {
            EventState::Pending => "pending",
            EventState::Claimed => "claimed",
            EventState::Delivered => "delivered",
            EventState::Dropped => "dropped",
        }
    }
}

/// Why an event was dropped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DropReason {
    /// Its session ended before it was delivered.
    SessionEnded,
    /// It waited longer than `replay_max_age_hours`.
    ReplayExpired,
    /// It was claimed and released `max_attempts` times.
    AttemptsExhausted,
    /// Nobody can ever receive it.
    Orphaned,
    /// Anything else, as given by the caller.
    Other(String),
}

impl DropReason {
    /// The snake_case name used in JSON and text.
    pub fn as_str(&self) -> &str {
        match self {
            DropReason::SessionEnded => "session_ended",
            DropReason::ReplayExpired => "replay_expired",
            DropReason::AttemptsExhausted => "attempts_exhausted",
            DropReason::Orphaned => "orphaned",
            DropReason::Other(reason) => reason,
        }
    }

    /// Parses a reason, mapping the well-known names to their variants.
    pub fn parse(reason: &str) -> DropReason {
        match reason {
            "session_ended" => DropReason::SessionEnded,
            "replay_expired" => DropReason::ReplayExpired,
            "attempts_exhausted" => DropReason::AttemptsExhausted,
            "orphaned" => DropReason::Orphaned,
            other => DropReason::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The current lease on an event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The claim's token.
    pub token: ClaimToken,
    /// Who holds it.
    pub consumer: String,
    /// When it was taken.
    pub claimed_at: Timestamp,
    /// When it runs out.
    pub expires_at: Timestamp,
}

/// Something to deliver, with its delivery state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Which delegation.
    pub delegation_id: DelegationId,
    /// Which event of it.
    pub key: EventKey,
    /// The session it belongs to (`None` for inline units, which no session may receive).
    pub session: Option<SessionId>,
    /// Whether it may be offered at tool boundaries.
    pub delivery: DeliveryMode,
    /// What it says.
    pub payload: EventPayload,
    /// Its delivery state.
    pub state: EventState,
    /// Claims taken so far (minus deferrals).
    pub attempts: u32,
    /// The latest lease while claimed.
    pub lease: Option<Lease>,
    /// When it was published.
    pub published_at: Timestamp,
    /// When it was delivered.
    pub delivered_at: Option<Timestamp>,
    /// When it was dropped.
    pub dropped_at: Option<Timestamp>,
    /// Why it was dropped.
    pub drop_reason: Option<DropReason>,
}

impl Event {
    /// Its address.
    pub fn event_ref(&self) -> EventRef {
        EventRef {
            delegation_id: self.delegation_id.clone(),
            key: self.key,
        }
    }

    /// Whether a consumer could claim it at `now`: pending, or claimed with an expired lease.
    pub fn is_deliverable(&self, now: Timestamp) -> bool {
        match self.state {
            EventState::Pending => true,
            EventState::Claimed => self.lease.as_ref().is_none_or(|l| l.expires_at <= now),
            EventState::Delivered | EventState::Dropped => false,
        }
    }
}

/// A unit as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Delegation {
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

impl Delegation {
    /// How many children it has.
    pub fn task_count(&self) -> u32 {
        self.spec.tasks.len() as u32
    }

    /// The worker pool that runs it, if it is a pool unit.
    pub fn pool(&self) -> Option<&str> {
        self.spec.pool.as_deref()
    }
}

/// A unit as formats 1 and 2 stored it (its dispatch had no pool).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct DelegationV2 {
    pub id: DelegationId,
    pub session: Option<SessionId>,
    pub channel: Channel,
    pub spec: DispatchSpecV2,
    pub status: UnitStatus,
    pub dispatched_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub ended_at: Option<Timestamp>,
    pub host: Option<ProcessId>,
    pub queue_seq: Option<u64>,
    pub interrupt: Option<String>,
    pub transcript_dir: Option<String>,
}

impl From<DelegationV2> for Delegation {
    fn from(old: DelegationV2) -> Delegation {
        Delegation {
            id: old.id,
            session: old.session,
            channel: old.channel,
            spec: old.spec.into(),
            status: old.status,
            dispatched_at: old.dispatched_at,
            started_at: old.started_at,
            ended_at: old.ended_at,
            host: old.host,
            queue_seq: old.queue_seq,
            interrupt: old.interrupt,
            transcript_dir: old.transcript_dir,
        }
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

/// A child as formats 1 and 2 stored it (no machine).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct ChildV2 {
    pub delegation_id: DelegationId,
    pub index: u32,
    pub status: ChildStatus,
    pub process: Option<ProcessId>,
    pub started_at: Option<Timestamp>,
    pub ended_at: Option<Timestamp>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub progress: Progress,
    pub transcript: Option<String>,
}

impl From<ChildV2> for Child {
    fn from(old: ChildV2) -> Child {
        Child {
            delegation_id: old.delegation_id,
            index: old.index,
            status: old.status,
            process: old.process,
            started_at: old.started_at,
            ended_at: old.ended_at,
            exit_code: old.exit_code,
            signal: old.signal,
            progress: old.progress,
            transcript: old.transcript,
            machine: None,
        }
    }
}
