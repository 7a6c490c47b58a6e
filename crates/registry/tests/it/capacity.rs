//! Capacity across every process of a home: units beyond `max_concurrent_children` queue and
//! start in FIFO order, in one process and across two processes sharing one home.

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use hermes_ledger::{ChildStatus, HostKind, Ledger, SessionId, UnitStatus};
use hermes_registry::{DispatchRequest, Host, HostOptions, SystemClock};

const ROLE: &str = "REGISTRY_TEST_SECOND_PROCESS_HOME";

fn config(home: &Path) -> hermes_registry::Config {
    let mut c = quick_config(home);
    c.delegation.max_concurrent_children = 2;
    c.delegation.stall_idle = Duration::from_secs(60);
    c
}

async fn host(home: &Path, session: &str) -> Host {
    let options = HostOptions {
        kind: HostKind::Headless,
        session: Some(SessionId::new(session).expect("session")),
        worker: None,
    };
    Host::start(
        open_ledger(home),
        config(home),
        Arc::new(SystemClock),
        options,
    )
    .await
    .expect("host starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_units_with_capacity_two_run_two_and_queue_two_in_fifo_order() {
    let home = tempfile::tempdir().expect("tempdir");
    let host = host(home.path(), "cap").await;
    let session = SessionId::new("cap").expect("session");
    // Each child runs until the test creates its `go-N` file: the order is the test's, not
    // the machine's speed.
    let go = |i: usize| home.path().join(format!("go-{i}"));
    let release = |i: usize| std::fs::write(go(i), b"").expect("release a child");
    let mut ids = Vec::new();
    let mut positions = Vec::new();
    for i in 0..4 {
        let script = format!("while [ ! -e '{}' ]; do sleep 0.02; done", go(i).display());
        let d = host
            .dispatch(DispatchRequest::background(
                session.clone(),
                spec(&[&sh(&script)]),
            ))
            .await
            .expect("dispatches");
        positions.push((d.delegation.status, d.queue_position));
        ids.push(d.delegation.id);
    }
    assert_eq!(
        positions,
        [
            (UnitStatus::Running, None),
            (UnitStatus::Running, None),
            (UnitStatus::Queued, Some(1)),
            (UnitStatus::Queued, Some(2)),
        ]
    );
    let ledger = open_ledger(home.path());
    let counts = || {
        let listing = ledger.list(None, 0).expect("list");
        (listing.running.len(), listing.queued.len())
    };
    assert_eq!(counts(), (2, 2));
    let unit = |i: usize| ledger.delegation(&ids[i]).expect("read").expect("exists");
    let status = |i: usize| unit(i).status;

    // The last unit may end at once when it starts; it still waits its turn.
    release(3);
    release(0);
    assert_eq!(
        host.wait(&ids[0]).await.expect("report").status,
        UnitStatus::Completed
    );
    let limit = Duration::from_secs(20);
    assert!(
        eventually(limit, || status(2) == UnitStatus::Running).await,
        "the third unit takes the freed slot"
    );
    assert_eq!(
        status(3),
        UnitStatus::Queued,
        "the fourth waits for the next slot"
    );
    assert_eq!(counts(), (2, 1));

    release(1);
    for i in [1, 3] {
        assert_eq!(
            host.wait(&ids[i]).await.expect("report").status,
            UnitStatus::Completed
        );
    }
    release(2);
    assert_eq!(
        host.wait(&ids[2]).await.expect("report").status,
        UnitStatus::Completed
    );

    let (u0, u1, u2, u3) = (unit(0), unit(1), unit(2), unit(3));
    let started = |u: &hermes_ledger::UnitRecord| u.started_at.expect("started");
    let ended = |u: &hermes_ledger::UnitRecord| u.ended_at.expect("ended");
    assert!(started(&u2) >= ended(&u0));
    assert!(started(&u3) >= ended(&u1));
    assert!(started(&u3) >= started(&u2));
    assert_eq!(counts(), (0, 0));
}

/// A unit that finishes wakes its host to start the next queued unit at once, not at its next
/// sweep (20 s here): the host skips that wake only while it knows of no queued unit — one it
/// queued itself, or one another process queued for it, which its pass read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freed_slot_starts_the_queued_unit_without_waiting_for_a_sweep() {
    freed_slot_starts_the_queued_unit(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freed_slot_starts_a_unit_another_process_queued_without_waiting_for_a_sweep() {
    freed_slot_starts_the_queued_unit(true).await;
}

/// The second unit is queued by the host itself, or (`foreign`) recorded for it through
/// another handle on the ledger, as `hermes delegate` does.
async fn freed_slot_starts_the_queued_unit(foreign: bool) {
    let home = tempfile::tempdir().expect("tempdir");
    let mut c = config(home.path());
    c.delegation.max_concurrent_children = 1;
    c.host.sweep_interval = Duration::from_secs(20);
    let options = HostOptions {
        kind: HostKind::Headless,
        session: Some(SessionId::new("slot").expect("session")),
        worker: None,
    };
    let host = Host::start(
        open_ledger(home.path()),
        c.clone(),
        Arc::new(SystemClock),
        options,
    )
    .await
    .expect("host starts");
    let session = SessionId::new("slot").expect("session");
    let go = home.path().join("go");
    // The first unit ticks into its transcript until the test releases it.
    let script = format!(
        "while [ ! -e '{}' ]; do echo tick; sleep 0.02; done",
        go.display()
    );
    let first = host
        .dispatch(DispatchRequest::background(
            session.clone(),
            spec(&[&sh(&script)]),
        ))
        .await
        .expect("dispatches");
    assert_eq!(first.delegation.status, UnitStatus::Running);
    let second = if foreign {
        let new = hermes_ledger::NewDelegation {
            id: None,
            session: Some(session.clone()),
            channel: hermes_ledger::Channel::Background,
            spec: spec(&[&sh("true")]),
            host: Some(host.process()),
            transcript_root: None,
        };
        let other = open_ledger(home.path());
        hermes_registry::record_dispatch(&other, &c, new, hermes_registry::Clock::now(&SystemClock))
            .expect("recorded")
            .delegation
    } else {
        host.dispatch(DispatchRequest::background(
            session.clone(),
            spec(&[&sh("true")]),
        ))
        .await
        .expect("dispatches")
        .delegation
    };
    assert_eq!(second.status, UnitStatus::Queued);
    // Released once it ticked for a while: the host has long read the queued unit (the
    // dispatch's activity wake), so only the first unit's end can start the second in time.
    let ticks = || {
        std::fs::read_to_string(&first.transcripts[0])
            .map_or(0, |t| t.lines().filter(|l| l.contains("tick")).count())
    };
    assert!(
        eventually(Duration::from_secs(10), || ticks() >= 15).await,
        "the first unit runs"
    );
    std::fs::write(&go, b"").expect("release the first unit");
    let limit = Duration::from_secs(8);
    let report = tokio::time::timeout(limit, host.wait(&second.id))
        .await
        .expect("the queued unit starts and ends well before the next sweep")
        .expect("report");
    assert_eq!(report.status, UnitStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatch_past_max_queued_is_refused_with_a_clear_error() {
    let home = tempfile::tempdir().expect("tempdir");
    let options = HostOptions {
        kind: HostKind::Headless,
        session: Some(SessionId::new("full").expect("session")),
        worker: None,
    };
    let mut c = config(home.path());
    c.delegation.max_concurrent_children = 1;
    c.delegation.max_queued = 1;
    let host = Host::start(open_ledger(home.path()), c, Arc::new(SystemClock), options)
        .await
        .expect("host starts");
    let session = SessionId::new("full").expect("session");
    // The running child holds its slot until the test creates `go`.
    let go = home.path().join("go");
    let hold = format!("while [ ! -e '{}' ]; do sleep 0.02; done", go.display());
    let dispatch = |script: &str| {
        host.dispatch(DispatchRequest::background(
            session.clone(),
            spec(&[&sh(script)]),
        ))
    };
    let running = dispatch(&hold).await.expect("runs");
    let queued = dispatch("true").await.expect("queues");
    assert_eq!(queued.queue_position, Some(1));
    let err = dispatch("true").await.expect_err("refused");
    assert!(
        matches!(
            err,
            hermes_registry::RegistryError::Ledger(hermes_ledger::LedgerError::QueueFull {
                max: 1
            })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("queue is full"), "{err}");
    std::fs::write(&go, b"").expect("release the child");
    for id in [running.delegation.id, queued.delegation.id] {
        assert_eq!(
            host.wait(&id).await.expect("report").status,
            UnitStatus::Completed
        );
    }
}

/// The second process of the cross-process test: dispatches two units into the shared home
/// and prints, as JSON lines, how each was admitted and when it started. Run on its own (no
/// shared home given), it checks the same two units on a fresh home, where both must start at
/// once and complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_process_role() {
    let fresh = tempfile::tempdir().expect("tempdir");
    let shared = std::env::var_os(ROLE);
    let home = shared.as_deref().map_or(fresh.path(), Path::new);
    let host = host(home, "second").await;
    let session = SessionId::new("second").expect("session");
    let mut ids = Vec::new();
    for _ in 0..2 {
        let d = host
            .dispatch(DispatchRequest::background(
                session.clone(),
                spec(&[&["sleep", "0.3"]]),
            ))
            .await
            .expect("dispatches");
        println!("ADMITTED {} {:?}", d.delegation.id, d.delegation.status);
        if shared.is_none() {
            assert_eq!(
                d.delegation.status,
                hermes_ledger::UnitStatus::Running,
                "a fresh home has free slots"
            );
        }
        ids.push(d.delegation.id);
    }
    for id in &ids {
        let report = host.wait(id).await.expect("report");
        println!("ENDED {} {:?}", id, report.status);
        assert_eq!(report.status, hermes_ledger::UnitStatus::Completed);
    }
    host.shutdown("test_done").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_is_shared_by_two_processes_on_one_home() {
    if std::env::var_os(ROLE).is_some() {
        return;
    }
    let home = tempfile::tempdir().expect("tempdir");
    let first = host(home.path(), "first").await;
    let session = SessionId::new("first").expect("session");
    // The first process's children hold both slots until the second has been admitted.
    let go = home.path().join("go");
    let hold = format!("while [ ! -e '{}' ]; do sleep 0.02; done", go.display());
    let mut mine = Vec::new();
    for _ in 0..2 {
        let d = first
            .dispatch(DispatchRequest::background(
                session.clone(),
                spec(&[&sh(&hold)]),
            ))
            .await
            .expect("dispatches");
        assert_eq!(d.delegation.status, UnitStatus::Running);
        mine.push(d.delegation.id);
    }
    let exe = std::env::current_exe().expect("test binary");
    let output = tokio::task::spawn_blocking(move || {
        let mut second = Command::new(exe)
            .args([
                "--exact",
                "capacity::second_process_role",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, home.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("second process starts");
        // Read until both of its units are admitted, then free the slots.
        let mut stdout = String::new();
        let mut lines = BufReader::new(second.stdout.take().expect("stdout"));
        while stdout.matches("ADMITTED").count() < 2 {
            if lines.read_line(&mut stdout).expect("read") == 0 {
                break;
            }
        }
        std::fs::write(&go, b"").expect("release the first process's children");
        lines.read_to_string(&mut stdout).expect("read");
        let output = second.wait_with_output().expect("second process ends");
        (output, stdout, home)
    })
    .await
    .expect("joins");
    let (output, stdout, home) = output;
    assert!(
        output.status.success(),
        "second process failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // libtest prints its own "test … " prefix on the first line; what follows is ours.
    let ours = |tag: &'static str| {
        stdout
            .lines()
            .filter_map(move |l| l.find(tag).map(|i| &l[i..]))
            .collect::<Vec<&str>>()
    };
    let admitted = ours("ADMITTED");
    assert_eq!(admitted.len(), 2, "{stdout}");
    assert!(
        admitted.iter().all(|l| l.ends_with("Queued")),
        "the other process's units hold both slots:\n{stdout}"
    );
    assert_eq!(
        ours("ENDED")
            .iter()
            .filter(|l| l.ends_with("Completed"))
            .count(),
        2,
        "{stdout}"
    );
    let ledger = open_ledger(home.path());
    let theirs: Vec<hermes_ledger::UnitRecord> = admitted
        .iter()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|id| {
            ledger
                .delegation(&id.parse().expect("id"))
                .expect("read")
                .expect("exists")
        })
        .collect();
    let first_end = mine
        .iter()
        .map(|id| {
            ledger
                .delegation(id)
                .expect("read")
                .expect("exists")
                .ended_at
                .expect("ended")
        })
        .min()
        .expect("two");
    for unit in &theirs {
        assert!(
            unit.started_at.expect("started") >= first_end,
            "a queued unit started before a slot was free"
        );
    }
    assert!(
        theirs[0].started_at <= theirs[1].started_at,
        "FIFO across processes"
    );
    for id in &mine {
        first.wait(id).await.expect("report");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_interrupts_running_units_cancels_queued_ones_and_unregisters() {
    let home = tempfile::tempdir().expect("tempdir");
    let mut c = config(home.path());
    c.delegation.max_concurrent_children = 1;
    let options = HostOptions {
        kind: HostKind::Headless,
        session: Some(SessionId::new("down").expect("session")),
        worker: None,
    };
    let ledger = open_ledger(home.path());
    let host = Host::start(ledger.clone(), c, Arc::new(SystemClock), options)
        .await
        .expect("host starts");
    assert!(host.is_idle().await.expect("reads"));
    let session = SessionId::new("down").expect("session");
    let running = host
        .dispatch(DispatchRequest::background(
            session.clone(),
            spec(&[&["sleep", "1000"]]),
        ))
        .await
        .expect("runs");
    let queued = host
        .dispatch(DispatchRequest::background(
            session,
            spec(&[&["sleep", "1000"]]),
        ))
        .await
        .expect("queues");
    assert_eq!(queued.delegation.status, UnitStatus::Queued);
    assert!(!host.is_idle().await.expect("reads"));
    host.shutdown("host_shutdown").await;
    let status = |id: &hermes_ledger::DelegationId| {
        ledger.delegation(id).expect("read").expect("exists").status
    };
    assert_eq!(status(&running.delegation.id), UnitStatus::Interrupted);
    assert_eq!(status(&queued.delegation.id), UnitStatus::Cancelled);
    let events = ledger.events(&running.delegation.id).expect("events");
    let outcome = &events[0].payload.outcomes()[0];
    assert_eq!(
        outcome.detail,
        hermes_ledger::ExitDetail::Interrupted {
            reason: "host_shutdown".into()
        }
    );
    assert_eq!(
        ledger.host(host.process()).expect("reads"),
        None,
        "the host unregistered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_cannot_renew_its_lease_stops_its_children_before_the_lease_runs_out() {
    let f = fixture_with(HostKind::Headless, Some("fence"), |c| {
        c.host.heartbeat = Duration::from_millis(500);
        c.host.lease = Duration::from_secs(3);
        c.host.sweep_interval = Duration::from_millis(50);
    })
    .await;
    let session = SessionId::new("fence").expect("session");
    let dispatched = f
        .host
        .dispatch(DispatchRequest::background(
            session,
            spec(&[&["sleep", "100"]]),
        ))
        .await
        .expect("dispatches");
    let id = dispatched.delegation.id.clone();
    let ledger = f.ledger.clone();
    let child_of = |ledger: &Ledger| {
        ledger
            .children(&id)
            .ok()
            .and_then(|c| c[0].process.filter(|_| c[0].status == ChildStatus::Running))
    };
    assert!(eventually(Duration::from_secs(10), || child_of(&ledger).is_some()).await);
    let child = child_of(&f.ledger).expect("running child");

    // From now on the disk refuses every write: the lease can no longer be renewed.
    f.ledger.fail_writes(true);
    assert!(eventually(Duration::from_secs(10), || f.host.is_fenced()).await);
    let fenced_at = hermes_registry::Clock::now(&hermes_registry::SystemClock);
    // The lease as the last renewal that got through left it (read now: a renewal in flight
    // when the writes began failing may still have landed).
    let lease_ran_out_at = f
        .ledger
        .host(f.host.process())
        .expect("read")
        .expect("host record")
        .lease_expires_at;
    assert!(
        eventually(Duration::from_secs(5), || !group_alive(child)).await,
        "the fenced host's child is gone"
    );
    let gone_at = hermes_registry::Clock::now(&hermes_registry::SystemClock);
    assert!(
        fenced_at <= lease_ran_out_at && gone_at <= lease_ran_out_at,
        "stopped before the lease ran out: fenced {fenced_at:?}, child gone {gone_at:?}, lease {lease_ran_out_at:?}"
    );

    // Once the disk works again, the fenced host still writes nothing: the child's death is not
    // recorded by it (recovery elsewhere will end the unit `unknown`).
    f.ledger.fail_writes(false);
    assert!(
        eventually(Duration::from_secs(10), || f.host.running().is_empty()).await,
        "the host saw its child end"
    );
    let record = f.ledger.children(&id).expect("children");
    assert_eq!(record[0].status, ChildStatus::Running, "{record:?}");
    assert_eq!(
        f.ledger
            .host(f.host.process())
            .expect("read")
            .expect("record")
            .lease_expires_at,
        lease_ran_out_at,
        "no renewal after fencing"
    );
}
