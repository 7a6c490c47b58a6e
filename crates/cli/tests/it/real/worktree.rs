//! A coding child with a real agent under `--workspace worktree`: Claude Code (the version
//! pinned in `tests/agents/package.json`) edits a file of the project with its own `Read` and
//! `Edit` tools, told to by a scripted Anthropic Messages server on 127.0.0.1. Its edit is a
//! commit on the child's own branch, the person's checkout never sees it, and the delivered
//! block names the branch and the change.
//!
//! Facts about Claude Code the test leans on, and where they are pinned in the installed
//! package (`node_modules/@anthropic-ai/claude-code`):
//!
//! - the tools' inputs: `Read {file_path}` and `Edit {file_path, old_string, new_string}`
//!   (`FileReadInput`, `FileEditInput` in `sdk-tools.d.ts`); `Edit` changes only a file read
//!   before in the conversation, so the model reads it first;
//! - the model learns where it works from its input, a line `Primary working directory: DIR`
//!   (in `claude-code-linux-x64/claude`), which is how the script finds the worktree;
//! - headless, `--permission-mode acceptEdits` lets it edit without asking (`claude --help`):
//!   what hermes passes under `--sandbox workspace-write` (`crates/agents/src/claude.rs`).

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use hermes_testkit::model::{ModelServer, Reply, Turn, Wire};
use serde_json::{Value, json};

use super::Machine;
use crate::common::wait_for;

/// How long the child may take.
const LIMIT: Duration = Duration::from_secs(90);

/// The line the child adds to the project's file.
const EDIT: &str = "a line Claude added in its worktree";

/// `git ARGS` in `dir` with an identity of the person's; its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "person")
        .env("GIT_AUTHOR_EMAIL", "person@example.com")
        .env("GIT_COMMITTER_NAME", "person")
        .env("GIT_COMMITTER_EMAIL", "person@example.com")
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The model: reads `notes.txt` in its working directory, edits it, then says it is done
/// (one step per tool result in the conversation).
fn editor(turn: &Turn<'_>) -> Reply {
    let body = &turn.request.body;
    let file = format!("{}/notes.txt", working_directory(body));
    match tool_results(body) {
        0 => Reply::Call {
            tool: "Read".to_owned(),
            args: json!({"file_path": file}),
        },
        1 => Reply::Call {
            tool: "Edit".to_owned(),
            args: json!({
                "file_path": file,
                "old_string": "start\n",
                "new_string": format!("start\n{EDIT}\n"),
            }),
        },
        _ => Reply::Text("notes.txt edited".to_owned()),
    }
}

/// The directory Claude says it works in (`Primary working directory: DIR`).
fn working_directory(body: &Value) -> String {
    let text = body.to_string();
    let (_, rest) = text
        .split_once("Primary working directory: ")
        .unwrap_or_else(|| panic!("no working directory in {text}"));
    rest.chars()
        .take_while(|c| !matches!(c, '\\' | '"'))
        .collect()
}

/// How many tool results the conversation holds.
fn tool_results(body: &Value) -> usize {
    body["messages"].as_array().map_or(0, |messages| {
        messages
            .iter()
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .filter(|b| b["type"] == "tool_result")
            .count()
    })
}

/// `hermes ARGS` in the project, with Claude pointed at `model` and nothing else (a child
/// gets the environment of whoever dispatched it).
fn hermes(machine: &Machine, model: &ModelServer, args: &[&str]) -> Output {
    machine
        .command("hermes")
        .args(args)
        .env("ANTHROPIC_BASE_URL", model.base_url())
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .env_remove("ANTHROPIC_MODEL")
        .env_remove("CLAUDE_CONFIG_DIR")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .output()
        .expect("hermes runs")
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{out:?}"))
}

/// Claude as a worktree child edits `notes.txt` with its own tools: the edit is on
/// `hermes/<delegation>-0`, the person's checkout is clean and unchanged, and the block
/// delivered to the session names the branch and the file.
#[test]
fn claude_edits_in_its_own_worktree_and_the_block_names_its_branch() {
    let machine = Machine::new();
    let project = machine.project();
    std::fs::write(project.join("notes.txt"), "start\n").expect("write notes.txt");
    git(project, &["add", "notes.txt"]);
    git(project, &["commit", "-q", "-m", "start"]);
    let head = git(project, &["rev-parse", "HEAD"]);
    let model = ModelServer::with_script(Wire::Anthropic, Arc::new(editor));

    let out = hermes(
        &machine,
        &model,
        &[
            "delegate",
            "--session",
            "s-worktree",
            "--agent",
            "claude",
            "--model",
            "claude-test-model",
            "--workspace",
            "worktree",
            "--sandbox",
            "workspace-write",
            "--goal",
            "add a line to notes.txt",
            "--json",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let id = json_of(&out)["delegation_id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let status = wait_for(LIMIT, "the child to end", || {
        let status = json_of(&hermes(
            &machine,
            &model,
            &["delegation", "status", &id, "--json"],
        ));
        (!matches!(status["status"].as_str(), Some("running" | "queued"))).then_some(status)
    });
    assert_eq!(status["status"], "completed", "{status}");
    let task = &status["tasks"][0];
    assert_eq!(task["result"], "notes.txt edited", "{task}");
    // It worked in its worktree, not in the project.
    let worktree = task["workspace"]["path"].as_str().expect("a worktree");
    let worked_in: Vec<String> = model
        .turns()
        .iter()
        .map(|r| working_directory(&r.body))
        .collect();
    assert_eq!(worked_in, vec![worktree; 3], "{task}");

    // The branch holds the edit, committed by hermes on the base the person had.
    let branch = format!("hermes/{id}-0");
    assert_eq!(task["workspace"]["branch"], branch.as_str(), "{task}");
    assert_eq!(task["workspace"]["base"], head.trim(), "{task}");
    assert_eq!(
        git(project, &["show", &format!("{branch}:notes.txt")]),
        format!("start\n{EDIT}\n")
    );
    let changed = git(project, &["diff", "--name-only", head.trim(), &branch]);
    assert_eq!(changed, "notes.txt\n");
    // The person's checkout: clean, the file as it was, still on its own branch.
    assert_eq!(git(project, &["status", "--porcelain"]), "");
    assert_eq!(
        std::fs::read_to_string(project.join("notes.txt")).expect("notes.txt"),
        "start\n"
    );
    assert_eq!(git(project, &["rev-parse", "HEAD"]), head);

    // The block delivered to the session says where the change is.
    let drained = json_of(&hermes(
        &machine,
        &model,
        &["drain", "--session", "s-worktree", "--json"],
    ));
    let texts: Vec<&str> = drained["envelopes"]
        .as_array()
        .expect("envelopes")
        .iter()
        .filter_map(|e| e["text"].as_str())
        .collect();
    assert_eq!(texts.len(), 1, "{drained}");
    let changes = texts[0]
        .split_once("--- CHANGES ---")
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("no CHANGES in {}", texts[0]));
    assert!(
        changes.contains(&format!("Branch: {branch}")),
        "{}",
        texts[0]
    );
    assert!(
        changes.contains("notes.txt") && changes.contains("1 file changed, 1 insertion"),
        "{}",
        texts[0]
    );
}
