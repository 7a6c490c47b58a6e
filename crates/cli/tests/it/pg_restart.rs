//! The PostgreSQL server restarted under a running host: nothing lost, nothing doubled. The
//! test restarts a throwaway server of its own (`hermes_pgcluster::Cluster`), so the server
//! the other tests of this binary share is never restarted under them.

use std::time::Duration;

use hermes_pgcluster::{Cluster, StopMode};

use crate::common::{Hermes, wait_for};

#[test]
fn a_server_restart_under_a_running_host_loses_and_doubles_nothing() {
    let server = Cluster::start().expect("a throwaway server starts");
    let h = Hermes::sharing(&server.url());
    let timings = [
        ("HERMES_HOST_HEARTBEAT_SECONDS", "0.5"),
        ("HERMES_HOST_LEASE_SECONDS", "20"),
    ];
    let run = h.run_env(
        &[
            "delegate",
            "--session",
            "R",
            "--json",
            "--",
            "sh",
            "-c",
            "sleep 3; echo survived",
        ],
        &timings,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = run.json()["delegation_id"].as_str().expect("id").to_owned();
    wait_for(Duration::from_secs(20), "the unit to run", || {
        (h.json(&["delegation", "status", &id, "--json"])["status"] == "running").then_some(())
    });
    server.restart(StopMode::Fast).expect("the server restarts");
    let drained = h.run_env(&["drain", "--session", "R", "--wait", "60"], &timings);
    assert_eq!(drained.code, 0, "{}", drained.stderr);
    assert_eq!(
        drained.stdout.matches("│ survived").count(),
        1,
        "{}",
        drained.stdout
    );
    assert!(
        drained.stdout.contains("Status: completed"),
        "{}",
        drained.stdout
    );
    assert_eq!(
        h.run(&["drain", "--session", "R"]).stdout,
        "",
        "delivered once"
    );
    assert_eq!(
        h.json(&["delegation", "status", &id, "--json"])["status"],
        "completed"
    );
}
