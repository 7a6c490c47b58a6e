//! Worker pools on one machine, with real `hermes worker` processes sharing the
//! embedded ledger: a burst spread over every worker's slots, SIGTERM to a worker, a worker
//! killed with SIGKILL mid-run. Every result is delivered exactly once to its session.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Hermes, process_alive, wait_for};
use serde_json::Value;

/// Short sweeps and recovery, a long lease: a death noticed within seconds was noticed by pid.
const TIMINGS: [(&str, &str); 2] = [
    ("HERMES_HOST_RECOVERY_INTERVAL_SECONDS", "0.5"),
    ("HERMES_HOST_LEASE_SECONDS", "120"),
];

const LIMIT: Duration = Duration::from_secs(60);

/// The worker processes of a test, killed when it ends however it ends.
struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn start_worker(h: &Hermes, pool: &str, capacity: u32, extra: &[&str]) -> Child {
    start_worker_env(h, pool, capacity, extra, &[])
}

fn start_worker_env(
    h: &Hermes,
    pool: &str,
    capacity: u32,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Child {
    let starting = h
        .path()
        .join(format!("worker-{pool}-{}.log", rand_suffix()));
    let log = File::create(&starting).expect("worker log");
    let capacity = capacity.to_string();
    let mut args = vec!["worker", "--pool", pool, "--capacity", &capacity];
    args.extend_from_slice(extra);
    let mut c = h.command(&args);
    for (k, v) in TIMINGS.iter().chain(env) {
        c.env(k, v);
    }
    let child = c
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("worker starts");
    std::fs::rename(&starting, worker_log(h, child.id())).expect("name the worker's log");
    child
}

/// Where worker `pid` writes its stderr.
fn worker_log(h: &Hermes, pid: u32) -> std::path::PathBuf {
    h.path().join(format!("worker-{pid}.log"))
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The live workers, by pid.
fn workers(h: &Hermes) -> BTreeMap<u64, Value> {
    h.json(&["worker", "list", "--json"])["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| (w["pid"].as_u64().expect("pid"), w.clone()))
        .collect()
}

fn wait_for_workers(h: &Hermes, pids: &[u32]) {
    wait_for(Duration::from_secs(20), "the workers to register", || {
        let live = workers(h);
        pids.iter()
            .all(|p| live.contains_key(&u64::from(*p)))
            .then_some(())
    });
}

/// Dispatches `script` (run by `sh -c`) into `session` on `pool`; returns the dispatch JSON.
fn dispatch(h: &Hermes, session: &str, pool: &str, script: &str) -> Value {
    let run = h.run_env(
        &[
            "delegate",
            "--session",
            session,
            "--pool",
            pool,
            "--json",
            "--",
            "sh",
            "-c",
            script,
        ],
        &TIMINGS,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.json()
}

fn status(h: &Hermes, id: &str) -> Value {
    h.json(&["delegation", "status", id, "--json"])
}

/// Drains `session` until every id of `ids` was delivered; fails if any arrives twice or an
/// unexpected one arrives. Returns the text of each delivery by id.
fn drain_each_once(h: &Hermes, session: &str, ids: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let deadline = Instant::now() + LIMIT;
    while seen.len() < ids.len() {
        assert!(
            Instant::now() < deadline,
            "timed out: delivered {:?} of {ids:?}",
            seen.keys()
        );
        let drain = h.json(&["drain", "--session", session, "--json", "--wait", "5"]);
        for env in drain["envelopes"].as_array().expect("envelopes") {
            let id = env["delegation_id"].as_str().expect("id").to_owned();
            assert!(ids.contains(&id), "unexpected delivery {id}");
            let text = env["text"].as_str().expect("text").to_owned();
            assert!(
                seen.insert(id.clone(), text).is_none(),
                "{id} delivered twice"
            );
        }
    }
    let again = h.json(&["drain", "--session", session, "--json"]);
    assert_eq!(again["envelopes"], Value::Array(Vec::new()), "nothing more");
    seen
}

#[test]
fn a_burst_runs_on_every_workers_slots_at_once_and_each_result_arrives_once() {
    let h = Hermes::new();
    let go = h.path().join("go");
    let mut ws = Workers(Vec::new());
    for _ in 0..3 {
        ws.0.push(start_worker(&h, "burst", 2, &[]));
    }
    let pids: Vec<u32> = ws.0.iter().map(Child::id).collect();
    wait_for_workers(&h, &pids);

    let started = Instant::now();
    // Every child waits for `go`: while they wait, what runs is exactly what the slots allow.
    let script = crate::common::until_told(&go, "done $HERMES_DELEGATION_ID");
    let mut ids = BTreeSet::new();
    for _ in 0..12 {
        let d = dispatch(&h, "S", "burst", &script);
        assert_eq!(d["status"], "queued");
        assert_eq!(d["pool"], "burst");
        assert_eq!(d["workers"], 3);
        ids.insert(d["delegation_id"].as_str().expect("id").to_owned());
    }
    // Three workers of two slots: six units run at once, two on each worker; six wait.
    wait_for(LIMIT, "every slot of every worker to fill", || {
        let live = workers(&h);
        live.values()
            .all(|w| w["running"] == 2 && w["capacity"] == 2)
            .then_some(())
    });
    let list = h.json(&["delegation", "list", "--json"]);
    assert_eq!(list["running_count"], 6, "{list}");
    assert_eq!(list["queued_count"], 6, "{list}");
    for unit in list["running"].as_array().expect("running") {
        assert_eq!(unit["pool"], "burst");
        let worker = unit["worker"]["pid"].as_u64().expect("a worker runs it");
        assert!(pids.contains(&(worker as u32)), "{unit}");
    }
    for unit in list["queued"].as_array().expect("queued") {
        assert_eq!(unit["worker"], Value::Null, "waiting in the pool: {unit}");
    }
    let text = h.run(&["delegation", "list"]).stdout;
    assert!(
        text.starts_with("running 6 (max 3 on session hosts; 6 on workers) · queued 6"),
        "{text}"
    );
    assert_eq!(text.matches("[pool burst · worker ").count(), 6, "{text}");
    assert_eq!(
        text.matches("[pool burst · waiting for a worker]").count(),
        6,
        "{text}"
    );
    let table = h.run(&["worker", "list"]).stdout;
    for pid in &pids {
        assert!(table.contains(&pid.to_string()), "{table}");
    }

    std::fs::write(&go, "").expect("go");
    let delivered = drain_each_once(&h, "S", &ids);
    eprintln!(
        "12 pool units on 3 workers x 2 slots, dispatch to last delivery: {:.2}s",
        started.elapsed().as_secs_f64()
    );
    let mut used = BTreeSet::new();
    for id in &ids {
        let s = status(&h, id);
        assert_eq!(s["status"], "completed", "{s}");
        assert_eq!(s["session"], "S");
        assert_eq!(s["pool"], "burst");
        used.insert(s["worker"]["pid"].as_u64().expect("worker"));
        // The worker is named by its machine too (pids mean nothing across machines).
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("host name");
        assert_eq!(s["worker"]["machine"], hostname.trim(), "{s}");
        assert_eq!(s["tasks"][0]["machine"], hostname.trim(), "{s}");
        assert!(
            delivered[id].contains(&format!("done {id}")),
            "{}",
            delivered[id]
        );
    }
    assert_eq!(used.len(), 3, "every worker ran some: {used:?}");
}

#[test]
fn sigterm_interrupts_a_workers_children_once_and_leaves_its_untaken_units_in_the_pool() {
    let h = Hermes::new();
    let mut ws = Workers(vec![start_worker(&h, "p", 2, &[])]);
    let pid = ws.0[0].id();
    wait_for_workers(&h, &[pid]);
    let running: Vec<String> = (0..2)
        .map(|_| {
            dispatch(&h, "S", "p", "echo started; sleep 60")["delegation_id"]
                .as_str()
                .expect("id")
                .to_owned()
        })
        .collect();
    let waiting = dispatch(
        &h,
        "S",
        "p",
        "echo later parent=$HERMES_PARENT_SESSION_ID own=${HERMES_SESSION_ID:-none}",
    )["delegation_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let children: Vec<u64> = running
        .iter()
        .map(|id| {
            wait_for(LIMIT, "the child to start", || {
                status(&h, id)["tasks"][0]["pid"].as_u64()
            })
        })
        .collect();
    assert_eq!(status(&h, &waiting)["status"], "queued");

    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let exit = wait_for(LIMIT, "the worker to exit", || {
        ws.0[0].try_wait().expect("try_wait")
    });
    assert_eq!(exit.code(), Some(0), "a stopped worker exits 0");
    for child in &children {
        assert!(!process_alive(*child), "child {child} survived its worker");
    }
    assert!(workers(&h).is_empty(), "the worker unregistered");
    for id in &running {
        let s = status(&h, id);
        assert_eq!(s["status"], "interrupted", "{s}");
        assert_eq!(s["tasks"][0]["detail"]["reason"], "worker_shutdown", "{s}");
    }
    // Nothing is claimed by the stopped worker: what it had not taken still waits.
    let list = h.json(&["delegation", "list", "--json"]);
    assert_eq!(list["running_count"], 0, "{list}");
    assert_eq!(list["queued_count"], 1, "{list}");
    assert_eq!(status(&h, &waiting)["status"], "queued");

    // Another worker runs it (one started inside some other session: its children must not
    // inherit that); every unit is delivered once.
    ws.0.push(start_worker_env(
        &h,
        "p",
        1,
        &[],
        &[("HERMES_SESSION_ID", "someone-else")],
    ));
    let mut all: BTreeSet<String> = running.iter().cloned().collect();
    all.insert(waiting.clone());
    let delivered = drain_each_once(&h, "S", &all);
    for id in &running {
        assert!(
            delivered[id].contains("worker_shutdown"),
            "{}",
            delivered[id]
        );
    }
    assert!(
        delivered[&waiting].contains("later parent=S own=none"),
        "{}",
        delivered[&waiting]
    );
    assert_eq!(status(&h, &waiting)["status"], "completed");
}

#[test]
fn with_a_drain_timeout_a_stopping_worker_lets_its_children_finish_and_takes_nothing_more() {
    let h = Hermes::new();
    let mut ws = Workers(vec![start_worker(&h, "d", 1, &["--drain-timeout", "30"])]);
    let pid = ws.0[0].id();
    wait_for_workers(&h, &[pid]);
    let release = h.path().join("release");
    let script = format!(
        "while [ ! -e {} ]; do sleep 0.05; done; echo finished",
        release.display()
    );
    let id = dispatch(&h, "S", "d", &script)["delegation_id"]
        .as_str()
        .expect("id")
        .to_owned();
    wait_for(LIMIT, "the child to start", || {
        status(&h, &id)["tasks"][0]["pid"].as_u64()
    });
    // The next unit waits: the worker's one slot is busy.
    let later = dispatch(&h, "S", "d", "echo never here")["delegation_id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert_eq!(status(&h, &later)["status"], "queued");
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill runs");
    wait_for(LIMIT, "the worker to say it is stopping", || {
        std::fs::read_to_string(worker_log(&h, pid))
            .ok()
            .filter(|log| {
                log.contains("stopping: taking no more units; 1 running unit(s) may finish")
            })
    });
    assert!(
        ws.0[0].try_wait().expect("try_wait").is_none(),
        "it waits for its child"
    );
    // The child finishes, freeing the slot: a stopping worker takes nothing into it.
    std::fs::write(&release, "").expect("release");
    let exit = wait_for(LIMIT, "the worker to exit", || {
        ws.0[0].try_wait().expect("try_wait")
    });
    assert_eq!(exit.code(), Some(0));
    assert_eq!(status(&h, &id)["status"], "completed", "its child finished");
    let left = status(&h, &later);
    assert_eq!(left["status"], "queued", "still in the pool: {left}");
    assert_eq!(left["worker"], Value::Null);
}

#[test]
fn a_worker_killed_mid_run_leaves_unknown_results_and_another_worker_runs_the_rest() {
    let h = Hermes::new();
    let mut ws = Workers(vec![start_worker(&h, "k", 2, &[])]);
    let a = ws.0[0].id();
    wait_for_workers(&h, &[a]);
    let doomed: Vec<String> = (0..2)
        .map(|i| {
            dispatch(&h, "S", "k", &format!("echo line-{i}; sleep 60"))["delegation_id"]
                .as_str()
                .expect("id")
                .to_owned()
        })
        .collect();
    let children: Vec<u64> = doomed
        .iter()
        .map(|id| {
            wait_for(LIMIT, "the child to start", || {
                status(&h, id)["tasks"][0]["pid"].as_u64()
            })
        })
        .collect();
    let rest: Vec<String> = (0..2)
        .map(|i| {
            dispatch(&h, "S", "k", &format!("echo rest-{i}"))["delegation_id"]
                .as_str()
                .expect("id")
                .to_owned()
        })
        .collect();
    for id in &rest {
        assert_eq!(status(&h, id)["status"], "queued", "worker A is full");
    }

    ws.0[0].kill().expect("kill -9");
    ws.0[0].wait().expect("reaped");
    // Worker B's sweep notices A's death by pid (the lease is two minutes), kills A's children,
    // ends A's units `unknown`, and B runs what A never took.
    ws.0.push(start_worker(&h, "k", 2, &[]));
    let mut all: BTreeSet<String> = doomed.iter().cloned().collect();
    all.extend(rest.iter().cloned());
    let delivered = drain_each_once(&h, "S", &all);
    for (i, id) in doomed.iter().enumerate() {
        let s = status(&h, id);
        assert_eq!(s["status"], "unknown", "{s}");
        assert_eq!(s["worker"]["pid"].as_u64(), Some(u64::from(a)));
        assert!(
            delivered[id].contains(&format!("line-{i}")),
            "the tail is kept: {}",
            delivered[id]
        );
    }
    let b = ws.0[1].id();
    for (i, id) in rest.iter().enumerate() {
        let s = status(&h, id);
        assert_eq!(s["status"], "completed", "{s}");
        assert_eq!(s["worker"]["pid"].as_u64(), Some(u64::from(b)));
        assert!(delivered[id].contains(&format!("rest-{i}")));
    }
    for child in children {
        wait_for(LIMIT, "A's child to be killed", || {
            (!process_alive(child)).then_some(())
        });
    }
    let live = workers(&h);
    assert_eq!(live.keys().copied().collect::<Vec<_>>(), [u64::from(b)]);
}

#[test]
fn pool_dispatch_without_a_worker_succeeds_and_says_so_and_bad_pool_input_is_refused() {
    let h = Hermes::new();
    let run = h.run(&[
        "delegate",
        "--session",
        "S",
        "--pool",
        "--json",
        "--",
        "true",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let d = run.json();
    assert_eq!(d["status"], "queued");
    assert_eq!(d["pool"], "default", "bare --pool is the default pool");
    assert_eq!(d["workers"], 0);
    assert!(
        run.stderr.contains("no live worker serves pool default"),
        "{}",
        run.stderr
    );
    assert!(
        h.host_pids().is_empty(),
        "no session host is started for a pool unit"
    );

    let tasks = h.write(
        "t.json",
        r#"{"tasks":[{"goal":"a","command":["true"]}],"pool":"gpu"}"#,
    );
    let from_file = h.json(&[
        "delegate",
        "--session",
        "S",
        "--json",
        "--tasks",
        tasks.to_str().expect("path"),
    ]);
    assert_eq!(from_file["pool"], "gpu");

    h.run(&["-z", "--pool", "gpu", "--", "true"])
        .assert_one_error_line(2);
    h.run(&["worker", "--capacity", "0"])
        .assert_one_error_line(2);
    h.run(&["worker", "--pool", "bad name"])
        .assert_one_error_line(2);
    h.run(&["delegate", "--session", "S", "--pool", "a b", "--", "true"])
        .assert_one_error_line(2);
    let bad_file = h.write(
        "bad.json",
        r#"{"tasks":[{"goal":"a","command":["true"]}],"pool":""}"#,
    );
    h.run(&[
        "delegate",
        "--session",
        "S",
        "--tasks",
        bad_file.to_str().expect("path"),
    ])
    .assert_one_error_line(2);
    let listed = h.run(&["worker", "list"]);
    assert_eq!(listed.code, 0);
    assert!(
        listed.stdout.contains("no live workers"),
        "{}",
        listed.stdout
    );
}
