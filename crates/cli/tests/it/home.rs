//! Where the home is when nothing names it, and `hermes home migrate` moving a home an older
//! hermes made in `~/.hermes` (upstream Hermes Agent's home as well) to a place of its own,
//! leaving upstream's files alone. The file home only: these runs name no ledger URL.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::{Run, wait_for};

/// A user with a home directory and no hermes variables.
struct User {
    dir: tempfile::TempDir,
}

impl User {
    fn new() -> User {
        User {
            dir: tempfile::tempdir().expect("the user's home"),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn hermes(&self, args: &[&str], extra: &[(&str, &Path)]) -> Run {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hermes"));
        c.args(args)
            .env("HOME", self.path())
            .env("HERMES_HOST_IDLE_EXIT_SECONDS", "1")
            .env("HERMES_HOST_SWEEP_INTERVAL_MS", "100")
            .env_remove("HERMES_HOME")
            .env_remove("XDG_DATA_HOME")
            .env_remove("HERMES_LEDGER_URL")
            .env_remove("HERMES_SESSION_ID")
            .stdin(Stdio::null());
        for (name, value) in extra {
            c.env(name, value);
        }
        Run::from(c.output().expect("hermes runs"))
    }

    fn json(&self, args: &[&str], extra: &[(&str, &Path)]) -> Value {
        let run = self.hermes(args, extra);
        assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
        run.json()
    }
}

#[test]
fn a_new_user_gets_a_home_of_our_own_and_xdg_data_home_moves_it() {
    let user = User::new();
    let home = user.json(&["home", "--json"], &[]);
    assert_eq!(home["source"], "default");
    assert_eq!(
        PathBuf::from(home["home"].as_str().expect("a path")),
        user.path().join(".local/share/hermes")
    );
    let data = user.path().join("data");
    let home = user.json(&["home", "--json"], &[("XDG_DATA_HOME", &data)]);
    assert_eq!(home["home"], data.join("hermes").display().to_string());
    // The work itself lands there, and nothing in upstream Hermes Agent's ~/.hermes.
    let run = user.hermes(&["-z", "--goal", "g", "--", "true"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        user.path()
            .join(".local/share/hermes/ledger.redb")
            .is_file()
    );
    assert!(!user.path().join(".hermes").exists());
}

#[test]
fn an_old_home_in_dot_hermes_is_used_until_migrated_and_upstreams_files_stay() {
    let user = User::new();
    let old = user.path().join(".hermes");
    // Upstream Hermes Agent's own files, with our MCP server installed naming the old home.
    std::fs::create_dir_all(old.join("logs")).expect("mkdir");
    std::fs::create_dir_all(old.join("cache/images")).expect("mkdir");
    std::fs::set_permissions(&old, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .expect("a private home, as upstream makes it");
    let yaml = format!(
        "model:\n  default: m\nmcp_servers:\n  hermes:\n    env:\n      HERMES_HOME: {}\n",
        old.display()
    );
    std::fs::write(old.join("config.yaml"), &yaml).expect("config.yaml");
    std::fs::write(old.join("logs/agent.log"), "upstream's log\n").expect("agent.log");
    // A home an older hermes made there (HERMES_HOME then defaulted to it).
    let made = user.hermes(
        &["-z", "--goal", "old work", "--", "true"],
        &[("HERMES_HOME", &old)],
    );
    assert_eq!(made.code, 0, "{}", made.stderr);
    let home = user.json(&["home", "--json"], &[]);
    assert_eq!(home["source"], "legacy");
    assert_eq!(home["home"], old.display().to_string());
    let listed = |user: &User| user.json(&["delegation", "list", "--all", "--json"], &[]);
    let before = listed(&user);
    assert_eq!(before["recent_count"], 1, "{before}");

    // A result still waiting for its conversation holds the move back.
    let dispatched = user.json(
        &[
            "delegate",
            "--session",
            "s",
            "--goal",
            "pending",
            "--json",
            "--",
            "true",
        ],
        &[],
    );
    assert!(dispatched["delegation_id"].is_string(), "{dispatched}");
    wait_for(Duration::from_secs(20), "the result to be ready", || {
        let list = user.json(&["session", "list", "--json"], &[]);
        (list["sessions"][0]["pending"] == 1).then_some(())
    });
    let refused = user.hermes(&["home", "migrate"], &[]);
    refused.assert_one_error_line(1);
    assert!(
        refused.stderr.contains("1 result not yet delivered"),
        "{}",
        refused.stderr
    );
    assert!(old.join("ledger.redb").is_file(), "nothing moved");
    let drained = user.hermes(&["drain", "--session", "s"], &[]);
    assert!(drained.stdout.contains("pending"), "{}", drained.stdout);
    wait_for(Duration::from_secs(20), "the host's idle exit", || {
        let list = user.json(&["session", "list", "--json"], &[]);
        list["sessions"]
            .as_array()?
            .iter()
            .all(|s| s["host_pid"].is_null())
            .then_some(())
    });

    let moved = user.json(&["home", "migrate", "--json"], &[]);
    let new = user.path().join(".local/share/hermes");
    assert_eq!(moved["home"], new.display().to_string(), "{moved}");
    assert_eq!(
        moved["reinstall"],
        serde_json::json!(["hermes-agent"]),
        "{moved}"
    );
    let names: Vec<&str> = moved["moved"]
        .as_array()
        .expect("moved")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(names.contains(&"ledger.redb"), "{names:?}");
    assert!(names.contains(&"cache/delegation"), "{names:?}");
    // Upstream's files are where they were, byte for byte; ours are gone from there.
    assert_eq!(
        std::fs::read_to_string(old.join("config.yaml")).expect("kept"),
        yaml
    );
    assert_eq!(
        std::fs::read_to_string(old.join("logs/agent.log")).expect("kept"),
        "upstream's log\n"
    );
    assert!(old.join("cache/images").is_dir());
    assert!(!old.join("ledger.redb").exists());
    assert!(!old.join("cache/delegation").exists());
    // The history came along: hermes finds it with no variable set.
    assert_eq!(user.json(&["home", "--json"], &[])["source"], "default");
    let after = listed(&user);
    assert_eq!(after["recent_count"], 2, "{after}");
    assert!(
        after["recent"]
            .as_array()
            .expect("recent")
            .contains(&before["recent"][0]),
        "{after}"
    );
    // Twice is nothing.
    let again = user.hermes(&["home", "migrate"], &[]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again.stdout.contains("nothing to migrate"),
        "{}",
        again.stdout
    );
}

#[test]
fn a_home_named_by_the_variable_is_never_migrated() {
    let user = User::new();
    let run = user.hermes(&["home", "migrate"], &[("HERMES_HOME", user.path())]);
    run.assert_one_error_line(2);
    assert!(run.stderr.contains("HERMES_HOME is set"), "{}", run.stderr);
}
