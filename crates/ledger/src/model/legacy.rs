//! Records as older formats stored them, and how each becomes today's (read from older
//! files; never written).

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{
    Channel, Child, ChildOutcome, ChildStatus, DelegationId, DeliveryMode, DispatchSpec,
    DropReason, Event, EventKey, EventPayload, EventState, HostId, HostKind, HostRecord, Lease,
    Locality, ProcessId, Progress, Role, SessionId, TaskSpec, Timestamp, UnitRecord, UnitStatus,
};

use crate::codec::{self, DecodeError};
use crate::error::Result;

use super::legacy_v3::{self, TaskSpecV3};
use super::legacy_v4;
use super::legacy_v5;

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

impl From<HostV2> for HostRecord {
    fn from(old: HostV2) -> HostRecord {
        HostRecord {
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

impl From<HostV1> for HostRecord {
    fn from(old: HostV1) -> HostRecord {
        HostRecord {
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
    pub tasks: Vec<TaskSpecV3>,
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
            workspace: crate::model::Workspace::None,
            sandbox: crate::model::Sandbox::FULL,
        }
    }
}

/// A unit as formats 1 to 3 stored it: laid out as today's, but for its dispatch, laid out as
/// `S` (formats 1 and 2: [`DispatchSpecV2`], with no pool; format 3:
/// [`legacy_v3::DispatchSpecV3`], with no agent, adapter or depth).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct UnitRecordOf<S> {
    pub id: DelegationId,
    pub session: Option<SessionId>,
    pub channel: Channel,
    pub spec: S,
    pub status: UnitStatus,
    pub dispatched_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub ended_at: Option<Timestamp>,
    pub host: Option<ProcessId>,
    pub queue_seq: Option<u64>,
    pub interrupt: Option<String>,
    pub transcript_dir: Option<String>,
}

/// A unit as formats 1 and 2 stored it (its dispatch had no pool).
pub(crate) type DelegationV2 = UnitRecordOf<DispatchSpecV2>;

impl<S: Into<DispatchSpec>> From<UnitRecordOf<S>> for UnitRecord {
    fn from(old: UnitRecordOf<S>) -> UnitRecord {
        UnitRecord {
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

/// An event's content as a past format stored it: laid out as today's, but for its child
/// outcomes, laid out as `C` (formats 1 to 3: [`legacy_v3::ChildOutcomeV3`]; format 4:
/// [`legacy_v4::ChildOutcomeV4`]; format 5: [`legacy_v5::ChildOutcomeV5`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum EventPayloadOf<C> {
    Task(C),
    Terminal {
        unit_status: UnitStatus,
        reason: String,
        children: Vec<C>,
    },
}

impl<C: Into<ChildOutcome>> From<EventPayloadOf<C>> for EventPayload {
    fn from(old: EventPayloadOf<C>) -> EventPayload {
        match old {
            EventPayloadOf::Task(outcome) => EventPayload::Task(outcome.into()),
            EventPayloadOf::Terminal {
                unit_status,
                reason,
                children,
            } => EventPayload::Terminal {
                unit_status,
                reason,
                children: children.into_iter().map(Into::into).collect(),
            },
        }
    }
}

/// An event as a past format stored it: laid out as today's, but for its payload, laid out as
/// `P` (an [`EventPayloadOf`] that format's child outcome).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct EventOf<P> {
    pub delegation_id: DelegationId,
    pub key: EventKey,
    pub session: Option<SessionId>,
    pub delivery: DeliveryMode,
    pub payload: P,
    pub state: EventState,
    pub attempts: u32,
    pub lease: Option<Lease>,
    pub published_at: Timestamp,
    pub delivered_at: Option<Timestamp>,
    pub dropped_at: Option<Timestamp>,
    pub drop_reason: Option<DropReason>,
}

impl<P: Into<EventPayload>> From<EventOf<P>> for Event {
    fn from(old: EventOf<P>) -> Event {
        Event {
            delegation_id: old.delegation_id,
            key: old.key,
            session: old.session,
            delivery: old.delivery,
            payload: old.payload.into(),
            state: old.state,
            attempts: old.attempts,
            lease: old.lease,
            published_at: old.published_at,
            delivered_at: old.delivered_at,
            dropped_at: old.dropped_at,
            drop_reason: old.drop_reason,
        }
    }
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

/// How to read the postcard bytes of one format's record as today's record `T`.
type Layout<T> = fn(&[u8]) -> Result<T, DecodeError>;

/// Reads `bytes` laid out as `Old` and makes today's record of it.
fn read<Old: DeserializeOwned + Into<T>, T>(bytes: &[u8]) -> Result<T, DecodeError> {
    postcard::from_bytes::<Old>(bytes)
        .map(Old::into)
        .map_err(|err| DecodeError::Damaged(err.to_string()))
}

/// Decodes a stored record whose layout depends on the format it was written in: `layout`
/// says, for a format, how to read it. A failure names the file and `what` was being read.
fn decode_any<T>(
    path: &Path,
    what: &str,
    bytes: &[u8],
    layout: impl FnOnce(u8) -> Layout<T>,
) -> Result<T> {
    codec::decode_versioned(bytes, |version, rest| layout(version)(rest))
        .map_err(|err| codec::ledger_error(path, what, err))
}

/// A host record of any format (format 1 had no fencing epoch, locality or lease; format 2 no
/// worker pool).
pub(crate) fn decode_host(path: &Path, bytes: &[u8]) -> Result<HostRecord> {
    decode_any(path, "host", bytes, |version| match version {
        1 => read::<HostV1, _>,
        2 => read::<HostV2, _>,
        _ => read::<HostRecord, _>,
    })
}

/// A unit of any format (formats 1 and 2 had no pool on its dispatch, format 3 no agent,
/// adapter or depth, format 4 no workspace).
pub(crate) fn decode_delegation(path: &Path, bytes: &[u8]) -> Result<UnitRecord> {
    decode_any(path, "delegation", bytes, |version| match version {
        ..3 => read::<DelegationV2, _>,
        3 => read::<legacy_v3::DelegationV3, _>,
        4 => read::<legacy_v4::DelegationV4, _>,
        5 => read::<legacy_v5::DelegationV5, _>,
        _ => read::<UnitRecord, _>,
    })
}

/// An event of any format (formats 1 to 3 had no model or usage on its outcomes, format 4 no
/// changes).
pub(crate) fn decode_event(path: &Path, bytes: &[u8]) -> Result<Event> {
    decode_any(path, "event", bytes, |version| match version {
        ..4 => read::<legacy_v3::EventV3, _>,
        4 => read::<legacy_v4::EventV4, _>,
        5 => read::<legacy_v5::EventV5, _>,
        _ => read::<Event, _>,
    })
}

/// An event's payload stored on its own (PostgreSQL's event rows) in any format (formats 1 to 3
/// had no model or usage on its outcomes, format 4 no changes).
pub(crate) fn decode_payload(path: &Path, bytes: &[u8]) -> Result<EventPayload> {
    decode_any(path, "event payload", bytes, |version| match version {
        ..4 => read::<legacy_v3::EventPayloadV3, _>,
        4 => read::<legacy_v4::EventPayloadV4, _>,
        5 => read::<legacy_v5::EventPayloadV5, _>,
        _ => read::<EventPayload, _>,
    })
}

/// A child of any format (formats 1 and 2 had no machine).
pub(crate) fn decode_child(path: &Path, bytes: &[u8]) -> Result<Child> {
    decode_any(path, "child", bytes, |version| match version {
        ..3 => read::<ChildV2, _>,
        _ => read::<Child, _>,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::LedgerError;
    use crate::model::WorkerPool;

    fn versioned<T: serde::Serialize>(version: u8, value: &T) -> Vec<u8> {
        let mut bytes = vec![version];
        bytes.extend(postcard::to_allocvec(value).expect("encodes"));
        bytes
    }

    #[test]
    fn a_format_2_unit_reads_with_no_pool_and_a_format_3_one_keeps_its_pool() {
        let old = DelegationV2 {
            id: DelegationId::new("deleg_0123456789ab").expect("id"),
            session: Some(SessionId::new("s").expect("session")),
            channel: Channel::Background,
            spec: DispatchSpecV2 {
                goal: "g".into(),
                context: Some("c".into()),
                toolsets: vec!["t".into()],
                role: Role::Orchestrator,
                model: Some("m".into()),
                delivery: DeliveryMode::Inject,
                timeout_ms: Some(5),
                cwd: Some("/w".into()),
                group: Some("grp".into()),
                tasks: vec![legacy_v3::TaskSpecV3 {
                    goal: "one".into(),
                    command: vec!["true".into()],
                    context: None,
                    toolsets: Vec::new(),
                    role: Role::Leaf,
                    model: None,
                }],
            },
            status: UnitStatus::Queued,
            dispatched_at: Timestamp(1),
            started_at: None,
            ended_at: None,
            host: Some(ProcessId {
                pid: 3,
                start_time: 4,
            }),
            queue_seq: Some(9),
            interrupt: None,
            transcript_dir: Some("/t".into()),
        };
        for version in [1, 2] {
            let unit = decode_delegation(Path::new("l.redb"), &versioned(version, &old))
                .expect("an old unit decodes");
            assert_eq!(unit.pool(), None);
            assert_eq!(unit.spec.group.as_deref(), Some("grp"));
            assert_eq!(unit.spec.tasks, [TaskSpec::new("one", vec!["true".into()])]);
            assert_eq!((unit.queue_seq, unit.host), (old.queue_seq, old.host));
        }
        let mut unit = UnitRecord::from(old);
        unit.spec.pool = Some("gpu".into());
        let bytes = codec::encode(&unit);
        assert_eq!(bytes[0], codec::FORMAT_VERSION);
        assert_eq!(
            decode_delegation(Path::new("l.redb"), &bytes).expect("decodes"),
            unit
        );
        let mut newer = bytes.clone();
        newer[0] = codec::FORMAT_VERSION + 1;
        assert!(matches!(
            decode_delegation(Path::new("l.redb"), &newer),
            Err(LedgerError::NewerFormat { .. })
        ));
    }

    #[test]
    fn a_format_2_host_reads_as_no_worker_and_a_worker_keeps_its_pool() {
        let old = HostV2 {
            process: ProcessId {
                pid: 7,
                start_time: 9,
            },
            kind: HostKind::Headless,
            session: Some(SessionId::new("s").expect("session")),
            registered_at: Timestamp(1),
            heartbeat_at: Timestamp(2),
            host_id: HostId(5),
            locality: Locality {
                boot_id: "b".into(),
                pid_namespace: "p".into(),
                hostname: "h".into(),
            },
            lease_expires_at: Timestamp(30),
        };
        let host = decode_host(Path::new("l.redb"), &versioned(2, &old)).expect("decodes");
        assert_eq!(host.worker, None);
        assert_eq!(
            (host.host_id, host.lease_expires_at),
            (HostId(5), Timestamp(30))
        );
        let worker = HostRecord {
            kind: HostKind::Worker,
            session: None,
            worker: Some(WorkerPool {
                pool: "default".into(),
                capacity: 4,
            }),
            ..host
        };
        let bytes = codec::encode(&worker);
        assert_eq!(
            decode_host(Path::new("l.redb"), &bytes).expect("decodes"),
            worker
        );
    }

    #[test]
    fn a_format_1_host_record_reads_as_judged_by_pid_with_no_lease() {
        let old = HostV1 {
            process: ProcessId {
                pid: 7,
                start_time: 9,
            },
            kind: HostKind::Headless,
            session: None,
            registered_at: Timestamp(1),
            heartbeat_at: Timestamp(2),
        };
        let mut bytes = vec![1u8];
        bytes.extend(postcard::to_allocvec(&old).expect("encodes"));
        let host = decode_host(Path::new("l.redb"), &bytes).expect("decodes");
        assert_eq!(host.process, old.process);
        assert_eq!(host.host_id, HostId(0));
        assert_eq!(host.locality, Locality::default());
        assert_eq!(host.lease_expires_at, Timestamp(u64::MAX));
        let now = codec::encode(&host);
        assert_eq!(now[0], codec::FORMAT_VERSION);
        assert_eq!(
            decode_host(Path::new("l.redb"), &now).expect("decodes"),
            host
        );
    }

    #[test]
    fn a_format_2_child_reads_with_no_machine_and_a_format_3_one_keeps_it() {
        let old = ChildV2 {
            delegation_id: DelegationId::new("deleg_0123456789ab").expect("id"),
            index: 2,
            status: crate::model::ChildStatus::Running,
            process: Some(ProcessId {
                pid: 3,
                start_time: 4,
            }),
            started_at: Some(Timestamp(5)),
            ended_at: None,
            exit_code: None,
            signal: None,
            progress: crate::model::Progress::default(),
            transcript: Some("/t/task-2.log".into()),
        };
        let child = decode_child(Path::new("l.redb"), &versioned(2, &old)).expect("decodes");
        assert_eq!(child.machine, None);
        assert_eq!(
            (child.index, child.transcript.as_deref()),
            (2, Some("/t/task-2.log"))
        );
        let mut child = Child::from(old);
        child.machine = Some("build-7".into());
        let bytes = codec::encode(&child);
        assert_eq!(
            decode_child(Path::new("l.redb"), &bytes).expect("decodes"),
            child
        );
    }
}
