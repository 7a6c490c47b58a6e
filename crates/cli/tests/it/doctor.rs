//! What a person asks of their setup: `hermes doctor`, `hermes config show`, the warning log of
//! `-z` runs and color on statuses — driven through the real binary with a temp home.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{Hermes, Run};
use serde_json::Value;

/// The checks of `doctor --json`, by name.
fn check<'a>(doctor: &'a Value, name: &str) -> &'a Value {
    doctor["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {doctor}"))
}

/// An executable script `name` in `dir`.
fn script(dir: &Path, name: &str, body: &str) {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// `PATH` of `dir` alone, so that what the machine has installed does not count.
fn path_with(dir: &Path) -> String {
    dir.display().to_string()
}

/// `hermes ARGS` in `cwd` with `HOME` and `PATH` of the test's own, plus `env`.
fn doctor_in(h: &Hermes, cwd: &Path, path: &str, env: &[(&str, &str)], args: &[&str]) -> Run {
    let mut c: Command = h.command(args);
    c.current_dir(cwd).env("HOME", cwd).env("PATH", path);
    for (k, v) in env {
        c.env(k, v);
    }
    Run::from(c.output().expect("hermes runs"))
}

#[test]
fn doctor_on_a_healthy_home_passes_and_its_json_has_one_object_per_check() {
    let h = Hermes::new();
    let ran = h.run(&["-z", "--", "true"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let text = h.run(&["doctor"]);
    assert_eq!(text.code, 0, "{}\n{}", text.stdout, text.stderr);
    for name in [
        "home",
        "config",
        "ledger",
        "sandbox landlock",
        "sandbox userns",
        "sandbox enforce",
    ] {
        assert!(
            text.stdout.lines().any(|l| l
                .split_whitespace()
                .skip(1)
                .collect::<Vec<_>>()
                .join(" ")
                .starts_with(name)),
            "{name}: {}",
            text.stdout
        );
    }
    assert!(
        !text.stdout.lines().any(|l| l.starts_with("fail")),
        "{}",
        text.stdout
    );
    let run = h.run(&["doctor", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let doctor = run.json();
    assert_eq!(doctor["exit_code"], 0);
    for name in ["home", "config", "ledger"] {
        assert_eq!(check(&doctor, name)["status"], "ok", "{doctor}");
    }
    assert!(
        check(&doctor, "ledger")["detail"]
            .as_str()
            .is_some_and(|d| d.contains("writable")),
        "{doctor}"
    );
    for c in doctor["checks"].as_array().expect("checks") {
        let status = c["status"].as_str().expect("status");
        assert!(["ok", "info", "warn"].contains(&status), "{c}");
        assert!(c["detail"].as_str().is_some_and(|d| !d.is_empty()), "{c}");
    }
}

#[test]
fn doctor_with_an_unknown_key_in_the_config_exits_2_and_names_it() {
    let h = Hermes::new();
    h.write("config.toml", "[delegation]\nmax_childs = 4\n");
    let run = h.run(&["doctor"]);
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with("fail") && l.contains("config"))
        .unwrap_or_else(|| panic!("no failed config line: {}", run.stdout));
    assert!(line.contains("delegation.max_childs"), "{line}");
    assert_eq!(run.stderr, "hermes: doctor: failed: config\n");
    let doctor = h.run(&["doctor", "--json"]);
    assert_eq!(doctor.code, 2);
    assert_eq!(check(&doctor.json(), "config")["status"], "fail");
}

#[test]
fn doctor_with_an_unreachable_ledger_fails_that_check_with_exit_6() {
    let h = Hermes::new();
    let run = h.run_env(
        &["doctor", "--json"],
        &[("HERMES_LEDGER_URL", "postgres://hermes:pw@127.0.0.1:1/x")],
    );
    assert_eq!(run.code, 6, "{}\n{}", run.stdout, run.stderr);
    let doctor = run.json();
    let ledger = check(&doctor, "ledger");
    assert_eq!(ledger["status"], "fail", "{doctor}");
    assert!(
        ledger["detail"]
            .as_str()
            .is_some_and(|d| d.contains("127.0.0.1:1")),
        "{ledger}"
    );
    assert!(
        !run.stdout.contains(":pw@"),
        "a password was printed: {}",
        run.stdout
    );
    assert_eq!(check(&doctor, "config")["status"], "ok");
}

#[test]
fn doctor_lists_an_agent_cli_on_path_with_its_version_and_gives_up_on_one_that_hangs() {
    let h = Hermes::new();
    let bin = tempfile::tempdir().expect("bin");
    script(bin.path(), "claude", "echo '9.9.9 (Claude Code)'");
    script(bin.path(), "codex", "exec /bin/sleep 60");
    let cwd = tempfile::tempdir().expect("cwd");
    let started = Instant::now();
    let run = doctor_in(
        &h,
        cwd.path(),
        &path_with(bin.path()),
        &[],
        &["doctor", "--json"],
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "a hanging --version held doctor for {:?}",
        started.elapsed()
    );
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let doctor = run.json();
    let claude = check(&doctor, "agent claude");
    assert_eq!(claude["status"], "ok", "{claude}");
    assert!(
        claude["detail"]
            .as_str()
            .is_some_and(|d| d.contains("9.9.9 (Claude Code)")
                && d.contains(&bin.path().join("claude").display().to_string())),
        "{claude}"
    );
    let codex = check(&doctor, "agent codex");
    assert_eq!(codex["status"], "warn", "{codex}");
    assert!(
        codex["detail"]
            .as_str()
            .is_some_and(|d| d.contains("did not answer")),
        "{codex}"
    );
    // Not installed is a note, not a failure.
    assert_eq!(check(&doctor, "agent gemini")["status"], "info", "{doctor}");
}

#[test]
fn doctor_finds_the_hooks_hook_install_wrote() {
    let h = Hermes::new();
    let project = tempfile::tempdir().expect("project");
    let bin = tempfile::tempdir().expect("bin");
    // The installed hooks run `hermes`: put it on PATH as the user would.
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_hermes"), bin.path().join("hermes"))
        .expect("link hermes");
    let path = path_with(bin.path());
    let before = doctor_in(&h, project.path(), &path, &[], &["doctor", "--json"]);
    assert_eq!(check(&before.json(), "hooks claude")["status"], "info");
    let install = doctor_in(
        &h,
        project.path(),
        &path,
        &[],
        &["hook", "install", "claude"],
    );
    assert_eq!(install.code, 0, "{}", install.stderr);
    let after = doctor_in(&h, project.path(), &path, &[], &["doctor", "--json"]);
    let doctor = after.json();
    let hooks = check(&doctor, "hooks claude");
    assert_eq!(hooks["status"], "ok", "{hooks}");
    let detail = hooks["detail"].as_str().expect("detail");
    assert!(
        detail.contains("project") && detail.contains("6/6 events"),
        "{detail}"
    );
    assert!(detail.contains(".claude/settings.json"), "{detail}");
    assert_eq!(check(&doctor, "hooks codex")["status"], "info", "{doctor}");
}

#[test]
fn config_show_says_where_each_setting_came_from_and_masks_a_password() {
    let h = Hermes::new();
    let file = h.write(
        "config.toml",
        "[delegation]\nmax_queued = 7\n[ledger]\nurl = \"postgres://hermes:s3cret@db.internal/h\"\n",
    );
    let mut c = h.command(&["config", "show", "--json"]);
    c.env_remove("HERMES_LEDGER_URL")
        .env("HERMES_HOST_LEASE_SECONDS", "40");
    let run = Run::from(c.output().expect("hermes runs"));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stdout.contains("s3cret"), "{}", run.stdout);
    let shown = run.json();
    let setting = |key: &str| {
        shown["settings"]
            .as_array()
            .expect("settings")
            .iter()
            .find(|s| s["key"] == key)
            .unwrap_or_else(|| panic!("no {key}: {shown}"))
            .clone()
    };
    let file = file.display().to_string();
    assert_eq!(shown["config_file"], file.as_str());
    let queued = setting("delegation.max_queued");
    assert_eq!(
        (
            queued["value"].clone(),
            queued["source"].clone(),
            queued["file"].clone()
        ),
        (
            Value::from(7),
            Value::from("file"),
            Value::from(file.as_str())
        )
    );
    let url = setting("ledger.url");
    assert_eq!(url["value"], "postgres://hermes:***@db.internal/h");
    assert_eq!(url["source"], "file");
    let lease = setting("host.lease_seconds");
    assert_eq!(lease["value"], 40);
    assert_eq!(lease["source"], "environment");
    assert_eq!(lease["variable"], "HERMES_HOST_LEASE_SECONDS");
    let depth = setting("delegation.max_depth");
    assert_eq!(
        (depth["value"].clone(), depth["source"].clone()),
        (Value::from(2), Value::from("default"))
    );
    // The text form says the same, one line per key.
    let mut c = h.command(&["config", "show"]);
    c.env_remove("HERMES_LEDGER_URL");
    let text = Run::from(c.output().expect("hermes runs"));
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(!text.stdout.contains("s3cret"), "{}", text.stdout);
    let line = |key: &str| {
        text.stdout
            .lines()
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("no {key}: {}", text.stdout))
            .to_owned()
    };
    assert!(line("delegation.max_queued").ends_with(&format!("file {file}")));
    assert!(line("host.idle_exit_seconds").ends_with("environment HERMES_HOST_IDLE_EXIT_SECONDS"));
    assert!(line("delivery.max_attempts").ends_with("default"));
}

#[test]
fn a_warning_of_a_oneshot_run_goes_to_the_log_file_and_is_pointed_at_once() {
    let h = Hermes::new();
    // The I/O count file is a directory: the run logs that it cannot write it.
    let blocked = tempfile::tempdir().expect("dir");
    let run = h.run_env(
        &["-z", "--", "true"],
        &[(
            "HERMES_DEBUG_SYNC_COUNT",
            blocked.path().to_str().expect("utf-8"),
        )],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let log = h.path().join("logs").join("hermes.log");
    let text = std::fs::read_to_string(&log).expect("the log was written");
    assert!(
        text.contains("WARN") && text.contains("I/O counts"),
        "{text}"
    );
    let pointer = format!("hermes: a warning was logged to {}", log.display());
    assert_eq!(
        run.stderr.lines().filter(|l| *l == pointer).count(),
        1,
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("WARN"), "{}", run.stderr);
    // With -q the warning is logged and nothing is said.
    let quiet = h.run_env(
        &["-q", "-z", "--", "true"],
        &[(
            "HERMES_DEBUG_SYNC_COUNT",
            blocked.path().to_str().expect("utf-8"),
        )],
    );
    assert_eq!(quiet.code, 0, "{}", quiet.stderr);
    assert!(!quiet.stderr.contains("logged to"), "{}", quiet.stderr);
    let again = std::fs::read_to_string(&log).expect("the log");
    assert_eq!(again.matches("I/O counts").count(), 2, "{again}");
    // A run with nothing to warn about says nothing of the log.
    let quiet = h.run(&["-z", "--", "true"]);
    assert_eq!(quiet.code, 0);
    assert!(!quiet.stderr.contains("logged to"), "{}", quiet.stderr);
}

#[test]
fn statuses_are_colored_only_when_asked_or_on_a_terminal_without_no_color() {
    let h = Hermes::new();
    let ran = h.run(&["-z", "--json", "--", "true"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let id = ran.json()["delegation_id"].as_str().expect("id").to_owned();
    let green = "\x1b[32mcompleted\x1b[0m";
    for args in [
        vec!["--color", "always", "delegation", "list"],
        vec!["delegation", "status", &id, "--color", "always"],
    ] {
        let run = h.run(&args);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(run.stdout.contains(green), "{args:?}: {:?}", run.stdout);
    }
    let always = h.run(&["--color", "always", "delegation", "list"]);
    let never = h.run(&["--color", "never", "delegation", "list"]);
    assert!(!never.stdout.contains('\x1b'), "{:?}", never.stdout);
    // The same text but for the color.
    assert_eq!(
        always.stdout.replace("\x1b[32m", "").replace("\x1b[0m", ""),
        never.stdout
    );
    // Piped (auto): no color; NO_COLOR changes nothing that --color always asked for.
    let auto = h.run(&["delegation", "list"]);
    assert_eq!(auto.stdout, never.stdout);
    let no_color = h.run_env(
        &["--color", "always", "delegation", "list"],
        &[("NO_COLOR", "1")],
    );
    assert!(no_color.stdout.contains(green), "{:?}", no_color.stdout);
}

/// What an interactive session on a pseudo-terminal wrote, read until `done` holds.
fn interactive_until(h: &Hermes, env: &[(&str, &str)], done: impl Fn(&str) -> bool) -> String {
    use std::io::Write as _;
    let mut c = Command::new(env!("CARGO_BIN_EXE_hermes"));
    c.env_remove("NO_COLOR")
        .env_remove("HERMES_SESSION_ID")
        .env_remove("RUST_LOG")
        .env("HERMES_HOME", h.path())
        .env("TERM", "xterm")
        .envs(env.iter().copied());
    h.ledger_env(&mut c);
    let mut session = expectrl::Session::spawn(c).expect("hermes starts on a pseudo-terminal");
    let mut raw = Vec::new();
    let mut typed = false;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut buf = [0u8; 4096];
        while let Ok(n) = session.try_read(&mut buf) {
            if n == 0 {
                break;
            }
            raw.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&raw).into_owned();
        if !typed && text.contains("hermes> ") {
            session
                .write_all(b"delegate -- sleep 1\r")
                .and_then(|()| session.flush())
                .expect("type a line");
            typed = true;
        }
        if typed && done(&text) {
            let pid = nix::unistd::Pid::from_raw(session.get_process().pid().as_raw());
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "timed out; the session wrote:\n{text:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_interactive_sessions_status_lines_are_colored_on_a_terminal_unless_no_color() {
    let h = Hermes::new();
    let colored = interactive_until(&h, &[], |t| t.contains("\x1b[33mrunning\x1b[0m: 1 task(s)"));
    assert!(colored.contains("\x1b[33mrunning"), "{colored:?}");
    let h = Hermes::new();
    let plain = interactive_until(&h, &[("NO_COLOR", "1")], |t| {
        t.contains(" running: 1 task(s)")
    });
    assert!(!plain.contains("\x1b[33m"), "{plain:?}");
}
