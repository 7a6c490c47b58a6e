//! Stand-in agents: separate processes that, like a hook-driven agent CLI, start `hermes mcp`
//! as their child (speaking MCP to it with rmcp's client) and run each hook as an
//! `sh -c 'hermes hook …'` child with the JSON such agents send. Nobody passes a session id to
//! the server: it must find the conversation the hooks name through the agent process.
//!
//! A stand-in agent is this test binary run again with `STANDIN` set: the test
//! `the_stand_in_agent_answers_its_driver` then becomes the agent, reading one request per line
//! on stdin and answering each with one `@@agent {…}` line on stdout.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use super::client::Mcp;
use super::hooks::payload;
use crate::common::{Hermes, wait_for};

const STANDIN: &str = "HERMES_TEST_STANDIN_AGENT";
const MARK: &str = "@@agent ";
const SELF_TEST: &str = "mcp_and_hooks::standin::the_stand_in_agent_answers_its_driver";

/// The driver's handle on one stand-in agent process.
pub struct Agent {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

/// How the stand-in agent starts `hermes mcp`, as MCP configurations do.
pub const LAUNCHERS: &[&str] = &["direct", "sh", "env", "script", "npx"];

impl Agent {
    pub fn start(h: &Hermes) -> Agent {
        Agent::start_with(h, "direct")
    }

    /// A stand-in agent that starts `hermes mcp` through `launcher` (see [`LAUNCHERS`]).
    pub fn start_with(h: &Hermes, launcher: &str) -> Agent {
        Agent::spawn(h, launcher, None, &[])
    }

    /// A stand-in agent that starts its MCP server as `argv` (the command and arguments an
    /// installed MCP configuration names).
    pub fn start_server(h: &Hermes, argv: &[String]) -> Agent {
        Agent::spawn(h, "argv", Some(argv), &[])
    }

    /// A stand-in agent started with `env` besides the home's (the person's environment), that
    /// starts its MCP server as `argv`.
    pub fn start_server_in(h: &Hermes, argv: &[String], env: &[(&str, &str)]) -> Agent {
        Agent::spawn(h, "argv", Some(argv), env)
    }

    fn spawn(h: &Hermes, launcher: &str, argv: Option<&[String]>, env: &[(&str, &str)]) -> Agent {
        let exe = std::env::current_exe().expect("test binary");
        let mut c = Command::new(exe);
        c.args([SELF_TEST, "--exact", "--nocapture", "--test-threads=1"]);
        h.environment(&mut c);
        c.envs(env.iter().copied());
        if let Some(argv) = argv {
            c.env("HERMES_TEST_MCP_ARGV", json!(argv).to_string());
        }
        let mut child = c
            .env(STANDIN, "1")
            .env("HERMES_TEST_LAUNCHER", launcher)
            .env("HERMES", env!("CARGO_BIN_EXE_hermes"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("stand-in agent starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // libtest may have begun the line (`test … ... `) before the answer.
                if let Some(at) = line.find(MARK)
                    && tx.send(line[at + MARK.len()..].to_owned()).is_err()
                {
                    break;
                }
            }
        });
        let stdin = child.stdin.take().expect("stdin");
        let mut agent = Agent {
            child,
            stdin,
            lines,
        };
        assert_eq!(agent.ask(&json!({"op": "ping"}))["pong"], true);
        agent
    }

    pub fn ask(&mut self, request: &Value) -> Value {
        writeln!(self.stdin, "{request}").expect("request written");
        self.stdin.flush().expect("flush");
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("the stand-in agent did not answer {request}"));
        serde_json::from_str(&line).expect("agent answers JSON")
    }

    /// Runs hook `event` (`post-tool-use`) with the agent's JSON for `name` (`PostToolUse`).
    pub fn hook(&mut self, event: &str, session: &str, name: &str) -> Value {
        self.hook_with(event, &payload(session, name))
    }

    pub fn hook_with(&mut self, event: &str, payload: &str) -> Value {
        let answer = self.ask(&json!({"op": "hook", "event": event, "payload": payload}));
        assert_eq!(answer["code"], 0, "hook {event}: {answer}");
        answer
    }

    /// The hook's `additionalContext` (empty if it printed nothing).
    pub fn context(&mut self, event: &str, session: &str, name: &str) -> String {
        let answer = self.hook(event, session, name);
        context_of(&answer, name)
    }

    /// Runs `argv` as the agent runs an installed hook (a shell command, a script), with
    /// `payload` on stdin; answers its exit code, stdout and stderr.
    pub fn exec(&mut self, argv: &[String], payload: &str) -> Value {
        self.ask(&json!({"op": "exec", "argv": argv, "payload": payload}))
    }

    pub fn tool(&mut self, name: &str, args: Value) -> Value {
        self.ask(&json!({"op": "tool", "name": name, "args": args}))
    }

    /// Dispatches in the background; returns (delegation id, session).
    pub fn delegate(&mut self, args: Value) -> (String, String) {
        let answer = self.tool("delegate_task", args);
        assert_eq!(answer["is_error"], false, "{answer}");
        let handle: Value =
            serde_json::from_str(answer["text"].as_str().expect("text")).expect("dispatch JSON");
        (
            handle["delegation_id"].as_str().expect("id").to_owned(),
            handle["session"].as_str().expect("session").to_owned(),
        )
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `additionalContext` of a hook's answer for event `name` (empty if it printed nothing).
pub fn context_of(answer: &Value, name: &str) -> String {
    let stdout = answer["stdout"].as_str().unwrap_or("");
    if stdout.is_empty() {
        return String::new();
    }
    let value: Value = serde_json::from_str(stdout).expect("hook answers JSON");
    assert_eq!(
        value["hookSpecificOutput"]["hookEventName"], name,
        "{value}"
    );
    value["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .expect("additionalContext")
        .to_owned()
}

/// Waits until the delegation's result has been published.
pub fn wait_ready(h: &Hermes, id: &str) {
    wait_for(Duration::from_secs(20), "a result to be ready", || {
        let status = h.json(&["delegation", "status", id, "--json"]);
        status["events"]
            .as_array()
            .is_some_and(|e| !e.is_empty())
            .then_some(())
    });
}

/// With `STANDIN` set this is the stand-in agent; otherwise it checks that one starts, runs
/// its server and answers.
#[test]
fn the_stand_in_agent_answers_its_driver() {
    if std::env::var_os(STANDIN).is_some() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(be_the_agent());
        return;
    }
    let h = Hermes::new();
    let mut agent = Agent::start(&h);
    let answer = agent.tool("delegation_list", json!({}));
    assert_eq!(answer["is_error"], false, "{answer}");
    assert_eq!(
        agent.ask(&json!({"op": "server_parent_is_me"}))["yes"],
        true
    );
}

/// The stand-in agent: `hermes mcp` as its child, hooks as `sh -c` children.
async fn be_the_agent() {
    let home = std::env::var("HERMES_HOME").expect("HERMES_HOME");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::path::Path::new(&home).join("mcp-stderr.log"))
        .expect("log");
    let hermes = env!("CARGO_BIN_EXE_hermes");
    let launcher = std::env::var("HERMES_TEST_LAUNCHER").unwrap_or_else(|_| "direct".into());
    let bin = std::path::Path::new(&home).join("launchers");
    let command = match launcher.as_str() {
        "argv" => {
            let argv: Vec<String> = serde_json::from_str(
                &std::env::var("HERMES_TEST_MCP_ARGV").expect("HERMES_TEST_MCP_ARGV"),
            )
            .expect("argv JSON");
            let mut c = tokio::process::Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        }
        "sh" => {
            let mut c = tokio::process::Command::new("sh");
            c.args(["-c", "\"$HERMES\" mcp"]);
            c
        }
        "env" => {
            let mut c = tokio::process::Command::new("env");
            c.args(["HERMES_TEST_VIA_ENV=1", hermes, "mcp"]);
            c
        }
        // A wrapper script that stays the server's parent (no `exec`), named as its author
        // liked, and an `npx`-like launcher that runs its arguments.
        "script" => tokio::process::Command::new(launcher_script(
            &bin,
            "run-hermes-mcp",
            "\"$HERMES\" mcp\n",
        )),
        "npx" => {
            let mut c = tokio::process::Command::new(launcher_script(&bin, "npx", "\"$@\"\n"));
            c.args([hermes, "mcp"]);
            c
        }
        _ => {
            let mut c = tokio::process::Command::new(hermes);
            c.arg("mcp");
            c
        }
    };
    let (transport, _) = rmcp::transport::TokioChildProcess::builder(command)
        .stderr(log)
        .spawn()
        .expect("hermes mcp starts");
    let server_pid = transport.id();
    let mut mcp = Some(Mcp {
        client: rmcp::ServiceExt::serve((), transport)
            .await
            .expect("initialize"),
    });
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    while let Some(line) = rx.recv().await {
        let request: Value = serde_json::from_str(&line).expect("request JSON");
        let answer = match request["op"].as_str() {
            Some("ping") => json!({"pong": true}),
            Some("server_parent_is_me") => {
                let stat = server_pid
                    .and_then(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
                    .unwrap_or_default();
                let ppid = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                    .and_then(|p| p.parse::<u32>().ok());
                json!({"yes": ppid == Some(std::process::id())})
            }
            Some("hook") => {
                let event = request["event"].as_str().expect("event").to_owned();
                let payload = request["payload"].as_str().expect("payload").to_owned();
                let keep_open = request["stdin_open"].as_bool().unwrap_or(false);
                tokio::task::spawn_blocking(move || run_hook(&event, &payload, keep_open))
                    .await
                    .expect("hook thread")
            }
            Some("exec") => {
                let argv: Vec<String> =
                    serde_json::from_value(request["argv"].clone()).expect("argv");
                let payload = request["payload"].as_str().expect("payload").to_owned();
                tokio::task::spawn_blocking(move || exec(&argv, &payload))
                    .await
                    .expect("exec thread")
            }
            Some("tool") => {
                let name = request["name"].as_str().expect("name");
                let answer = mcp
                    .as_ref()
                    .expect("the MCP client is open")
                    .call(name, request["args"].clone())
                    .await;
                json!({"is_error": answer.is_error, "text": answer.text})
            }
            // The MCP SDKs' close: stdin closed, 2 s, then SIGTERM (and the server must be gone
            // by then or soon after).
            Some("sdk_close") => {
                let started = std::time::Instant::now();
                let client = mcp.take().expect("the MCP client is open");
                let closing = tokio::spawn(async move {
                    let _ = client.client.cancel().await;
                });
                tokio::time::sleep(Duration::from_secs(2)).await;
                let pid = server_pid.expect("server pid");
                let alive_at_2s = process_running(pid);
                if alive_at_2s {
                    // SAFETY: kill(2) only sends a signal.
                    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
                }
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while process_running(pid) && std::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                closing.abort();
                json!({
                    "alive_at_2s": alive_at_2s,
                    "gone": !process_running(pid),
                    "elapsed_ms": started.elapsed().as_millis() as u64,
                })
            }
            other => json!({"error": format!("unknown op {other:?}")}),
        };
        println!("{MARK}{answer}");
    }
}

/// Whether `pid` runs (a zombie does not).
fn process_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .is_some_and(|zombie| !zombie)
}

/// Writes an executable `#!/bin/sh` script `name` with `body` under `dir`.
fn launcher_script(dir: &std::path::Path, name: &str, body: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(dir).expect("launcher dir");
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).expect("launcher script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// Runs `argv` with `payload` on stdin, as an agent runs an installed hook.
fn exec(argv: &[String], payload: &str) -> Value {
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the hook starts");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(payload.as_bytes()).expect("payload");
    drop(stdin);
    let out = child.wait_with_output().expect("hook ends");
    json!({
        "code": out.status.code(),
        "stdout": String::from_utf8_lossy(&out.stdout),
        "stderr": String::from_utf8_lossy(&out.stderr),
    })
}

/// Runs hook `event` the way Claude Code runs a command hook: `sh -c`, the JSON on stdin.
/// With `keep_open`, stdin stays open after the JSON (as Claude Code is reported to leave it
/// for `SessionEnd`).
fn run_hook(event: &str, payload: &str, keep_open: bool) -> Value {
    let started = std::time::Instant::now();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("\"$HERMES\" hook {event} --agent claude"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sh runs");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(payload.as_bytes()).expect("payload");
    let held = if keep_open {
        Some(stdin)
    } else {
        drop(stdin);
        None
    };
    let out = child.wait_with_output().expect("hook ends");
    drop(held);
    json!({
        "code": out.status.code(),
        "stdout": String::from_utf8_lossy(&out.stdout),
        "stderr": String::from_utf8_lossy(&out.stderr),
        "elapsed_ms": started.elapsed().as_millis() as u64,
    })
}

#[test]
fn inject_results_arrive_at_the_next_tool_call_and_after_turn_ones_at_the_next_prompt() {
    let h = Hermes::new();
    let mut agent = Agent::start(&h);
    agent.hook("session-start", "conv-a", "SessionStart");
    let (inject, session) = agent.delegate(json!({
        "goal": "lint", "command": ["sh", "-c", "echo inject-out"], "result_delivery": "inject"
    }));
    assert_eq!(
        session, "conv-a",
        "the server dispatches into the hooks' session"
    );
    let (after, _) = agent.delegate(json!({
        "goal": "tests", "command": ["sh", "-c", "echo after-out"]
    }));
    wait_ready(&h, &inject);
    wait_ready(&h, &after);

    let tool = agent.context("post-tool-use", "conv-a", "PostToolUse");
    assert!(tool.starts_with("[DELEGATION RESULT READY"), "{tool}");
    assert!(
        tool.contains(&inject) && tool.contains("inject-out"),
        "{tool}"
    );
    assert!(
        !tool.contains("after-out"),
        "after_turn waits for the turn: {tool}"
    );
    assert_eq!(agent.context("post-tool-use", "conv-a", "PostToolUse"), "");

    let turn = agent.context("user-prompt-submit", "conv-a", "UserPromptSubmit");
    assert!(
        turn.contains(&after) && turn.contains("after-out"),
        "{turn}"
    );
    assert!(!turn.contains("inject-out"), "delivered once: {turn}");
    assert_eq!(
        agent.context("user-prompt-submit", "conv-a", "UserPromptSubmit"),
        ""
    );
    let results = agent.tool("delegation_results", json!({}));
    assert!(
        results["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("No delegation results")),
        "{results}"
    );
}

#[test]
fn stop_keeps_the_agent_going_once_with_the_ready_results_and_never_loops() {
    let h = Hermes::new();
    let mut agent = Agent::start(&h);
    agent.hook("session-start", "conv-stop", "SessionStart");
    let (id, _) =
        agent.delegate(json!({"goal": "report", "command": ["sh", "-c", "echo stop-out"]}));
    wait_ready(&h, &id);
    // Claude goes on with a stop's `additionalContext` (see `crates/agents/src/claude.rs`).
    let first = agent.hook("stop", "conv-stop", "Stop");
    let context = context_of(&first, "Stop");
    assert!(
        context.contains(&id) && context.contains("stop-out"),
        "{context}"
    );
    // The agent went on with it; its next stop has nothing new.
    let mut again: Value = serde_json::from_str(&payload("conv-stop", "Stop")).expect("payload");
    again["stop_hook_active"] = json!(true);
    let second = agent.hook_with("stop", &again.to_string());
    assert_eq!(second["stdout"], "", "{second}");
}

#[test]
fn work_dispatched_before_the_first_hook_is_not_lost() {
    let h = Hermes::new();
    let mut agent = Agent::start(&h);
    let (early, provisional) =
        agent.delegate(json!({"goal": "early", "command": ["sh", "-c", "echo early-out"]}));
    assert!(provisional.starts_with("mcp-"), "{provisional}");
    wait_ready(&h, &early);
    let turn = agent.context("user-prompt-submit", "conv-late", "UserPromptSubmit");
    assert!(
        turn.contains(&early) && turn.contains("early-out"),
        "{turn}"
    );
    let (_, session) = agent.delegate(json!({"goal": "later", "command": ["true"]}));
    assert_eq!(
        session, "conv-late",
        "after the first hook, work lands in its session"
    );
    let status = agent.tool("delegation_status", json!({"delegation_id": early}));
    assert_eq!(
        status["is_error"], false,
        "the early unit is still this conversation's: {status}"
    );
}

#[test]
fn two_agents_side_by_side_never_see_each_others_results() {
    let h = Hermes::new();
    let mut a = Agent::start(&h);
    let mut b = Agent::start(&h);
    a.hook("session-start", "conv-a", "SessionStart");
    b.hook("session-start", "conv-b", "SessionStart");
    let (ida, sa) = a.delegate(json!({"goal": "a", "command": ["sh", "-c", "echo from-a"]}));
    let (idb, sb) = b.delegate(json!({"goal": "b", "command": ["sh", "-c", "echo from-b"]}));
    assert_eq!((sa.as_str(), sb.as_str()), ("conv-a", "conv-b"));
    wait_ready(&h, &ida);
    wait_ready(&h, &idb);
    let ta = a.context("user-prompt-submit", "conv-a", "UserPromptSubmit");
    let tb = b.context("user-prompt-submit", "conv-b", "UserPromptSubmit");
    assert!(ta.contains("from-a") && !ta.contains("from-b"), "{ta}");
    assert!(tb.contains("from-b") && !tb.contains("from-a"), "{tb}");
    let peek = b.tool("delegation_status", json!({"delegation_id": ida}));
    assert_eq!(peek["is_error"], true, "{peek}");
    let listed = b.tool("delegation_list", json!({"all": true}));
    assert!(
        !listed["text"].as_str().unwrap_or("").contains(&ida),
        "{listed}"
    );
}

/// A session end the agent names a discard (`/clear`) ends the conversation and its work.
#[test]
fn a_discarding_session_end_ends_the_conversation_and_stops_its_work() {
    let h = Hermes::new();
    let mut agent = Agent::start(&h);
    agent.hook("session-start", "conv-end", "SessionStart");
    let (id, _) = agent.delegate(json!({"goal": "long", "command": ["sleep", "60"]}));
    let mut clear: Value = serde_json::from_str(&payload("conv-end", "SessionEnd")).expect("JSON");
    clear["reason"] = json!("clear");
    agent.hook_with("session-end", &clear.to_string());
    let status = wait_for(Duration::from_secs(20), "the unit to stop", || {
        let s = h.json(&["delegation", "status", &id, "--json"]);
        (s["status"] != "running").then_some(s)
    });
    assert_eq!(status["status"], "interrupted", "{status}");
    let sessions = h.json(&["session", "list", "--json"]);
    let ended = sessions["sessions"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == "conv-end"))
        .map(|s| s["state"].clone());
    assert_eq!(ended, Some(json!("ended")), "{sessions}");
}
