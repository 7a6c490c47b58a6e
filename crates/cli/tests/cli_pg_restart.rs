//! The PostgreSQL server restarted under a running host: nothing lost, nothing doubled. A test
//! binary of its own, since it restarts the one throwaway server every test shares.

mod common;

use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::time::Duration;

use common::{Hermes, wait_for};

/// Restarts the throwaway server (`hermes_testkit::pg_server`), as the user that owns its data
/// directory.
fn restart_server() {
    let server = hermes_testkit::pg_server();
    let (dir, bin) = (server.dir.display(), server.bin.display());
    let data = format!("{dir}/data");
    let owner = std::fs::metadata(&data).expect("the data directory").uid();
    let pg_ctl = format!("{bin}/pg_ctl");
    let args = [
        "-D",
        data.as_str(),
        "restart",
        "-m",
        "fast",
        "-w",
        "-l",
        "/dev/null",
    ];
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let status = if me == owner {
        Command::new(&pg_ctl).args(args).status()
    } else {
        let user = Command::new("id")
            .args(["-nu", &owner.to_string()])
            .output()
            .expect("id runs");
        let user = String::from_utf8_lossy(&user.stdout).trim().to_owned();
        Command::new("runuser")
            .args(["-u", &user, "--", &pg_ctl])
            .args(args)
            .status()
    }
    .expect("pg_ctl runs");
    assert!(status.success(), "the server restarts");
}

#[test]
fn a_server_restart_under_a_running_host_loses_and_doubles_nothing() {
    let url = hermes_testkit::fresh_database(&hermes_testkit::pg_admin_url());
    let h = Hermes::sharing(&url);
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
    restart_server();
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
