//! The backend seam: typed reads and writes inside one transaction.
//!
//! Every ledger operation (`events.rs`, `units.rs`, `sessions.rs`, `recovery.rs`, `queries.rs`)
//! is written once, against [`ReadTx`] and [`WriteTx`]; the rules it applies live in those files
//! and in `rules.rs`, never in a backend. A backend supplies only transactional storage of the
//! ledger's records and the indexes over them:
//!
//! - `redb.rs` — the embedded default: one file, typed redb tables, index tables kept in step;
//! - `pg.rs` — PostgreSQL, shared by many machines: one table per record kind, indexes as
//!   columns, serializable transactions.
//!
//! A `Reader` and a `Writer` are a backend's transaction behind these traits; operations never
//! see which backend they run on.

pub(crate) mod pg;
pub(crate) mod redb;

use std::cell::Cell;
use std::path::Path;

use serde::de::DeserializeOwned;

use crate::codec::{self, DecodeError};
use crate::error::{LedgerError, Result};
use crate::model::{
    Child, ClaimToken, Delegation, DelegationId, Event, EventKey, EventRef, Host, ProcessId,
    Session, SessionId, Stalling, Timestamp,
};
use crate::units::UnitTally;

pub(crate) use self::redb::storage;

/// A claim as stored under its token.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClaimRecord {
    /// The token.
    pub token: ClaimToken,
    /// Every key the claim covers.
    pub keys: Vec<EventRef>,
    /// Who holds it.
    pub consumer: String,
    /// When it was taken.
    pub claimed_at: Timestamp,
    /// When its lease runs out.
    pub expires_at: Timestamp,
}

/// Rows decoded whose count can grow with a batch's size (children and units), for tests
/// and benchmarks that check how much an operation reads.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) rows: std::sync::atomic::AtomicU64,
}

impl Counters {
    pub(crate) fn count(&self, n: u64) {
        self.rows.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The reads every backend offers inside a transaction. Each returns what was committed before
/// the transaction began plus what it wrote itself.
pub(crate) trait ReadTx {
    /// A session.
    fn session(&self, id: &SessionId) -> Result<Option<Session>>;
    /// Every session.
    fn sessions(&self) -> Result<Vec<Session>>;
    /// The host record of a process.
    fn host(&self, process: ProcessId) -> Result<Option<Host>>;
    /// Every host record.
    fn hosts(&self) -> Result<Vec<Host>>;
    /// The last output a host stored for a running child, if any.
    fn child_tail(&self, id: &DelegationId, index: u32) -> Result<Option<String>>;
    /// A unit.
    fn delegation(&self, id: &str) -> Result<Option<Delegation>>;
    /// Whether a unit with this id exists.
    fn delegation_exists(&self, id: &str) -> Result<bool>;
    /// One child of a unit.
    fn child(&self, id: &DelegationId, index: u32) -> Result<Option<Child>>;
    /// Every child of a unit, by index.
    fn children(&self, id: &DelegationId) -> Result<Vec<Child>>;
    /// The children of a unit found stalling, by index.
    fn stalls(&self, id: &DelegationId) -> Result<Vec<Stalling>>;
    /// The tally of a unit not yet terminal.
    fn tally(&self, id: &DelegationId) -> Result<Option<UnitTally>>;
    /// One event.
    fn event(&self, event: &EventRef) -> Result<Option<Event>>;
    /// Every event of a unit, `task:0..` then `terminal`.
    fn events(&self, id: &DelegationId) -> Result<Vec<Event>>;
    /// Every pending or claimed event of `session` (`None`: of inline units), by unit id then
    /// key.
    fn open_events(&self, session: Option<&SessionId>) -> Result<Vec<EventRef>>;
    /// The records of [`ReadTx::open_events`], in the same order. A backend where every read
    /// is a round trip to a server answers in one query instead of one per event.
    fn open_event_records(&self, session: Option<&SessionId>) -> Result<Vec<Event>> {
        let mut out = Vec::new();
        for event_ref in self.open_events(session)? {
            out.extend(self.event(&event_ref)?);
        }
        Ok(out)
    }
    /// Every pending or claimed event of every session.
    fn all_open_events(&self) -> Result<Vec<EventRef>>;
    /// A claim by its token.
    fn claim_record(&self, token: ClaimToken) -> Result<Option<ClaimRecord>>;
    /// Queued or running units, in id order.
    fn active_units(&self) -> Result<Vec<Delegation>>;
    /// Queued units in FIFO order, with their queue sequence numbers.
    fn queue(&self) -> Result<Vec<(u64, String)>>;
    /// How many units are recorded, of `session` or of all sessions.
    fn unit_count(&self, session: Option<&SessionId>) -> Result<usize>;
    /// The `limit` most recently dispatched units, newest first, optionally of one session.
    fn recent_units(&self, session: Option<&SessionId>, limit: usize) -> Result<Vec<Delegation>>;
    /// Units dispatched before `cutoff`, oldest first, as (dispatched at, id).
    fn units_before(&self, cutoff: Timestamp) -> Result<Vec<(u64, String)>>;
    /// A counter of the ledger's metadata (`tables::META_*`).
    fn meta(&self, key: &str) -> Result<Option<u64>>;
    /// The children of every unit of `ids`, by unit then index (whole-ledger views). A backend
    /// where every read is a round trip answers in one query instead of one per unit.
    fn children_of(&self, ids: &[DelegationId]) -> Result<Vec<Child>> {
        let mut out = Vec::new();
        for id in ids {
            out.extend(self.children(id)?);
        }
        Ok(out)
    }
    /// The events of every unit of `ids`, by unit then key; as [`ReadTx::children_of`].
    fn events_of(&self, ids: &[DelegationId]) -> Result<Vec<Event>> {
        let mut out = Vec::new();
        for id in ids {
            out.extend(self.events(id)?);
        }
        Ok(out)
    }
    /// The stalling children of every unit of `ids`, with their unit; as
    /// [`ReadTx::children_of`].
    fn stalls_of(&self, ids: &[DelegationId]) -> Result<Vec<(DelegationId, Stalling)>> {
        let mut out = Vec::new();
        for id in ids {
            out.extend(self.stalls(id)?.into_iter().map(|s| (id.clone(), s)));
        }
        Ok(out)
    }
}

/// The writes every backend offers inside a write transaction. A backend keeps its indexes in
/// step with the rows in the same transaction.
pub(crate) trait WriteTx: ReadTx {
    /// Set by every write, so group commit can tell an operation that failed before writing
    /// from one that left partial writes behind.
    fn dirty(&self) -> &Cell<bool>;
    /// Whether a statement of this transaction failed. A server that aborts the whole
    /// transaction on any failed statement (PostgreSQL) runs nothing more in it, so group
    /// commit must not carry on with the other operations of the group.
    fn aborted(&self) -> bool {
        false
    }
    /// Commits durably.
    fn commit(self: Box<Self>) -> Result<()>;
    /// Stores the last output of a running child.
    fn put_child_tail(&self, id: &DelegationId, index: u32, tail: &str) -> Result<()>;
    /// Inserts or updates a session.
    fn put_session(&self, session: &Session) -> Result<()>;
    /// Inserts or updates a host record.
    fn put_host(&self, host: &Host) -> Result<()>;
    /// Removes a host record.
    fn remove_host(&self, process: ProcessId) -> Result<()>;
    /// Inserts or updates a unit, keeping the active set, the queue and the by-time and
    /// by-session indexes in step.
    fn put_delegation(&self, unit: &Delegation) -> Result<()>;
    /// Inserts or updates a child.
    fn put_child(&self, child: &Child) -> Result<()>;
    /// Records a child found stalling.
    fn put_stall(&self, id: &DelegationId, stalling: &Stalling) -> Result<()>;
    /// Inserts or updates a unit's tally.
    fn put_tally(&self, id: &DelegationId, tally: &UnitTally) -> Result<()>;
    /// Removes a unit's tally (it became terminal).
    fn remove_tally(&self, id: &DelegationId) -> Result<()>;
    /// Inserts or updates an event, keeping the open-events index in step with its state.
    fn put_event(&self, event: &Event) -> Result<()>;
    /// Inserts or updates a claim.
    fn put_claim(&self, claim: &ClaimRecord) -> Result<()>;
    /// Removes a claim.
    fn remove_claim(&self, token: ClaimToken) -> Result<()>;
    /// Bumps the activity counter (`tables::META_ACTIVITY`) and, where the backend can, wakes
    /// every waiter once the transaction commits.
    fn bump_activity(&self) -> Result<()>;
    /// Sets a metadata counter.
    fn set_meta(&self, key: &str, value: u64) -> Result<()>;
    /// Removes a unit with its children, events, claims and index rows (retention).
    fn purge_delegation(&self, unit: &Delegation) -> Result<()>;
}

/// A read transaction of either backend.
pub(crate) struct Reader<'p>(pub(crate) Box<dyn ReadTx + 'p>);

impl<'p> std::ops::Deref for Reader<'p> {
    type Target = dyn ReadTx + 'p;

    fn deref(&self) -> &Self::Target {
        self.0.as_ref()
    }
}

/// A write transaction of either backend. Dropping it without `commit` aborts it.
pub(crate) struct Writer<'p>(pub(crate) Box<dyn WriteTx + 'p>);

impl<'p> std::ops::Deref for Writer<'p> {
    type Target = dyn WriteTx + 'p;

    fn deref(&self) -> &Self::Target {
        self.0.as_ref()
    }
}

impl Writer<'_> {
    /// Commits durably (counted in `io_counts`).
    pub(crate) fn commit(self) -> Result<()> {
        let started = std::time::Instant::now();
        self.0.commit()?;
        crate::backend::count_commit();
        crate::observe::commit_took(started.elapsed());
        Ok(())
    }
}

pub(crate) fn decode<V: DeserializeOwned>(path: &Path, what: &str, bytes: &[u8]) -> Result<V> {
    codec::decode(bytes).map_err(|err| decode_error(path, what, err))
}

/// A host record of any format (format 1 had no fencing epoch, locality or lease; format 2 no
/// worker pool).
pub(crate) fn decode_host(path: &Path, bytes: &[u8]) -> Result<Host> {
    codec::decode_versioned(bytes, |version, rest| {
        let damaged = |err: postcard::Error| DecodeError::Damaged(err.to_string());
        match version {
            1 => postcard::from_bytes::<crate::model::HostV1>(rest)
                .map(Host::from)
                .map_err(damaged),
            2 => postcard::from_bytes::<crate::model::HostV2>(rest)
                .map(Host::from)
                .map_err(damaged),
            _ => postcard::from_bytes::<Host>(rest).map_err(damaged),
        }
    })
    .map_err(|err| decode_error(path, "host", err))
}

/// A unit of any format (formats 1 and 2 had no pool on its dispatch).
pub(crate) fn decode_delegation(path: &Path, bytes: &[u8]) -> Result<Delegation> {
    codec::decode_versioned(bytes, |version, rest| {
        let damaged = |err: postcard::Error| DecodeError::Damaged(err.to_string());
        if version < 3 {
            postcard::from_bytes::<crate::model::DelegationV2>(rest)
                .map(Delegation::from)
                .map_err(damaged)
        } else {
            postcard::from_bytes::<Delegation>(rest).map_err(damaged)
        }
    })
    .map_err(|err| decode_error(path, "delegation", err))
}

/// A child of any format (formats 1 and 2 had no machine).
pub(crate) fn decode_child(path: &Path, bytes: &[u8]) -> Result<Child> {
    codec::decode_versioned(bytes, |version, rest| {
        let damaged = |err: postcard::Error| DecodeError::Damaged(err.to_string());
        if version < 3 {
            postcard::from_bytes::<crate::model::ChildV2>(rest)
                .map(Child::from)
                .map_err(damaged)
        } else {
            postcard::from_bytes::<Child>(rest).map_err(damaged)
        }
    })
    .map_err(|err| decode_error(path, "child", err))
}

fn decode_error(path: &Path, what: &str, err: DecodeError) -> LedgerError {
    match err {
        DecodeError::Newer(found) => LedgerError::NewerFormat {
            path: path.to_owned(),
            found: u32::from(found),
            supported: u32::from(codec::FORMAT_VERSION),
        },
        DecodeError::Damaged(reason) => LedgerError::Damaged {
            path: path.to_owned(),
            reason: format!("{what}: {reason}"),
        },
    }
}

/// The session part of an open-events index key (`""` for inline units).
pub(crate) fn session_part(session: Option<&SessionId>) -> &str {
    session.map_or("", SessionId::as_str)
}

/// An event reference from its stored parts.
pub(crate) fn event_ref(path: &Path, id: &str, code: u32) -> Result<EventRef> {
    let delegation_id = DelegationId::new(id).map_err(|err| LedgerError::Damaged {
        path: path.to_owned(),
        reason: format!("event index: {err}"),
    })?;
    Ok(EventRef {
        delegation_id,
        key: crate::tables::key_from_code(code),
    })
}

/// Whether `key` names one of the first `task_count` children.
pub(crate) fn is_task_of(key: EventKey, task_count: u32) -> bool {
    matches!(key, EventKey::Task(n) if n < task_count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        Channel, DelegationV2, DeliveryMode, DispatchSpecV2, HostId, HostKind, HostV1, HostV2,
        Locality, Role, TaskSpec, UnitStatus, WorkerPool,
    };

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
                tasks: vec![TaskSpec::new("one", vec!["true".into()])],
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
            assert_eq!(unit.spec.tasks, old.spec.tasks);
            assert_eq!((unit.queue_seq, unit.host), (old.queue_seq, old.host));
        }
        let mut unit = Delegation::from(old);
        unit.spec.pool = Some("gpu".into());
        let bytes = codec::encode(&unit);
        assert_eq!(bytes[0], 3);
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
        let worker = Host {
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
        let old = crate::model::ChildV2 {
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
