//! Liveness by lease, with real processes: a dead host's capacity comes back without
//! any other command run, and a host in another pid namespace is never judged by pid.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::{Hermes, process_alive, wait_for};
use serde_json::Value;

/// Short sweeps, a long lease: anything noticed within seconds was noticed by pid, not lease.
const TIMINGS: [(&str, &str); 3] = [
    ("HERMES_HOST_RECOVERY_INTERVAL_SECONDS", "0.5"),
    ("HERMES_HOST_LEASE_SECONDS", "120"),
    ("HERMES_DELEGATION_MAX_CONCURRENT_CHILDREN", "1"),
];

fn status(h: &Hermes, id: &str) -> Value {
    h.json(&["delegation", "status", id, "--json"])
}

/// `hermes delegate --session SESSION --json -- COMMAND…` with the test's timings; its answer.
fn delegated(h: &Hermes, session: &str, command: &[&str]) -> serde_json::Value {
    let mut args = vec!["delegate", "--session", session, "--json", "--"];
    args.extend_from_slice(command);
    let run = h.run_env(&args, &TIMINGS);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.json()
}

/// Dispatches `sleep 120` into `session`, taking the machine's only slot; its id, its host's pid
/// and its child's, once the child runs.
fn holding_the_slot(h: &Hermes, session: &str) -> (String, u64, u64) {
    let answer = delegated(h, session, &["sleep", "120"]);
    let id = answer["delegation_id"].as_str().expect("id").to_owned();
    let host = answer["host_pid"].as_u64().expect("the host's pid");
    let child = wait_for(Duration::from_secs(10), "the child to start", || {
        status(h, &id)["tasks"][0]["pid"].as_u64()
    });
    (id, host, child)
}

/// Dispatches `touch started` into `session`, which waits in the queue; its id.
fn queued_behind(h: &Hermes, session: &str, started: &std::path::Path) -> String {
    let answer = delegated(h, session, &["touch", started.to_str().expect("path")]);
    assert_eq!(
        answer["status"], "queued",
        "another unit holds the only slot"
    );
    answer["delegation_id"].as_str().expect("id").to_owned()
}

#[test]
fn a_killed_hosts_capacity_comes_back_and_its_child_is_gone_with_no_other_command_run() {
    let h = Hermes::new();
    let (a_id, a_host, a_child) = holding_the_slot(&h, "A");
    let started = h.path().join("b-started");
    queued_behind(&h, "B", &started);

    Command::new("kill")
        .args(["-9", &a_host.to_string()])
        .status()
        .expect("kill runs");
    // No hermes command runs from here on: B's own host must sweep, notice A's death by pid
    // (the lease is two minutes), free A's slot and start B's queued unit.
    wait_for(Duration::from_secs(30), "B's queued unit to start", || {
        started.exists().then_some(())
    });
    wait_for(Duration::from_secs(10), "A's child to be killed", || {
        (!process_alive(a_child)).then_some(())
    });
    let a_status = status(&h, &a_id);
    assert_eq!(a_status["status"], "unknown", "{a_status}");
    let drained = h.run(&["drain", "--session", "A"]);
    assert!(drained.stdout.contains("unknown"), "{}", drained.stdout);
    assert_eq!(
        h.run(&["drain", "--session", "A"]).stdout,
        "",
        "delivered once"
    );
}

/// A one-shot run killed with SIGKILL while its child runs: the next command's sweep finds the
/// run dead by its pid, kills the child — found by its marker when the run died before it
/// recorded the child's pid, which a one-shot run records with the child's finish or a second
/// after its start — and reports the unit `unknown`, its child `unknown` (it ran), not
/// `cancelled`.
/// Issue #22 defect 7: a session whose host died here with a queued unit, and
/// no dispatch to start it another, gets one from the next command of this machine that sweeps.
#[test]
fn a_dead_hosts_queued_unit_gets_a_new_host_from_the_next_command_that_sweeps() {
    let h = Hermes::new();
    let (a_id, host, _) = holding_the_slot(&h, "A");
    let started = h.path().join("queued-started");
    let queued_id = queued_behind(&h, "A", &started);

    Command::new("kill")
        .args(["-9", &host.to_string()])
        .status()
        .expect("kill runs");
    wait_for(Duration::from_secs(10), "the host to die", || {
        (!process_alive(host)).then_some(())
    });
    // The session's queued unit has no host now, and no dispatch comes to start one: the next
    // command that sweeps (a look at the list, here) starts the session a host.
    wait_for(Duration::from_secs(30), "the queued unit to run", || {
        let list = h.run_env(&["delegation", "list", "--json"], &TIMINGS);
        assert_eq!(list.code, 0, "{}", list.stderr);
        started.exists().then_some(())
    });
    let done = wait_for(Duration::from_secs(10), "the queued unit to finish", || {
        let s = status(&h, &queued_id);
        (s["status"] == "completed").then_some(s)
    });
    let new_host = done["host_pid"].as_u64().expect("the new host's pid");
    assert_ne!(new_host, host, "{done}");
    assert_eq!(status(&h, &a_id)["status"], "unknown");
    let drained = h.run(&["drain", "--session", "A", "--json"]).json();
    let ids: Vec<&str> = drained["envelopes"]
        .as_array()
        .expect("envelopes")
        .iter()
        .filter_map(|e| e["delegation_id"].as_str())
        .collect();
    assert!(
        ids.contains(&a_id.as_str()) && ids.contains(&queued_id.as_str()),
        "{drained}"
    );
}

#[test]
fn a_killed_oneshot_runs_child_is_killed_and_its_unit_reported_by_the_next_command() {
    let h = Hermes::new();
    let pid_file = h.path().join("child.pid");
    let script = format!("echo $$ > {}; exec sleep 120", pid_file.display());
    let mut oneshot = h.command(&["-z", "--", "sh", "-c", &script]);
    oneshot
        .envs(TIMINGS)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut oneshot = oneshot.spawn().expect("hermes -z starts");
    let child = wait_for(Duration::from_secs(10), "the child to start", || {
        std::fs::read_to_string(&pid_file)
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()
    });
    oneshot.kill().expect("kill -9");
    oneshot.wait().expect("reaped");
    let id = wait_for(Duration::from_secs(10), "the unit in the list", || {
        let list = h.json(&["delegation", "list", "--all", "--json"]);
        ["running", "recent"].iter().find_map(|part| {
            list[part]
                .as_array()?
                .first()?
                .get("delegation_id")?
                .as_str()
                .map(str::to_owned)
        })
    });
    // Every short command sweeps at its start (at most every half second here).
    wait_for(Duration::from_secs(30), "the child to be killed", || {
        let status = h.run_env(&["delegation", "status", &id, "--json"], &TIMINGS);
        (!process_alive(child) && status.json()["status"] == "unknown").then_some(())
    });
    let status = status(&h, &id);
    assert_eq!(status["tasks"][0]["status"], "unknown", "{status}");
}

/// A process tree in its own pid namespace, killed (with everything in it) when dropped.
struct Namespace(Child);

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_host_in_another_pid_namespace_keeps_its_unit_while_others_sweep_and_delivers_once() {
    let h = Hermes::new();
    let hermes = env!("CARGO_BIN_EXE_hermes");
    // `sh` is the namespace's pid 1 and outlives `delegate`, so the headless host it started
    // keeps running in there.
    let script = format!(
        "'{hermes}' delegate --session NS --json -- sh -c 'sleep 4; echo from-the-namespace' > '{out}' && exec sleep 120",
        out = h.path().join("dispatch.json").display()
    );
    let mut command = Command::new("unshare");
    h.environment(&mut command);
    command
        .args(["--pid", "--fork", "--mount-proc", "sh", "-c", &script])
        .envs(TIMINGS)
        .stdout(Stdio::null());
    let _ns = Namespace(command.spawn().expect("unshare starts"));
    let dispatch = h.path().join("dispatch.json");
    let handle: Value = wait_for(
        Duration::from_secs(20),
        "the dispatch in the namespace",
        || serde_json::from_slice(&std::fs::read(&dispatch).ok()?).ok(),
    );
    let id = handle["delegation_id"].as_str().expect("id").to_owned();

    // From outside, every command sweeps: none may judge the host by its pid, which means
    // nothing here. Keep at it for well over a sweep interval.
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while std::time::Instant::now() < deadline {
        let listed = h.run_env(&["delegation", "list", "--json"], &TIMINGS);
        assert_eq!(listed.code, 0, "{}", listed.stderr);
        let s = status(&h, &id);
        if s["status"] == "completed" {
            break;
        }
        assert_eq!(s["status"], "running", "judged dead from outside: {s}");
    }
    wait_for(Duration::from_secs(30), "the unit to complete", || {
        (status(&h, &id)["status"] == "completed").then_some(())
    });
    let drained = h.run(&["drain", "--session", "NS"]);
    assert!(
        drained.stdout.contains("from-the-namespace"),
        "{}",
        drained.stdout
    );
    assert_eq!(
        h.run(&["drain", "--session", "NS"]).stdout,
        "",
        "delivered once"
    );
}
