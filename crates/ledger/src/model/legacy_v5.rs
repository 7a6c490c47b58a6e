//! Records as format 5 laid them out, before format 6 added a unit's sandbox to its dispatch
//! and an agent child's refused tool calls to its outcome. Read from format-5 files, never
//! written.

use serde::{Deserialize, Serialize};

use crate::model::legacy::{EventOf, EventPayloadOf};
use crate::model::{
    Changes, ChildOutcome, ChildStatus, DeliveryMode, DispatchSpec, ExitDetail, Role, Sandbox,
    TaskSpec, Timestamp, Usage, Workspace,
};

/// A dispatch as format 5 stored it (no sandbox: its children ran unconfined).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DispatchSpecV5 {
    pub goal: String,
    pub context: Option<String>,
    pub toolsets: Vec<String>,
    pub role: Role,
    pub model: Option<String>,
    pub delivery: DeliveryMode,
    pub timeout_ms: Option<u64>,
    pub cwd: Option<String>,
    pub group: Option<String>,
    pub tasks: Vec<TaskSpec>,
    pub pool: Option<String>,
    pub depth: u32,
    pub workspace: Workspace,
}

impl From<DispatchSpecV5> for DispatchSpec {
    fn from(old: DispatchSpecV5) -> DispatchSpec {
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
            tasks: old.tasks,
            pool: old.pool,
            depth: old.depth,
            workspace: old.workspace,
            sandbox: Sandbox::FULL,
        }
    }
}

/// A unit as format 5 stored it.
pub(crate) type DelegationV5 = super::legacy::UnitRecordOf<DispatchSpecV5>;

/// A child's outcome as format 5 stored it (no denials).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct ChildOutcomeV5 {
    pub index: u32,
    pub goal: String,
    pub status: ChildStatus,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub started_at: Option<Timestamp>,
    pub ended_at: Timestamp,
    pub api_calls: u64,
    pub result: String,
    pub stderr_tail: Option<String>,
    pub transcript_tail: Option<String>,
    pub transcript: String,
    pub detail: ExitDetail,
    pub model: Option<String>,
    pub usage: Option<Box<Usage>>,
    pub changes: Option<Box<Changes>>,
}

impl From<ChildOutcomeV5> for ChildOutcome {
    fn from(old: ChildOutcomeV5) -> ChildOutcome {
        ChildOutcome {
            exit_code: old.exit_code,
            signal: old.signal,
            started_at: old.started_at,
            api_calls: old.api_calls,
            result: old.result,
            stderr_tail: old.stderr_tail,
            transcript_tail: old.transcript_tail,
            transcript: old.transcript,
            detail: old.detail,
            model: old.model,
            usage: old.usage,
            changes: old.changes,
            ..ChildOutcome::new(old.index, old.goal, old.status, old.ended_at)
        }
    }
}

/// An event's content as format 5 stored it.
pub(crate) type EventPayloadV5 = EventPayloadOf<ChildOutcomeV5>;

/// An event as format 5 stored it.
pub(crate) type EventV5 = EventOf<EventPayloadV5>;

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::model::legacy::{decode_delegation, decode_event, decode_payload};
    use crate::model::{Channel, DelegationId, Event, EventKey, EventPayload, EventState};
    use crate::model::{SandboxMode, UnitStatus};

    fn at_format<T: Serialize>(version: u8, value: &T) -> Vec<u8> {
        postcard::to_extend(value, vec![version]).expect("encodes")
    }

    #[test]
    fn a_format_5_unit_reads_as_unconfined_and_keeps_its_workspace() {
        let old = DelegationV5 {
            id: DelegationId::new("deleg_0123456789ab").expect("id"),
            session: None,
            channel: Channel::Background,
            spec: DispatchSpecV5 {
                goal: "g".into(),
                context: None,
                toolsets: Vec::new(),
                role: Role::Orchestrator,
                model: None,
                delivery: DeliveryMode::AfterTurn,
                timeout_ms: None,
                cwd: Some("/r".into()),
                group: None,
                tasks: vec![TaskSpec::new("t", vec!["x".into()])],
                pool: None,
                depth: 3,
                workspace: Workspace::Worktree,
            },
            status: UnitStatus::Running,
            dispatched_at: Timestamp(1),
            started_at: Some(Timestamp(2)),
            ended_at: None,
            host: None,
            queue_seq: None,
            interrupt: None,
            transcript_dir: None,
        };
        let unit =
            decode_delegation(Path::new("l.redb"), &at_format(5, &old)).expect("format 5 decodes");
        assert_eq!(unit.spec.sandbox, Sandbox::FULL);
        assert_eq!(unit.spec.workspace, Workspace::Worktree);
        assert_eq!((unit.spec.depth, unit.spec.role), (3, Role::Orchestrator));
        // Today's format keeps what format 6 added.
        let mut new = unit.clone();
        new.spec.sandbox = Sandbox {
            mode: SandboxMode::WorkspaceWrite,
            commands_network: false,
            agents_network: true,
        };
        let bytes = crate::codec::encode(&new);
        assert_eq!(bytes[0], crate::codec::FORMAT_VERSION);
        assert_eq!(
            decode_delegation(Path::new("l.redb"), &bytes).expect("decodes"),
            new
        );
    }

    #[test]
    fn a_format_5_event_reads_with_no_denials() {
        let outcome = ChildOutcomeV5 {
            index: 0,
            goal: "g".into(),
            status: ChildStatus::Completed,
            exit_code: Some(0),
            signal: None,
            started_at: None,
            ended_at: Timestamp(2),
            api_calls: 1,
            result: "done".into(),
            stderr_tail: None,
            transcript_tail: None,
            transcript: "/t".into(),
            detail: ExitDetail::None,
            model: None,
            usage: None,
            changes: Some(Box::new(Changes {
                branch: "b".into(),
                ..Changes::default()
            })),
        };
        let old = EventV5 {
            delegation_id: DelegationId::new("deleg_0123456789ab").expect("id"),
            key: EventKey::Task(0),
            session: None,
            delivery: DeliveryMode::AfterTurn,
            payload: EventPayloadV5::Task(outcome),
            state: EventState::Pending,
            attempts: 0,
            lease: None,
            published_at: Timestamp(3),
            delivered_at: None,
            dropped_at: None,
            drop_reason: None,
        };
        let payload = decode_payload(Path::new("pg"), &at_format(5, &old.payload))
            .expect("a format 5 payload decodes");
        assert!(payload.outcomes()[0].denied().is_empty());
        let event =
            decode_event(Path::new("l.redb"), &at_format(5, &old)).expect("format 5 decodes");
        let outcomes = event.payload.outcomes();
        assert_eq!(
            outcomes[0].changes.as_ref().map(|c| c.branch.as_str()),
            Some("b")
        );
        let mut new = Event::from(old);
        if let EventPayload::Task(outcome) = &mut new.payload {
            outcome.denials = Some(Box::new(crate::model::Denials {
                calls: vec!["Bash: touch f".into()],
            }));
        }
        let bytes = crate::codec::encode(&new);
        assert_eq!(
            decode_event(Path::new("l.redb"), &bytes).expect("decodes"),
            new
        );
    }
}
