//! What a careless or hostile environment cannot do to hermes: loose file modes, leaked session
//! variables, closed pipes, out-of-range numbers, unknown overrides, half-typed command lines.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Duration;

use crate::common::{Hermes, wait_for};

/// Every file and directory under `dir` with its mode.
fn modes(dir: &Path) -> Vec<(String, u32, bool)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir") {
            let path = entry.expect("entry").path();
            let meta = std::fs::symlink_metadata(&path).expect("metadata");
            if meta.is_dir() {
                stack.push(path.clone());
            }
            out.push((
                path.display().to_string(),
                meta.permissions().mode() & 0o777,
                meta.is_dir(),
            ));
        }
    }
    out
}

#[test]
fn every_file_is_private_whatever_the_umask_and_children_keep_the_users_mask() {
    let h = Hermes::new();
    let home = h.path().join("shared-home");
    std::fs::create_dir(&home).expect("mkdir");
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let with_umask_000 = |args: &[&str]| {
        let mut c = h.command(args);
        c.env("HERMES_HOME", &home);
        // SAFETY: `umask` is async-signal-safe and only changes the child's own mask.
        unsafe {
            c.pre_exec(|| {
                libc::umask(0);
                Ok(())
            });
        }
        crate::common::Run::from(c.output().expect("hermes runs"))
    };
    let run = with_umask_000(&["delegate", "--session", "P", "--", "echo", "secret"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let warning = run.stderr.lines().next().expect("a warning");
    assert!(
        warning.starts_with("hermes: warning: ") && warning.contains("readable by other users"),
        "{warning}"
    );
    let drained = with_umask_000(&["drain", "--session", "P", "--wait", "20"]);
    assert!(drained.stdout.contains("secret"), "{drained:?}");
    let run = with_umask_000(&["-z", "--json", "--", "sh", "-c", "umask"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["tasks"][0]["result"], "0000\n");

    let found = modes(&home);
    // The ledger is a file here only on redb (PostgreSQL keeps it on the server).
    assert_eq!(
        found.iter().any(|(p, _, _)| p.ends_with("ledger.redb")),
        !h.on_postgres(),
        "{found:?}"
    );
    assert!(found.iter().any(|(p, _, _)| p.ends_with("host-P.log")));
    assert!(found.iter().any(|(p, _, _)| p.ends_with("task-0.log")));
    for (path, mode, dir) in found {
        let want = if dir { 0o700 } else { 0o600 };
        assert_eq!(mode, want, "{path} is {mode:o}");
    }
}

#[test]
fn cron_children_see_no_session_variable_at_all() {
    let h = Hermes::new();
    let run = h.run_env(
        &["cron", "run", "--json", "--", "env"],
        &[
            ("HERMES_SESSION_ID", "victim"),
            ("HERMES_SESSION_FOO", "bar"),
            ("HERMES_SESSION_TOKEN", "t0ken"),
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let result = run.json()["tasks"][0]["result"]
        .as_str()
        .expect("result")
        .to_owned();
    assert!(result.contains("HERMES_DELEGATION_ID="), "{result}");
    assert!(!result.contains("HERMES_SESSION_"), "{result}");
    assert!(!result.contains("t0ken"), "{result}");
}

#[test]
fn a_failed_job_exits_1_even_when_nobody_reads_its_output() {
    let h = Hermes::new();
    for (args, code) in [
        (&["cron", "run", "--", "sh", "-c", "exit 1"][..], 1),
        (&["-z", "--", "sh", "-c", "exit 1"], 1),
        (&["-z", "--json", "--", "sh", "-c", "exit 1"], 1),
        (&["-z", "--", "true"], 0),
    ] {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let out = h
            .command(args)
            .stdout(writer)
            .output()
            .expect("hermes runs");
        assert_eq!(out.status.code(), Some(code), "{args:?}: {out:?}");
    }
}

#[test]
fn numbers_out_of_range_exit_2_naming_the_flag_or_key() {
    let h = Hermes::new();
    for (args, named) in [
        (
            &["drain", "--session", "s", "--wait", "1e300"][..],
            "--wait",
        ),
        (&["drain", "--session", "s", "--wait=-1"], "--wait"),
        (&["drain", "--session", "s", "--lease", "0.0004"], "--lease"),
        (&["drain", "--session", "s", "--lease", "nan"], "--lease"),
        (&["delivery", "renew", "x", "--lease", "0"], "--lease"),
        (&["-z", "--timeout", "inf", "--", "true"], "--timeout"),
    ] {
        let run = h.run(args);
        run.assert_one_error_line(2);
        assert!(run.stderr.contains(named), "{args:?}: {}", run.stderr);
    }
    for (key, value, variable) in [
        (
            "delegation.max_concurrent_children",
            "0",
            "HERMES_DELEGATION_MAX_CONCURRENT_CHILDREN",
        ),
        (
            "delivery.claim_lease_seconds",
            "0.0004",
            "HERMES_DELIVERY_CLAIM_LEASE_SECONDS",
        ),
        ("delivery.max_attempts", "0", "HERMES_DELIVERY_MAX_ATTEMPTS"),
        (
            "host.sweep_interval_ms",
            "0",
            "HERMES_HOST_SWEEP_INTERVAL_MS",
        ),
    ] {
        let (section, name) = key.split_once('.').expect("section.key");
        h.write("config.toml", &format!("[{section}]\n{name} = {value}\n"));
        let run = h.run(&["-z", "--", "true"]);
        run.assert_one_error_line(2);
        assert!(run.stderr.contains(key), "{key}: {}", run.stderr);
        std::fs::remove_file(h.path().join("config.toml")).expect("rm");
        let run = h.run_env(&["-z", "--", "true"], &[(variable, value)]);
        run.assert_one_error_line(2);
        assert!(run.stderr.contains(variable), "{variable}: {}", run.stderr);
    }
}

#[test]
fn unknown_overrides_of_our_sections_are_refused_and_a_nested_hermes_still_runs() {
    let h = Hermes::new();
    let run = h.run_env(&["-z", "--", "true"], &[("HERMES_DELEGATION_BOGUS", "1")]);
    run.assert_one_error_line(2);
    assert!(
        run.stderr.contains("HERMES_DELEGATION_BOGUS"),
        "{}",
        run.stderr
    );
    // Other HERMES_* names are not ours to judge.
    let run = h.run_env(&["-z", "--", "true"], &[("HERMES_SOMETHING_ELSE", "1")]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // A child runs with HERMES_DELEGATION_ID and friends set: hermes inside it still works (in
    // an orchestrator child: a leaf may not delegate).
    let hermes = env!("CARGO_BIN_EXE_hermes");
    let run = h.run(&[
        "-z",
        "--json",
        "--role",
        "orchestrator",
        "--",
        hermes,
        "-z",
        "-q",
        "--",
        "echo",
        "nested",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let result = run.json()["tasks"][0]["result"]
        .as_str()
        .expect("result")
        .to_owned();
    assert!(result.contains("nested"), "{result}");
}

#[test]
fn missing_arguments_are_named() {
    let h = Hermes::new();
    for (args, named) in [
        (&["delegation", "status"][..], "<ID>"),
        (&["delegation", "log"], "<ID>"),
        (&["delivery", "ack"], "<CLAIM>"),
        (&["session", "end"], "<SESSION>"),
    ] {
        let run = h.run(args);
        run.assert_one_error_line(2);
        assert!(run.stderr.contains(named), "{args:?}: {}", run.stderr);
    }
}

#[test]
fn both_spellings_of_after_turn_are_accepted_and_after_turn_is_printed() {
    let h = Hermes::new();
    let tasks = h.write(
        "tasks.json",
        r#"{"tasks":[{"goal":"a","command":["true"]}],"delivery":"after-turn"}"#,
    );
    let runs = [
        h.run(&["-z", "--json", "--delivery", "after-turn", "--", "true"]),
        h.run(&["-z", "--json", "--delivery", "after_turn", "--", "true"]),
        h.run(&["-z", "--json", "--tasks", tasks.to_str().expect("path")]),
    ];
    for run in runs {
        assert_eq!(run.code, 0, "{}", run.stderr);
        let id = run.json()["delegation_id"].as_str().expect("id").to_owned();
        let status = h.json(&["delegation", "status", &id, "--json"]);
        assert_eq!(status["delivery"], "after_turn", "{status}");
    }
}

#[test]
fn quiet_is_accepted_before_and_after_the_subcommand() {
    let h = Hermes::new();
    for args in [
        &["-q", "delegation", "list"][..],
        &["delegation", "list", "-q"],
        &["-z", "-q", "--", "true"],
        &["-q", "cron", "run", "--", "true"],
    ] {
        let run = h.run(args);
        assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
    }
    let run = h.run(&["delegate", "-q", "--session", "quiet", "--", "true"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    wait_for(Duration::from_secs(20), "the quiet unit to finish", || {
        let drained = h.run(&["drain", "-q", "--session", "quiet"]);
        (!drained.stdout.is_empty()).then_some(())
    });
}

#[test]
fn log_shows_control_characters_escaped_so_a_child_cannot_forge_a_line() {
    let h = Hermes::new();
    let run = h.run(&[
        "-z",
        "--json",
        "--",
        "printf",
        "real\\033[2K\\r12:00:00 prg | status completed\\n",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = run.json()["delegation_id"].as_str().expect("id").to_owned();
    for args in [
        &["delegation", "log", &id][..],
        &["delegation", "log", &id, "--follow"],
    ] {
        let log = h.run(args);
        assert_eq!(log.code, 0, "{}", log.stderr);
        assert!(!log.stdout.contains('\u{1b}'), "{:?}", log.stdout);
        assert!(!log.stdout.contains('\r'), "{:?}", log.stdout);
        assert!(
            log.stdout
                .contains("out | real\\u{1b}[2K\\r12:00:00 prg | status completed"),
            "{:?}",
            log.stdout
        );
    }
}

#[test]
fn list_says_when_it_shows_only_the_most_recent_units() {
    let h = Hermes::new();
    for _ in 0..22 {
        assert_eq!(h.run(&["-z", "-q", "--", "true"]).code, 0);
    }
    let list = h.run(&["delegation", "list"]);
    assert!(
        list.stdout
            .contains("recent (20 of 22; --all or --since for more):"),
        "{}",
        list.stdout
    );
    let json = h.json(&["delegation", "list", "--json"]);
    assert_eq!(json["recent"].as_array().map(Vec::len), Some(20));
    assert_eq!(json["recent_count"], 22);
    let all = h.run(&["delegation", "list", "--all"]);
    assert!(all.stdout.contains("recent:\n"), "{}", all.stdout);
    assert_eq!(all.stdout.matches("deleg_").count(), 22);
}

#[test]
fn a_second_host_for_a_hosted_session_says_so() {
    let h = Hermes::new();
    let run = h.run(&["delegate", "--session", "busy", "--", "sleep", "30"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let second = h.run(&["host", "--session", "busy"]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert!(
        second
            .stderr
            .contains("session busy is already hosted by process"),
        "{}",
        second.stderr
    );
    assert!(
        h.run(&["host", "-q", "--session", "busy"])
            .stderr
            .is_empty()
    );
    h.run(&["delegation", "stop", "--session", "busy"]);
}

#[test]
fn options_that_need_z_are_refused_without_it_and_nothing_runs() {
    let h = Hermes::new();
    let marker = h.path().join("ran");
    let touch = format!("touch '{}'", marker.display());
    let tasks = h.write(
        "inject.json",
        r#"{"tasks":[{"goal":"a","command":["true"]}],"delivery":"inject"}"#,
    );
    let tasks = tasks.to_str().expect("path");
    for (args, named) in [
        (&["--", "sh", "-c", &touch][..], "needs -z"),
        (&["--goal", "x"], "--goal needs -z"),
        (&["--json"], "--json needs -z"),
        (
            &["--resume", "S", "--", "sh", "-c", &touch],
            "leave out --resume",
        ),
        (
            &["-z", "--resume", "S", "--", "sh", "-c", &touch],
            "--resume",
        ),
        (&["-z", "--pool", "--", "sh", "-c", &touch], "--pool"),
        (
            &["cron", "run", "--pool", "p", "--", "sh", "-c", &touch],
            "--pool",
        ),
        (
            &["-z", "--delivery", "inject", "--", "sh", "-c", &touch],
            "inject",
        ),
        (
            &["cron", "run", "--delivery", "inject", "--", "true"],
            "inject",
        ),
        (&["-z", "--tasks", tasks], "inject"),
        (
            &["--goal", "x", "delegation", "list"],
            "--goal before a subcommand",
        ),
        (
            &["delivery", "ack", "garbage", "--lease", "5"],
            "--lease is for delivery renew",
        ),
        (
            &["delivery", "release", "garbage", "--reason", "r"],
            "--reason is for delivery drop",
        ),
    ] {
        let run = h.run(args);
        run.assert_one_error_line(2);
        assert!(run.stderr.contains(named), "{args:?}: {}", run.stderr);
    }
    assert!(!marker.exists(), "a refused command line ran its command");
    let list = h.json(&["delegation", "list", "--json"]);
    assert_eq!(list["recent_count"], 0, "{list}");
    // The usage line says what bare hermes does.
    let help = h.run(&["--help"]);
    assert!(
        help.stdout
            .contains("Usage: hermes [--resume SESSION]           an interactive session"),
        "{}",
        help.stdout
    );
    assert!(help.stdout.contains("hermes -z [OPTIONS] [-- CMD...]"));
}

#[test]
fn usage_errors_exit_2_and_only_a_hook_event_exits_1() {
    let h = Hermes::new();
    for args in [
        &["hook", "bogus"][..],
        &["hook", "uninstall", "nosuchagent"],
        &["delegaton"],
        &["delegation", "lst"],
    ] {
        h.run(args).assert_one_error_line(2);
    }
    // A hook event never blocks its agent, whatever its command line.
    h.run(&["hook", "stop", "--bogus"]).assert_one_error_line(1);
    // A home that is a file is a configuration error, not failed work.
    let file = h.write("not-a-directory", "x");
    let run = h.run_env(
        &["delegation", "list"],
        &[("HERMES_HOME", file.to_str().expect("path"))],
    );
    run.assert_one_error_line(2);
    assert!(run.stderr.contains("HERMES_HOME"), "{}", run.stderr);
}

#[test]
fn a_subcommand_without_its_verb_prints_its_help_on_stderr_and_exits_2() {
    let h = Hermes::new();
    for name in ["delegation", "session", "cron", "hook"] {
        let run = h.run(&[name]);
        assert_eq!(run.code, 2, "{name}: {run:?}");
        assert!(run.stdout.is_empty(), "{name}: {}", run.stdout);
        assert!(
            run.stderr.contains(&format!("Usage: hermes {name} ")),
            "{name}: {}",
            run.stderr
        );
        assert!(run.stderr.contains("Commands:"), "{name}: {}", run.stderr);
    }
}

#[test]
fn errors_point_at_the_subcommands_help_and_typos_get_suggestions() {
    let h = Hermes::new();
    for (args, said) in [
        (
            &["delegation", "status"][..],
            "(see hermes delegation status --help)",
        ),
        (&["delegation", "lst"], "'list'"),
        (&["delegation", "lst"], "(see hermes delegation --help)"),
        (&["delegaton"], "'delegation'"),
        (&["delegaton"], "(see hermes --help)"),
        (&["drain", "--bogus"], "(see hermes drain --help)"),
        (&["hook", "bogus"], "(see hermes hook --help)"),
    ] {
        let run = h.run(args);
        run.assert_one_error_line(2);
        assert!(run.stderr.contains(said), "{args:?}: {}", run.stderr);
    }
}

/// `{"error":…,"code":n,…}` on stdout and the line on stderr, for every kind of error.
#[test]
fn every_error_under_json_is_json_on_stdout_too() {
    let h = Hermes::new();
    let json_error = |args: &[&str], env: &[(&str, &str)], code: i64| {
        let run = h.run_env(args, env);
        run.assert_one_error_line(code as i32);
        let json = run.json();
        assert_eq!(json["code"], code, "{args:?}: {json}");
        let message = json["error"].as_str().expect("an error message").to_owned();
        assert!(!message.is_empty(), "{json}");
        json
    };
    json_error(&["delegation", "status", "bad", "--json"], &[], 2);
    json_error(
        &[
            "delegate",
            "--json",
            "--id",
            "deleg_x",
            "--session",
            "s",
            "--",
            "true",
        ],
        &[],
        2,
    );
    json_error(&["delegation", "status", "--json"], &[], 2);
    json_error(&["delivery", "ack", "garbage", "--json"], &[], 2);
    let missing = json_error(
        &["delegation", "stop", "deleg_000000000000", "--json"],
        &[],
        4,
    );
    assert_eq!(missing["delegation_id"], "deleg_000000000000");
    // A full queue: one child at a time, nothing may wait.
    let full = [
        ("HERMES_DELEGATION_MAX_CONCURRENT_CHILDREN", "1"),
        ("HERMES_DELEGATION_MAX_QUEUED", "0"),
    ];
    let first = h.run_env(
        &["delegate", "--session", "q", "--json", "--", "sleep", "30"],
        &full,
    );
    assert_eq!(first.code, 0, "{}", first.stderr);
    json_error(
        &["delegate", "--session", "q", "--json", "--", "true"],
        &full,
        1,
    );
    // Success under --json: `delegation stop` answers in JSON.
    let stopped = h.json(&["delegation", "stop", "--session", "q", "--json"]);
    assert_eq!(
        stopped["stopping"].as_array().map(Vec::len),
        Some(1),
        "{stopped}"
    );
    assert_eq!(stopped["reason"], "stopped_by_user");
    // The ledger unavailable.
    if !h.on_postgres() {
        let damaged = Hermes::new();
        damaged.write("ledger.redb", &"not a redb file\n".repeat(400));
        let run = damaged.run(&["delegation", "list", "--json"]);
        run.assert_one_error_line(6);
        assert_eq!(run.json()["code"], 6);
    }
    // Without --json, stdout stays empty.
    let run = h.run(&["delegation", "status", "bad"]);
    run.assert_one_error_line(2);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
}

#[test]
fn quiet_silences_the_warning_about_a_shared_home() {
    let h = Hermes::new();
    let home = h.path().join("shared-home");
    std::fs::create_dir(&home).expect("mkdir");
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let home = home.to_str().expect("path");
    let loud = h.run_env(&["delegation", "list"], &[("HERMES_HOME", home)]);
    assert_eq!(loud.code, 0, "{}", loud.stderr);
    assert!(
        loud.stderr.contains("readable by other users"),
        "{}",
        loud.stderr
    );
    for args in [
        &["-q", "delegation", "list"][..],
        &["delegation", "list", "--quiet"],
    ] {
        let quiet = h.run_env(args, &[("HERMES_HOME", home)]);
        assert_eq!(quiet.code, 0, "{}", quiet.stderr);
        assert!(quiet.stderr.is_empty(), "{args:?}: {}", quiet.stderr);
    }
}

/// A command's arguments are text (they are recorded and shown): one that is not UTF-8 is
/// refused with exit 2 and one line, never a panic.
#[test]
fn an_argument_that_is_not_utf8_is_refused_without_a_panic() {
    use std::os::unix::ffi::OsStrExt;
    let h = Hermes::new();
    let name = std::ffi::OsStr::from_bytes(b"caf\xe9");
    for (args, said) in [
        (&["-z", "--json", "--", "echo"][..], "UTF-8"),
        (&["delegation"], "unrecognized subcommand"),
    ] {
        let out = h.command(args).arg(name).output().expect("hermes runs");
        let run = crate::common::Run::from(out);
        run.assert_one_error_line(2);
        assert!(run.stderr.contains(said), "{}", run.stderr);
    }
}
