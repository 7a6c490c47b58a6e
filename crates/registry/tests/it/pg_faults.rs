//! A host on PostgreSQL under faults (issue #22): a partition that never answers,
//! a storage error that is not a broken connection. These run against the throwaway test
//! server whatever the backend under test.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use hermes_ledger::{ChildStatus, DelegationId, HostKind, Ledger, SessionId, UnitStatus};
use hermes_registry::{DispatchRequest, Host, HostOptions, SystemClock};

fn connect(url: &str) -> Arc<Ledger> {
    connect_within(url, Duration::from_secs(30))
}

/// A ledger whose calls give up on a silent server after `statement_timeout` and a margin.
fn connect_within(url: &str, statement_timeout: Duration) -> Arc<Ledger> {
    let target = hermes_ledger::PgTarget::parse(url, None)
        .expect("the URL parses")
        .with_statement_timeout(statement_timeout);
    let config = hermes_ledger::LedgerConfig::default();
    Arc::new(
        Ledger::connect(&target, config, hermes_ledger::TokenSource::Random).expect("connects"),
    )
}

/// A headless host of `session` with a 3 s lease that fences itself after 2.5 s.
async fn host_on(ledger: Arc<Ledger>, home: &Path, session: &str) -> Host {
    let mut config = quick_config(home);
    config.host.heartbeat = Duration::from_millis(500);
    config.host.lease = Duration::from_secs(3);
    config.host.sweep_interval = Duration::from_millis(50);
    let options = HostOptions {
        kind: HostKind::Headless,
        session: Some(SessionId::new(session).expect("session")),
        worker: None,
    };
    Host::start(ledger, config, Arc::new(SystemClock), options)
        .await
        .expect("host starts")
}

/// Dispatches into `session` a child that waits for the file `go`, then prints "the result";
/// returns its unit once `ledger` sees the child running.
async fn dispatch_until_told(
    host: &Host,
    session: &str,
    go: &Path,
    ledger: &Ledger,
) -> DelegationId {
    let script = format!(
        "while [ ! -e {} ]; do sleep 0.05; done; echo the result",
        go.display()
    );
    let dispatched = host
        .dispatch(DispatchRequest::background(
            SessionId::new(session).expect("session"),
            spec(&[&sh(&script)]),
        ))
        .await
        .expect("dispatches");
    let id = dispatched.delegation.id.clone();
    let running = || {
        ledger
            .children(&id)
            .is_ok_and(|c| c[0].status == ChildStatus::Running && c[0].process.is_some())
    };
    assert!(eventually(Duration::from_secs(10), running).await);
    id
}

/// A partition that black-holes traffic (the server accepts and never answers)
/// holds up every ledger call of the host until the call's deadline; its self-fencing runs on
/// its own clock all the same, and the calls themselves end on theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_whose_server_stops_answering_fences_itself_on_its_own_clock() {
    let url = hermes_testkit::fresh_database(&hermes_testkit::pg_admin_url());
    let (proxy, via) = hermes_pgcluster::FaultProxy::in_front_of(&url).expect("the proxy starts");
    // A call gives up after 2 s of silence (a statement timeout of 1 s and a margin).
    let (partitioned, outside) = (connect_within(&via, Duration::from_secs(1)), connect(&url));
    let home = tempfile::tempdir().expect("tempdir");
    let host = host_on(Arc::clone(&partitioned), home.path(), "hang").await;
    let dispatched = host
        .dispatch(DispatchRequest::background(
            SessionId::new("hang").expect("session"),
            spec(&[&["sleep", "100"]]),
        ))
        .await
        .expect("dispatches");
    let id = dispatched.delegation.id.clone();
    let child_of = |ledger: &Ledger| {
        ledger
            .children(&id)
            .ok()
            .and_then(|c| c[0].process.filter(|_| c[0].status == ChildStatus::Running))
    };
    assert!(eventually(Duration::from_secs(10), || child_of(&outside).is_some()).await);
    let child = child_of(&outside).expect("running child");

    proxy.black_hole();
    let partitioned_at = std::time::Instant::now();
    assert!(
        eventually(Duration::from_secs(10), || host.is_fenced()).await,
        "the host fences itself though every ledger call hangs"
    );
    assert!(
        eventually(Duration::from_secs(5), || !group_alive(child)).await,
        "the fenced host's child is gone"
    );
    assert!(
        partitioned_at.elapsed() < Duration::from_secs(3),
        "stopped within the lease: {:?}",
        partitioned_at.elapsed()
    );
    // The host's own calls do not hang either: one made now gives up on its deadline.
    let asked = std::time::Instant::now();
    let read = tokio::task::spawn_blocking(move || partitioned.delegation(&id).map(drop))
        .await
        .expect("the call returns");
    assert!(
        matches!(read, Err(hermes_ledger::LedgerError::Unavailable { .. })),
        "{read:?}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "the deadline and one reconnection: {:?}",
        asked.elapsed()
    );
    drop(proxy);
}

/// A short storage error that is not a broken connection (here every event write
/// refused with `disk_full`) is retried for as long as the host holds its lease, so the
/// finished child's result is recorded once the server accepts writes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_childs_result_is_recorded_once_a_storage_error_clears() {
    let url = hermes_testkit::fresh_database(&hermes_testkit::pg_admin_url());
    let ledger = connect(&url);
    let home = tempfile::tempdir().expect("tempdir");
    let host = host_on(ledger.clone(), home.path(), "full").await;
    let go = home.path().join("go");
    let id = dispatch_until_told(&host, "full", &go, &ledger).await;

    hermes_testkit::fail_event_writes(&url, true);
    std::fs::write(&go, b"").expect("the child may finish");
    // More refusals than the three attempts and one finalization a host used to make.
    assert!(
        eventually(Duration::from_secs(20), || {
            hermes_testkit::refused_event_writes(&url) >= 6
        })
        .await,
        "the host keeps trying to record the result: {} refusals",
        hermes_testkit::refused_event_writes(&url)
    );
    assert!(!host.is_fenced(), "its lease still renews");
    // Meanwhile the outcome waits beside its transcript, saying why (`delegation status`).
    let transcript = ledger.children(&id).expect("children")[0]
        .transcript
        .clone()
        .expect("a transcript");
    let kept = hermes_registry::unrecorded::read(&transcript, 0).expect("the outcome is kept");
    assert!(
        kept.attempts >= 1 && kept.outcome.result.contains("the result"),
        "{kept:?}"
    );
    assert!(
        kept.describe().starts_with("retrying since ")
            && kept.describe().contains("could not extend file"),
        "{}",
        kept.describe()
    );
    hermes_testkit::fail_event_writes(&url, false);
    let recorded = |ledger: &Ledger| {
        ledger
            .delegation(&id)
            .ok()
            .flatten()
            .is_some_and(|u| u.status == UnitStatus::Completed)
    };
    assert!(
        eventually(Duration::from_secs(20), || recorded(&ledger)).await,
        "the result is recorded once writes are accepted"
    );
    let events = ledger.events(&id).expect("events");
    let outcome = &events[0].payload.outcomes()[0];
    assert!(outcome.result.contains("the result"), "{outcome:?}");
    // The kept copy goes once the host has heard its commit, a moment after the unit reads
    // as completed to everyone else.
    assert!(
        eventually(Duration::from_secs(10), || {
            hermes_registry::unrecorded::read(&transcript, 0).is_none()
        })
        .await,
        "recorded: no longer kept, yet {:?}",
        hermes_registry::unrecorded::read(&transcript, 0)
    );
}

/// A host that fences while it still fails to record a finished child's result
/// leaves that result to recovery on its machine, which records the child as it ended (exit 0,
/// its output) rather than `unknown`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_its_fenced_host_could_not_record_is_recorded_by_recovery() {
    let url = hermes_testkit::fresh_database(&hermes_testkit::pg_admin_url());
    let (proxy, via) = hermes_pgcluster::FaultProxy::in_front_of(&url).expect("the proxy starts");
    let (partitioned, outside) = (connect(&via), connect(&url));
    let home = tempfile::tempdir().expect("tempdir");
    let host = host_on(partitioned, home.path(), "fenced").await;
    let go = home.path().join("go");
    let id = dispatch_until_told(&host, "fenced", &go, &outside).await;
    let transcript = outside.children(&id).expect("children")[0]
        .transcript
        .clone()
        .expect("a transcript");

    hermes_testkit::fail_event_writes(&url, true);
    std::fs::write(&go, b"").expect("the child may finish");
    assert!(
        eventually(Duration::from_secs(10), || {
            hermes_registry::unrecorded::read(&transcript, 0).is_some()
        })
        .await,
        "the refused outcome is kept beside its transcript"
    );
    // Then the host loses its server altogether, and fences on its own clock.
    proxy.black_hole();
    assert!(eventually(Duration::from_secs(10), || host.is_fenced()).await);
    hermes_testkit::fail_event_writes(&url, false);

    // Once its lease ran out, a sweep on this machine recovers the unit with the kept outcome.
    let config = quick_config(home.path());
    let reaper = hermes_registry::OsReaper::new();
    let recovered = eventually(Duration::from_secs(10), || {
        let now = hermes_registry::Clock::now(&SystemClock);
        hermes_registry::housekeeping::sweep(
            &outside,
            &reaper,
            &config,
            now,
            hermes_ledger::Sweep::Now,
        )
        .is_ok_and(|report| report.finalized.contains(&id))
    })
    .await;
    assert!(recovered, "the fenced host's unit is recovered");
    let unit = outside.delegation(&id).expect("read").expect("unit");
    assert_eq!(unit.status, UnitStatus::Completed, "not unknown: {unit:?}");
    let child = &outside.children(&id).expect("children")[0];
    assert_eq!(
        (child.status, child.exit_code),
        (ChildStatus::Completed, Some(0))
    );
    let events = outside.events(&id).expect("events");
    let outcome = events
        .iter()
        .flat_map(|e| e.payload.outcomes())
        .find(|o| o.index == 0)
        .expect("the child's outcome is published");
    assert!(outcome.result.contains("the result"), "{outcome:?}");
    assert_eq!(
        hermes_registry::unrecorded::read(&transcript, 0),
        None,
        "recorded by recovery: no longer kept"
    );
    // Ends the hung calls, so that the runtime can shut down.
    drop(proxy);
}
