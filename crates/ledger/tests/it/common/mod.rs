//! Shared helpers for the ledger's tests.

use hermes_ledger::*;

pub const T0: Timestamp = Timestamp(1_700_000_000_000);

/// The writer of units no host owns (dispatched with `host: None`).
pub const BY_HAND: HostId = HostId(0);

pub fn session() -> SessionId {
    SessionId::new("s").expect("valid id")
}

/// Registers a (pretend) headless host of session `s` and returns its identity.
pub fn registered_host(ledger: &Ledger, pid: u32) -> ProcessId {
    let process = ProcessId { pid, start_time: 1 };
    ledger
        .register_host(&HostRecord {
            process,
            kind: HostKind::Headless,
            session: Some(session()),
            registered_at: T0,
            heartbeat_at: T0,
            host_id: HostId(u128::from(pid)),
            locality: Locality::default(),
            lease_expires_at: Timestamp(u64::MAX),
            worker: None,
        })
        .expect("host registers");
    process
}

pub fn spec(tasks: u32) -> DispatchSpec {
    hermes_testkit::spec(tasks)
}

/// A background dispatch of `tasks` tasks into session `s`, for no host yet, under a fresh id.
pub fn background(tasks: u32) -> NewDelegation {
    NewDelegation {
        id: None,
        session: Some(session()),
        channel: Channel::Background,
        spec: spec(tasks),
        host: None,
        transcript_root: None,
    }
}

pub fn outcome(index: u32, status: ChildStatus, at: Timestamp) -> ChildOutcome {
    ChildOutcome {
        exit_code: Some(0),
        started_at: Some(T0),
        result: format!("result {index}"),
        ..ChildOutcome::new(index, format!("task {index}"), status, at)
    }
}

pub struct Fixture {
    /// Holds the redb file's directory for the test's length.
    _dir: tempfile::TempDir,
    pub ledger: Ledger,
    pub location: Location,
    /// Drops the test's database (PostgreSQL) once the test is done; declared last, so the
    /// ledger's connections close first.
    _database: Option<hermes_testkit::TestDatabase>,
}

impl Fixture {
    /// Another handle on the same ledger, as another process would open it.
    pub fn reopen(&self) -> Ledger {
        hermes_testkit::open_location(&self.location, LedgerConfig::default(), 11)
    }
}

pub fn fixture() -> Fixture {
    fixture_with(LedgerConfig::default())
}

/// A fresh ledger on the backend under test (`HERMES_TEST_BACKEND`).
pub fn fixture_with(config: LedgerConfig) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let (location, _, database) = hermes_testkit::TestBackend::from_env().fresh_owned(dir.path());
    let ledger = hermes_testkit::open_location(&location, config, 7);
    Fixture {
        _dir: dir,
        ledger,
        location,
        _database: database,
    }
}

pub const ROOMY: Capacity = Capacity {
    max_running: 1_000,
    max_queued: 1_000,
};

/// Dispatches a background unit of `tasks` children into session `s`.
pub fn unit(ledger: &Ledger, tasks: u32) -> DelegationId {
    ledger
        .dispatch(background(tasks), ROOMY, T0)
        .expect("dispatch")
        .delegation
        .id
}

/// The fencing epoch of the host that owns `id` ([`BY_HAND`] if none does).
pub fn owner(ledger: &Ledger, id: &DelegationId) -> HostId {
    let unit = ledger.delegation(id).expect("read").expect("unit exists");
    unit.host
        .and_then(|p| ledger.host(p).expect("read"))
        .map_or(BY_HAND, |h| h.host_id)
}

/// Finishes child `index` of `id` as completed (as its host), publishing `task:index`.
pub fn finish(ledger: &Ledger, id: &DelegationId, index: u32, at: Timestamp) {
    let done = ledger
        .finish_child(
            owner(ledger, id),
            id,
            outcome(index, ChildStatus::Completed, at),
            at,
        )
        .expect("finish");
    assert!(done.published);
}

pub fn key(id: &DelegationId, n: u32) -> EventRef {
    EventRef {
        delegation_id: id.clone(),
        key: EventKey::Task(n),
    }
}

pub fn claim(ledger: &Ledger, keys: &[EventRef], lease_ms: u64, now: Timestamp) -> ClaimOutcome {
    let request = ClaimRequest {
        keys: keys.to_vec(),
        consumer: "test".into(),
        session: Some(session()),
        lease_ms,
    };
    ledger.claim(&request, now).expect("claim runs")
}

pub fn claimed(outcome: ClaimOutcome) -> Claim {
    match outcome {
        ClaimOutcome::Claimed(claim) => claim,
        ClaimOutcome::Refused(why) => panic!("claim refused: {why:?}"),
    }
}

pub fn state(ledger: &Ledger, key: &EventRef) -> EventState {
    ledger
        .event(key)
        .expect("read")
        .expect("event exists")
        .state
}

/// A process table where every process is alive (`Pids(true)`) or none is, seen from one
/// locality (the default one, that format-1 records also carry).
pub struct Pids(pub bool);

impl Liveness for Pids {
    fn locality(&self) -> Locality {
        Locality::default()
    }
    fn is_alive(&self, _: ProcessId) -> bool {
        self.0
    }
}

/// Recovery with [`Pids`]: it kills nothing and reads no transcript.
impl Reaper for Pids {
    fn kill_child(&self, _: &DelegationId, _: &Child) {}
    fn transcript_tail(&self, _: &str) -> Option<String> {
        None
    }
}
