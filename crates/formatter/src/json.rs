//! The same envelopes as JSON, for `--json`. Field names are stable: fields may be
//! added, never renamed. Times are RFC 3339 UTC.

use hermes_ledger::{ChildOutcome, ClaimToken, DelegationId, EventKey, ExitDetail, Timestamp};
use serde::{Deserialize, Serialize};

use crate::boundary::Boundary;
use crate::envelope::{Envelope, render_envelope};
use crate::time::{RenderContext, rfc3339};

/// One envelope as `hermes drain --json` prints it:
/// `{"claim","delegation_id","event_keys","attempts","text"}`.
///
/// [`envelope_json`] fills everything from event data except `claim`, which the caller sets with
/// [`EnvelopeJson::with_claim`] once it holds one (and leaves `null` otherwise). `attempts` is the
/// count at rendering time; a caller that claims after rendering may set it to what the claim
/// returned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvelopeJson {
    /// The claim token, 32 hex digits, or `null`.
    pub claim: Option<String>,
    /// The delegation.
    pub delegation_id: String,
    /// The keys of the events in the envelope (`task:N`, `terminal`).
    pub event_keys: Vec<String>,
    /// The most claims any of its events has seen.
    pub attempts: u32,
    /// The envelope rendered as text, exactly as [`render_envelope`] returns it.
    pub text: String,
}

impl EnvelopeJson {
    /// The same envelope, held under `token`.
    pub fn with_claim(self, token: ClaimToken) -> EnvelopeJson {
        EnvelopeJson {
            claim: Some(token.to_string()),
            ..self
        }
    }
}

/// `envelope` as a drain JSON entry, with no claim yet.
pub fn envelope_json(envelope: &Envelope<'_>, ctx: &RenderContext) -> EnvelopeJson {
    EnvelopeJson {
        claim: None,
        delegation_id: envelope.delegation.id.to_string(),
        event_keys: envelope.event_keys(),
        attempts: envelope.attempts(),
        text: render_envelope(envelope, ctx),
    }
}

/// An envelope the router could not claim yet, and when it will try again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeferredJson {
    /// The delegation.
    pub delegation_id: String,
    /// The keys it will try to claim.
    pub event_keys: Vec<String>,
    /// When, RFC 3339 UTC.
    pub retry_at: String,
}

impl DeferredJson {
    /// The deferred envelope of `keys` of `delegation_id`, retried at `retry_at`.
    pub fn new(delegation_id: &DelegationId, keys: &[EventKey], retry_at: Timestamp) -> Self {
        DeferredJson {
            delegation_id: delegation_id.to_string(),
            event_keys: keys.iter().map(EventKey::to_string).collect(),
            retry_at: rfc3339(retry_at),
        }
    }
}

/// Everything `hermes drain --json` prints:
/// `{"session","boundary","envelopes":[…],"deferred":[…]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainJson {
    /// The session drained.
    pub session: String,
    /// `turn` or `tool`.
    pub boundary: Boundary,
    /// What was delivered (or is held, with `--hold`).
    pub envelopes: Vec<EnvelopeJson>,
    /// What could not be claimed yet.
    pub deferred: Vec<DeferredJson>,
    /// The line the text output opens with at a tool boundary (`TOOL_CARRIER`), when something
    /// is delivered there: a consumer showing the envelopes puts it first, as the text does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carrier: Option<String>,
}

/// How a child ended beyond its status, tagged by `kind`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DetailJson {
    /// Could not be started.
    SpawnError {
        /// The operating system's message.
        reason: String,
    },
    /// Stopped for making no progress.
    Stalled {
        /// How long it had been quiet.
        stalled_after_quiet_seconds: f64,
        /// The threshold that applied.
        stall_threshold_seconds: f64,
        /// `idle` or `in_tool`.
        stall_phase: String,
        /// The grace period between SIGTERM and SIGKILL.
        stall_grace_seconds: f64,
    },
    /// Stopped at its timeout.
    Timeout {
        /// The configured timeout.
        timeout_seconds: f64,
        /// How long it had run.
        timed_out_after_seconds: f64,
        /// `before_first_progress` or `after_progress`.
        timeout_phase: String,
    },
    /// Interrupted on purpose.
    Interrupted {
        /// Why.
        reason: String,
    },
    /// Cancelled before it started.
    Cancelled {
        /// Why.
        reason: String,
    },
    /// Its host died.
    Unknown {
        /// Why the outcome is unknown.
        reason: String,
    },
}

impl DetailJson {
    /// The JSON view of `detail`; `None` when there is nothing more to say.
    pub fn new(detail: &ExitDetail) -> Option<DetailJson> {
        Some(match detail {
            ExitDetail::None => return None,
            ExitDetail::SpawnError { reason } => DetailJson::SpawnError {
                reason: reason.clone(),
            },
            ExitDetail::Stalled {
                stalled_after_quiet_seconds,
                stall_threshold_seconds,
                stall_phase,
                stall_grace_seconds,
            } => DetailJson::Stalled {
                stalled_after_quiet_seconds: *stalled_after_quiet_seconds,
                stall_threshold_seconds: *stall_threshold_seconds,
                stall_phase: stall_phase.as_str().to_owned(),
                stall_grace_seconds: *stall_grace_seconds,
            },
            ExitDetail::Timeout {
                timeout_seconds,
                timed_out_after_seconds,
                timeout_phase,
            } => DetailJson::Timeout {
                timeout_seconds: *timeout_seconds,
                timed_out_after_seconds: *timed_out_after_seconds,
                timeout_phase: timeout_phase.as_str().to_owned(),
            },
            ExitDetail::Interrupted { reason } => DetailJson::Interrupted {
                reason: reason.clone(),
            },
            ExitDetail::Cancelled { reason } => DetailJson::Cancelled {
                reason: reason.clone(),
            },
            ExitDetail::Unknown { reason } => DetailJson::Unknown {
                reason: reason.clone(),
            },
        })
    }
}

/// One child as `hermes -z --json` prints it:
/// `{"index","goal","status","exit_code","duration_seconds","result","transcript",…}`.
///
/// Strings are the recorded values unchanged (JSON escapes them; nothing here is cut).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskJson {
    /// Its index in the unit, from 0.
    pub index: u32,
    /// Its goal.
    pub goal: String,
    /// Its final status (`completed`, `failed`, `error`, …).
    pub status: String,
    /// Its exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if any.
    pub signal: Option<i32>,
    /// Seconds from start to end (0 if it never started).
    pub duration_seconds: f64,
    /// API calls it reported.
    pub api_calls: u64,
    /// When it started, if it did.
    pub started_at: Option<String>,
    /// When it ended.
    pub ended_at: String,
    /// Its result.
    pub result: String,
    /// The tail of its stderr, on failure.
    pub stderr_tail: Option<String>,
    /// The tail of its transcript, when the registry kept one.
    pub transcript_tail: Option<String>,
    /// Path of its live transcript.
    pub transcript: String,
    /// How it ended beyond its status, or `null`.
    pub detail: Option<DetailJson>,
    /// What it changed in its own worktree (`--workspace worktree` only; absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceJson>,
}

/// What a child changed in its own worktree:
/// `{"branch","base","head","commits","files_changed","insertions","deletions","path"}`.
/// `commits` is empty (and the branch gone) when it changed nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceJson {
    /// Its branch.
    pub branch: String,
    /// The commit it started from.
    pub base: String,
    /// The branch's head.
    pub head: String,
    /// Its commits, oldest first, one line each.
    pub commits: Vec<String>,
    /// Files changed from base to head.
    pub files_changed: u64,
    /// Lines inserted.
    pub insertions: u64,
    /// Lines deleted.
    pub deletions: u64,
    /// Where its worktree was (removed once the child's result is settled).
    pub path: String,
    /// Why its changes could not be committed or measured, if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl WorkspaceJson {
    /// `changes` as JSON.
    pub fn new(changes: &hermes_ledger::Changes) -> WorkspaceJson {
        WorkspaceJson {
            branch: changes.branch.clone(),
            base: changes.base.clone(),
            head: changes.head.clone(),
            commits: changes.commits.clone(),
            files_changed: changes.files_changed,
            insertions: changes.insertions,
            deletions: changes.deletions,
            path: changes.path.clone(),
            error: changes.error.clone(),
        }
    }
}

/// `outcome` as a task JSON entry.
pub fn task_json(outcome: &ChildOutcome) -> TaskJson {
    TaskJson {
        index: outcome.index,
        goal: outcome.goal.clone(),
        status: outcome.status.as_str().to_owned(),
        exit_code: outcome.exit_code,
        signal: outcome.signal,
        duration_seconds: outcome.duration_seconds(),
        api_calls: outcome.api_calls,
        started_at: outcome.started_at.map(rfc3339),
        ended_at: rfc3339(outcome.ended_at),
        result: outcome.result.clone(),
        stderr_tail: outcome.stderr_tail.clone(),
        transcript_tail: outcome.transcript_tail.clone(),
        transcript: outcome.transcript.clone(),
        detail: DetailJson::new(&outcome.detail),
        workspace: outcome.changes.as_deref().map(WorkspaceJson::new),
    }
}

/// A whole inline run as `hermes -z --json` and `hermes cron run --json` print it:
/// `{"delegation_id","status","tasks":[…]}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunJson {
    /// The delegation.
    pub delegation_id: String,
    /// The unit's status (see [`Envelope::unit_status`]).
    pub status: String,
    /// Its children, by index.
    pub tasks: Vec<TaskJson>,
}

/// The run JSON of the unit in `envelope` (for an inline run, every event of the unit).
pub fn run_json(envelope: &Envelope<'_>) -> RunJson {
    RunJson {
        delegation_id: envelope.delegation.id.to_string(),
        status: envelope.unit_status().as_str().to_owned(),
        tasks: envelope.outcomes().into_iter().map(task_json).collect(),
    }
}
