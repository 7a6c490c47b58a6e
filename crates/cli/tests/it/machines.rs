//! Several machines sharing one PostgreSQL ledger: each "machine" is a home of its
//! own whose processes run in a pid namespace of their own (`unshare --pid --fork
//! --mount-proc`), so no machine can judge another's processes by pid. These run against the
//! throwaway test server whatever the backend under test.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::common::{Hermes, Machine, wait_for};
use serde_json::Value;

/// Short leases, so a lost machine's units are recovered within seconds.
const TIMINGS: [(&str, &str); 4] = [
    ("HERMES_HOST_RECOVERY_INTERVAL_SECONDS", "0.5"),
    ("HERMES_HOST_LEASE_SECONDS", "3"),
    ("HERMES_HOST_HEARTBEAT_SECONDS", "0.5"),
    ("HERMES_DELEGATION_MAX_CONCURRENT_CHILDREN", "2"),
];

fn status(h: &Hermes, id: &str) -> Value {
    h.json(&["delegation", "status", id, "--json"])
}

/// Drains `session` on `h` until `ids` were all delivered, counting deliveries per unit.
fn drain_all(h: &Hermes, session: &str, ids: &[&str]) -> HashMap<String, (u32, Vec<String>)> {
    let mut seen: HashMap<String, (u32, Vec<String>)> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ids.iter().any(|id| !seen.contains_key(*id)) {
        assert!(Instant::now() < deadline, "not all delivered: {seen:?}");
        let run = h.run_env(
            &["drain", "--session", session, "--json", "--wait", "2"],
            &TIMINGS,
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        for env in run.json()["envelopes"].as_array().expect("envelopes") {
            let id = env["delegation_id"].as_str().expect("id").to_owned();
            // Each task's block says `Status: <status>   Progress: …`.
            let statuses = env["text"]
                .as_str()
                .expect("text")
                .lines()
                .filter_map(|line| line.strip_prefix("Status: "))
                .filter_map(|rest| rest.split_whitespace().next())
                .map(str::to_owned)
                .collect();
            let entry = seen.entry(id).or_default();
            entry.0 += 1;
            entry.1 = statuses;
        }
    }
    seen
}

#[test]
fn a_lost_machines_results_are_drained_once_elsewhere_and_the_session_moves_there() {
    let url = hermes_testkit::fresh_database(&hermes_testkit::pg_admin_url());
    let a = Hermes::sharing(&url);
    let b = Hermes::sharing(&url);
    let (mut machine_a, ids) = crate::common::machine_dispatching(
        &a,
        "M",
        &["echo early-result", "echo started; exec sleep 300"],
        &TIMINGS,
    );
    let (early_id, late_id) = (ids[0].clone(), ids[1].clone());

    // Machine B sees A's units, finished and running; sweeping from B never judges A's host
    // by pid (another process table), only by its lease, which A keeps renewing.
    wait_for(
        Duration::from_secs(30),
        "A's first unit to complete",
        || (status(&b, &early_id)["status"] == "completed").then_some(()),
    );
    wait_for(Duration::from_secs(30), "A's second unit to run", || {
        (status(&b, &late_id)["status"] == "running").then_some(())
    });
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        let s = b.json(&["delegation", "status", &late_id, "--json"]);
        assert_eq!(
            s["status"], "running",
            "judged dead while its lease was renewed: {s}"
        );
    }

    // A is lost whole. From B, after A's lease: every result, finished before the loss or
    // `unknown` after it, is drained exactly once.
    machine_a.lose();
    let seen = drain_all(&b, "M", &[&early_id, &late_id]);
    assert_eq!(seen[&early_id].0, 1, "{seen:?}");
    assert_eq!(seen[&late_id].0, 1, "{seen:?}");
    assert_eq!(seen[&early_id].1, ["completed"], "{seen:?}");
    assert_eq!(seen[&late_id].1, ["unknown"], "{seen:?}");
    assert_eq!(status(&b, &late_id)["status"], "unknown");
    let again = b.run_env(&["drain", "--session", "M", "--json"], &TIMINGS);
    assert_eq!(
        again.json()["envelopes"],
        serde_json::json!([]),
        "delivered once"
    );

    // A's transcript is not on B (the "machines" share a file system here, so A's disk goes
    // with it): B's log shows the ledger's copy and says where the log is.
    std::fs::remove_dir_all(a.path().join("cache")).expect("A's disk is gone");
    let log = b.run(&["delegation", "log", &early_id]);
    assert_eq!(log.code, 0, "{}", log.stderr);
    assert!(log.stdout.contains("early-result"), "{}", log.stdout);
    // It names the machine that ran the child (recorded when the child started; these
    // "machines" share a host name, having no UTS namespace of their own).
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("host name");
    assert!(
        log.stdout
            .contains(&format!("the full log is on machine {}", hostname.trim())),
        "{}",
        log.stdout
    );

    // The session goes on from B: a new unit runs on B's own host and is delivered there.
    let next = b.run_env(
        &[
            "delegate",
            "--session",
            "M",
            "--json",
            "--",
            "sh",
            "-c",
            "echo on-b",
        ],
        &TIMINGS,
    );
    assert_eq!(next.code, 0, "{}", next.stderr);
    let next_id = next.json()["delegation_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let seen = drain_all(&b, "M", &[&next_id]);
    assert_eq!(
        seen[&next_id],
        (1, vec!["completed".to_owned()]),
        "{seen:?}"
    );
}

#[test]
fn each_machine_runs_its_own_max_concurrent_children() {
    let url = hermes_testkit::fresh_database(&hermes_testkit::pg_admin_url());
    let (a, b) = (Hermes::sharing(&url), Hermes::sharing(&url));
    // Two slots per machine (TIMINGS): A fills its own with two long units.
    let script = "\"$HERMES\" delegate --session A -- sleep 300 && \
                  \"$HERMES\" delegate --session A -- sleep 300 && exec sleep 300";
    let _machine_a = Machine::start(&a, script, &TIMINGS);
    wait_for(Duration::from_secs(30), "A's two units to run", || {
        let list = b.json(&["delegation", "list", "--json"]);
        let running = list["running"].as_array()?.len();
        (running == 2).then_some(())
    });
    // B's slots are its own: a unit dispatched there runs at once instead of queueing.
    let run = b.run_env(
        &[
            "delegate",
            "--session",
            "B",
            "--json",
            "--",
            "sh",
            "-c",
            "echo b-ran",
        ],
        &TIMINGS,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let handle = run.json();
    assert_eq!(handle["status"], "dispatched", "{handle}");
    assert_eq!(
        handle["queue_position"],
        Value::Null,
        "not queued: {handle}"
    );
    let id = handle["delegation_id"].as_str().expect("id").to_owned();
    let seen = drain_all(&b, "B", &[&id]);
    assert_eq!(seen[&id], (1, vec!["completed".to_owned()]), "{seen:?}");
}
