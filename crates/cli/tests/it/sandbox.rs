//! What a child may do, enforced by the kernel, through the real binary: `--sandbox` on `-z`
//! and `delegate`, the status JSON and the block, the person's ceiling on `delegate_task`
//! (`sandbox.mcp_max`, `mcp.commands`), and the ledger from inside a child (an orchestrator
//! delegates, a leaf cannot write it).

use std::time::Duration;

use serde_json::json;

use crate::common::{Hermes, Run, wait_for};
use crate::mcp_and_hooks::client::Mcp;

/// A directory with a `.git/config`, and a user home beside it (`$HOME`).
struct Places {
    _root: tempfile::TempDir,
    work: std::path::PathBuf,
    home: std::path::PathBuf,
}

fn places() -> Places {
    let root = tempfile::tempdir().expect("tempdir");
    let work = root.path().join("work");
    let home = root.path().join("home");
    std::fs::create_dir_all(work.join(".git")).expect("work");
    std::fs::create_dir_all(&home).expect("home");
    std::fs::write(work.join(".git/config"), "[core]\n").expect("config");
    Places {
        _root: root,
        work,
        home,
    }
}

/// `hermes -z --sandbox MODE [extra] --cwd WORK -- sh -c SCRIPT` with `HOME` set to the places'.
fn run_in(h: &Hermes, p: &Places, mode: &str, extra: &[&str], script: &str) -> Run {
    let work = p.work.display().to_string();
    let mut args = vec!["-z", "--sandbox", mode, "--cwd", &work];
    args.extend_from_slice(extra);
    args.extend(["--", "sh", "-c", script]);
    let mut c = h.command(&args);
    c.env("HOME", &p.home)
        .env("HERMES", env!("CARGO_BIN_EXE_hermes"));
    Run::from(c.output().expect("hermes runs"))
}

/// A script that tries each write and prints `name=ok` or `name=no`.
fn tries(writes: &[(&str, String)]) -> String {
    writes
        .iter()
        .map(|(name, cmd)| {
            format!("if {cmd} 2>/dev/null; then echo {name}=ok; else echo {name}=no; fi\n")
        })
        .collect()
}

/// Whether the result (each of its lines shown behind `│` in the block) holds `line`.
fn says(run: &Run, line: &str) -> bool {
    run.stdout
        .lines()
        .any(|l| l.trim().trim_start_matches('│').trim() == line)
}

#[test]
fn workspace_write_reaches_the_workspace_and_nothing_else() {
    let h = Hermes::new();
    let p = places();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = listener.local_addr().expect("addr").port();
    let script = tries(&[
        ("work", "echo x > made.txt".into()),
        ("tmp", "echo x > \"$TMPDIR/t\"".into()),
        ("outside", "echo x > \"$HOME/outside\"".into()),
        ("git", "echo x >> .git/config".into()),
        (
            "link",
            "ln -s \"$HOME\" esc && echo x > esc/via-link".into(),
        ),
        ("proc", "echo x > \"/proc/self/root$HOME/via-proc\"".into()),
        (
            "net",
            format!("bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}'"),
        ),
    ]);
    let run = run_in(&h, &p, "workspace-write", &["--network", "off"], &script);
    assert_eq!(run.code, 0, "{run:?}");
    for (name, allowed) in [
        ("work", true),
        ("tmp", true),
        ("outside", false),
        ("git", false),
        ("link", false),
        ("proc", false),
        ("net", false),
    ] {
        let word = if allowed { "ok" } else { "no" };
        assert!(
            says(&run, &format!("{name}={word}")),
            "{name}: {}",
            run.stdout
        );
    }
    assert!(p.work.join("made.txt").exists());
    assert_eq!(std::fs::read_dir(&p.home).expect("home").count(), 0);
    // The block says what the child could do.
    assert!(
        run.stdout.contains("Sandbox: workspace-write, network off"),
        "{}",
        run.stdout
    );
}

#[test]
fn read_only_writes_only_its_temp_dir_and_full_writes_anywhere() {
    let h = Hermes::new();
    let p = places();
    let script = tries(&[
        ("work", "echo x > made.txt".into()),
        ("tmp", "echo x > \"$TMPDIR/t\"".into()),
        ("outside", "echo x > \"$HOME/outside\"".into()),
    ]);
    let run = run_in(&h, &p, "read-only", &[], &script);
    assert!(says(&run, "work=no") && says(&run, "outside=no"), "{run:?}");
    assert!(says(&run, "tmp=ok"), "{run:?}");
    let run = run_in(&h, &p, "full", &[], &script);
    for name in ["work", "tmp", "outside"] {
        assert!(says(&run, &format!("{name}=ok")), "{name}: {run:?}");
    }
    assert!(!run.stdout.contains("Sandbox:"), "{}", run.stdout);
}

#[test]
fn a_write_the_sandbox_refused_shows_in_the_status_line() {
    let h = Hermes::new();
    let p = places();
    let run = run_in(&h, &p, "read-only", &[], "echo x > \"$HOME/outside\"");
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stdout.contains("Status: failed (sandbox: "),
        "{}",
        run.stdout
    );
}

#[test]
fn a_leaf_cannot_write_the_ledger_and_an_orchestrator_delegates() {
    let h = Hermes::new();
    let p = places();
    let ledger = h.path().join("ledger.redb");
    // Even with the home as its workspace, a leaf cannot open the ledger for writing.
    let home = h.path().display().to_string();
    let mut c = h.command(&[
        "-z",
        "--sandbox",
        "workspace-write",
        "--cwd",
        &home,
        "--",
        "sh",
        "-c",
        "if echo x >> ledger.redb 2>/dev/null; then echo ledger=ok; else echo ledger=no; fi",
    ]);
    let run = Run::from(c.output().expect("runs"));
    if !h.on_postgres() {
        assert!(ledger.exists());
        assert!(says(&run, "ledger=no"), "{run:?}");
    }
    // A leaf's hermes cannot record a dispatch; an orchestrator's can.
    let inner = "\"$HERMES\" -z --sandbox full -- echo from-the-grandchild";
    let leaf = run_in(&h, &p, "workspace-write", &[], inner);
    let orchestrator = run_in(
        &h,
        &p,
        "workspace-write",
        &["--role", "orchestrator"],
        inner,
    );
    assert!(
        orchestrator.stdout.contains("from-the-grandchild"),
        "{orchestrator:?}"
    );
    if !h.on_postgres() {
        assert_ne!(leaf.code, 0, "{leaf:?}");
        assert!(!leaf.stdout.contains("TASK COMPLETE"), "{leaf:?}");
    }
}

#[test]
fn status_json_carries_each_childs_sandbox() {
    let h = Hermes::new();
    let p = places();
    let work = p.work.display().to_string();
    let handle = h.json(&[
        "delegate",
        "--session",
        "conv-sandbox",
        "--json",
        "--sandbox",
        "read-only",
        "--network",
        "off",
        "--cwd",
        &work,
        "--",
        "true",
    ]);
    let id = handle["delegation_id"].as_str().expect("id").to_owned();
    let status = wait_for(Duration::from_secs(20), "the delegation to end", || {
        let s = h.json(&["delegation", "status", &id, "--json"]);
        (s["status"] == "completed").then_some(s)
    });
    let task = &status["tasks"][0];
    assert_eq!(
        task["sandbox"],
        json!({"mode": "read-only", "network": false}),
        "{status}"
    );
    assert_eq!(task["denials"], 0);
}

#[test]
fn unknown_and_unenforceable_asks_are_refused_with_one_line() {
    let h = Hermes::new();
    h.run(&["-z", "--sandbox", "open", "--", "true"])
        .assert_one_error_line(2);
    h.run(&["-z", "--network", "maybe", "--", "true"])
        .assert_one_error_line(2);
    let tasks = h.write(
        "tasks.json",
        r#"{"sandbox": "wide", "tasks": [{"goal": "g", "command": ["true"]}]}"#,
    );
    h.run(&["-z", "--tasks", &tasks.display().to_string()])
        .assert_one_error_line(2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegate_task_stays_within_the_persons_ceiling() {
    let h = Hermes::new();
    h.write("config.toml", "[mcp]\ncommands = [\"true\", \"echo\"]\n");
    let mcp = Mcp::start(&h, &[("HERMES_SESSION_ID", "conv-ceiling")]).await;
    let wide = mcp
        .call(
            "delegate_task",
            json!({"goal": "x", "command": ["true"], "sandbox": "full"}),
        )
        .await;
    assert!(wide.is_error, "{}", wide.text);
    assert!(wide.text.contains("sandbox.mcp_max"), "{}", wide.text);
    let not_listed = mcp
        .call(
            "delegate_task",
            json!({"goal": "x", "command": ["sh", "-c", "true"]}),
        )
        .await;
    assert!(not_listed.is_error, "{}", not_listed.text);
    assert!(
        not_listed.text.contains("mcp.commands"),
        "{}",
        not_listed.text
    );
    // Within it: runs under mcp_default.
    let ok = mcp
        .call(
            "delegate_task",
            json!({"goal": "x", "command": ["echo", "hi"], "background": false}),
        )
        .await;
    assert!(!ok.is_error, "{}", ok.text);
    assert!(ok.text.contains("Sandbox: workspace-write"), "{}", ok.text);
}
