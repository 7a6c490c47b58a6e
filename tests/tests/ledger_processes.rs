//! The ledger shared by real OS processes: concurrent consumers, and writers killed mid-flight.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ledger::*;

const WORKER: &str = env!("CARGO_BIN_EXE_ledger-worker");

fn now() -> Timestamp {
    Timestamp(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_millis() as u64,
    )
}

fn batch(path: &Path, tasks: u32) -> DelegationId {
    let ledger = Ledger::open(path, LedgerConfig::default()).expect("ledger opens");
    let task = TaskSpec::new("t", vec!["true".into()]);
    let spec = DispatchSpec::new("stress", vec![task; tasks as usize]);
    let new = NewDelegation {
        session: Some(SessionId::new("s").unwrap()),
        channel: Channel::Background,
        spec,
        host: None,
        transcript_root: None,
    };
    ledger
        .dispatch(
            new,
            Capacity {
                max_running: 100,
                max_queued: 100,
            },
            now(),
        )
        .expect("dispatch")
        .delegation
        .id
}

#[test]
fn four_consumers_and_a_publisher_deliver_every_event_exactly_once() {
    const N: u32 = 200;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.redb");
    let id = batch(&db, N);
    let db_arg = db.to_str().unwrap();
    let consumers: Vec<_> = (0..4)
        .map(|_| {
            Command::new(WORKER)
                .args(["consume", db_arg, "s", id.as_str(), &N.to_string()])
                .stdout(Stdio::piped())
                .spawn()
                .expect("consumer starts")
        })
        .collect();
    let publisher = Command::new(WORKER)
        .args(["publish", db_arg, id.as_str(), &N.to_string()])
        .output()
        .expect("publisher runs");
    assert!(
        publisher.status.success(),
        "{}",
        String::from_utf8_lossy(&publisher.stderr)
    );

    let mut acked: Vec<String> = Vec::new();
    for consumer in consumers {
        let out = consumer.wait_with_output().expect("consumer finishes");
        assert!(out.status.success(), "a consumer failed");
        acked.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_owned),
        );
    }
    let unique: HashSet<&String> = acked.iter().collect();
    assert_eq!(
        acked.len(),
        N as usize,
        "every event acked once across all consumers"
    );
    assert_eq!(unique.len(), N as usize, "no event acked twice");
    let ledger = Ledger::open(&db, LedgerConfig::default()).unwrap();
    let events = ledger.events(&id).unwrap();
    assert_eq!(events.len(), N as usize);
    assert!(
        events
            .iter()
            .all(|e| e.state == EventState::Delivered && e.attempts == 1)
    );
}

#[test]
fn a_writer_killed_at_random_points_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.redb");
    let id = batch(&db, 2_500);
    let mut rng = fastrand::Rng::with_seed(42);
    let mut published: HashSet<String> = HashSet::new();
    let mut acked: HashSet<String> = HashSet::new();
    for round in 0..50 {
        let mut child = Command::new(WORKER)
            .args(["crash", db.to_str().unwrap(), id.as_str()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("writer starts");
        let stdout = child.stdout.take().unwrap();
        // Let it commit a random number of steps (a deadline guards a stuck writer), then kill it.
        let steps = rng.usize(1..20);
        let mut lines = BufReader::new(stdout).lines();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = 0;
        while seen < steps && Instant::now() < deadline {
            match lines.next() {
                Some(Ok(line)) => {
                    record(&line, &mut published, &mut acked);
                    seen += 1;
                }
                _ => break,
            }
        }
        child.kill().expect("SIGKILL");
        child.wait().unwrap();
        // Whatever it printed before dying was committed.
        for line in lines.map_while(Result::ok) {
            record(&line, &mut published, &mut acked);
        }
        let ledger = Ledger::open(&db, LedgerConfig::default()).unwrap_or_else(|err| {
            panic!("round {round}: the ledger must open after a crash: {err}")
        });
        let events = ledger.events(&id).unwrap();
        let stored: HashSet<String> = events.iter().map(|e| e.key.to_string()).collect();
        for key in &published {
            assert!(
                stored.contains(key),
                "round {round}: published {key} is missing"
            );
        }
        for event in &events {
            if acked.contains(&event.key.to_string()) {
                assert_eq!(
                    event.state,
                    EventState::Delivered,
                    "round {round}: acked {} is open again",
                    event.key
                );
            }
        }
    }
    assert!(
        acked.len() > 50,
        "the writer really made progress ({} acks)",
        acked.len()
    );
}

fn record(line: &str, published: &mut HashSet<String>, acked: &mut HashSet<String>) {
    if let Some(key) = line.strip_prefix("published ") {
        published.insert(key.to_owned());
    } else if let Some(key) = line.strip_prefix("acked ") {
        acked.insert(key.to_owned());
    }
}
