//! Records as format 3 (and, for tasks, formats 1 and 2) laid them out, before format 4 added an
//! agent child's profile, stream adapter and delegation depth to a dispatch and the model and
//! usage its stream reported to its outcome. Read from older files, never written.

use serde::{Deserialize, Serialize};

use crate::model::legacy::{EventOf, EventPayloadOf};
use crate::model::{
    ChildOutcome, ChildStatus, DeliveryMode, DispatchSpec, ExitDetail, Role, TaskSpec, Timestamp,
};

/// A task as formats 1 to 3 stored it (no agent, no adapter).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TaskSpecV3 {
    pub goal: String,
    pub command: Vec<String>,
    pub context: Option<String>,
    pub toolsets: Vec<String>,
    pub role: Role,
    pub model: Option<String>,
}

impl From<TaskSpecV3> for TaskSpec {
    fn from(old: TaskSpecV3) -> TaskSpec {
        TaskSpec {
            context: old.context,
            toolsets: old.toolsets,
            role: old.role,
            model: old.model,
            ..TaskSpec::new(old.goal, old.command)
        }
    }
}

/// A dispatch as format 3 stored it (tasks without agent or adapter, no depth).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DispatchSpecV3 {
    pub goal: String,
    pub context: Option<String>,
    pub toolsets: Vec<String>,
    pub role: Role,
    pub model: Option<String>,
    pub delivery: DeliveryMode,
    pub timeout_ms: Option<u64>,
    pub cwd: Option<String>,
    pub group: Option<String>,
    pub tasks: Vec<TaskSpecV3>,
    pub pool: Option<String>,
}

impl From<DispatchSpecV3> for DispatchSpec {
    fn from(old: DispatchSpecV3) -> DispatchSpec {
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
            pool: old.pool,
            depth: 1,
            workspace: crate::model::Workspace::None,
            sandbox: crate::model::Sandbox::FULL,
        }
    }
}

/// A unit as format 3 stored it.
pub(crate) type DelegationV3 = super::legacy::UnitRecordOf<DispatchSpecV3>;

/// A child's outcome as formats 1 to 3 stored it (no model, no usage).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct ChildOutcomeV3 {
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
}

impl From<ChildOutcomeV3> for ChildOutcome {
    fn from(old: ChildOutcomeV3) -> ChildOutcome {
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
            ..ChildOutcome::new(old.index, old.goal, old.status, old.ended_at)
        }
    }
}

/// An event's content as formats 1 to 3 stored it.
pub(crate) type EventPayloadV3 = EventPayloadOf<ChildOutcomeV3>;

/// An event as formats 1 to 3 stored it.
pub(crate) type EventV3 = EventOf<EventPayloadV3>;

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::model::Channel;
    use crate::model::legacy::{decode_delegation, decode_event};
    use crate::model::{DelegationId, Event, EventKey, EventPayload, EventState, UnitStatus};

    fn at_format<T: Serialize>(version: u8, value: &T) -> Vec<u8> {
        postcard::to_extend(value, vec![version]).expect("encodes")
    }

    fn old_task() -> TaskSpecV3 {
        TaskSpecV3 {
            goal: "review".into(),
            command: vec!["some-agent".into(), "-p".into(), "review".into()],
            context: Some("c".into()),
            toolsets: vec!["files".into()],
            role: Role::Orchestrator,
            model: Some("m".into()),
        }
    }

    #[test]
    fn a_format_3_unit_reads_with_no_agent_and_depth_one() {
        let old = DelegationV3 {
            id: DelegationId::new("deleg_0123456789ab").expect("id"),
            session: None,
            channel: Channel::Inline,
            spec: DispatchSpecV3 {
                goal: "g".into(),
                context: None,
                toolsets: Vec::new(),
                role: Role::Leaf,
                model: None,
                delivery: DeliveryMode::AfterTurn,
                timeout_ms: None,
                cwd: None,
                group: None,
                tasks: vec![old_task()],
                pool: Some("gpu".into()),
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
            decode_delegation(Path::new("l.redb"), &at_format(3, &old)).expect("format 3 decodes");
        assert_eq!(unit.spec.depth, 1);
        assert_eq!(unit.pool(), Some("gpu"));
        let task = &unit.spec.tasks[0];
        assert_eq!(
            (task.agent.as_deref(), task.adapter.as_deref()),
            (None, None)
        );
        assert_eq!(task.role, Role::Orchestrator);
        assert_eq!(task.command, old_task().command);
        // Today's format keeps what format 4 added.
        let mut new = unit.clone();
        new.spec.depth = 2;
        new.spec.tasks[0].agent = Some("some-agent".into());
        new.spec.tasks[0].adapter = Some("some-agent".into());
        let bytes = crate::codec::encode(&new);
        assert_eq!(bytes[0], crate::codec::FORMAT_VERSION);
        assert_eq!(
            decode_delegation(Path::new("l.redb"), &bytes).expect("decodes"),
            new
        );
    }

    #[test]
    fn a_format_3_event_reads_with_no_model_or_usage() {
        let outcome = |index| ChildOutcomeV3 {
            index,
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
        };
        let old = EventV3 {
            delegation_id: DelegationId::new("deleg_0123456789ab").expect("id"),
            key: EventKey::Terminal,
            session: None,
            delivery: DeliveryMode::AfterTurn,
            payload: EventPayloadV3::Terminal {
                unit_status: UnitStatus::Unknown,
                reason: "owner_died".into(),
                children: vec![outcome(0), outcome(1)],
            },
            state: EventState::Pending,
            attempts: 0,
            lease: None,
            published_at: Timestamp(3),
            delivered_at: None,
            dropped_at: None,
            drop_reason: None,
        };
        for version in [1, 2, 3] {
            let event = decode_event(Path::new("l.redb"), &at_format(version, &old))
                .expect("an old event decodes");
            let outcomes = event.payload.outcomes();
            assert_eq!(outcomes.len(), 2);
            assert_eq!((outcomes[1].index, outcomes[1].api_calls), (1, 3));
            assert!(
                outcomes
                    .iter()
                    .all(|o| o.model.is_none() && o.usage.is_none())
            );
        }
        let mut new = Event::from(old);
        if let EventPayload::Terminal { children, .. } = &mut new.payload {
            children[0].model = Some("some-model".into());
            children[0].usage = Some(Box::new(crate::model::Usage {
                input_tokens: 10,
                output_tokens: 5,
                cached_input_tokens: 2,
                cost_usd: Some(0.01),
            }));
        }
        let bytes = crate::codec::encode(&new);
        assert_eq!(
            decode_event(Path::new("l.redb"), &bytes).expect("decodes"),
            new
        );
    }
}
