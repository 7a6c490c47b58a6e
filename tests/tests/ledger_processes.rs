//! The ledger shared by real OS processes: concurrent consumers, and writers killed mid-flight.
//!
//! Every test runs against the backend `HERMES_TEST_BACKEND` names (a redb file by default, a
//! fresh database on the throwaway PostgreSQL with `postgres`; `cargo xtask ci` runs both): the
//! `ledger-worker` processes are handed the ledger's location, a path or a `postgres://` URL.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hermes_ledger::*;
use hermes_testkit::TestBackend;

const WORKER: &str = env!("CARGO_BIN_EXE_ledger-worker");

fn now() -> Timestamp {
    Timestamp(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_millis() as u64,
    )
}

/// A fresh ledger of the backend under test, shared by this test and its worker processes.
struct Shared {
    location: Location,
    /// How a `ledger-worker` is told where the ledger is: the file's path or the database's URL.
    arg: String,
    _dir: tempfile::TempDir,
}

impl Shared {
    fn new() -> Shared {
        let dir = tempfile::tempdir().expect("tempdir");
        let (location, url) = TestBackend::from_env().fresh(dir.path());
        let arg = match (&location, url) {
            (_, Some(url)) => url,
            (Location::File(path), None) => path.to_str().expect("UTF-8 temp path").to_owned(),
            (Location::Postgres(_), None) => panic!("a fresh database comes with its URL"),
        };
        Shared {
            location,
            arg,
            _dir: dir,
        }
    }

    /// This process's own handle on the ledger (after a crash: the file reopened, or a new
    /// connection).
    fn open(&self) -> Result<Ledger> {
        Ledger::open_at(&self.location, LedgerConfig::default())
    }
}

fn batch(shared: &Shared, tasks: u32) -> DelegationId {
    let ledger = shared.open().expect("ledger opens");
    let task = TaskSpec::new("t", vec!["true".into()]);
    let spec = DispatchSpec::new("stress", vec![task; tasks as usize]);
    let new = NewDelegation {
        id: None,
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
    let shared = Shared::new();
    let id = batch(&shared, N);
    let db_arg = shared.arg.as_str();
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
    let ledger = shared.open().unwrap();
    let events = ledger.events(&id).unwrap();
    assert_eq!(events.len(), N as usize);
    assert!(
        events
            .iter()
            .all(|e| e.state == EventState::Delivered && e.attempts == 1)
    );
}

/// A writer (publish, claim, ack or release, one commit each) is killed 50 times after a random
/// number of commits. Whatever it reported committed survives: no published event goes missing,
/// no acked event is open again, and no event is stored, published or acked twice. On redb the
/// file is reopened after each kill (the crash recovery of the file itself); on PostgreSQL the
/// server aborts the killed connection's open transaction and a new connection sees the rest.
#[test]
fn a_writer_killed_at_random_points_loses_nothing() {
    let shared = Shared::new();
    let id = batch(&shared, 2_500);
    let mut rng = fastrand::Rng::with_seed(42);
    let mut published: HashSet<String> = HashSet::new();
    let mut acked: HashSet<String> = HashSet::new();
    for round in 0..50 {
        let mut child = Command::new(WORKER)
            .args(["crash", &shared.arg, id.as_str()])
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
        let ledger = shared.open().unwrap_or_else(|err| {
            panic!("round {round}: the ledger must open after a crash: {err}")
        });
        let events = ledger.events(&id).unwrap();
        let stored: HashSet<String> = events.iter().map(|e| e.key.to_string()).collect();
        assert_eq!(
            stored.len(),
            events.len(),
            "round {round}: an event is stored twice"
        );
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

/// Notes a step the writer reported committed; each event is published once and acked at most
/// once across all of its lives (a writer resumes after the last stored event).
fn record(line: &str, published: &mut HashSet<String>, acked: &mut HashSet<String>) {
    if let Some(key) = line.strip_prefix("published ") {
        assert!(published.insert(key.to_owned()), "{key} published twice");
    } else if let Some(key) = line.strip_prefix("acked ") {
        assert!(acked.insert(key.to_owned()), "{key} acked twice");
    }
}
