//! PostgreSQL as operators run it (issue #22), end to end: the real `hermes`
//! binary reaching the throwaway server, through a fault proxy when a test needs one. These
//! run on PostgreSQL whatever the backend under test.

use std::time::Duration;

use crate::common::{Hermes, wait_for};
use hermes_pgcluster::FaultProxy;
use hermes_testkit::{fresh_database, pg_admin_url};
use serde_json::Value;

/// The simple-query message that commits a transaction, as the client sends it.
const COMMIT: &[u8] = b"COMMIT\0";

/// A fresh database reached through a proxy the test drives, in the clear so that the proxy
/// can see which message is a COMMIT.
fn through_proxy() -> (Hermes, FaultProxy) {
    let url = fresh_database(&pg_admin_url());
    let (proxy, via) = FaultProxy::in_front_of(&url).expect("the proxy starts");
    let via = format!(
        "{via}{}sslmode=disable",
        if via.contains('?') { '&' } else { '?' }
    );
    (Hermes::sharing(&via), proxy)
}

const ECHO: [&str; 3] = ["--", "echo", "once"];

#[test]
fn a_dispatch_whose_answer_was_lost_names_its_id_and_sent_again_with_it_is_recorded_once() {
    let (h, proxy) = through_proxy();
    // The session exists, so the dispatch is the command's first COMMIT.
    h.ledger()
        .ensure_session(
            &hermes_ledger::SessionId::new("P").expect("id"),
            hermes_ledger::Timestamp(now_ms()),
        )
        .expect("the session");
    let dispatch = |extra: &[&str], command: &[&str]| {
        let mut args = vec!["delegate", "--session", "P", "--pool", "p", "--json"];
        args.extend_from_slice(extra);
        args.extend_from_slice(command);
        h.run(&args)
    };
    proxy.lose_reply_to(COMMIT);
    let lost = dispatch(&[], &ECHO);
    assert_eq!(proxy.faults(), 1, "the answer to COMMIT was lost");
    lost.assert_one_error_line(6);
    let error = lost.json();
    let id = error["delegation_id"].as_str().expect("the id").to_owned();
    assert_eq!(error["recorded"], "unknown", "{error}");
    assert!(
        lost.stderr.contains(&format!("--id {id}")),
        "{}",
        lost.stderr
    );
    assert!(lost.stderr.contains("may or may not"), "{}", lost.stderr);

    let again = dispatch(&["--id", &id], &ECHO);
    assert_eq!(again.code, 0, "{}", again.stderr);
    let answer = again.json();
    assert_eq!(answer["delegation_id"], id.as_str());
    assert_eq!(answer["already_recorded"], true, "{answer}");
    assert_eq!(answer["status"], "queued");
    let listing = h.json(&["delegation", "list", "--session", "P", "--json"]);
    assert_eq!(listing["queued_count"], 1, "one unit: {listing}");

    // The id of another dispatch, or a malformed one, is refused.
    let other = dispatch(&["--id", &id], &["--", "echo", "twice"]);
    other.assert_one_error_line(2);
    assert!(
        other.stderr.contains("different dispatch"),
        "{}",
        other.stderr
    );
    let malformed = dispatch(&["--id", "deleg_XYZ"], &ECHO);
    malformed.assert_one_error_line(2);
    assert!(malformed.stderr.contains("--id"), "{}", malformed.stderr);
    let listing = h.json(&["delegation", "list", "--session", "P", "--json"]);
    assert_eq!(listing["queued_count"], 1, "still one unit: {listing}");
}

#[test]
fn an_ack_that_exited_6_at_commit_run_again_by_the_harness_says_repeated_and_delivers_once() {
    // The dispatcher and its host reach the server directly; the harness's acks go through
    // the proxy, which loses the answer to the ack's COMMIT and then the whole server for
    // longer than the claim's 3 s lease (each login gives up after 1 s).
    let url = fresh_database(&pg_admin_url());
    let (proxy, via) = FaultProxy::in_front_of(&url).expect("the proxy starts");
    let direct = Hermes::sharing(&url);
    let harness = Hermes::sharing(&format!(
        "{via}{}sslmode=disable&connect_timeout=1",
        if via.contains('?') { '&' } else { '?' }
    ));
    let run = direct.run(&[
        "delegate",
        "--session",
        "S",
        "--json",
        "--",
        "echo",
        "acked",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = run.json()["delegation_id"].as_str().expect("id").to_owned();
    let delivery = |h: &Hermes| {
        h.json(&["delegation", "status", &id, "--json"])["tasks"][0]["delivery"].clone()
    };
    crate::common::wait_for(
        std::time::Duration::from_secs(30),
        "the child's result",
        || (delivery(&direct)["state"] == "pending").then_some(()),
    );
    let held = direct.json(&[
        "drain",
        "--session",
        "S",
        "--hold",
        "--lease",
        "3",
        "--json",
    ]);
    let held_at = std::time::Instant::now();
    let token = held["envelopes"][0]["claim"]
        .as_str()
        .expect("a claim token")
        .to_owned();

    // An ack is one statement on PostgreSQL: the call of `hermes_ack`, committed on its own.
    proxy.lose_reply_to(b"hermes_ack($1");
    proxy.then_black_hole();
    let lost = harness.run(&["delivery", "ack", &token, "--json"]);
    lost.assert_one_error_line(6);
    assert_eq!(proxy.faults(), 1, "the answer to the ack's COMMIT was lost");
    proxy.pass();
    let again = harness.run(&["delivery", "ack", &token, "--json"]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    let answer = again.json();
    assert_eq!(
        answer["repeated"], true,
        "already acked by this token: {answer}"
    );
    assert_eq!(answer["transitions"][0]["to"], "delivered", "{answer}");

    // Once the lease is over the result is not offered again: it was delivered once.
    crate::common::wait_for(
        std::time::Duration::from_secs(30),
        "the claim's lease to run out",
        || (held_at.elapsed() > std::time::Duration::from_millis(3_500)).then_some(()),
    );
    let drained = direct.json(&["drain", "--session", "S", "--json"]);
    assert_eq!(
        drained["envelopes"].as_array().map(Vec::len),
        Some(0),
        "{drained}"
    );
    let after = delivery(&direct);
    assert_eq!(after["state"], "delivered", "{after}");
    assert_eq!(after["attempts"], 1, "{after}");
}

/// The time now, in the ledger's milliseconds.
fn now_ms() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(since.as_millis()).expect("fits")
}

#[test]
fn a_session_dispatch_sent_again_under_its_id_starts_nothing_and_says_so() {
    let h = Hermes::sharing(&fresh_database(&pg_admin_url()));
    let id = "deleg_00000000c0de";
    let args = [
        "delegate",
        "--session",
        "S",
        "--id",
        id,
        "--json",
        "--",
        "sh",
        "-c",
        "echo one",
    ];
    let first = h.run(&args);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_eq!(first.json()["delegation_id"], id);
    assert_eq!(first.json()["already_recorded"], false);
    let host = first.json()["host_pid"].as_u64().expect("a host runs it");
    let again = h.run(&args);
    assert_eq!(again.code, 0, "{}", again.stderr);
    let answer = again.json();
    assert_eq!(answer["delegation_id"], id);
    assert_eq!(answer["already_recorded"], true, "{answer}");
    assert_eq!(answer["host_pid"], host, "the unit's own host, no other");
    let without_json: Vec<&str> = args.iter().copied().filter(|a| *a != "--json").collect();
    let text = h.run(&without_json);
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(text.stdout.contains("already recorded"), "{}", text.stdout);
    let drained = h.run(&["drain", "--session", "S", "--wait", "30"]);
    assert_eq!(drained.code, 0, "{}", drained.stderr);
    assert_eq!(
        drained.stdout.matches("│ one").count(),
        1,
        "{}",
        drained.stdout
    );
}

/// A home of its own on the database of `url`, in the deployment namespace `namespace`.
fn deployment(url: &str, namespace: &str) -> Hermes {
    let h = Hermes::sharing(url);
    h.write(
        "config.toml",
        &format!("[ledger]\nnamespace = \"{namespace}\"\n"),
    );
    h
}

#[test]
fn two_deployments_on_one_database_keep_their_sessions_hosts_and_results_apart() {
    let url = fresh_database(&pg_admin_url());
    let (a, b) = (deployment(&url, "team_a"), deployment(&url, "team_b"));
    let info = a.json(&["ledger", "info", "--json"]);
    assert_eq!(info["namespace"], "team_a", "{info}");
    // The same session name in both: A's child is still running when B's session ends.
    // A's child finishes only once the test says so.
    let go = a.path().join("go");
    let script = crate::common::until_told(&go, "from-a");
    let slow = a.run(&[
        "delegate",
        "--session",
        "S",
        "--json",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert_eq!(slow.code, 0, "{}", slow.stderr);
    let a_id = slow.json()["delegation_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let fast = b.run(&[
        "delegate",
        "--session",
        "S",
        "--json",
        "--",
        "echo",
        "from-b",
    ]);
    assert_eq!(fast.code, 0, "{}", fast.stderr);
    assert_ne!(
        fast.json()["host_pid"],
        slow.json()["host_pid"],
        "B's unit runs in B's own host"
    );
    let b_drained = b.run(&["drain", "--session", "S", "--wait", "30"]);
    assert_eq!(b_drained.code, 0, "{}", b_drained.stderr);
    assert!(
        b_drained.stdout.contains("│ from-b"),
        "{}",
        b_drained.stdout
    );
    assert!(!b_drained.stdout.contains("from-a"), "{}", b_drained.stdout);
    assert_eq!(
        a.json(&["delegation", "status", &a_id, "--json"])["status"],
        "running",
        "A's child still runs"
    );
    let ended = b.run(&["session", "end", "S"]);
    assert_eq!(ended.code, 0, "{}", ended.stderr);
    assert_eq!(
        a.json(&["delegation", "status", &a_id, "--json"])["status"],
        "running",
        "B's session end left A's child alone"
    );
    std::fs::write(&go, "").expect("lets A's child finish");
    let a_drained = a.run(&["drain", "--session", "S", "--wait", "30"]);
    assert_eq!(a_drained.code, 0, "{}", a_drained.stderr);
    assert_eq!(
        a_drained.stdout.matches("│ from-a").count(),
        1,
        "{}",
        a_drained.stdout
    );
    assert!(!a_drained.stdout.contains("from-b"), "{}", a_drained.stdout);
    let status = a.json(&["delegation", "status", &a_id, "--json"]);
    assert_eq!(status["status"], "completed", "not interrupted: {status}");
    let sessions = a.json(&["session", "list", "--json"]);
    assert_eq!(sessions["sessions"][0]["state"], "active", "{sessions}");
    assert_eq!(
        b.run(&["drain", "--session", "S"]).code,
        5,
        "B's S has ended"
    );
    // A bad namespace is refused, naming the key.
    let bad = a.run_env(
        &["ledger", "info"],
        &[("HERMES_LEDGER_NAMESPACE", "Team-A")],
    );
    bad.assert_one_error_line(2);
    assert!(
        bad.stderr.contains("HERMES_LEDGER_NAMESPACE"),
        "{}",
        bad.stderr
    );
}

/// A process the test started, killed when the test ends however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Timings under which a host or worker fences itself within seconds of losing the server,
/// and its units are recovered soon after.
const FENCING: [(&str, &str); 3] = [
    ("HERMES_HOST_HEARTBEAT_SECONDS", "0.5"),
    ("HERMES_HOST_LEASE_SECONDS", "3"),
    ("HERMES_HOST_RECOVERY_INTERVAL_SECONDS", "0.5"),
];

/// A fresh database, a proxy in front of it, a home that reaches the server directly (the
/// dispatcher) and one that reaches it through the proxy (the machine an outage cuts off).
fn outage_rig() -> (FaultProxy, Hermes, Hermes) {
    let url = fresh_database(&pg_admin_url());
    let (proxy, via) = FaultProxy::in_front_of(&url).expect("the proxy starts");
    (proxy, Hermes::sharing(&url), Hermes::sharing(&via))
}

/// An outage seen from the machine behind `proxy`: nothing it sends is answered until `who`
/// logged in `log` that it fenced itself; then the server answers again, on new connections.
fn outage_until_fenced(proxy: &FaultProxy, log: &std::path::Path, who: &str) {
    proxy.black_hole();
    crate::common::wait_for(
        std::time::Duration::from_secs(60),
        &format!("{who} to fence itself"),
        || {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            text.contains("lost its lease").then_some(())
        },
    );
    proxy.pass();
    proxy.drop_all();
}

#[test]
fn a_worker_fenced_by_a_long_outage_re_registers_with_a_fresh_epoch_and_runs_the_next_unit() {
    // The dispatcher reaches the server directly; the worker's machine through the proxy.
    let (proxy, dispatcher, machine) = outage_rig();
    let timings = FENCING;
    let log = machine.path().join("worker.log");
    let mut command = machine.command(&["worker", "--pool", "p", "--capacity", "1"]);
    command
        .envs(timings)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("the worker's log"));
    let mut worker = Killed(command.spawn().expect("the worker starts"));
    let pid = u64::from(worker.0.id());
    let live_worker = |h: &Hermes| {
        h.json(&["worker", "list", "--json"])["workers"]
            .as_array()
            .is_some_and(|all| all.iter().any(|w| w["pid"] == pid))
    };
    let limit = Duration::from_secs(60);
    crate::common::wait_for(limit, "the worker to register", || {
        live_worker(&dispatcher).then_some(())
    });
    let dispatch = |script: &str| {
        let run = dispatcher.run_env(
            &[
                "delegate",
                "--session",
                "W",
                "--pool",
                "p",
                "--json",
                "--",
                "sh",
                "-c",
                script,
            ],
            &timings,
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.json()["delegation_id"].as_str().expect("id").to_owned()
    };
    let status = |id: &str| dispatcher.json(&["delegation", "status", id, "--json"]);
    let before = dispatch("sleep 120");
    // Its child's start recorded, not only the unit taken (a taken unit is `running` at
    // once): a unit whose child's start the outage kept from the ledger was, for recovery,
    // never started, and goes back to the pool instead of ending `unknown`.
    crate::common::wait_for(limit, "the first unit's child to start", || {
        let unit = status(&before);
        (unit["tasks"][0]["status"] == "running" && unit["tasks"][0]["pid"].is_u64()).then_some(())
    });

    outage_until_fenced(&proxy, &log, "the worker");

    crate::common::wait_for(limit, "the fenced epoch's unit to be recovered", || {
        (status(&before)["status"] == "unknown").then_some(())
    });
    crate::common::wait_for(limit, "the worker to re-register", || {
        live_worker(&dispatcher).then_some(())
    });
    let after = dispatch("echo after the outage");
    let mut drained = String::new();
    crate::common::wait_for(limit, "the next unit's result", || {
        let run = dispatcher.run(&["drain", "--session", "W", "--wait", "5"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        drained.push_str(&run.stdout);
        drained.contains("│ after the outage").then_some(())
    });
    let done = status(&after);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["worker"]["pid"], pid,
        "the same worker process ran it: {done}"
    );
    assert!(
        worker.0.try_wait().expect("waits").is_none(),
        "the worker still runs: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("re-registered with a fresh epoch"), "{text}");
}

/// A headless host of session `H` started on a machine that reaches the server through a
/// proxy (with `timings`, and no idle exit while the test runs), its log and its pid, once it
/// hosts the session: a `delegate` before that would start a host of its own.
fn proxied_host(
    dispatcher: &Hermes,
    machine: &Hermes,
    timings: &[(&str, &str)],
) -> (Killed, std::path::PathBuf, u64) {
    let log = machine.path().join("host.log");
    let mut command = machine.command(&["host", "--session", "H"]);
    command
        .envs(timings.iter().copied())
        .env("HERMES_HOST_IDLE_EXIT_SECONDS", "60")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("the host's log"));
    let host = Killed(command.spawn().expect("the host starts"));
    let pid = u64::from(host.0.id());
    wait_hosted(dispatcher, pid, "the host to register");
    (host, log, pid)
}

/// Waits until process `pid` hosts session `H` and has registered.
fn wait_hosted(dispatcher: &Hermes, pid: u64, what: &str) {
    let session = hermes_ledger::SessionId::new("H").expect("id");
    crate::common::wait_for(std::time::Duration::from_secs(60), what, || {
        let ledger = dispatcher.ledger();
        let process = ledger.session(&session).ok()??.host?;
        (u64::from(process.pid) == pid && ledger.host(process).ok()?.is_some()).then_some(())
    });
}

#[test]
fn a_headless_host_fenced_by_a_long_outage_hosts_its_session_again_while_it_has_work() {
    let (proxy, dispatcher, machine) = outage_rig();
    let timings = [
        &FENCING[..],
        &[("HERMES_DELEGATION_MAX_CONCURRENT_CHILDREN", "1")],
    ]
    .concat();
    let (mut host, log, pid) = proxied_host(&dispatcher, &machine, &timings);
    let limit = Duration::from_secs(60);
    let dispatch = |script: &str| {
        let args = [
            "delegate",
            "--session",
            "H",
            "--json",
            "--",
            "sh",
            "-c",
            script,
        ];
        let run = dispatcher.run_env(&args, &timings);
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.json()["delegation_id"].as_str().expect("id").to_owned()
    };
    let status = |id: &str| dispatcher.json(&["delegation", "status", id, "--json"]);
    let before = dispatch("sleep 120");
    crate::common::wait_for(limit, "the first unit's child to start", || {
        status(&before)["tasks"][0]["pid"].is_u64().then_some(())
    });
    // One child at a time: this one waits, assigned to the host, through the outage.
    let after = dispatch("echo after the outage");
    assert_eq!(status(&after)["status"], "queued");

    outage_until_fenced(&proxy, &log, "the host");

    crate::common::wait_for(limit, "the fenced epoch's unit to be recovered", || {
        (status(&before)["status"] == "unknown").then_some(())
    });
    let mut drained = String::new();
    crate::common::wait_for(limit, "the queued unit's result", || {
        let run = dispatcher.run(&["drain", "--session", "H", "--wait", "5"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        drained.push_str(&run.stdout);
        drained.contains("│ after the outage").then_some(())
    });
    let done = status(&after);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["host_pid"], pid,
        "the same host process ran it: {done}"
    );
    assert!(
        host.0.try_wait().expect("waits").is_none(),
        "the host still runs: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("re-registered with a fresh epoch"), "{text}");
    wait_hosted(&dispatcher, pid, "the host to host the session again");
}

#[test]
fn a_headless_host_fenced_with_no_work_left_exits_once_its_units_were_recovered() {
    let (proxy, dispatcher, machine) = outage_rig();
    let timings = FENCING;
    let (mut host, log, _) = proxied_host(&dispatcher, &machine, &timings);
    let args = ["delegate", "--session", "H", "--json", "--", "sleep", "120"];
    let run = dispatcher.run_env(&args, &timings);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = run.json()["delegation_id"].as_str().expect("id").to_owned();
    let status = || dispatcher.json(&["delegation", "status", &id, "--json"]);
    let limit = Duration::from_secs(60);
    crate::common::wait_for(limit, "the unit's child to start", || {
        status()["tasks"][0]["pid"].is_u64().then_some(())
    });
    outage_until_fenced(&proxy, &log, "the host");
    let exited = crate::common::wait_for(limit, "the host to exit", || {
        host.0.try_wait().expect("waits")
    });
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(exited.success(), "{exited}: {text}");
    assert!(text.contains("has no work left"), "{text}");
    assert_eq!(status()["status"], "unknown");
}

#[test]
fn a_headless_host_whose_connections_fail_for_less_than_its_lease_keeps_hosting() {
    let (proxy, dispatcher, machine) = outage_rig();
    // The default lease (30 s): the outage below is far shorter, so the host never fences.
    let (mut host, log, pid) = proxied_host(&dispatcher, &machine, &[]);
    let limit = Duration::from_secs(60);
    // Every connection is cut as soon as it sends anything: each of the idle host's looks
    // at its units fails, on a fresh connection or not.
    let before = proxy.faults();
    proxy.cut_after(0);
    let deadline = std::time::Instant::now() + limit;
    while proxy.faults() < before + 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for the host's ledger calls to fail ({} faults of 3); its log: {}",
            proxy.faults() - before,
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    proxy.pass();
    assert!(
        host.0.try_wait().expect("waits").is_none(),
        "the host still runs: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let args = [
        "delegate",
        "--session",
        "H",
        "--json",
        "--",
        "echo",
        "still hosted",
    ];
    let run = dispatcher.run(&args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut drained = String::new();
    crate::common::wait_for(limit, "the unit's result", || {
        let run = dispatcher.run(&["drain", "--session", "H", "--wait", "5"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        drained.push_str(&run.stdout);
        drained.contains("│ still hosted").then_some(())
    });
    let id = run.json()["delegation_id"].as_str().expect("id").to_owned();
    let done = dispatcher.json(&["delegation", "status", &id, "--json"]);
    assert_eq!(done["host_pid"], pid, "the same host ran it: {done}");
}

/// The database part of `url`.
fn dbname(url: &str) -> &str {
    let base = url.split('?').next().unwrap_or(url);
    base.rsplit('/').next().unwrap_or_default()
}

/// Whether a backend of `direct`'s database last ran `LISTEN` on one of hermes' own channels
/// (a listener that connected past the pooler; one behind it never listens on them).
fn listening_directly(direct: &str) -> bool {
    hermes_testkit::query_bools(
        direct,
        "SELECT count(*) > 0 FROM pg_stat_activity \
         WHERE datname = current_database() AND query LIKE 'LISTEN hermes\\_events%'",
    ) == vec![true]
}

/// Behind PgBouncer in transaction mode, with fewer server connections than hermes has
/// clients (README "Behind a pooler"; what the mode breaks: <https://www.pgbouncer.org/features.html>):
/// the schema is made and migrated, a session's units are dispatched and hosted, and a waiting
/// drain gets each result once: first polling (no notification gets through the pooler, so
/// nothing listens on hermes' channels), then with `ledger.listen_url` naming a direct
/// connection, where the waiting drain listens.
#[test]
fn behind_pgbouncer_in_transaction_mode_a_session_dispatches_hosts_and_drains_once() {
    let bouncer = hermes_testkit::pg_bouncer(hermes_testkit::PoolMode::Transaction, 3);
    let direct = hermes_testkit::fresh_empty_database(&pg_admin_url());
    let h = Hermes::sharing(&bouncer.url(dbname(&direct)));
    let migrated = h.json(&["ledger", "migrate", "--json"]);
    assert_eq!(
        migrated["schema_version"],
        hermes_ledger::SCHEMA_VERSION,
        "{migrated}"
    );
    let info = h.json(&["ledger", "info", "--json"]);
    assert_eq!(info["reachable"], true, "{info}");
    for round in ["polled", "listened"] {
        if round == "listened" {
            h.write(
                "config.toml",
                &format!("[ledger]\nlisten_url = \"{direct}\"\n"),
            );
        }
        let waiting = h
            .command(&["drain", "--session", "P", "--wait", "30"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("drain starts");
        if round == "listened" {
            crate::common::wait_for(
                std::time::Duration::from_secs(10),
                "the waiting drain to listen on the direct connection",
                || listening_directly(&direct).then_some(()),
            );
        }
        let ids: Vec<String> = (0..3)
            .map(|n| {
                let word = format!("{round}-{n}");
                let sent = h.run(&["delegate", "--session", "P", "--json", "--", "echo", &word]);
                assert_eq!(sent.code, 0, "{}\n{}", sent.stderr, bouncer.log());
                sent.json()["delegation_id"]
                    .as_str()
                    .expect("id")
                    .to_owned()
            })
            .collect();
        let first = waiting.wait_with_output().expect("drain ends");
        assert!(
            first.status.success(),
            "{}",
            String::from_utf8_lossy(&first.stderr)
        );
        let mut seen = String::from_utf8_lossy(&first.stdout).into_owned();
        while (0..3).any(|n| !seen.contains(&format!("│ {round}-{n}"))) {
            let drained = h.run(&["drain", "--session", "P", "--wait", "30"]);
            assert_eq!(drained.code, 0, "{}\n{}", drained.stderr, bouncer.log());
            seen.push_str(&drained.stdout);
        }
        for n in 0..3 {
            assert_eq!(
                seen.matches(&format!("│ {round}-{n}")).count(),
                1,
                "each result once: {seen}"
            );
        }
        for id in &ids {
            let status = h.json(&["delegation", "status", id, "--json"]);
            assert_eq!(status["status"], "completed", "{status}");
        }
        if round == "polled" {
            assert!(
                !listening_directly(&direct),
                "nothing listens behind the pooler"
            );
        }
    }
    let end = h.run(&["session", "end", "P"]);
    assert_eq!(end.code, 0, "{}", end.stderr);
}

/// A server out of connections for hermes' role: the `delegate` whose new host cannot connect
/// says so itself, on stderr with exit 6 (the ledger cannot be reached), rather than exit 1
/// with the reason only in the host's log (issue #22, defect 9).
#[test]
fn a_host_refused_for_too_many_connections_is_reported_by_its_delegate_with_exit_6() {
    let db = fresh_database(&pg_admin_url());
    let role = format!("capped_{}", std::process::id());
    hermes_testkit::execute_sql(
        &db,
        &format!(
            "CREATE ROLE {role} LOGIN PASSWORD 'pw'; \
             GRANT ALL ON ALL TABLES IN SCHEMA public TO {role};"
        ),
    );
    let port = db
        .rsplit_once(':')
        .expect("a port")
        .1
        .split('/')
        .next()
        .expect("port");
    let url = format!(
        "postgres://{role}:pw@127.0.0.1:{port}/{}?sslmode=disable",
        dbname(&db)
    );
    let h = Hermes::sharing(&url);
    let slow = h.run(&["delegate", "--session", "a", "--", "sleep", "30"]);
    assert_eq!(slow.code, 0, "{}", slow.stderr);
    // Room for what session a's host holds and one more: the next delegate connects, and the
    // host it starts cannot. The host holds one connection once it runs the child (its calls
    // and its listener share it).
    let running = || {
        let status = h.json(&["delegation", "list", "--json"]);
        status.to_string().contains("\"running\"")
    };
    crate::common::wait_for(
        std::time::Duration::from_secs(10),
        "session a's host to run its child on its one connection",
        || (running() && hermes_testkit::connections_of(&db, &role) == 1).then_some(()),
    );
    let held = hermes_testkit::connections_of(&db, &role);
    hermes_testkit::execute_sql(
        &db,
        &format!("ALTER ROLE {role} CONNECTION LIMIT {}", held + 1),
    );
    let refused = h.run(&["delegate", "--session", "b", "--", "true"]);
    assert_eq!(refused.code, 6, "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("headless host for session b could not start")
            && refused.stderr.contains("too many connections"),
        "{}",
        refused.stderr
    );
    hermes_testkit::execute_sql(&db, &format!("ALTER ROLE {role} CONNECTION LIMIT -1"));
    let end = h.run(&["session", "end", "a"]);
    assert_eq!(end.code, 0, "{}", end.stderr);
}

/// While its host cannot record a finished child's result (here every event write
/// refused with `disk_full`), `delegation status` on the host's machine says so, and stops
/// saying so once the result is recorded.
#[test]
fn delegation_status_shows_a_result_its_host_keeps_failing_to_record() {
    let url = fresh_database(&pg_admin_url());
    let h = Hermes::sharing(&url);
    let go = h.path().join("go");
    let script = crate::common::until_told(&go, "the result");
    let dispatched = h.json(&[
        "delegate",
        "--session",
        "R",
        "--json",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let id = dispatched["delegation_id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let status = || h.json(&["delegation", "status", &id, "--json"]);
    wait_for(Duration::from_secs(10), "the child runs", || {
        status()["tasks"][0]["pid"].as_u64()
    });
    assert_eq!(status()["tasks"][0]["recording"], Value::Null);

    hermes_testkit::fail_event_writes(&url, true);
    std::fs::write(&go, b"").expect("the child may finish");
    let recording = wait_for(
        Duration::from_secs(15),
        "status says it is retrying",
        || {
            status()["tasks"][0]["recording"]
                .as_str()
                .map(str::to_owned)
        },
    );
    assert!(
        recording.starts_with("retrying since ") && recording.contains("could not extend file"),
        "{recording}"
    );
    let text = h.run(&["delegation", "status", &id]);
    assert!(
        text.stdout.contains("recording: retrying since "),
        "{}",
        text.stdout
    );

    hermes_testkit::fail_event_writes(&url, false);
    let done = wait_for(Duration::from_secs(20), "the result is recorded", || {
        let value = status();
        (value["status"] == "completed").then_some(value)
    });
    assert_eq!(done["tasks"][0]["recording"], Value::Null, "{done}");
    assert!(
        done["tasks"][0]["result"]
            .as_str()
            .is_some_and(|r| r.contains("the result")),
        "{done}"
    );
}

/// A server that takes the login and then never answers (hung, or behind a
/// partition that black-holes the session): each command gives up once its statement deadline
/// passes (`ledger.statement_timeout_seconds` 1 s and a margin as long: 2 s), exits 6 and says
/// so in one line, instead of hanging.
#[test]
fn a_command_whose_server_stops_answering_exits_6_within_its_deadline_in_one_line() {
    let (h, proxy) = through_proxy();
    let first = h.run(&["delegation", "list"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    // Every connection goes silent at the schema check each command makes first.
    proxy.hang_at(b"hermes_schema");
    let short = [("HERMES_LEDGER_STATEMENT_TIMEOUT_SECONDS", "1")];
    let list: &[&str] = &["delegation", "list"];
    let delegate: &[&str] = &["delegate", "--session", "S", "--", "true"];
    for args in [list, delegate] {
        let started = std::time::Instant::now();
        let run = h.run_env(args, &short);
        let took = started.elapsed();
        assert_eq!(run.code, 6, "{args:?}: {}", run.stderr);
        assert_eq!(run.stderr.trim().lines().count(), 1, "{}", run.stderr);
        assert!(
            run.stderr.contains("did not answer within 2 s"),
            "{}",
            run.stderr
        );
        assert!(
            took < std::time::Duration::from_secs(15),
            "{args:?}: {took:?}"
        );
    }
    assert!(proxy.faults() >= 2, "{}", proxy.faults());
    proxy.pass();
    let again = h.run(&["delegation", "list"]);
    assert_eq!(again.code, 0, "{}", again.stderr);
}

/// Issue #22, defect 9: a worker and a session's headless host each hold one server
/// connection while they run a child (their calls and their listener share it); they held two
/// or three before. Each process's connections are told apart by the URL's
/// `application_name`.
#[test]
fn a_worker_and_a_headless_host_each_hold_one_connection_while_they_run_a_child() {
    use std::time::Duration;
    let url = fresh_database(&pg_admin_url());
    let named = |name: &str| {
        format!(
            "{url}{}application_name={name}",
            if url.contains('?') { '&' } else { '?' }
        )
    };
    let dispatcher = Hermes::sharing(&url);
    let worker_home = Hermes::sharing(&named("pinned_worker"));
    let host_home = Hermes::sharing(&named("pinned_host"));
    let mut worker = worker_home.command(&["worker", "--pool", "p", "--capacity", "2"]);
    worker
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let _worker = Killed(worker.spawn().expect("the worker starts"));
    let mut host = host_home.command(&["host", "--session", "H"]);
    host.env("HERMES_HOST_IDLE_EXIT_SECONDS", "60")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let _host = Killed(host.spawn().expect("the host starts"));
    let limit = Duration::from_secs(60);
    crate::common::wait_for(limit, "the worker to register", || {
        let workers = dispatcher.json(&["worker", "list", "--json"]);
        workers["workers"]
            .as_array()
            .is_some_and(|all| !all.is_empty())
            .then_some(())
    });
    let session = hermes_ledger::SessionId::new("H").expect("id");
    crate::common::wait_for(limit, "the host to host session H", || {
        dispatcher.ledger().session(&session).ok()??.host.map(drop)
    });
    let delegate = |args: &[&str]| {
        let run = dispatcher.run(args);
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.json()["delegation_id"].as_str().expect("id").to_owned()
    };
    let pooled = delegate(&[
        "delegate",
        "--session",
        "W",
        "--pool",
        "p",
        "--json",
        "--",
        "sleep",
        "60",
    ]);
    let hosted = delegate(&["delegate", "--session", "H", "--json", "--", "sleep", "60"]);
    for (id, name) in [(&pooled, "pinned_worker"), (&hosted, "pinned_host")] {
        crate::common::wait_for(limit, &format!("{name} to hold one connection"), || {
            let status = dispatcher.json(&["delegation", "status", id, "--json"]);
            let running = status["tasks"][0]["pid"].is_u64();
            (running && hermes_testkit::connections_named(&url, name) == 1).then_some(())
        });
    }
}

/// Issue #22 defect 6: a `drain --wait` whose server becomes unreachable while it
/// waits (every connection cut, new ones refused) keeps waiting rather than exiting 6, and
/// delivers what is published once the server is back.
#[test]
fn a_waiting_drain_outlasts_an_outage_and_delivers_what_came_after_it() {
    use std::io::{BufRead as _, BufReader};
    use std::process::Stdio;

    let url = fresh_database(&pg_admin_url());
    let (proxy, via) = FaultProxy::in_front_of(&url).expect("the proxy starts");
    let via = format!(
        "{via}{}sslmode=disable",
        if via.contains('?') { '&' } else { '?' }
    );
    let (waiting, direct) = (Hermes::sharing(&via), Hermes::sharing(&url));
    let mut drain = waiting.command(&["drain", "--session", "W", "--wait", "60", "--json"]);
    let mut drain = drain
        .env("RUST_LOG", "hermes_router=debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("drain starts");
    let (said, heard) = std::sync::mpsc::channel();
    let stderr = drain.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = said.send(line);
        }
    });
    let mut seen: Vec<String> = Vec::new();
    let until_said = |what: &str, seen: &mut Vec<String>| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !seen.iter().any(|l| l.contains(what)) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match heard.recv_timeout(left) {
                Ok(line) => seen.push(line),
                Err(_) => panic!("the drain never said {what:?}: {seen:?}"),
            }
        }
    };
    until_said("waiting for results", &mut seen);

    // The outage: every connection cut, every new one cut at its first byte.
    proxy.cut_after(0);
    proxy.drop_all();
    until_said("cannot be reached; waiting", &mut seen);
    assert_eq!(
        drain.try_wait().expect("try_wait"),
        None,
        "the drain waits on through the outage: {seen:?}"
    );

    proxy.pass();
    let dispatched = direct.run(&[
        "delegate",
        "--session",
        "W",
        "--",
        "echo",
        "after-the-outage",
    ]);
    assert_eq!(dispatched.code, 0, "{}", dispatched.stderr);
    let out = drain.wait_with_output().expect("the drain ends");
    assert!(out.status.success(), "{:?} {seen:?}", out.status);
    let json: Value = serde_json::from_slice(&out.stdout).expect("drain --json");
    let text = json["envelopes"].to_string();
    assert!(text.contains("after-the-outage"), "{json}");
}
