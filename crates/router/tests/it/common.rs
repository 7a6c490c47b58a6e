//! Shared helpers for the router's integration tests: a ledger in a temp dir, units, finished
//! children, and consumers.

use std::convert::Infallible;
use std::sync::Arc;

use hermes_ledger::*;
use hermes_router::{BoundaryOutcome, Router, RouterConfig};

/// A fixed start time.
pub const T0: Timestamp = Timestamp(1_700_000_000_000);

/// One second, in milliseconds.
pub const SEC: u64 = 1_000;

pub fn sid(id: &str) -> SessionId {
    SessionId::new(id).expect("valid session id")
}

pub fn spec(tasks: u32, delivery: DeliveryMode) -> DispatchSpec {
    let tasks = (0..tasks)
        .map(|i| TaskSpec::new(format!("task {i}"), vec!["true".into()]))
        .collect();
    DispatchSpec {
        delivery,
        ..DispatchSpec::new("goal", tasks)
    }
}

pub fn outcome(index: u32, at: Timestamp) -> ChildOutcome {
    ChildOutcome {
        exit_code: Some(0),
        started_at: Some(T0),
        result: format!("result {index}"),
        ..ChildOutcome::new(index, format!("task {index}"), ChildStatus::Completed, at)
    }
}

pub struct Fixture {
    /// Holds the ledger's directory for the test's lifetime.
    _dir: tempfile::TempDir,
    pub ledger: Arc<Ledger>,
    /// Drops the test's database (PostgreSQL) once the test is done.
    _database: Option<hermes_testkit::TestDatabase>,
}

/// A fresh ledger on the backend under test (`HERMES_TEST_BACKEND`).
pub fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let (location, _, database) = hermes_testkit::TestBackend::from_env().fresh_owned(dir.path());
    let ledger = hermes_testkit::open_location(&location, LedgerConfig::default(), 7);
    Fixture {
        _dir: dir,
        ledger: Arc::new(ledger),
        _database: database,
    }
}

pub const ROOMY: Capacity = Capacity {
    max_running: 100_000,
    max_queued: 100_000,
};

/// Dispatches a background unit of `tasks` children into `session`.
pub fn unit(ledger: &Ledger, session: &str, tasks: u32, delivery: DeliveryMode) -> DelegationId {
    let new = NewDelegation {
        id: None,
        session: Some(sid(session)),
        channel: Channel::Background,
        spec: spec(tasks, delivery),
        host: None,
        transcript_root: None,
    };
    ledger
        .dispatch(new, ROOMY, T0)
        .expect("dispatch")
        .delegation
        .id
}

/// Finishes child `index` of `id` at `at`, publishing `task:index`.
pub fn finish(ledger: &Ledger, id: &DelegationId, index: u32, at: Timestamp) {
    let done = ledger
        .finish_child(hermes_ledger::HostId(0), id, outcome(index, at), at)
        .expect("finish");
    assert!(done.published, "task {index} of {id} was already final");
}

pub fn key(id: &DelegationId, n: u32) -> EventRef {
    EventRef {
        delegation_id: id.clone(),
        key: EventKey::Task(n),
    }
}

/// A consumer of `session` that does not poll (tests drive time themselves).
pub fn router(ledger: &Arc<Ledger>, session: &str, consumer: &str) -> Router {
    let mut config = RouterConfig::new(sid(session), consumer);
    config.poll_interval_ms = None;
    Router::new(Arc::clone(ledger), config)
}

/// Renders an envelope as `deleg_…/task:0,task:1`.
pub fn render(delegation: &UnitRecord, events: &[Event]) -> Result<String, Infallible> {
    let keys: Vec<String> = events.iter().map(|e| e.key.to_string()).collect();
    Ok(format!("{}/{}", delegation.id, keys.join(",")))
}

/// The keys of every delivered envelope, as `task:N` lists.
pub fn delivered_keys<T, E>(outcome: &BoundaryOutcome<T, E>) -> Vec<Vec<String>> {
    outcome
        .delivered
        .iter()
        .map(|e| e.events.iter().map(|ev| ev.key.to_string()).collect())
        .collect()
}

pub fn state(ledger: &Ledger, key: &EventRef) -> EventState {
    ledger
        .event(key)
        .expect("read")
        .expect("event exists")
        .state
}

/// Claims `keys` directly as another consumer of `session` (a process holding them).
pub fn hold(
    ledger: &Ledger,
    session: &str,
    keys: &[EventRef],
    lease_ms: u64,
    now: Timestamp,
) -> Claim {
    let request = ClaimRequest {
        keys: keys.to_vec(),
        consumer: "holder".into(),
        session: Some(sid(session)),
        lease_ms,
    };
    match ledger.claim(&request, now).expect("claim runs") {
        ClaimOutcome::Claimed(claim) => claim,
        ClaimOutcome::Refused(why) => panic!("holder's claim refused: {why:?}"),
    }
}
