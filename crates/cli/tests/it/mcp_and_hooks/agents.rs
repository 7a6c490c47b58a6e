//! Codex CLI, Gemini CLI, GitHub Copilot CLI, Cursor and Cline end to end: for
//! each, `hermes hook install NAME` into a project, then a stand-in agent that starts the MCP
//! server the installed configuration names and runs the installed hooks as the agent's
//! documentation says (a shell command, a `bash` command, an executable script), with the
//! documented payloads (`agent_fixtures.rs`). Dispatch in the background, delivery at the
//! agent's own boundaries exactly once, two conversations side by side, install twice, install
//! into a user's configuration, and what a failing hook exits with.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::agent_fixtures as fx;
use super::standin::{Agent, wait_ready};
use crate::common::{Hermes, Run};

/// What the tests need to know of one agent, all of it from its documentation.
pub struct Spec {
    pub name: &'static str,
    /// The agent's session-start event.
    pub start: &'static str,
    /// Its hook after a tool call that can add context, if any.
    pub tool: Option<&'static str>,
    /// Its hook before the model reads the next prompt that can add context, if any.
    pub turn: Option<&'static str>,
    /// Its hook when the agent wants to stop that can keep it going, if any.
    pub stop: Option<&'static str>,
    /// Its session-end event, if any.
    pub end: Option<&'static str>,
    /// The documented input of an event for a conversation.
    pub payload: fn(&str, &str) -> Value,
    /// The text an answer to an event hands the model ("" when the hook printed nothing).
    pub delivered: fn(&str, &str) -> String,
    /// How the agent runs the installed hook of an event: the argv.
    pub hook_argv: fn(&Path, &str) -> Vec<String>,
    /// The installed MCP server's command and arguments.
    pub server_argv: fn(&Path) -> Vec<String>,
    /// A user's configuration before the install: (path in the project, content).
    pub seed: &'static [(&'static str, &'static str)],
    /// What of it must be there after the install.
    pub keeps: &'static [&'static str],
    /// The exit code of a hook hermes cannot serve (bad input): a code the agent does not
    /// take as "block".
    pub fail_code: i32,
    /// Where `--user` writes, under the home directory.
    pub user_file: &'static str,
}

/// `hermes hook install NAME --project P --absolute` (and `extra`), with `HOME` at `home`.
pub fn install(h: &Hermes, spec: &Spec, project: &Path, home: &Path, extra: &[&str]) -> Run {
    let mut args = vec![
        "hook",
        "install",
        spec.name,
        "--project",
        project.to_str().expect("utf-8"),
        "--absolute",
    ];
    args.extend_from_slice(extra);
    h.run_env(&args, &[("HOME", home.to_str().expect("utf-8"))])
}

/// A project with `spec`'s hooks installed, and a stand-in agent on it.
struct Installed {
    project: tempfile::TempDir,
}

impl Installed {
    /// The home is the project's `.home`: an agent that reads its MCP servers from the home
    /// only (Cline) finds them there (`Spec::server_argv` of the project).
    fn new(h: &Hermes, spec: &Spec) -> Installed {
        let project = tempfile::tempdir().expect("project");
        let home = project.path().join(".home");
        std::fs::create_dir(&home).expect("home");
        let run = install(h, spec, project.path(), &home, &[]);
        assert_eq!(run.code, 0, "install {}: {}", spec.name, run.stderr);
        Installed { project }
    }

    fn agent(&self, h: &Hermes, spec: &Spec) -> Agent {
        Agent::start_server(h, &(spec.server_argv)(self.project.path()))
    }

    /// Runs the installed hook of `event` for `session`; asserts it exited 0.
    fn fire(&self, agent: &mut Agent, spec: &Spec, event: &str, session: &str) -> String {
        let argv = (spec.hook_argv)(self.project.path(), event);
        let answer = agent.exec(&argv, &(spec.payload)(event, session).to_string());
        assert_eq!(answer["code"], 0, "{} {event}: {answer}", spec.name);
        (spec.delivered)(event, answer["stdout"].as_str().unwrap_or(""))
    }
}

/// Dispatches `command` in the background; returns the dispatch answer.
fn dispatch(agent: &mut Agent, goal: &str, out: &str, delivery: &str) -> Value {
    let answer = agent.tool(
        "delegate_task",
        json!({"goal": goal, "command": ["sh", "-c", format!("echo {out}")], "result_delivery": delivery}),
    );
    assert_eq!(answer["is_error"], false, "{answer}");
    serde_json::from_str(answer["text"].as_str().expect("text")).expect("dispatch JSON")
}

fn id(answer: &Value) -> String {
    answer["delegation_id"].as_str().expect("id").to_owned()
}

/// Dispatch in the background; each result arrives at the agent's own boundary, once; a hook
/// hermes cannot serve exits with a code the agent does not take as "block"; the session
/// ends with the agent's session end, or (without one) stays for a resume.
pub fn delivers_once(spec: &Spec) {
    let h = Hermes::new();
    let installed = Installed::new(&h, spec);
    let mut agent = installed.agent(&h, spec);
    assert_eq!(installed.fire(&mut agent, spec, spec.start, "conv-1"), "");
    let inject = dispatch(&mut agent, "lint", "inject-out", "inject");
    assert_eq!(inject["session"], "conv-1", "{inject}");
    match spec.tool {
        Some(_) => assert!(inject.get("note").is_none(), "{inject}"),
        None => assert!(
            inject["note"]
                .as_str()
                .is_some_and(|n| n.contains("after_turn")),
            "{} has no tool boundary: the answer says inject becomes after_turn: {inject}",
            spec.name
        ),
    }
    let after = dispatch(&mut agent, "tests", "after-out", "after_turn");
    wait_ready(&h, &id(&inject));
    wait_ready(&h, &id(&after));
    if let Some(tool) = spec.tool {
        let text = installed.fire(&mut agent, spec, tool, "conv-1");
        assert!(
            text.contains("inject-out") && !text.contains("after-out"),
            "{text}"
        );
        assert_eq!(installed.fire(&mut agent, spec, tool, "conv-1"), "");
    }
    let turn = spec.turn.or(spec.stop).expect("a turn boundary");
    let text = installed.fire(&mut agent, spec, turn, "conv-1");
    assert!(
        text.contains(&id(&after)) && text.contains("after-out"),
        "{text}"
    );
    assert_eq!(text.contains("inject-out"), spec.tool.is_none(), "{text}");
    assert_eq!(installed.fire(&mut agent, spec, turn, "conv-1"), "");
    if let (Some(_), Some(stop)) = (spec.turn, spec.stop) {
        let late = dispatch(&mut agent, "late", "late-out", "after_turn");
        wait_ready(&h, &id(&late));
        let text = installed.fire(&mut agent, spec, stop, "conv-1");
        assert!(text.contains("late-out"), "{text}");
        assert_eq!(installed.fire(&mut agent, spec, stop, "conv-1"), "");
    }
    let results = agent.tool("delegation_results", json!({}));
    assert!(
        results["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("No delegation results")),
        "delivered once: {results}"
    );
    let bad = agent.exec(&(spec.hook_argv)(installed.project.path(), turn), "{");
    assert_eq!(bad["code"], spec.fail_code, "{bad}");
    assert!(
        bad["stderr"]
            .as_str()
            .is_some_and(|e| e.starts_with("hermes: ")),
        "{bad}"
    );
    if spec.fail_code == 0 {
        // The agent takes any other code as "block": hermes answers "go on" instead.
        let go_on: Value =
            serde_json::from_str(bad["stdout"].as_str().unwrap_or("")).expect("JSON");
        assert_eq!(go_on, json!({"cancel": false}), "{bad}");
    }
    let sessions = || h.json(&["session", "list", "--json"]);
    let state = |s: &Value| {
        s["sessions"]
            .as_array()
            .and_then(|all| all.iter().find(|s| s["id"] == "conv-1"))
            .map(|s| s["state"].clone())
    };
    match spec.end {
        Some(end) => {
            // A session end that is no discard (its process exits): the conversation is
            // detached, for a resume to collect what it left.
            assert_eq!(installed.fire(&mut agent, spec, end, "conv-1"), "");
            assert_eq!(state(&sessions()), Some(json!("detached")));
        }
        None => assert_ne!(state(&sessions()), Some(json!("ended"))),
    }
}

/// Two conversations of the agent side by side: each gets only its own results.
pub fn side_by_side(spec: &Spec) {
    let h = Hermes::new();
    let installed = Installed::new(&h, spec);
    let mut a = installed.agent(&h, spec);
    let mut b = installed.agent(&h, spec);
    installed.fire(&mut a, spec, spec.start, "conv-a");
    installed.fire(&mut b, spec, spec.start, "conv-b");
    let da = dispatch(&mut a, "a", "from-a", "after_turn");
    let db = dispatch(&mut b, "b", "from-b", "after_turn");
    assert_eq!(
        (da["session"].clone(), db["session"].clone()),
        (json!("conv-a"), json!("conv-b"))
    );
    wait_ready(&h, &id(&da));
    wait_ready(&h, &id(&db));
    let turn = spec.turn.or(spec.stop).expect("a turn boundary");
    let ta = installed.fire(&mut a, spec, turn, "conv-a");
    let tb = installed.fire(&mut b, spec, turn, "conv-b");
    assert!(ta.contains("from-a") && !ta.contains("from-b"), "{ta}");
    assert!(tb.contains("from-b") && !tb.contains("from-a"), "{tb}");
}

/// Every file under `dir`, by path.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d)
            .expect("read dir")
            .map_while(Result::ok)
        {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                files.insert(path.clone(), std::fs::read(&path).expect("read"));
            }
        }
    }
    files
}

/// Installing into a user's configuration keeps their entries; installing again changes
/// nothing; `--print` writes nothing; `--user` writes under the home directory.
pub fn install_keeps_and_repeats(spec: &Spec) {
    let h = Hermes::new();
    let project = tempfile::tempdir().expect("project");
    let home = tempfile::tempdir().expect("home");
    let p = project.path();
    for (path, text) in spec.seed {
        let path = p.join(path);
        std::fs::create_dir_all(path.parent().expect("dir")).expect("dir");
        std::fs::write(&path, text).expect("seed");
    }
    let printed = install(&h, spec, p, home.path(), &["--print"]);
    assert_eq!(printed.code, 0, "{}", printed.stderr);
    assert!(printed.stdout.contains("hook"), "{}", printed.stdout);
    let seeded = snapshot(p);
    assert_eq!(seeded.len(), spec.seed.len(), "--print wrote nothing");
    let first = install(&h, spec, p, home.path(), &[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let once = snapshot(p);
    let all: String = once.values().map(|b| String::from_utf8_lossy(b)).collect();
    for kept in spec.keeps {
        assert!(all.contains(kept), "{} kept {kept:?}: {all}", spec.name);
    }
    assert!(all.contains(env!("CARGO_BIN_EXE_hermes")), "{all}");
    let second = install(&h, spec, p, home.path(), &[]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(
        snapshot(p),
        once,
        "{}: installing twice changes nothing",
        spec.name
    );
    // An agent that reads its MCP servers from the home only gets them there either way.
    let home_server = match &hermes_agents::find(spec.name)
        .expect("an agent")
        .install
        .server
    {
        hermes_agents::Server::Json { file, .. } if file.home_only() => file.user,
        _ => None,
    };
    assert!(
        snapshot(home.path()).keys().all(|k| {
            home_server.is_some_and(|parts| {
                *k == parts.iter().fold(home.path().to_owned(), |p, s| p.join(s))
            })
        }),
        "a project install writes no user file but the server of an agent that reads it from the home only"
    );
    let user = install(&h, spec, p, home.path(), &["--user"]);
    assert_eq!(user.code, 0, "{}", user.stderr);
    let wrote = snapshot(home.path());
    assert!(
        wrote.contains_key(&home.path().join(spec.user_file)),
        "{:?}",
        wrote.keys()
    );
}

macro_rules! agent_tests {
    ($($agent:ident => $spec:expr),* $(,)?) => {$(
        mod $agent {
            #[test]
            fn dispatches_in_the_background_and_delivers_once_at_its_boundaries() {
                super::delivers_once(&$spec);
            }

            #[test]
            fn two_conversations_side_by_side_never_cross() {
                super::side_by_side(&$spec);
            }

            #[test]
            fn install_keeps_the_users_entries_and_twice_changes_nothing() {
                super::install_keeps_and_repeats(&$spec);
            }
        }
    )*};
}

agent_tests! {
    codex => crate::mcp_and_hooks::agent_fixtures::CODEX,
    gemini => crate::mcp_and_hooks::agent_fixtures::GEMINI,
    copilot => crate::mcp_and_hooks::agent_fixtures::COPILOT,
    cursor => crate::mcp_and_hooks::agent_fixtures::CURSOR,
    cline => crate::mcp_and_hooks::agent_fixtures::CLINE,
}

/// Cline runs a script named after the event; one of the user's under a name hermes needs
/// cannot be merged: refused with one line, nothing written.
#[test]
fn a_users_cline_script_under_a_hermes_name_is_refused_and_nothing_written() {
    let h = Hermes::new();
    let project = tempfile::tempdir().expect("project");
    let home = tempfile::tempdir().expect("home");
    let script = project.path().join(".clinerules/hooks/PostToolUse");
    std::fs::create_dir_all(script.parent().expect("dir")).expect("dir");
    std::fs::write(&script, "#!/bin/sh\necho '{\"cancel\": false}'\n").expect("seed");
    let run = install(&h, &fx::CLINE, project.path(), home.path(), &[]);
    run.assert_one_error_line(2);
    assert!(run.stderr.contains("PostToolUse"), "{}", run.stderr);
    assert_eq!(snapshot(project.path()).len(), 1, "nothing written");
}

/// Bad names and flags are refused with one line: an unknown agent, a hook event the agent
/// does not have, `--local` (Claude Code's file) for another agent, `--user` without a home.
#[test]
fn unknown_agents_events_and_flags_are_refused_with_one_line() {
    let h = Hermes::new();
    let project = tempfile::tempdir().expect("project");
    let p = project.path().to_str().expect("utf-8");
    let run = h.run(&["hook", "install", "aider", "--project", p]);
    run.assert_one_error_line(2);
    assert!(
        run.stderr
            .contains("claude, codex, gemini, copilot, cursor, cline"),
        "{}",
        run.stderr
    );
    let run = h.run(&["hook", "install", "codex", "--project", p, "--local"]);
    run.assert_one_error_line(2);
    let run = h.run_env(
        &["hook", "install", "gemini", "--project", p, "--user"],
        &[("HOME", "")],
    );
    run.assert_one_error_line(2);
    assert!(snapshot(project.path()).is_empty(), "nothing written");
    // Cursor runs no hook after a tool call that adds context: hermes has none for it, and
    // says so (exit 1, which Cursor logs and skips).
    let mut c = h.command(&["hook", "post-tool-use", "--agent", "cursor"]);
    let out = c
        .stdin(std::process::Stdio::null())
        .output()
        .expect("hermes runs");
    Run::from(out).assert_one_error_line(1);
    let mut c = h.command(&["hook", "stop", "--agent", "nobody"]);
    Run::from(c.output().expect("hermes runs")).assert_one_error_line(1);
}

/// `--user` for Claude Code: the hooks in `~/.claude/settings.json`, the server in
/// `~/.claude.json` (user scope, no `enabledMcpjsonServers`).
#[test]
fn claude_user_install_writes_under_home() {
    let h = Hermes::new();
    let project = tempfile::tempdir().expect("project");
    let home = tempfile::tempdir().expect("home");
    let run = h.run_env(
        &[
            "hook",
            "install",
            "claude",
            "--user",
            "--project",
            project.path().to_str().expect("utf-8"),
        ],
        &[("HOME", home.path().to_str().expect("utf-8"))],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mcp: Value = serde_json::from_str(
        &std::fs::read_to_string(home.path().join(".claude.json")).expect("~/.claude.json"),
    )
    .expect("JSON");
    assert_eq!(mcp["mcpServers"]["hermes"]["args"], json!(["mcp"]));
    let settings =
        std::fs::read_to_string(home.path().join(".claude/settings.json")).expect("settings");
    assert!(
        settings.contains("hook post-tool-use --agent claude"),
        "{settings}"
    );
    assert!(!settings.contains("enabledMcpjsonServers"), "{settings}");
    assert!(snapshot(project.path()).is_empty());
}

/// An agent without a session-end hook (Codex, Cline): the agent goes away, the session's
/// host ends by idleness (`host.idle_exit_seconds`), the session stays open, and the resumed
/// conversation — a new agent process — gets the result that was waiting.
fn idle_sessions_keep_their_results_for_the_resume(
    spec: &Spec,
    resume: &str,
    source: Option<&str>,
) {
    assert!(spec.end.is_none(), "{} has no session end", spec.name);
    let h = Hermes::new();
    let installed = Installed::new(&h, spec);
    let mut first = installed.agent(&h, spec);
    installed.fire(&mut first, spec, spec.start, "conv-r");
    let unit = dispatch(&mut first, "slow", "kept-out", "after_turn");
    wait_ready(&h, &id(&unit));
    drop(first);
    crate::common::wait_for(
        std::time::Duration::from_secs(30),
        "the idle host to exit",
        || {
            h.host_pids()
                .iter()
                .all(|pid| !crate::common::process_alive(*pid))
                .then_some(())
        },
    );
    let sessions = h.json(&["session", "list", "--json"]);
    let conv = sessions["sessions"]
        .as_array()
        .and_then(|all| all.iter().find(|s| s["id"] == "conv-r"))
        .cloned()
        .unwrap_or_default();
    assert_ne!(conv["state"], "ended", "{sessions}");
    let mut resumed = installed.agent(&h, spec);
    let mut payload = (spec.payload)(resume, "conv-r");
    if let Some(source) = source {
        payload["source"] = json!(source);
    }
    let start = resumed.exec(
        &(spec.hook_argv)(installed.project.path(), resume),
        &payload.to_string(),
    );
    assert_eq!(start["code"], 0, "{start}");
    let turn = spec.turn.or(spec.stop).expect("a turn boundary");
    let text = installed.fire(&mut resumed, spec, turn, "conv-r");
    assert!(text.contains("kept-out"), "{text}");
    assert_eq!(installed.fire(&mut resumed, spec, turn, "conv-r"), "");
}

#[test]
fn a_cline_task_ends_by_idleness_and_its_results_wait_for_task_resume() {
    idle_sessions_keep_their_results_for_the_resume(&fx::CLINE, "TaskResume", None);
}
