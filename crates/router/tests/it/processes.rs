//! Real processes: two OS processes drain one session through their own routers while children
//! finish, and every event is delivered exactly once.
//!
//! The test binary re-executes itself as the worker: with `HERMES_ROUTER_WORKER` set, the test
//! function below is the worker (it drains until told the run is over and exits); without it,
//! it is the orchestrator that starts two workers and checks what they delivered.
//!
//! The ledger is of the backend `HERMES_TEST_BACKEND` names (a redb file by default, a fresh
//! PostgreSQL database with `postgres`); the workers get its location in `HERMES_ROUTER_LEDGER`
//! (the file's path or the database's URL).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;
use hermes_ledger::{DeliveryMode, EventState, Ledger, LedgerConfig, Location};
use hermes_router::{Boundary, Clock, Router, RouterConfig, SystemClock};
use hermes_testkit::TestBackend;

const WORKER: &str = "HERMES_ROUTER_WORKER";
/// Where the workers find the ledger: a redb file's path or a `postgres://` URL.
const LEDGER: &str = "HERMES_ROUTER_LEDGER";
const TEST_NAME: &str =
    "processes::two_processes_draining_one_session_deliver_each_event_exactly_once";
const UNITS: u32 = 20;
const TASKS: u32 = 10;

#[test]
fn two_processes_draining_one_session_deliver_each_event_exactly_once() {
    match std::env::var_os(WORKER) {
        Some(dir) => worker(Path::new(&dir)),
        None => orchestrate(),
    }
}

fn orchestrate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (location, url) = TestBackend::from_env().fresh(dir.path());
    let ledger_arg = match (&location, url) {
        (_, Some(url)) => url,
        (Location::File(path), None) => path.to_str().expect("UTF-8 temp path").to_owned(),
        (Location::Postgres(_), None) => panic!("a fresh database comes with its URL"),
    };
    let ledger = Ledger::open_at(&location, LedgerConfig::default()).expect("ledger opens");
    let ids: Vec<_> = (0..UNITS)
        .map(|_| unit(&ledger, "s", TASKS, DeliveryMode::AfterTurn))
        .collect();
    let exe = std::env::current_exe().expect("own test binary");
    let mut workers: Vec<Child> = ["one", "two"]
        .iter()
        .map(|name| {
            Command::new(&exe)
                .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
                .env(WORKER, dir.path())
                .env(LEDGER, &ledger_arg)
                .env("HERMES_ROUTER_NAME", name)
                .stdout(Stdio::null())
                .spawn()
                .expect("worker starts")
        })
        .collect();

    // Children finish in an interleaved order while both workers drain.
    let mut order: Vec<(usize, u32)> = Vec::new();
    for t in 0..TASKS {
        for u in 0..ids.len() {
            order.push((u, (t + u as u32) % TASKS));
        }
    }
    for (u, t) in order {
        finish(&ledger, &ids[u], t, SystemClock.now());
    }
    fs::write(dir.path().join("published"), b"").expect("marker");

    let deadline = Instant::now() + Duration::from_secs(120);
    for worker in &mut workers {
        loop {
            match worker.try_wait().expect("worker status") {
                Some(status) => {
                    assert!(status.success(), "a worker failed: {status}");
                    break;
                }
                None if Instant::now() > deadline => {
                    let _ = worker.kill();
                    panic!("a worker did not finish within 120 s");
                }
                None => thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    let mut delivered: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for name in ["one", "two"] {
        let text = fs::read_to_string(out_file(dir.path(), name)).unwrap_or_default();
        for line in text.lines() {
            delivered
                .entry(line.to_owned())
                .or_default()
                .push(name.to_owned());
        }
    }
    let twice: Vec<_> = delivered.iter().filter(|(_, by)| by.len() > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    let all: BTreeSet<String> = ids
        .iter()
        .flat_map(|id| (0..TASKS).map(move |t| key(id, t).to_string()))
        .collect();
    let got: BTreeSet<String> = delivered.keys().cloned().collect();
    assert_eq!(got.len(), 200);
    assert_eq!(got, all, "every event delivered");
    for id in &ids {
        for t in 0..TASKS {
            let event = ledger.event(&key(id, t)).unwrap().unwrap();
            assert_eq!(event.state, EventState::Delivered);
            assert_eq!(
                event.attempts, 1,
                "{id}/task:{t} was claimed more than once"
            );
        }
    }
    let by_one = delivered.values().filter(|by| by[0] == "one").count();
    eprintln!("worker one delivered {by_one}, worker two {}", 200 - by_one);
}

fn out_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("delivered-{name}.txt"))
}

/// Drains session `s` until the orchestrator has published everything and nothing is open.
fn worker(dir: &Path) {
    let name = std::env::var("HERMES_ROUTER_NAME").expect("worker name");
    let at = std::env::var(LEDGER).expect("the orchestrator names the ledger");
    let location = if hermes_ledger::is_postgres_url(&at) {
        Location::from_url(Some(&at), Path::new(""), None).expect("the ledger URL parses")
    } else {
        Location::File(PathBuf::from(at))
    };
    let ledger =
        Arc::new(Ledger::open_at(&location, LedgerConfig::default()).expect("ledger opens"));
    let mut config = RouterConfig::new(sid("s"), format!("worker-{name}"));
    config.lease_ms = 30_000;
    config.poll_interval_ms = Some(10);
    let consumer = Router::new(Arc::clone(&ledger), config);
    let mut out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(out_file(dir, &name))
        .expect("output file");
    let clock = SystemClock;
    let give_up = Instant::now() + Duration::from_secs(100);
    loop {
        assert!(Instant::now() < give_up, "worker {name} gave up");
        let deadline = clock.now().plus_ms(100);
        let round = consumer
            .wait_ready(Boundary::Turn, deadline, &clock, render)
            .expect("boundary runs");
        for envelope in round.delivered {
            // Present (write and flush), then acknowledge.
            let mut text = String::new();
            for event in &envelope.events {
                text.push_str(&event.event_ref().to_string());
                text.push('\n');
            }
            out.write_all(text.as_bytes()).expect("write");
            out.flush().expect("flush");
            consumer.ack(envelope.token, clock.now()).expect("ack");
        }
        let published = dir.join("published").exists();
        if published && ledger.open_events(&sid("s")).expect("read").is_empty() {
            return;
        }
    }
}
