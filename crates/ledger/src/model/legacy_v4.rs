//! Records as format 4 laid them out, before format 5 added a unit's workspace to its dispatch
//! and a child's changes (its worktree's branch, commits and diffstat) to its outcome. Read from
//! format-4 files, never written.

use serde::{Deserialize, Serialize};

use crate::model::legacy::{EventOf, EventPayloadOf};
use crate::model::{
    ChildOutcome, ChildStatus, DeliveryMode, DispatchSpec, ExitDetail, Role, TaskSpec, Timestamp,
    Usage, Workspace,
};

/// A dispatch as format 4 stored it (no workspace).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DispatchSpecV4 {
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
}

impl From<DispatchSpecV4> for DispatchSpec {
    fn from(old: DispatchSpecV4) -> DispatchSpec {
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
            workspace: Workspace::None,
            sandbox: crate::model::Sandbox::FULL,
        }
    }
}

/// A unit as format 4 stored it.
pub(crate) type DelegationV4 = super::legacy::UnitRecordOf<DispatchSpecV4>;

/// A child's outcome as format 4 stored it (no changes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct ChildOutcomeV4 {
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
}

impl From<ChildOutcomeV4> for ChildOutcome {
    fn from(old: ChildOutcomeV4) -> ChildOutcome {
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
            ..ChildOutcome::new(old.index, old.goal, old.status, old.ended_at)
        }
    }
}

/// An event's content as format 4 stored it.
pub(crate) type EventPayloadV4 = EventPayloadOf<ChildOutcomeV4>;

/// An event as format 4 stored it.
pub(crate) type EventV4 = EventOf<EventPayloadV4>;

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::model::legacy::{decode_delegation, decode_event};
    use crate::model::{Changes, Channel};
    use crate::model::{DelegationId, Event, EventKey, EventPayload, EventState, UnitStatus};

    fn at_format<T: Serialize>(version: u8, value: &T) -> Vec<u8> {
        postcard::to_extend(value, vec![version]).expect("encodes")
    }

    #[test]
    fn a_format_4_unit_reads_with_no_workspace() {
        let old = DelegationV4 {
            id: DelegationId::new("deleg_0123456789ab").expect("id"),
            session: None,
            channel: Channel::Background,
            spec: DispatchSpecV4 {
                goal: "g".into(),
                context: None,
                toolsets: Vec::new(),
                role: Role::Leaf,
                model: None,
                delivery: DeliveryMode::Inject,
                timeout_ms: Some(5),
                cwd: Some("/r".into()),
                group: None,
                tasks: vec![TaskSpec {
                    agent: Some("a".into()),
                    ..TaskSpec::new("t", vec!["x".into()])
                }],
                pool: Some("gpu".into()),
                depth: 2,
            },
            status: UnitStatus::Queued,
            dispatched_at: Timestamp(1),
            started_at: None,
            ended_at: None,
            host: None,
            queue_seq: Some(3),
            interrupt: None,
            transcript_dir: None,
        };
        let unit =
            decode_delegation(Path::new("l.redb"), &at_format(4, &old)).expect("format 4 decodes");
        assert_eq!(unit.spec.workspace, Workspace::None);
        assert_eq!((unit.spec.depth, unit.pool()), (2, Some("gpu")));
        assert_eq!(unit.spec.tasks[0].agent.as_deref(), Some("a"));
        assert_eq!(unit.queue_seq, Some(3));
        // Today's format keeps what format 5 added.
        let mut new = unit.clone();
        new.spec.workspace = Workspace::Worktree;
        let bytes = crate::codec::encode(&new);
        assert_eq!(bytes[0], crate::codec::FORMAT_VERSION);
        assert_eq!(
            decode_delegation(Path::new("l.redb"), &bytes).expect("decodes"),
            new
        );
    }

    #[test]
    fn a_format_4_event_reads_with_no_changes() {
        let outcome = ChildOutcomeV4 {
            index: 1,
            goal: "g".into(),
            status: ChildStatus::Completed,
            exit_code: Some(0),
            signal: None,
            started_at: Some(Timestamp(1)),
            ended_at: Timestamp(2),
            api_calls: 3,
            result: "done".into(),
            stderr_tail: None,
            transcript_tail: None,
            transcript: "/t".into(),
            detail: ExitDetail::None,
            model: Some("m".into()),
            usage: Some(Box::new(Usage {
                input_tokens: 1,
                ..Usage::default()
            })),
        };
        let old = EventV4 {
            delegation_id: DelegationId::new("deleg_0123456789ab").expect("id"),
            key: EventKey::Task(1),
            session: None,
            delivery: DeliveryMode::AfterTurn,
            payload: EventPayloadV4::Task(outcome),
            state: EventState::Pending,
            attempts: 0,
            lease: None,
            published_at: Timestamp(3),
            delivered_at: None,
            dropped_at: None,
            drop_reason: None,
        };
        // PostgreSQL keeps an event's payload on its own: a format-4 one reads too.
        let payload =
            crate::model::legacy::decode_payload(Path::new("pg"), &at_format(4, &old.payload))
                .expect("a format 4 payload decodes");
        assert!(payload.outcomes()[0].changes.is_none());
        assert_eq!(payload.outcomes()[0].api_calls, 3);
        let event =
            decode_event(Path::new("l.redb"), &at_format(4, &old)).expect("format 4 decodes");
        let outcomes = event.payload.outcomes();
        assert_eq!(outcomes[0].model.as_deref(), Some("m"));
        assert_eq!(outcomes[0].usage.as_ref().map(|u| u.input_tokens), Some(1));
        assert!(outcomes[0].changes.is_none());
        let mut new = Event::from(old);
        if let EventPayload::Task(outcome) = &mut new.payload {
            outcome.changes = Some(Box::new(Changes {
                branch: "hermes/deleg_0123456789ab-1".into(),
                commits: vec!["abc1234 hermes: what the child left".into()],
                files_changed: 1,
                insertions: 2,
                ..Changes::default()
            }));
        }
        let bytes = crate::codec::encode(&new);
        assert_eq!(
            decode_event(Path::new("l.redb"), &bytes).expect("decodes"),
            new
        );
    }
}
