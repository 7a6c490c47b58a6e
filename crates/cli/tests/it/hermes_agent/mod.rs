//! Hermes Agent (PyPI `hermes-agent` 0.19.0, NousResearch) with hermes, end to end: the real
//! package in a venv these tests create once (`<target>/hermes-agent-venv`, kept between runs),
//! talking to a scripted OpenAI-compatible model server (`model_server.py`, beside this file)
//! that logs every request body. What matters is read from that log: what upstream sent its
//! model.
//!
//! Upstream's venv is first on `PATH` in every run (its `hermes` shadows ours, which is on no
//! `PATH` at all): the install names our binary by absolute path and our home explicitly.
//!
//! The facts these tests lean on, each pinned by a file of the package:
//! - `hermes_cli/plugins.py`: plugins in `$HERMES_HOME/plugins/<name>/`, loaded when named in
//!   `plugins.enabled`; the hooks `pre_llm_call`, `pre_api_request`, `transform_tool_result`,
//!   `on_session_end`, `on_session_finalize`, `on_session_reset`;
//! - `agent/turn_context.py`: `pre_llm_call`'s `{"context": …}` is appended to the user message;
//! - `model_tools.py`: `transform_tool_result`'s string replaces the tool's result;
//! - `tools/mcp_tool.py`: `mcp_servers.<name>` (`command`, `args`, `env`), tools named
//!   `mcp__<server>__<tool>`, the server run under `tools/mcp_stdio_watchdog.py`; the `mcp`
//!   extra (`hermes-agent[mcp]`) is what makes MCP servers load at all;
//! - `hermes_cli/_parser.py`: `chat -q` (one query), `-Q` (quiet), `--resume SESSION`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{Hermes, wait_for};

const VERSION: &str = "0.19.0";

/// The venv with `hermes-agent[mcp]==0.19.0`, created once (under a file lock: several test
/// processes may ask at once) and reused by later runs.
fn venv() -> &'static Path {
    static VENV: OnceLock<PathBuf> = OnceLock::new();
    VENV.get_or_init(|| {
        let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .expect("the target directory")
            .to_owned();
        let dir = target.join("hermes-agent-venv");
        let ready = dir.join(format!(".ready-{VERSION}"));
        let lock = std::fs::File::create(target.join("hermes-agent-venv.lock")).expect("lock file");
        lock.lock().expect("lock the venv");
        if !ready.exists() {
            let _ = std::fs::remove_dir_all(&dir);
            let ok = Command::new("python3")
                .args(["-m", "venv"])
                .arg(&dir)
                .status()
                .expect("python3 runs");
            assert!(
                ok.success(),
                "python3 -m venv failed (is python3-venv installed?)"
            );
            let ok = Command::new(dir.join("bin/pip"))
                .args(["install", "-q", "--disable-pip-version-check"])
                .arg(format!("hermes-agent[mcp]=={VERSION}"))
                .status()
                .expect("pip runs");
            assert!(
                ok.success(),
                "pip install hermes-agent[mcp]=={VERSION} failed"
            );
            std::fs::write(&ready, "").expect("mark the venv ready");
        }
        dir
    })
}

/// The scripted model server: answers from the conversation (see `model_server.py`) and logs
/// every request body.
struct Model {
    child: Child,
    log: PathBuf,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Model {
    fn start() -> Model {
        let dir = tempfile::tempdir().expect("model dir");
        let log = dir.path().join("requests.jsonl");
        let portfile = dir.path().join("port");
        let child = Command::new("python3")
            .arg(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/hermes_agent/model_server.py"),
            )
            .arg(&log)
            .arg(&portfile)
            .stdin(Stdio::null())
            .spawn()
            .expect("the model server starts");
        let port = wait_for(Duration::from_secs(20), "the model server's port", || {
            std::fs::read_to_string(&portfile).ok()?.trim().parse().ok()
        });
        Model {
            child,
            log,
            port,
            _dir: dir,
        }
    }

    /// Every chat request logged so far.
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|b| b.get("messages").is_some())
            .collect()
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Upstream's home, configured for the model server.
struct Upstream {
    home: tempfile::TempDir,
    config: String,
}

impl Upstream {
    fn new(model: &Model) -> Upstream {
        let home = tempfile::tempdir().expect("upstream home");
        let config = format!(
            "# the person's own settings\nmodel:\n  provider: custom\n  base_url: http://127.0.0.1:{}/v1\n  default: test-model   # kept\n  api_key: sk-test\n",
            model.port
        );
        std::fs::write(home.path().join("config.yaml"), &config).expect("config.yaml");
        Upstream { home, config }
    }

    fn config_path(&self) -> PathBuf {
        self.home.path().join("config.yaml")
    }

    /// `hermes chat -Q -q PROMPT [--resume SESSION]` of upstream, its venv first on PATH and
    /// ours on none; returns its session id.
    fn chat(&self, prompt: &str, resume: Option<&str>) -> String {
        let bin = venv().join("bin");
        let mut c = Command::new(bin.join("hermes"));
        c.args(["chat", "-Q", "-q", prompt]);
        if let Some(s) = resume {
            c.args(["--resume", s]);
        }
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = c
            .env("HERMES_HOME", self.home.path())
            .env("PATH", path)
            .env_remove("HERMES_SESSION_ID")
            .env_remove("VIRTUAL_ENV")
            .stdin(Stdio::null())
            .output()
            .expect("upstream's hermes runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "upstream failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // `session_id: …` ends its output (on stderr with `-Q`).
        let stderr = String::from_utf8_lossy(&out.stderr);
        stdout
            .lines()
            .chain(stderr.lines())
            .find_map(|l| l.trim().strip_prefix("session_id: "))
            .map(|s| s.trim().to_owned())
            .or_else(|| resume.map(str::to_owned))
            .unwrap_or_else(|| panic!("no session_id in {stdout}"))
    }
}

/// Installs the integration into `up`'s home for `h`'s home. On PostgreSQL the ledger's URL
/// goes into our home's `config.toml`: upstream hands its MCP servers a filtered environment,
/// and the home the install names is all our binary gets.
fn install(h: &Hermes, up: &Upstream) {
    if let Some(url) = &h.ledger_url {
        h.write("config.toml", &format!("[ledger]\nurl = {url:?}\n"));
    }
    let agent_home = up.home.path().to_str().expect("utf-8");
    let run = h.run(&[
        "hook",
        "install",
        "hermes-agent",
        "--agent-home",
        agent_home,
    ]);
    assert_eq!(run.code, 0, "{run:?}");
}

/// How many times `needle` appears in the messages of request `body`.
fn count(body: &Value, needle: &str) -> usize {
    body["messages"].to_string().matches(needle).count()
}

/// The messages of the last request whose last user message holds `prompt`.
fn last_request_of(model: &Model, prompt: &str) -> Value {
    model
        .requests()
        .into_iter()
        .rfind(|b| b["messages"].to_string().contains(prompt))
        .unwrap_or_else(|| panic!("no request for {prompt}"))
}

/// Waits until delegation `id` has completed (read through our CLI, with our home).
fn completed(h: &Hermes, id: &str) {
    wait_for(
        Duration::from_secs(30),
        "the delegation to complete",
        || {
            let run = h.run(&["delegation", "status", id, "--json"]);
            (run.code == 0 && run.json()["status"] == "completed").then_some(())
        },
    );
}

fn dispatch(h: &Hermes, session: &str, delivery: &str, script: &str) -> String {
    let v = h.json(&[
        "delegate",
        "--session",
        session,
        "--delivery",
        delivery,
        "--json",
        "--",
        "sh",
        "-c",
        script,
    ]);
    v["delegation_id"].as_str().expect("id").to_owned()
}

#[test]
fn dispatch_by_the_model_arrives_on_the_next_turn_exactly_once_and_uninstall_restores_the_config() {
    let h = Hermes::new();
    let model = Model::start();
    let up = Upstream::new(&model);
    install(&h, &up);
    // Idempotent: a second install writes the same file.
    let once = std::fs::read_to_string(up.config_path()).expect("config");
    install(&h, &up);
    assert_eq!(
        std::fs::read_to_string(up.config_path()).expect("config"),
        once
    );
    assert!(
        once.starts_with(&up.config),
        "the person's lines stay first: {once}"
    );

    // Turn 1: the model calls hermes' MCP tool; the result's text (MARK-one) is not in the call.
    let call = r#"CALL mcp__hermes__delegate_task {"command": ["sh", "-c", "printf 'MARK-%s\\n' one"], "goal": "the first mark"}"#;
    let started = Instant::now();
    let session = up.chat(&format!("dispatch this\n{call}"), None);
    let answered = last_request_of(&model, "the first mark");
    let tool = answered["messages"]
        .as_array()
        .and_then(|m| m.last())
        .expect("a tool message");
    assert_eq!(tool["role"], "tool", "{tool}");
    assert!(tool["content"].to_string().contains("deleg_"), "{tool}");
    // Our `delegation list`, with no session variable, shows what the integration dispatched
    // (into upstream's session).
    let list = h.json(&["delegation", "list", "--all", "--json"]);
    let text = list.to_string();
    assert!(text.contains(&session), "{text}");
    let id = text
        .split("deleg_")
        .nth(1)
        .map(|rest| format!("deleg_{}", &rest[..12]))
        .expect("an id");
    completed(&h, &id);

    // Turn 2 (`--resume`): the result is in what upstream sent, exactly once.
    up.chat("what came back?", Some(&session));
    let round_trip = started.elapsed();
    let next = last_request_of(&model, "what came back?");
    assert_eq!(count(&next, "MARK-one"), 1, "{next}");
    assert!(
        next["messages"]
            .to_string()
            .contains("ASYNC DELEGATION COMPLETE")
    );
    // Turn 3: not handed over again (it is in the history once, as upstream keeps it).
    up.chat("anything else?", Some(&session));
    let after = last_request_of(&model, "anything else?");
    assert_eq!(count(&after, "MARK-one"), 1, "{after}");
    eprintln!("hermes-agent: dispatch → delivered on the next turn in {round_trip:?}");

    // Uninstall: upstream's config is what it was, byte for byte, and the plugin is gone.
    let agent_home = up.home.path().to_str().expect("utf-8");
    let run = h.run(&[
        "hook",
        "uninstall",
        "hermes-agent",
        "--agent-home",
        agent_home,
    ]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        std::fs::read_to_string(up.config_path()).expect("config"),
        up.config
    );
    assert!(!up.home.path().join("plugins/hermes_delegation").exists());
    // Neither project wrote into the other's home: no name is in both.
    let names = |dir: &Path| -> std::collections::BTreeSet<String> {
        std::fs::read_dir(dir)
            .expect("a home")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect()
    };
    let (ours, theirs) = (names(h.path()), names(up.home.path()));
    assert!(ours.contains("agents") && theirs.contains("config.yaml"));
    assert!(ours.is_disjoint(&theirs), "{ours:?} / {theirs:?}");
}

#[test]
fn an_inject_result_arrives_in_the_next_tool_result_behind_the_carrier() {
    let h = Hermes::new();
    let model = Model::start();
    let up = Upstream::new(&model);
    install(&h, &up);
    let session = up.chat("hello", None);
    // A child that finishes only once the tool call runs: its result is ready at the tool
    // boundary, after the turn boundary has passed.
    let go = h.path().join("go");
    let id = dispatch(
        &h,
        &session,
        "inject",
        &format!(
            "while [ ! -e '{}' ]; do sleep 0.05; done; printf 'MARK-%s\\n' two",
            go.display()
        ),
    );
    let wait = h.path().join("wait.sh");
    std::fs::write(
        &wait,
        format!(
            "touch '{go}'\nuntil HERMES_HOME='{home}' '{bin}' delegation status {id} --json | grep -q '\"status\":\"completed\"'; do sleep 0.1; done\necho waited\n",
            go = go.display(),
            home = h.path().display(),
            bin = env!("CARGO_BIN_EXE_hermes"),
        ),
    )
    .expect("wait.sh");
    let call = format!(
        "CALL terminal {}",
        serde_json::json!({"command": format!("sh '{}'", wait.display())})
    );
    up.chat(&call, Some(&session));
    let sent = last_request_of(&model, "wait.sh");
    let messages = sent["messages"].as_array().expect("messages");
    let tool = messages.last().expect("a message");
    assert_eq!(tool["role"], "tool", "{tool}");
    let content = tool["content"].as_str().unwrap_or_default();
    assert!(content.contains("waited"), "{content}");
    assert!(content.contains("[DELEGATION RESULT READY"), "{content}");
    assert_eq!(count(&sent, "MARK-two"), 1, "{sent}");
}

#[test]
fn two_conversations_whose_turns_overlap_never_see_each_others_results() {
    let h = Hermes::new();
    let model = Model::start();
    let up = Upstream::new(&model);
    install(&h, &up);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| up.chat("hello from A", None));
        let b = s.spawn(|| up.chat("hello from B", None));
        (a.join().expect("A"), b.join().expect("B"))
    });
    assert_ne!(a, b);
    let ida = dispatch(&h, &a, "after_turn", "printf 'MARK-%s\\n' alpha");
    let idb = dispatch(&h, &b, "after_turn", "printf 'MARK-%s\\n' beta");
    completed(&h, &ida);
    completed(&h, &idb);
    std::thread::scope(|s| {
        s.spawn(|| up.chat("A again", Some(&a)));
        s.spawn(|| up.chat("B again", Some(&b)));
    });
    let sa = last_request_of(&model, "A again");
    let sb = last_request_of(&model, "B again");
    assert_eq!(
        (count(&sa, "MARK-alpha"), count(&sa, "MARK-beta")),
        (1, 0),
        "{sa}"
    );
    assert_eq!(
        (count(&sb, "MARK-beta"), count(&sb, "MARK-alpha")),
        (1, 0),
        "{sb}"
    );
}

#[test]
fn a_session_named_on_stdin_wins_over_an_inherited_hermes_session_id() {
    let h = Hermes::new();
    let id = dispatch(&h, "conv-b", "after_turn", "printf 'MARK-%s\\n' bee");
    completed(&h, &id);
    let mut c = h.command(&["hook", "user-prompt-submit", "--agent", "hermes-agent"]);
    c.env("HERMES_SESSION_ID", "conv-a")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = c.spawn().expect("hook runs");
    use std::io::Write as _;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(br#"{"session_id": "conv-b", "hook_event_name": "pre_llm_call"}"#)
        .expect("write");
    let out = child.wait_with_output().expect("hook ends");
    let answer: Value = serde_json::from_slice(&out.stdout).expect("an answer");
    // Upstream's shell-hook answer shape, `{"context": …}`, with conversation B's result.
    assert!(
        answer["context"]
            .as_str()
            .unwrap_or_default()
            .contains("MARK-bee"),
        "{answer}"
    );
}

/// The plugin's ends, driven directly (its functions, as upstream calls them): the end of a
/// turn and the end of the process only detach — the child runs on and its result waits; `/new`
/// (`on_session_finalize`, reason `session_boundary`) ends the session.
#[test]
fn only_new_ends_the_session_every_other_end_detaches() {
    let h = Hermes::new();
    if let Some(url) = &h.ledger_url {
        h.write("config.toml", &format!("[ledger]\nurl = {url:?}\n"));
    }
    let go = h.path().join("go");
    let id = dispatch(
        &h,
        "conv-ends",
        "after_turn",
        &format!(
            "while [ ! -e '{}' ]; do sleep 0.05; done; echo late",
            go.display()
        ),
    );
    let plugin = |call: &str| {
        let mut c = Command::new("python3");
        c.arg("-c")
            .arg(format!("import hermes_delegation as p\n{call}"))
            .env(
                "PYTHONPATH",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../integrations/hermes-agent"),
            )
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("DELEGATION_PLUGIN_PROGRAM", env!("CARGO_BIN_EXE_hermes"))
            .env("DELEGATION_PLUGIN_HOME", h.path())
            // Upstream's own variables, which the plugin must not pass on.
            .env("HERMES_HOME", "/nonexistent/upstream-home")
            .env("HERMES_SESSION_ID", "someone-else")
            .env("HERMES_SESSION_PLATFORM", "cli")
            .env("HERMES_DELEGATION_ANYTHING", "1");
        let out = c.output().expect("python3 runs");
        assert!(out.status.success(), "{call}: {out:?}");
    };
    plugin("p.on_session_end(session_id='conv-ends', completed=True)");
    plugin("p.on_session_finalize(session_id='conv-ends', reason='shutdown')");
    let status = h.json(&["delegation", "status", &id, "--json"]);
    assert_eq!(status["status"], "running", "{status}");
    plugin("p.on_session_finalize(session_id='conv-ends', reason='session_boundary')");
    wait_for(
        Duration::from_secs(20),
        "the session's work to stop",
        || {
            let status = h.json(&["delegation", "status", &id, "--json"]);
            (status["status"] != "running").then_some(())
        },
    );
    assert!(!go.exists());
}

/// `hermes -z --agent hermes-agent`: upstream as a child, its final answer the result. Our
/// `hermes` is first on `PATH` (the worst case): the child is the other one; it keeps its own
/// home (its default, under `HOME`), never ours.
#[test]
fn upstream_runs_as_a_child_from_its_own_home_with_its_answer_as_the_result() {
    let h = Hermes::new();
    let model = Model::start();
    let person = tempfile::tempdir().expect("HOME");
    let up_home = person.path().join(".hermes");
    std::fs::create_dir(&up_home).expect("~/.hermes");
    std::fs::write(
        up_home.join("config.yaml"),
        format!(
            "model:\n  provider: custom\n  base_url: http://127.0.0.1:{}/v1\n  default: test-model\n  api_key: sk-test\n",
            model.port
        ),
    )
    .expect("config.yaml");
    let ours = person.path().join("ours-first");
    std::fs::create_dir(&ours).expect("dir");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_hermes"), ours.join("hermes")).expect("link");
    let path = format!(
        "{}:{}:{}",
        ours.display(),
        venv().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = {
        let mut c = h.command(&[
            "-z",
            "--agent",
            "hermes-agent",
            "--goal",
            "answer this\nSAY the-final-answer-42",
        ]);
        c.env("HOME", person.path()).env("PATH", path);
        crate::common::Run::from(c.output().expect("hermes -z runs"))
    };
    assert_eq!(run.code, 0, "{run:?}");
    let result = run
        .stdout
        .split("--- RESULT ---")
        .nth(1)
        .unwrap_or_else(|| panic!("no RESULT: {run:?}"));
    assert!(result.contains("the-final-answer-42"), "{result}");
    assert_eq!(count(&model.requests()[0], "the-final-answer-42"), 1);
    // Upstream wrote into its own home only.
    assert!(up_home.join("state.db").exists() || up_home.join("sessions").exists());
    let names = |dir: &Path| -> std::collections::BTreeSet<String> {
        std::fs::read_dir(dir)
            .expect("a home")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect()
    };
    let (ours, theirs) = (names(h.path()), names(&up_home));
    assert!(ours.is_disjoint(&theirs), "{ours:?} / {theirs:?}");
}

/// `drain --json` carries the tool-boundary carrier line the text output opens with (the plugin
/// puts it first in the tool's result); a turn boundary has none.
#[test]
fn drain_json_carries_the_tool_boundary_carrier() {
    let h = Hermes::new();
    let id = dispatch(&h, "conv-carrier", "inject", "printf 'MARK-%s\\n' carried");
    completed(&h, &id);
    let turn = h.json(&[
        "drain",
        "--session",
        "conv-carrier",
        "--boundary",
        "turn",
        "--hold",
        "--json",
    ]);
    assert!(turn.get("carrier").is_none(), "{turn}");
    let claim = turn["envelopes"][0]["claim"].as_str().expect("a claim");
    assert_eq!(h.run(&["delivery", "release", claim]).code, 0);
    let tool = h.json(&[
        "drain",
        "--session",
        "conv-carrier",
        "--boundary",
        "tool",
        "--json",
    ]);
    let text = h.run(&["drain", "--session", "conv-carrier", "--boundary", "tool"]);
    assert!(text.stdout.is_empty(), "acked already: {text:?}");
    assert!(
        tool["carrier"]
            .as_str()
            .is_some_and(|c| c.starts_with("[DELEGATION RESULT READY")),
        "{tool}"
    );
    assert!(
        tool["envelopes"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("MARK-carried")
    );
}
