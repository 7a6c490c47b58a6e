//! `hermes -z` and `hermes cron run`, and the error paths every command shares.

use std::time::Duration;

use crate::common::Hermes;

#[test]
fn oneshot_prints_the_result_block_and_leaves_nothing_pending() {
    let h = Hermes::new();
    let run = h.run(&[
        "-z",
        "--goal",
        "say hello",
        "--",
        "sh",
        "-c",
        "echo hello from a child",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("[ASYNC DELEGATION COMPLETE — deleg_"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("hello from a child"));
    assert!(run.stdout.contains("Original goal: say hello"));

    let json = h.run(&["-z", "--json", "--", "echo", "json please"]).json();
    assert_eq!(json["status"], "completed");
    assert_eq!(json["tasks"][0]["result"], "json please\n");
    assert_eq!(json["tasks"][0]["goal"], "echo json please");
    assert_eq!(json["tasks"][0]["exit_code"], 0);
    let id = json["delegation_id"].as_str().expect("id").to_owned();

    let status = h.json(&["delegation", "status", &id, "--json"]);
    assert_eq!(status["status"], "completed");
    assert_eq!(status["channel"], "inline");
    assert_eq!(status["tasks"][0]["delivery"]["state"], "delivered");
    let list = h.json(&["delegation", "list", "--json"]);
    assert_eq!(list["recent"].as_array().map(Vec::len), Some(2));
    assert_eq!(list["running_count"], 0);
    assert_eq!(list["max_concurrent_children"], 3);
}

/// A one-shot run of one child makes two commits and no more: its dispatch (which registers
/// its host and records its child running) and the child's finish, which carries its pid,
/// settles its event as delivered and removes its host, before the result is printed. On redb,
/// with the file's writable open (1 sync) and close (4), that is 9 syncs, 10 when the file
/// grows (it was 11–12 with three commits, 17–18 with six).
#[test]
fn a_oneshot_run_makes_two_commits_and_leaves_no_host_behind() {
    let h = Hermes::new();
    // The first run creates the ledger; the second is measured.
    assert_eq!(h.run(&["-z", "--", "true"]).code, 0);
    let counts = h.path().join("counts.jsonl");
    let counts_env = counts.to_str().expect("utf-8 path");
    let run = h.run_env(
        &["-z", "--json", "--", "true"],
        &[("HERMES_DEBUG_SYNC_COUNT", counts_env)],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = run.json()["delegation_id"].as_str().expect("id").to_owned();
    let text = std::fs::read_to_string(&counts).expect("counts recorded");
    let io: serde_json::Value =
        serde_json::from_str(text.lines().last().expect("one line")).expect("JSON counts");
    // Two, or three when the child outlived the start-record delay on a busy machine (its pid
    // then has a commit of its own, as for any longer child).
    let commits = io["commits"].as_u64().expect("commits counted");
    assert!(commits == 2 || commits == 3, "{io}");
    if !h.on_postgres() {
        let limit = 10 + 2 * (commits - 2);
        assert!(io["syncs"].as_u64().is_some_and(|n| n <= limit), "{io}");
    }
    let status = h.json(&["delegation", "status", &id, "--json"]);
    assert_eq!(status["tasks"][0]["delivery"]["state"], "delivered");
    // Settled by the commit that published it, before the result was shown.
    assert_eq!(
        status["tasks"][0]["delivery"]["delivered_at"], status["events"][0]["published_at"],
        "{status}"
    );
    assert!(status["tasks"][0]["pid"].as_u64().is_some(), "{status}");
    assert!(
        status["tasks"][0]["started_at"].as_str().is_some(),
        "{status}"
    );
    let overview = h.ledger().overview(0).expect("overview");
    assert!(overview.hosts.is_empty(), "{:?}", overview.hosts);
}

#[test]
fn a_batch_where_one_child_fails_exits_1_shows_both_and_leaves_nothing_pending() {
    let h = Hermes::new();
    let tasks = h.write(
        "tasks.json",
        r#"{"tasks":[{"goal":"good","command":["sh","-c","echo fine"]},{"goal":"bad","command":["sh","-c","echo broken >&2; exit 4"]}]}"#,
    );
    let run = h.run(&["-z", "--tasks", tasks.to_str().expect("path")]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stdout.contains("2 of 2 tasks"), "{}", run.stdout);
    assert!(run.stdout.contains("fine"));
    assert!(run.stdout.contains("broken"));
    let last = run.stderr.lines().last().expect("an error line");
    assert!(
        last.starts_with("hermes: deleg_") && last.contains("partial"),
        "{last}"
    );

    let list = h.json(&["delegation", "list", "--json"]);
    let id = list["recent"][0]["delegation_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let status = h.json(&["delegation", "status", &id, "--json"]);
    for event in status["events"].as_array().expect("events") {
        assert_eq!(event["state"], "delivered", "{event}");
    }
    let json = h.run(&["-z", "--json", "--tasks", tasks.to_str().expect("path")]);
    assert_eq!(json.code, 1);
    let json = json.json();
    assert_eq!(json["status"], "partial");
    assert_eq!(json["tasks"][1]["status"], "failed");
    assert_eq!(json["tasks"][1]["exit_code"], 4);
}

#[test]
fn cron_ignores_the_ambient_session_and_never_leaks_into_it() {
    let h = Hermes::new();
    let env = [("HERMES_SESSION_ID", "victim"), ("HERMES_SESSION_KEY", "k")];
    let run = h.run_env(
        &["cron", "run", "--name", "nightly", "--", "sh", "-c", "echo secret; echo \"sid=${HERMES_SESSION_ID:-none} key=${HERMES_SESSION_KEY:-none} parent=${HERMES_PARENT_SESSION_ID:-none}\""],
        &env,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("secret"));
    assert!(
        run.stdout.contains("sid=none key=none parent=none"),
        "{}",
        run.stdout
    );
    let drain = h.json(&["drain", "--session", "victim", "--json"]);
    assert_eq!(drain["envelopes"].as_array().map(Vec::len), Some(0));
    let drain = h.run_env(&["drain"], &env);
    assert_eq!(drain.code, 0);
    assert_eq!(drain.stdout, "");
    let sessions = h.json(&["session", "list", "--json"]);
    assert_eq!(
        sessions["sessions"].as_array().map(Vec::len),
        Some(0),
        "{sessions}"
    );
}

#[test]
fn malformed_tasks_files_exit_2_naming_the_field() {
    let h = Hermes::new();
    let cases = [
        (
            r#"{"tasks":[{"goal":"a","command":["x"]},{"goal":"b","command":[]}]}"#,
            "tasks[1].command",
        ),
        (r#"{"tasks":[]}"#, "tasks is empty"),
        (
            r#"{"tasks":[{"goal":"","command":["x"]}]}"#,
            "tasks[0].goal",
        ),
        (
            r#"{"tasks":[{"goal":"a","command":["x"],"extra":true}]}"#,
            "unknown field `extra`",
        ),
    ];
    for (text, field) in cases {
        let path = h.write("bad.json", text);
        let run = h.run(&["-z", "--tasks", path.to_str().expect("path")]);
        run.assert_one_error_line(2);
        assert!(
            run.stderr.contains(field),
            "{} should name {field}",
            run.stderr
        );
    }
    let run = h.run(&["-z"]);
    run.assert_one_error_line(2);
    let run = h.run(&["delegation", "frobnicate"]);
    run.assert_one_error_line(2);
}

#[test]
fn unknown_ids_exit_4_with_the_json_error() {
    let h = Hermes::new();
    let run = h.run(&["delegation", "status", "deleg_000000000000", "--json"]);
    run.assert_one_error_line(4);
    let json = run.json();
    assert_eq!(json["error"], "not found");
    assert_eq!(json["delegation_id"], "deleg_000000000000");
    h.run(&["delegation", "status", "deleg_000000000000"])
        .assert_one_error_line(4);
    h.run(&["delegation", "log", "deleg_000000000000"])
        .assert_one_error_line(4);
    h.run(&["session", "end", "nobody"])
        .assert_one_error_line(4);
    h.run(&["delegation", "status", "nonsense"])
        .assert_one_error_line(2);
}

#[test]
fn a_damaged_ledger_exits_6_with_one_line() {
    let h = Hermes::new();
    match &h.ledger_url {
        // A file that is not a ledger.
        None => {
            h.write(
                "ledger.redb",
                &"garbage that is not a redb file\n".repeat(400),
            );
        }
        // A database whose schema a newer hermes wrote.
        Some(url) => hermes_testkit::set_schema_version(url, hermes_ledger::SCHEMA_VERSION + 1),
    }
    for args in [
        &["delegation", "list"][..],
        &["session", "list", "--json"],
        &["-z", "--", "echo", "x"],
        &["drain", "--session", "s"],
    ] {
        let run = h.run(args);
        run.assert_one_error_line(6);
        assert!(run.stderr.contains("ledger"), "{}", run.stderr);
    }
}

#[test]
fn a_malformed_config_exits_2_naming_file_and_key() {
    let h = Hermes::new();
    h.write("config.toml", "[delegation]\nstall_idle_secs = 3\n");
    let run = h.run(&["delegation", "list"]);
    run.assert_one_error_line(2);
    assert!(
        run.stderr.contains("config.toml") && run.stderr.contains("delegation.stall_idle_secs"),
        "{}",
        run.stderr
    );
    h.write("config.toml", "[delegation]\nmax_concurrent_children = 7\n");
    assert_eq!(
        h.json(&["delegation", "list", "--json"])["max_concurrent_children"],
        7
    );
    let run = h.run_env(
        &["delegation", "list", "--json"],
        &[("HERMES_DELEGATION_MAX_CONCURRENT_CHILDREN", "2")],
    );
    assert_eq!(run.json()["max_concurrent_children"], 2);
}

#[test]
fn completions_and_log() {
    let h = Hermes::new();
    let run = h.run(&["completions", "bash"]);
    assert_eq!(run.code, 0);
    assert!(run.stdout.contains("hermes"));
    let json = h
        .run(&["-z", "--json", "--", "sh", "-c", "echo logged line"])
        .json();
    let id = json["delegation_id"].as_str().expect("id");
    let log = h.run(&["delegation", "log", id]);
    assert_eq!(log.code, 0, "{}", log.stderr);
    assert!(log.stdout.contains("out | logged line"), "{}", log.stdout);
    let follow = h.run(&["delegation", "log", id, "--task", "1", "--follow"]);
    assert!(follow.stdout.contains("logged line"));
    h.run(&["delegation", "log", id, "--task", "0"])
        .assert_one_error_line(2);
    h.run(&["delegation", "log", id, "--task", "5"])
        .assert_one_error_line(4);
}

#[test]
fn a_flooding_child_leaves_a_capped_transcript_that_says_what_it_skipped() {
    let h = Hermes::new();
    let run = h.run_env(
        &["-z", "--json", "--", "sh", "-c", "yes | head -n 200000"],
        &[("HERMES_DELEGATION_TRANSCRIPT_MAX_BYTES", "65536")],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let json = run.json();
    let path = json["tasks"][0]["transcript"].as_str().expect("transcript");
    let text = std::fs::read_to_string(path).expect("transcript");
    // 200,000 lines of `y` would be 3.4 MB of transcript.
    assert!(text.len() <= 65_536 + 4096, "{} bytes", text.len());
    let marker = text
        .lines()
        .find(|l| l.contains("hermes: transcript cap of 65536 bytes reached;"))
        .expect("a line says the cap was reached");
    let counts: Vec<&str> = marker
        .split_once("reached;")
        .map(|(_, c)| c.split_whitespace().collect())
        .expect("counts");
    let skipped: u64 = counts[counts.iter().position(|w| *w == "lines").expect("lines") - 1]
        .parse()
        .expect("a line count");
    let kept = text.lines().filter(|l| l.ends_with(" out | y")).count() as u64;
    assert_eq!(kept + skipped, 200_000, "every line is kept or counted");
    // The note counts what the child wrote (`y` and a newline, 400,000 bytes), not the
    // transcript's prefixes.
    let skipped_bytes: u64 = counts[counts.iter().position(|w| *w == "bytes").expect("bytes") - 1]
        .parse()
        .expect("a byte count");
    assert_eq!(kept * 2 + skipped_bytes, 400_000, "{marker}");
    // The result was cut too; its marker does not claim the transcript holds all of it.
    let result = json["tasks"][0]["result"].as_str().expect("result");
    assert!(!result.contains("the full output is in"), "{result}");
    assert!(
        result.contains(&format!(
            "the transcript {path} was cut too, at its cap of 65536 bytes"
        )),
        "{result}"
    );
    // The head and the very end are both there.
    assert!(text.contains("hermes: started pid"));
    assert!(
        text.trim_end().ends_with("status completed"),
        "{}",
        &text[text.len() - 200..]
    );
}

#[test]
fn a_successful_child_s_stderr_is_in_its_result_marked() {
    let h = Hermes::new();
    let run = h.run(&[
        "-z",
        "--",
        "sh",
        "-c",
        "echo Compiling >&2; echo Finished >&2",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stdout.contains("(no output)"), "{}", run.stdout);
    let compiling = run
        .stdout
        .find("[stderr] Compiling")
        .expect("the first line");
    let finished = run
        .stdout
        .find("[stderr] Finished")
        .expect("the second line");
    assert!(compiling < finished, "{}", run.stdout);
    // Both streams, in the order they came; stdout unmarked.
    let json = h
        .run(&[
            "-z",
            "--json",
            "--",
            "sh",
            "-c",
            "echo out; sleep 0.2; echo err >&2",
        ])
        .json();
    assert_eq!(json["tasks"][0]["result"], "out\n[stderr] err\n");
}

#[test]
fn ledger_info_and_migrate_say_which_ledger_without_a_password() {
    let h = Hermes::new();
    let info = h.json(&["ledger", "info", "--json"]);
    let migrated = h.json(&["ledger", "migrate", "--json"]);
    match &h.ledger_url {
        None => {
            assert_eq!(info["backend"], "redb");
            let path = h.path().join("ledger.redb");
            assert_eq!(info["ledger"], path.to_str().expect("utf-8"));
            assert_eq!(
                migrated["schema_version"],
                u64::from(hermes_ledger::FORMAT_VERSION)
            );
        }
        Some(url) => {
            assert_eq!(info["backend"], "postgres");
            let shown = info["ledger"].as_str().expect("ledger");
            assert!(shown.starts_with("postgres://"), "{shown}");
            // The test server's URL carries a password; nothing printed does.
            let password = url
                .split_once("://")
                .and_then(|(_, rest)| rest.split_once('@'))
                .and_then(|(userinfo, _)| userinfo.split_once(':'))
                .map(|(_, password)| password.to_owned())
                .expect("the test URL has a password");
            let all = format!(
                "{}{}",
                h.run(&["ledger", "info"]).stdout,
                h.run(&["ledger", "migrate"]).stdout
            );
            assert!(!all.contains(&password), "{all}");
            assert!(!shown.contains(&password), "{shown}");
            assert_eq!(migrated["schema_version"], hermes_ledger::SCHEMA_VERSION);
        }
    }
    // `info` asks the ledger itself, creating nothing: after the migration it finds the version
    // the migration put there.
    let after = h.json(&["ledger", "info", "--json"]);
    assert_eq!(after["reachable"], true, "{after}");
    assert_eq!(
        after["schema_version"], migrated["schema_version"],
        "{after}"
    );
    assert_eq!(
        after["supported_schema_version"],
        migrated["schema_version"]
    );
    assert!(
        h.run(&["ledger", "info"])
            .stdout
            .contains(&format!(": schema version {}", migrated["schema_version"])),
        "says the version"
    );
    let bad = h.run_env(&["ledger", "info"], &[("HERMES_LEDGER_URL", "mysql://x")]);
    bad.assert_one_error_line(2);
    // A server nobody answers at is unavailable: one line, exit 6.
    let gone = h.run_env(
        &["ledger", "info", "--json"],
        &[("HERMES_LEDGER_URL", "postgres://hermes@127.0.0.1:1/hermes")],
    );
    gone.assert_one_error_line(6);
    assert!(gone.stderr.contains("cannot reach"), "{}", gone.stderr);
}

#[test]
fn ledger_info_on_a_new_ledger_finds_no_schema_and_creates_none() {
    let h = Hermes::new();
    // An empty database on PostgreSQL (the suite's own come with the schema already).
    let empty = h
        .on_postgres()
        .then(|| hermes_testkit::fresh_empty_database(&hermes_testkit::pg_admin_url()));
    let env: Vec<(&str, &str)> = empty
        .iter()
        .map(|url| ("HERMES_LEDGER_URL", url.as_str()))
        .collect();
    for _ in 0..2 {
        let info = h.run_env(&["ledger", "info", "--json"], &env);
        assert_eq!(info.code, 0, "{}", info.stderr);
        let info = info.json();
        assert_eq!(info["reachable"], true, "{info}");
        assert_eq!(info["schema_version"], serde_json::Value::Null, "{info}");
    }
    assert!(
        !h.path().join("ledger.redb").exists(),
        "info created nothing"
    );
    let said = h.run_env(&["ledger", "info"], &env).stdout;
    assert!(said.contains("no ledger yet"), "{said}");
    if !h.on_postgres() {
        // A damaged file is said to be damaged, exit 6.
        std::fs::write(h.path().join("ledger.redb"), b"not a ledger").expect("writes");
        h.run(&["ledger", "info"]).assert_one_error_line(6);
    }
}

#[test]
fn a_child_never_gets_the_ledgers_password_and_its_hermes_finds_it_in_the_password_file() {
    let h = Hermes::new();
    // The password, wherever this process had it: PGPASSWORD, and on PostgreSQL the URL too.
    let password = h
        .ledger_url
        .as_deref()
        .and_then(|url| url.split_once("://"))
        .and_then(|(_, rest)| rest.split_once('@'))
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .map_or("not-the-ledgers".to_owned(), |(_, password)| {
            password.to_owned()
        });
    // libpq's password file (libpq, "The Password File"), only its owner may read it.
    let passfile = h.write("pgpass", &format!("*:*:*:*:{password}\n"));
    std::fs::set_permissions(
        &passfile,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("chmod");
    let script = format!(
        "printf 'pgpassword=%s\\n' \"${{PGPASSWORD:-none}}\"; \
         printf 'url=%s\\n' \"${{HERMES_LEDGER_URL:-none}}\"; \
         printf 'passfile=%s\\n' \"${{PGPASSFILE:-none}}\"; \
         {} delegation list --json >/dev/null && echo nested-hermes-reached-the-ledger",
        env!("CARGO_BIN_EXE_hermes")
    );
    let run = h.run_env(
        &["-z", "--json", "--", "sh", "-c", &script],
        &[
            ("PGPASSWORD", password.as_str()),
            ("PGPASSFILE", passfile.to_str().expect("path")),
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let result = run.json()["tasks"][0]["result"]
        .as_str()
        .expect("result")
        .to_owned();
    assert!(!result.contains(&password), "{result}");
    assert!(result.contains("pgpassword=none"), "{result}");
    match &h.ledger_url {
        Some(url) => {
            let bare = hermes_ledger::url_without_password(url);
            assert!(result.contains(&format!("url={bare}")), "{result}");
            // The password file children get is hermes' own, for this ledger only, 0600.
            let own = h.path().join("run").join("ledger.pgpass");
            assert!(
                result.contains(&format!("passfile={}", own.display())),
                "{result}"
            );
            let mode = std::os::unix::fs::PermissionsExt::mode(
                &std::fs::metadata(&own).expect("written").permissions(),
            );
            assert_eq!(mode & 0o777, 0o600);
        }
        None => assert!(result.contains("url=none"), "{result}"),
    }
    assert!(
        result.contains("nested-hermes-reached-the-ledger"),
        "{result}"
    );
}

/// A `-z` run started in the background, its stdout and stderr going to files of the home.
struct Running {
    child: std::process::Child,
    stdout: std::path::PathBuf,
    stderr: std::path::PathBuf,
}

impl Running {
    fn start(h: &Hermes, args: &[&str], env: &[(&str, &str)]) -> Running {
        let stdout = h.path().join("run.out");
        let stderr = h.path().join("run.err");
        let mut c = h.command(args);
        c.envs(env.iter().copied())
            .stdout(std::fs::File::create(&stdout).expect("stdout file"))
            .stderr(std::fs::File::create(&stderr).expect("stderr file"));
        let child = c.spawn().expect("hermes starts");
        Running {
            child,
            stdout,
            stderr,
        }
    }

    fn interrupt(&self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Its exit code, once it exited within `limit`.
    fn exit_within(&mut self, limit: std::time::Duration) -> i32 {
        let status = crate::common::wait_for(limit, "hermes to exit", || {
            self.child.try_wait().expect("try_wait")
        });
        status.code().unwrap_or(-1)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Kills a child's process group when the test ends, passed or not: a child that ignores
/// SIGTERM must not outlive a failed test.
struct KillGroup(u64);

impl Drop for KillGroup {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.0 as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    }
}

/// The running unit's id and its child's pid, which the child wrote to `pid_file`.
fn running_child(h: &Hermes, pid_file: &std::path::Path) -> (String, u64) {
    crate::common::wait_for(Duration::from_secs(20), "the child to run", || {
        let pid = std::fs::read_to_string(pid_file)
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let list = h.json(&["delegation", "list", "--json"]);
        let id = list["running"][0]["delegation_id"].as_str()?.to_owned();
        Some((id, pid))
    })
}

#[test]
fn ctrl_c_says_it_stops_the_children_and_exits_130_with_the_unit_interrupted() {
    let h = Hermes::new();
    let pid_file = h.path().join("child.pid");
    let script = format!("echo $$ > '{}'; exec sleep 30", pid_file.display());
    let mut run = Running::start(&h, &["-z", "--json", "--", "sh", "-c", &script], &[]);
    let (id, pid) = running_child(&h, &pid_file);
    run.interrupt();
    // The grace period is 1 s here: the child stops well within the deadline.
    assert_eq!(run.exit_within(Duration::from_secs(20)), 130);
    let stderr = run.stderr();
    assert!(
        stderr.contains("hermes: interrupted: stopping the children (press Ctrl-C again"),
        "{stderr}"
    );
    assert!(stderr.contains("interrupted by Ctrl-C"), "{stderr}");
    let printed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&run.stdout).expect("stdout")).expect("JSON");
    assert_eq!(printed["status"], "interrupted", "{printed}");
    let status = h.json(&["delegation", "status", &id, "--json"]);
    assert_eq!(status["status"], "interrupted", "{status}");
    assert_eq!(status["interrupt"], "interrupted_by_user", "{status}");
    assert_eq!(status["tasks"][0]["status"], "interrupted", "{status}");
    assert!(
        !crate::common::process_alive(pid),
        "the child {pid} survived"
    );
}

#[test]
fn a_second_ctrl_c_kills_a_child_that_ignores_sigterm_at_once() {
    let h = Hermes::new();
    // A grace period far longer than the test's deadline: only the second Ctrl-C ends it.
    let grace = [("HERMES_DELEGATION_KILL_GRACE_SECONDS", "300")];
    let pid_file = h.path().join("child.pid");
    let script = format!(
        "trap '' TERM; echo $$ > '{}'; while :; do sleep 0.1; done",
        pid_file.display()
    );
    let mut run = Running::start(&h, &["-z", "--", "sh", "-c", &script], &grace);
    let (id, pid) = running_child(&h, &pid_file);
    let _cleanup = KillGroup(pid);
    run.interrupt();
    crate::common::wait_for(Duration::from_secs(20), "the first Ctrl-C's note", || {
        run.stderr().contains("stopping the children").then_some(())
    });
    let transcript = h.json(&["delegation", "status", &id, "--json"])["tasks"][0]["transcript"]
        .as_str()
        .expect("transcript")
        .to_owned();
    crate::common::wait_for(Duration::from_secs(20), "SIGTERM to the child", || {
        let log = std::fs::read_to_string(&transcript).ok()?;
        log.contains("SIGTERM sent").then_some(())
    });
    assert!(
        run.child.try_wait().expect("try_wait").is_none(),
        "hermes left during the grace"
    );
    assert!(
        crate::common::process_alive(pid),
        "the child ignores SIGTERM"
    );
    run.interrupt();
    assert_eq!(run.exit_within(Duration::from_secs(20)), 130);
    crate::common::wait_for(Duration::from_secs(10), "the child to be gone", || {
        (!crate::common::process_alive(pid)).then_some(())
    });
    let status = h.json(&["delegation", "status", &id, "--json"]);
    assert_eq!(status["status"], "interrupted", "{status}");
    assert_eq!(status["tasks"][0]["status"], "interrupted", "{status}");
    assert_eq!(status["tasks"][0]["signal"], 9, "{status}");
}
