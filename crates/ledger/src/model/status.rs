//! How units and children end: statuses, progress tokens, stall and timeout details, and a
//! child's outcome as its event carries it.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::Timestamp;

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

    /// The unit status that follows from its children's final statuses (`completed` if
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
    /// The model an agent child said it runs (its stream's init event). Added in
    /// format 4.
    pub model: Option<String>,
    /// The tokens and cost an agent child reported (boxed: most children have none). Added in
    /// format 4.
    pub usage: Option<Box<Usage>>,
    /// What a child that worked in its own worktree changed (boxed: most children have none).
    /// Added in format 5.
    pub changes: Option<Box<Changes>>,
    /// The tool calls an agent child's own permission system refused, one line each
    /// (boxed: most children have none; [`ChildOutcome::denied`] reads them). Added in format 6.
    pub denials: Option<Box<Denials>>,
}

/// The tool calls an agent child's own permission system refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Denials {
    /// One line each: the tool and its main argument (`Bash: touch f`).
    pub calls: Vec<String>,
}

/// What a child left in its own worktree, committed on its branch by hermes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    /// Its branch (`hermes/<delegation>-<task>`); it exists only if `commits` is not empty.
    pub branch: String,
    /// The commit it started from.
    pub base: String,
    /// The branch's head (the base when it changed nothing).
    pub head: String,
    /// Its commits, oldest first, one line each (`<short hash> <subject>`).
    pub commits: Vec<String>,
    /// Files changed from the base to the head.
    pub files_changed: u64,
    /// Lines inserted.
    pub insertions: u64,
    /// Lines deleted.
    pub deletions: u64,
    /// The worktree's directory (removed once the result is settled).
    pub path: String,
    /// The repository the worktree belongs to (its top-level directory).
    pub repository: String,
    /// Why its changes could not be committed or measured, if they could not.
    pub error: Option<String>,
}

impl Changes {
    /// Whether it changed nothing (and so left no branch).
    pub fn is_empty(&self) -> bool {
        self.commits.is_empty()
    }
}

/// Token usage and cost, as an agent child's stream reported them.
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
    /// use hermes_ledger::{ChildOutcome, ChildStatus, ExitDetail, Timestamp};
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
            changes: None,
            denials: None,
        }
    }

    /// The tool calls its agent's permission system refused (none for most children).
    pub fn denied(&self) -> &[String] {
        self.denials.as_deref().map_or(&[], |d| &d.calls)
    }

    /// Seconds from start to end (zero if it never started).
    pub fn duration_seconds(&self) -> f64 {
        self.started_at
            .map(|s| self.ended_at.ms_since(s) as f64 / 1000.0)
            .unwrap_or(0.0)
    }
}
