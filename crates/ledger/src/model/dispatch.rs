//! What a dispatch asks for: its children, role, delivery mode and channel.

use std::fmt;

use serde::{Deserialize, Serialize};

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

/// Where a unit's children work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Workspace {
    /// In the dispatch's working directory, as given.
    #[default]
    None,
    /// Each child in a fresh git worktree of the repository that holds the working directory,
    /// on its own branch `hermes/<delegation>-<task>`; what it leaves is committed there.
    Worktree,
}

impl Workspace {
    /// `none` or `worktree`.
    pub fn as_str(self) -> &'static str {
        match self {
            Workspace::None => "none",
            Workspace::Worktree => "worktree",
        }
    }

    /// The workspace named `name` (`none` or `worktree`).
    pub fn parse(name: &str) -> Option<Workspace> {
        match name {
            "none" => Some(Workspace::None),
            "worktree" => Some(Workspace::Worktree),
            _ => None,
        }
    }
}

/// How far a child's writes reach, enforced by the operating system.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum SandboxMode {
    /// Writes only to its own temporary directory.
    ReadOnly,
    /// Also under its working directory (or its worktree); `.git` stays read-only.
    WorkspaceWrite,
    /// Unconfined: whatever the user running hermes may do.
    #[default]
    Full,
}

impl SandboxMode {
    /// Every mode, narrowest first.
    pub const ALL: [SandboxMode; 3] = [
        SandboxMode::ReadOnly,
        SandboxMode::WorkspaceWrite,
        SandboxMode::Full,
    ];

    /// `read-only`, `workspace-write` or `full`.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::Full => "full",
        }
    }

    /// The mode named `name`.
    pub fn parse(name: &str) -> Option<SandboxMode> {
        SandboxMode::ALL.into_iter().find(|m| m.as_str() == name)
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a unit's children may do: how far their writes reach, and whether they reach the
/// network (for plain commands and for agent children apart: an agent needs its model's API).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Sandbox {
    /// How far writes reach.
    pub mode: SandboxMode,
    /// Whether a plain command child reaches the network.
    pub commands_network: bool,
    /// Whether an agent child reaches the network.
    pub agents_network: bool,
}

impl Sandbox {
    /// No confinement at all: what every unit before format 6 ran with.
    pub const FULL: Sandbox = Sandbox {
        mode: SandboxMode::Full,
        commands_network: true,
        agents_network: true,
    };

    /// Whether a child (an agent child if `agent`) reaches the network.
    pub fn network(self, agent: bool) -> bool {
        if agent {
            self.agents_network
        } else {
            self.commands_network
        }
    }

    /// Whether the operating system confines a child (an agent child if `agent`) at all.
    pub fn confines(self, agent: bool) -> bool {
        self.mode != SandboxMode::Full || !self.network(agent)
    }
}

impl Default for Sandbox {
    fn default() -> Sandbox {
        Sandbox::FULL
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
    /// The agent profile its command was built from (an agent's name), if any.
    /// Added in format 4.
    pub agent: Option<String>,
    /// The stream adapter that reads its stdout (`plain`, or an agent's name); `None`:
    /// recognised from its command. Added in format 4.
    pub adapter: Option<String>,
}

impl TaskSpec {
    /// A leaf child running `command` for `goal`, with no context, toolsets or model.
    ///
    /// Set anything else with struct-update syntax:
    ///
    /// ```
    /// use hermes_ledger::{Role, TaskSpec};
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
    /// The worker pool that runs it; `None`: the session's own host runs it. Added
    /// in format 3.
    pub pool: Option<String>,
    /// How deep in a chain of delegations its children are: 1 for a unit dispatched from
    /// outside any child, one more for each agent child in between (bounded by
    /// `delegation.max_depth`). Added in format 4; older units read as 1.
    pub depth: u32,
    /// Where its children work. Added in format 5; older units read as
    /// [`Workspace::None`].
    pub workspace: Workspace,
    /// What its children may do. Added in format 6; older units read as
    /// [`Sandbox::FULL`].
    pub sandbox: Sandbox,
}

impl DispatchSpec {
    /// A leaf unit of `tasks` for `goal`, delivered after the turn, with no context, toolsets,
    /// model, timeout, working directory or group.
    ///
    /// Set anything else with struct-update syntax:
    ///
    /// ```
    /// use hermes_ledger::{DeliveryMode, DispatchSpec, Role, TaskSpec};
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
            workspace: Workspace::None,
            sandbox: Sandbox::FULL,
        }
    }
}
