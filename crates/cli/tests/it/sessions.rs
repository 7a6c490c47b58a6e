//! `delegate`, the headless host, `drain`, `delivery`, sessions, and crash recovery.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::{Hermes, process_alive, wait_for};
use serde_json::Value;

fn delegate(h: &Hermes, session: &str, script: &str) -> String {
    let run = h.run(&[
        "delegate",
        "--session",
        session,
        "--json",
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let json = run.json();
    assert_eq!(json["mode"], "background");
    assert_eq!(json["session"], session);
    json["delegation_id"].as_str().expect("id").to_owned()
}

fn status(h: &Hermes, id: &str) -> Value {
    h.json(&["delegation", "status", id, "--json"])
}

#[test]
fn three_children_are_each_drained_exactly_once() {
    let h = Hermes::new();
    let ids = [
        delegate(&h, "S", "echo first"),
        delegate(&h, "S", "sleep 0.5; echo second"),
        delegate(&h, "S", "sleep 1; echo third"),
    ];
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    wait_for(Duration::from_secs(30), "three results", || {
        let drain = h.json(&["drain", "--session", "S", "--json"]);
        for env in drain["envelopes"].as_array().expect("envelopes") {
            let id = env["delegation_id"].as_str().expect("id").to_owned();
            assert_eq!(env["attempts"], 1);
            assert!(env["claim"].is_null());
            *seen.entry(id).or_default() += 1;
        }
        (seen.len() == 3).then_some(())
    });
    for id in &ids {
        assert_eq!(seen.get(id), Some(&1), "{id} delivered once: {seen:?}");
        let s = status(&h, id);
        assert_eq!(s["tasks"][0]["delivery"]["state"], "delivered");
    }
    // Later drains find nothing, text and JSON.
    let again = h.run(&["drain", "--session", "S"]);
    assert_eq!((again.code, again.stdout.as_str()), (0, ""));
    let list = h.json(&["delegation", "list", "--session", "S", "--json"]);
    assert_eq!(list["recent"].as_array().map(Vec::len), Some(3));
    let text = h.run(&["delegation", "list"]);
    assert!(text.stdout.contains(&ids[0]));
    let sessions = h.json(&["session", "list", "--json"]);
    assert_eq!(sessions["sessions"][0]["id"], "S");
    assert_eq!(sessions["sessions"][0]["state"], "active");
    assert_eq!(sessions["sessions"][0]["pending"], 0);
}

#[test]
fn a_held_claim_that_is_never_settled_is_offered_again_and_the_old_token_is_fenced() {
    let h = Hermes::new();
    let id = delegate(&h, "S", "echo held");
    wait_for(Duration::from_secs(20), "the child to finish", || {
        (status(&h, &id)["tasks"][0]["delivery"]["state"] == "pending").then_some(())
    });
    let held = h.json(&[
        "drain",
        "--session",
        "S",
        "--hold",
        "--lease",
        "3",
        "--json",
        "--consumer",
        "hook",
    ]);
    let env = &held["envelopes"][0];
    assert_eq!(env["attempts"], 1);
    assert!(env["text"].as_str().expect("text").contains("held"));
    let old = env["claim"].as_str().expect("a claim token").to_owned();
    assert_eq!(status(&h, &id)["tasks"][0]["delivery"]["consumer"], "hook");
    // While the lease lives, another drain gets nothing and is told when to look again.
    let blocked = h.json(&["drain", "--session", "S", "--json"]);
    assert_eq!(blocked["envelopes"].as_array().map(Vec::len), Some(0));
    assert_eq!(blocked["deferred"][0]["delegation_id"], id.as_str());
    // After the lease ran out, it is offered again with attempts 2.
    let again = wait_for(Duration::from_secs(10), "the lease to expire", || {
        let d = h.json(&["drain", "--session", "S", "--hold", "--json"]);
        (!d["envelopes"].as_array().expect("envelopes").is_empty()).then_some(d)
    });
    assert_eq!(again["envelopes"][0]["attempts"], 2);
    let new = again["envelopes"][0]["claim"]
        .as_str()
        .expect("claim")
        .to_owned();
    h.run(&["delivery", "ack", &old]).assert_one_error_line(3);
    let renewed = h.run(&["delivery", "renew", &new, "--lease", "60"]);
    assert_eq!(renewed.code, 0, "{}", renewed.stderr);
    let acked = h.json(&["delivery", "ack", &new, "--json"]);
    assert_eq!(acked["transitions"][0]["to"], "delivered");
    h.run(&["delivery", "release", &new])
        .assert_one_error_line(3);
    h.run(&["delivery", "ack", "not-a-token"])
        .assert_one_error_line(2);
}

#[test]
fn a_held_claim_acked_twice_by_separate_processes_says_so_the_second_time() {
    let h = Hermes::new();
    let id = delegate(&h, "S", "echo twice acked");
    wait_for(Duration::from_secs(20), "the child to finish", || {
        (status(&h, &id)["tasks"][0]["delivery"]["state"] == "pending").then_some(())
    });
    let held = h.json(&["drain", "--session", "S", "--hold", "--json"]);
    let token = held["envelopes"][0]["claim"]
        .as_str()
        .expect("a claim token")
        .to_owned();
    let first = h.json(&["delivery", "ack", &token, "--json"]);
    assert_eq!(first["repeated"], false, "{first}");
    assert_eq!(first["transitions"][0]["to"], "delivered");
    // The harness could not tell whether that landed and runs it again: a no-op that says so.
    let again = h.json(&["delivery", "ack", &token, "--json"]);
    assert_eq!(again["repeated"], true, "{again}");
    assert_eq!(again["transitions"], first["transitions"]);
    let text = h.run(&["delivery", "ack", &token]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(
        text.stdout.contains("already acked by this token"),
        "{}",
        text.stdout
    );
    // Acked, the token can no longer give the result back; it was delivered once.
    h.run(&["delivery", "release", &token])
        .assert_one_error_line(3);
    let delivery = &status(&h, &id)["tasks"][0]["delivery"];
    assert_eq!(delivery["state"], "delivered", "{delivery}");
    assert_eq!(delivery["attempts"], 1, "{delivery}");
    assert!(delivery["consumer"].is_null(), "no live claim: {delivery}");
    let drained = h.json(&["drain", "--session", "S", "--json"]);
    assert_eq!(drained["envelopes"].as_array().map(Vec::len), Some(0));
}

#[test]
fn release_defer_and_drop_settle_a_held_claim() {
    let h = Hermes::new();
    let id = delegate(&h, "S", "echo settle me");
    wait_for(Duration::from_secs(20), "the child to finish", || {
        (status(&h, &id)["tasks"][0]["delivery"]["state"] == "pending").then_some(())
    });
    let claim = |h: &Hermes| {
        let d = h.json(&["drain", "--session", "S", "--hold", "--json"]);
        d["envelopes"][0]["claim"]
            .as_str()
            .expect("claim")
            .to_owned()
    };
    let t = claim(&h);
    assert_eq!(
        h.json(&["delivery", "defer", &t, "--json"])["transitions"][0]["to"],
        "pending"
    );
    let t = claim(&h);
    assert_eq!(
        h.json(&["delivery", "release", &t, "--json"])["transitions"][0]["to"],
        "pending"
    );
    let t = claim(&h);
    let text = h.run(&["delivery", "drop", &t, "--reason", "not_needed"]);
    assert!(
        text.stdout.contains("dropped (not_needed)"),
        "{}",
        text.stdout
    );
    assert_eq!(
        status(&h, &id)["tasks"][0]["delivery"]["drop_reason"],
        "not_needed"
    );
    assert_eq!(status(&h, &id)["tasks"][0]["delivery"]["attempts"], 2);
}

#[test]
fn delegate_needs_a_session_and_ended_sessions_refuse() {
    let h = Hermes::new();
    let run = h.run(&["delegate", "--", "echo", "x"]);
    run.assert_one_error_line(2);
    assert!(run.stderr.contains("-z"), "{}", run.stderr);
    let run = h.run_env(
        &["delegate", "--json", "--", "echo", "from env"],
        &[("HERMES_SESSION_ID", "E")],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["session"], "E");
    let run = h.run(&["session", "end", "E"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("session E ended"));
    h.run(&["delegate", "--session", "E", "--", "echo", "late"])
        .assert_one_error_line(5);
    h.run(&["drain", "--session", "E"]).assert_one_error_line(5);
    let sessions = h.json(&["session", "list", "--json"]);
    assert_eq!(sessions["sessions"][0]["state"], "ended");
    let text = h.run(&["session", "list"]);
    assert!(text.stdout.contains("ended"));
    // A session nobody has used is not an error to drain.
    let empty = h.json(&["drain", "--session", "never-seen", "--json"]);
    assert_eq!(empty["envelopes"].as_array().map(Vec::len), Some(0));
}

#[test]
fn stop_interrupts_a_running_delegation() {
    let h = Hermes::new();
    let id = delegate(&h, "S", "sleep 30");
    wait_for(Duration::from_secs(20), "the child to run", || {
        (status(&h, &id)["tasks"][0]["status"] == "running").then_some(())
    });
    let run = h.run(&["delegation", "stop", &id, "--reason", "enough"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    wait_for(Duration::from_secs(20), "the interrupt", || {
        (status(&h, &id)["status"] == "interrupted").then_some(())
    });
    let drain = h.run(&["drain", "--session", "S"]);
    assert!(drain.stdout.contains("interrupted"), "{}", drain.stdout);
    h.run(&["delegation", "stop", "deleg_000000000000"])
        .assert_one_error_line(4);
}

#[test]
fn a_killed_host_leaves_unknown_results_with_tails_and_no_survivors() {
    let h = Hermes::new();
    let tasks = h.write(
        "tasks.json",
        r#"{"tasks":[{"goal":"a","command":["sh","-c","echo started a; exec sleep 60"]},{"goal":"b","command":["sh","-c","echo started b; exec sleep 60"]}]}"#,
    );
    let run = h.run(&[
        "delegate",
        "--session",
        "K",
        "--json",
        "--tasks",
        tasks.to_str().expect("path"),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = run.json()["delegation_id"].as_str().expect("id").to_owned();
    let pids: Vec<u64> = wait_for(Duration::from_secs(20), "both children to run", || {
        let s = status(&h, &id);
        let pids: Vec<u64> = s["tasks"]
            .as_array()?
            .iter()
            .filter(|t| t["status"] == "running")
            .filter_map(|t| t["pid"].as_u64())
            .collect();
        (pids.len() == 2).then_some(pids)
    });
    // Let the transcripts get their first lines.
    wait_for(Duration::from_secs(10), "transcripts", || {
        let s = status(&h, &id);
        let all = s["tasks"].as_array()?.iter().all(|t| {
            t["transcript"]
                .as_str()
                .and_then(|p| std::fs::read_to_string(p).ok())
                .is_some_and(|text| text.contains("started"))
        });
        all.then_some(())
    });
    let host = h.host_pids();
    assert_eq!(host.len(), 1);
    let killed = std::process::Command::new("kill")
        .args(["-9", &host[0].to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let s = wait_for(Duration::from_secs(30), "recovery", || {
        let s = status(&h, &id);
        (s["status"] == "unknown").then_some(s)
    });
    for task in s["tasks"].as_array().expect("tasks") {
        assert_eq!(task["status"], "unknown", "{task}");
        let tail = task["transcript_tail"].as_str().expect("a transcript tail");
        assert!(tail.contains("started"), "{tail}");
    }
    // The manifest beside the transcripts says what recovery decided.
    let log = s["tasks"][0]["transcript"].as_str().expect("transcript");
    let dir = std::path::Path::new(log).parent().expect("unit dir");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).expect("manifest.json"))
            .expect("manifest is JSON");
    assert_eq!(manifest["status"], "unknown", "{manifest}");
    assert!(manifest["completed"].is_string(), "{manifest}");
    for task in manifest["tasks"].as_array().expect("tasks") {
        assert_eq!(task["status"], "unknown", "{manifest}");
        assert!(task["exit_reason"].is_string(), "{manifest}");
    }
    wait_for(Duration::from_secs(10), "children to die", || {
        pids.iter().all(|p| !process_alive(*p)).then_some(())
    });
    let drain = h.run(&["drain", "--session", "K"]);
    assert!(drain.stdout.contains("unknown"), "{}", drain.stdout);
}

#[test]
fn a_running_host_starts_new_work_without_waiting_for_its_sweep() {
    let h = Hermes::new();
    // A long sweep: only the host's watch on the ledger's activity can start work promptly.
    let slow_sweep = [("HERMES_HOST_SWEEP_INTERVAL_MS", "10000")];
    let first = h.run_env(
        &["delegate", "--session", "S", "--json", "--", "sleep", "5"],
        &slow_sweep,
    );
    assert_eq!(first.code, 0, "{}", first.stderr);
    let second = h.run_env(
        &["delegate", "--session", "S", "--json", "--", "sleep", "5"],
        &slow_sweep,
    );
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(
        first.json()["host_pid"],
        second.json()["host_pid"],
        "one host for the session"
    );
    let id = second.json()["delegation_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let dispatched = std::time::Instant::now();
    wait_for(Duration::from_secs(5), "the second unit to start", || {
        (!status(&h, &id)["tasks"][0]["started_at"].is_null()).then_some(())
    });
    assert!(
        dispatched.elapsed() < Duration::from_secs(3),
        "started {:?} after dispatch; the sweep alone would take 10 s",
        dispatched.elapsed()
    );
    h.run(&["session", "end", "S"]);
}

#[test]
fn a_drain_blocked_on_its_output_keeps_its_claim_and_nobody_delivers_twice() {
    let h = Hermes::new();
    // Three results of 64 KiB each: far more than a pipe holds.
    let big = "head -c 100000 /dev/zero | tr '\\\\0' x";
    let tasks = h.write(
        "tasks.json",
        &format!(
            r#"{{"tasks":[{{"goal":"a","command":["sh","-c","{big}"]}},{{"goal":"b","command":["sh","-c","{big}"]}},{{"goal":"c","command":["sh","-c","{big}"]}}]}}"#
        ),
    );
    let run = h.run(&[
        "delegate",
        "--session",
        "P",
        "--json",
        "--tasks",
        tasks.to_str().expect("path"),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = run.json()["delegation_id"].as_str().expect("id").to_owned();
    wait_for(Duration::from_secs(30), "the batch to finish", || {
        (status(&h, &id)["status"] == "completed").then_some(())
    });
    let short = [
        ("HERMES_DELIVERY_CLAIM_LEASE_SECONDS", "1"),
        ("HERMES_DELIVERY_HEARTBEAT_SECONDS", "0.2"),
    ];
    // The first drain's stdout is a pipe nobody reads yet: its write blocks.
    let mut first = h.command(&["drain", "--session", "P"]);
    first
        .envs(short)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let first = first.spawn().expect("drain starts");
    let claimed = |s: &Value| -> Option<Vec<String>> {
        let tasks = s["tasks"].as_array()?;
        let leases: Vec<String> = tasks
            .iter()
            .filter(|t| t["delivery"]["state"] == "claimed")
            .filter_map(|t| t["delivery"]["lease_expires_at"].as_str().map(String::from))
            .collect();
        (leases.len() == tasks.len()).then_some(leases)
    };
    let leases = wait_for(Duration::from_secs(20), "the first drain's claim", || {
        claimed(&status(&h, &id))
    });
    let seen = std::time::Instant::now();
    // Let the first lease (1 s) run out three times over while the first drain is blocked.
    let expiry = leases.iter().max().cloned().expect("a lease");
    let later = wait_for(Duration::from_secs(20), "three leases' time", || {
        let s = status(&h, &id);
        let now = s["tasks"][0]["delivery"]["lease_expires_at"]
            .as_str()?
            .to_owned();
        (seen.elapsed() >= Duration::from_secs(3)).then_some(now)
    });
    let second = h.run_env(&["drain", "--session", "P", "--json"], &short);
    assert_eq!(second.code, 0, "{}", second.stderr);
    let taken: Vec<Value> = second.json()["envelopes"]
        .as_array()
        .expect("envelopes")
        .iter()
        .map(|e| e["event_keys"].clone())
        .collect();
    assert!(taken.is_empty(), "the second drain took {taken:?} too");
    // The claim was renewed meanwhile (RFC 3339 UTC times compare as strings).
    assert!(later > expiry, "renewed from {expiry} to {later}");
    let out = first.wait_with_output().expect("first drain ends");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&id) && text.contains("TASK 3/3"),
        "{}",
        &text[..200.min(text.len())]
    );
    let s = status(&h, &id);
    for task in s["tasks"].as_array().expect("tasks") {
        assert_eq!(task["delivery"]["state"], "delivered", "{task}");
        assert_eq!(task["delivery"]["attempts"], 1, "{task}");
    }
}

#[test]
fn status_shows_a_stalling_child_and_its_stall_fields_during_the_grace_period() {
    let h = Hermes::new();
    let stall = [
        ("HERMES_DELEGATION_STALL_IDLE_SECONDS", "1"),
        ("HERMES_DELEGATION_STALL_GRACE_SECONDS", "8"),
    ];
    // The group ignores SIGTERM, so it lives through the grace period.
    let run = h.run_env(
        &[
            "delegate",
            "--session",
            "G",
            "--json",
            "--",
            "sh",
            "-c",
            "trap '' TERM; sleep 1000",
        ],
        &stall,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = run.json()["delegation_id"].as_str().expect("id").to_owned();
    let task = wait_for(Duration::from_secs(30), "the child to be stalling", || {
        let s = status(&h, &id);
        (s["tasks"][0]["status"] == "stalling").then(|| s["tasks"][0].clone())
    });
    // The names `-z --json` uses, under `detail`.
    let detail = &task["detail"];
    assert_eq!(detail["kind"], "stalled", "{task}");
    assert_eq!(detail["stall_threshold_seconds"], 1.0, "{task}");
    assert_eq!(detail["stall_phase"], "idle", "{task}");
    assert_eq!(detail["stall_grace_seconds"], 8.0, "{task}");
    assert!(
        detail["stalled_after_quiet_seconds"].as_f64() >= Some(1.0),
        "{task}"
    );
    assert!(task["stalling_since"].is_string(), "{task}");
    assert!(task["pid"].is_u64(), "it still runs: {task}");
    let text = h.run(&["delegation", "status", &id]);
    assert!(text.stdout.contains("stalling"), "{}", text.stdout);
    assert!(
        text.stdout.contains("idle threshold 1 s"),
        "{}",
        text.stdout
    );
    // After SIGKILL the fields stay, from the outcome.
    let task = wait_for(Duration::from_secs(30), "the child to be stalled", || {
        let s = status(&h, &id);
        (s["tasks"][0]["status"] == "stalled").then(|| s["tasks"][0].clone())
    });
    assert_eq!(task["detail"]["kind"], "stalled", "{task}");
    assert_eq!(task["detail"]["stall_grace_seconds"], 8.0, "{task}");
}

/// Issue #22, defect 6: a `drain --wait` whose connection (its calls' and its
/// listener's) is ended by the server (an operator, a failover), with the host's, reconnects and
/// delivers, instead of exiting 6 at its next look.
#[test]
fn a_waiting_drain_whose_connections_are_all_ended_reconnects_and_delivers() {
    let url = hermes_testkit::fresh_database(&hermes_testkit::pg_admin_url());
    let h = Hermes::sharing(&url);
    let go = h.path().join("go");
    let script = crate::common::until_told(&go, "reconnected");
    let run = h.run(&[
        "delegate",
        "--session",
        "K",
        "--json",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // The drain's connection is told apart by its application_name.
    let named = format!(
        "{url}{}application_name=waiting_drain",
        if url.contains('?') { '&' } else { '?' }
    );
    let drain = h
        .command(&["drain", "--session", "K", "--wait", "60"])
        .env("HERMES_LEDGER_URL", &named)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("drain starts");
    // It has looked for results and waits: its connection is idle after something other than
    // its set-up (the deadlines and schema version, then `LISTEN`, which come before the first
    // look; its listener shares that connection and waits on it between looks).
    let looked = "SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = current_database() \
                  AND application_name = 'waiting_drain' AND state = 'idle' \
                  AND query NOT LIKE 'SELECT (SELECT max(version)%' \
                  AND query NOT LIKE 'SELECT set_config%' AND query NOT LIKE 'LISTEN%' \
                  AND query NOT LIKE 'SELECT pg_notify%'";
    wait_for(Duration::from_secs(20), "the drain to wait", || {
        (hermes_testkit::query_bools(&url, looked) == vec![true]).then_some(())
    });
    let ended = hermes_testkit::terminate_connections(&url);
    assert!(ended >= 2, "{ended} connections ended");
    std::fs::write(&go, b"").expect("the child may finish");
    let out = drain.wait_with_output().expect("drain ends");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout.matches("│ reconnected").count(), 1, "{stdout}");
}

#[test]
fn a_relative_home_reaches_children_in_other_directories_as_the_same_home() {
    let h = Hermes::new();
    let parent = h.path().parent().expect("the home has a parent");
    let name = h.path().file_name().expect("the home has a name");
    let elsewhere = tempfile::tempdir().expect("another directory");
    // Each child says which home it was given and lists the home's delegations from there.
    let script = "printf '%s\\n' \"$HERMES_HOME\"; \"$HERMES\" delegation list --json";
    let elsewhere_arg = elsewhere.path().to_str().expect("utf-8 path");
    let out = h
        .command(&[
            "-z",
            "--json",
            "--cwd",
            elsewhere_arg,
            "--",
            "sh",
            "-c",
            script,
        ])
        .env("HERMES", env!("CARGO_BIN_EXE_hermes"))
        .env("HERMES_HOME", name)
        .current_dir(parent)
        .output()
        .expect("hermes -z runs");
    let run = crate::common::Run::from(out);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let result = run.json()["tasks"][0]["result"]
        .as_str()
        .expect("result")
        .to_owned();
    let (home, listed) = result.split_once('\n').expect("two parts");
    assert_eq!(std::path::Path::new(home), h.path(), "{result}");
    let listed: Value = serde_json::from_str(listed).expect("the child's list is JSON");
    assert_eq!(
        listed["running_count"], 1,
        "the child sees its own run: {listed}"
    );
    assert!(!elsewhere.path().join(name).exists(), "no second home");

    // A headless host's children, in another directory, get the same home.
    let mut delegate = h.command(&[
        "delegate",
        "--session",
        "R",
        "--json",
        "--cwd",
        elsewhere_arg,
        "--",
        "sh",
        "-c",
        script,
    ]);
    let run = crate::common::Run::from(
        delegate
            .env("HERMES_HOME", name)
            .env("HERMES", env!("CARGO_BIN_EXE_hermes"))
            .current_dir(parent)
            .output()
            .expect("delegate runs"),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = run.json()["delegation_id"].as_str().expect("id").to_owned();
    let done = wait_for(Duration::from_secs(20), "the headless host's child", || {
        let s = status(&h, &id);
        (s["status"] == "completed").then_some(s)
    });
    let result = done["tasks"][0]["result"].as_str().expect("result");
    assert!(
        result.starts_with(&format!("{}\n", h.path().display())),
        "{result}"
    );
    assert!(!elsewhere.path().join(name).exists(), "no second home");
}

#[test]
fn a_program_that_cannot_be_found_is_refused_at_dispatch_unless_a_worker_or_z_runs_it() {
    let h = Hermes::new();
    let missing = "hermes-test-no-such-program";
    let run = h.run(&["delegate", "--session", "M", "--", missing, "x"]);
    run.assert_one_error_line(2);
    assert!(run.stderr.contains(missing), "{}", run.stderr);
    // Nothing was recorded: no session, no unit, no host.
    let sessions = h.json(&["session", "list", "--json"]);
    assert_eq!(sessions["sessions"], serde_json::json!([]), "{sessions}");
    let list = h.json(&["delegation", "list", "--all", "--json"]);
    assert_eq!(list["recent"], serde_json::json!([]), "{list}");
    // A path is looked for where the child will run: in its --cwd.
    let dir = tempfile::tempdir().expect("a working directory");
    let cwd = dir.path().to_str().expect("utf-8 path");
    let run = h.run(&[
        "delegate",
        "--session",
        "M",
        "--cwd",
        cwd,
        "--",
        "./here.sh",
    ]);
    run.assert_one_error_line(2);
    assert!(run.stderr.contains(cwd), "{}", run.stderr);
    let script = dir.path().join("here.sh");
    std::fs::write(&script, "#!/bin/sh\necho found here\n").expect("script");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let run = h.run(&[
        "delegate",
        "--session",
        "M",
        "--json",
        "--cwd",
        cwd,
        "--",
        "./here.sh",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = run.json()["delegation_id"].as_str().expect("id").to_owned();
    wait_for(Duration::from_secs(20), "the script's result", || {
        (status(&h, &id)["status"] == "completed").then_some(())
    });
    // A pool's worker may run on a machine that has the program.
    let run = h.run(&[
        "delegate",
        "--session",
        "M",
        "--pool",
        "p",
        "--json",
        "--",
        missing,
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["status"], "queued");
    // A one-shot run reports the operating system's reason at once.
    let run = h.run(&["-z", "--json", "--", missing]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let json = run.json();
    assert_eq!(json["tasks"][0]["status"], "error", "{json}");
}

#[test]
fn ending_a_session_stops_its_headless_host_and_the_session_can_be_resumed() {
    let h = Hermes::new();
    // A long idle exit: only the session's end can make the host leave within the test.
    let long_idle = [("HERMES_HOST_IDLE_EXIT_SECONDS", "300")];
    let run = h.run_env(
        &["delegate", "--session", "S", "--json", "--", "sleep", "30"],
        &long_idle,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let dispatched = run.json();
    let id = dispatched["delegation_id"].as_str().expect("id").to_owned();
    let host = dispatched["host_pid"].as_u64().expect("a host runs it");
    wait_for(Duration::from_secs(20), "the child to run", || {
        (status(&h, &id)["tasks"][0]["status"] == "running").then_some(())
    });
    let end = h.json(&["session", "end", "S", "--json"]);
    assert_eq!(end["session"], "S");
    assert_eq!(end["state"], "ended");
    assert_eq!(end["already_ended"], false);
    assert_eq!(end["interrupted"], serde_json::json!([id]));
    assert_eq!(end["host_pid"].as_u64(), Some(host));
    wait_for(Duration::from_secs(10), "the host to leave", || {
        (!process_alive(host)).then_some(())
    });
    // Nothing was lost: the unit was finalized as interrupted by the session's end.
    let s = status(&h, &id);
    assert_eq!(s["status"], "interrupted", "{s}");
    let sessions = h.json(&["session", "list", "--json"]);
    assert_eq!(sessions["sessions"][0]["state"], "ended");
    assert!(sessions["sessions"][0]["host_pid"].is_null(), "{sessions}");
    // Ending it again says so; an unknown session is an error, in JSON too.
    let again = h.json(&["session", "end", "S", "--json"]);
    assert_eq!(again["already_ended"], true);
    assert!(again["host_pid"].is_null(), "{again}");
    let unknown = h.run(&["session", "end", "nobody", "--json"]);
    unknown.assert_one_error_line(4);
    assert_eq!(unknown.json()["code"], 4);
    assert!(unknown.json()["error"].is_string());
    // The conversation comes back (its agent resumed it): nothing holds the session.
    h.ledger()
        .reopen_session(
            &hermes_ledger::SessionId::new("S").expect("id"),
            hermes_ledger::Timestamp(u64::try_from(unix_ms()).expect("time")),
        )
        .expect("reopened");
    let resumed = h.run(&["--resume", "S"]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert!(!resumed.stderr.contains("leave that one first"));
}

fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis()
}

#[test]
fn every_short_tool_call_shows_in_status_from_another_process_while_it_lasts() {
    let h = Hermes::new();
    // Each tool call lasts 700 ms, less than the two seconds progress once waited for; the
    // child notes when it sent each (nanoseconds since the epoch), to measure the delay.
    let marks = h.path().join("marks");
    std::fs::create_dir(&marks).expect("marks dir");
    let script = format!(
        r#"sleep 0.5; for t in alpha beta gamma delta; do
            date +%s%N > {marks}/$t; echo "{{\"tool\": \"$t\"}}" >&$HERMES_PROGRESS_FD; sleep 0.7
            echo '{{"tool": null}}' >&$HERMES_PROGRESS_FD; sleep 0.7
        done"#,
        marks = marks.display()
    );
    let id = delegate(&h, "S", &script);
    let mut seen: Vec<(String, std::time::SystemTime)> = Vec::new();
    wait_for(Duration::from_secs(30), "the child to end", || {
        let s = status(&h, &id);
        if let Some(tool) = s["tasks"][0]["progress"]["current_tool"].as_str()
            && !seen.iter().any(|(t, _)| t == tool)
        {
            seen.push((tool.to_owned(), std::time::SystemTime::now()));
        }
        (s["status"] == "completed").then_some(())
    });
    let names: Vec<&str> = seen.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(names, ["alpha", "beta", "gamma", "delta"]);
    for (tool, at) in &seen {
        let sent: u128 = std::fs::read_to_string(marks.join(tool))
            .expect("mark")
            .trim()
            .parse()
            .expect("nanoseconds");
        let seen_ns = at
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after the epoch")
            .as_nanos();
        // A figure for the reader, not a verdict (`cargo xtask bench` measures it).
        eprintln!(
            "{tool}: seen by status {} ms after it was sent",
            seen_ns.saturating_sub(sent) / 1_000_000
        );
    }
}
