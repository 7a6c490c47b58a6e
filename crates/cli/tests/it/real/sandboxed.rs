//! Agent children inside their sandbox, with the real CLIs: a scripted model asks the agent to
//! make a file with its own tool. Under `workspace-write` the agent's permission flags (its
//! profile) let it act without asking and the kernel lets the write land in its working
//! directory; under `read-only` nothing is written and the refusal shows, in `status --json`
//! (`denials`) and in the block (`Denied: N (…)`). The agent's model, on 127.0.0.1, is reached
//! from inside the sandbox in every mode (agents keep their network).
//!
//! Facts each test leans on, checked against the installed packages:
//!
//! - Claude Code 2.1.332 offers `Bash` among its tools (the logged request's `tools`) and reports
//!   a call its permission mode refused in the result's `permission_denials`
//!   (`node_modules/@anthropic-ai/claude-code/bin/claude.exe`);
//! - Codex 0.171.0 offers `exec_command` (`{"cmd": …}`) to its model (the logged request's
//!   `tools`) and reads its provider from `$CODEX_HOME/config.toml` (see `codex.rs`); its
//!   `exec --json` stream reports a command as a `command_execution` item with its
//!   `aggregated_output` and `exit_code`, and nothing else marks a refusal by the kernel;
//! - Gemini CLI 0.61.0 offers `run_shell_command` (`{"command": …}`) under `--approval-mode
//!   yolo`; under `plan` the tool is gone and a call of it ends in a `tool_result` whose
//!   `error.type` is `tool_not_registered` (`ToolErrorType` in
//!   `node_modules/@google/gemini-cli/bundle/chunk-JDPZ4CE3.js`).

use std::path::Path;
use std::process::Output;
use std::sync::Arc;

use hermes_testkit::model::{ModelServer, Reply, Turn, Wire};
use serde_json::{Value, json};

use super::Machine;

/// The file the model asks for, in the child's working directory.
const MADE: &str = "made-by-child.txt";

/// One agent on a machine, its model scripted to make [`MADE`] with `call`.
struct Agent {
    machine: Machine,
    model: ModelServer,
    /// The agent's name for `--agent`.
    name: &'static str,
    /// The variables that point the agent at the model.
    env: Vec<(String, String)>,
}

impl Agent {
    /// `name` on `machine`, its model speaking `wire` and answering the prompt with `call`,
    /// the tool's result with `done`.
    fn new(machine: Machine, name: &'static str, wire: Wire, call: Reply) -> Agent {
        let model = ModelServer::with_script(
            wire,
            Arc::new(move |turn: &Turn<'_>| {
                if turn.after_tool {
                    Reply::Text("done".into())
                } else {
                    call.clone()
                }
            }),
        );
        Agent {
            machine,
            model,
            name,
            env: Vec::new(),
        }
    }

    /// `hermes -z --agent NAME --sandbox MODE [extra] --goal …` in the project: the block it
    /// printed, and the unit's `status --json` (with the child's `log` and `raw` stream).
    fn run(&self, mode: &str, extra: &[&str]) -> (Output, Value) {
        let mut c = self.machine.command("hermes");
        c.args(["-z", "--agent", self.name, "--sandbox", mode])
            .args(extra)
            .args(["--goal", "make the file"]);
        for (key, value) in &self.env {
            c.env(key, value);
        }
        let out = c.output().expect("hermes runs");
        let block = String::from_utf8_lossy(&out.stdout);
        let id = delegation_id(&block).unwrap_or_else(|| panic!("an id in {out:?}"));
        let mut status = self
            .machine
            .hermes
            .json(&["delegation", "status", &id, "--json"]);
        // The child's transcript and raw stream, for the assertions' messages.
        let log = status["tasks"][0]["transcript"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        status["log"] = std::fs::read_to_string(&log).unwrap_or_default().into();
        let raw = Path::new(&log).with_extension("jsonl");
        status["raw"] = std::fs::read_to_string(raw).unwrap_or_default().into();
        (out, status)
    }

    fn made(&self) -> bool {
        self.machine.project().join(MADE).exists()
    }
}

/// The delegation id in a block.
fn delegation_id(text: &str) -> Option<String> {
    let start = text.find("deleg_")?;
    Some(
        text[start..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect(),
    )
}

/// Claude Code pointed at its scripted model and nothing else (see `claude.rs`); no
/// `IS_SANDBOX`: the permission flags must work for root as they are.
fn claude() -> Agent {
    let call = Reply::Call {
        tool: "Bash".into(),
        args: json!({"command": format!("touch {MADE}"), "description": "make the file"}),
    };
    let mut agent = Agent::new(Machine::new(), "claude", Wire::Anthropic, call);
    agent.env = [
        ("ANTHROPIC_BASE_URL", agent.model.base_url()),
        ("ANTHROPIC_API_KEY", "sk-ant-test".into()),
        ("DISABLE_TELEMETRY", "1".into()),
        ("DISABLE_AUTOUPDATER", "1".into()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
        // A model it cannot reach fails at once.
        ("CLAUDE_CODE_MAX_RETRIES", "0".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    agent
}

/// Codex with the scripted provider in its `$CODEX_HOME` (its home under the target
/// directory: codex refuses to make its helper binaries under `/tmp`), nothing about its own
/// sandbox configured: hermes' profile sets it.
fn codex() -> Agent {
    let call = Reply::Call {
        tool: "exec_command".into(),
        args: json!({"cmd": format!("touch {MADE}")}),
    };
    let machine = Machine::in_temp(Path::new(env!("CARGO_TARGET_TMPDIR")));
    let mut agent = Agent::new(machine, "codex", Wire::Responses, call);
    let home = agent.machine.home().join(".codex");
    std::fs::create_dir_all(&home).expect("CODEX_HOME");
    std::fs::write(
        home.join("config.toml"),
        format!(
            "model = \"test-model\"\nmodel_provider = \"scripted\"\n\n[model_providers.scripted]\nname = \"scripted\"\nbase_url = \"{}/v1\"\nwire_api = \"responses\"\nenv_key = \"SCRIPTED_MODEL_KEY\"\nrequest_max_retries = 0\nstream_max_retries = 0\n",
            agent.model.base_url()
        ),
    )
    .expect("config.toml");
    agent.env = vec![
        ("CODEX_HOME".into(), home.display().to_string()),
        ("SCRIPTED_MODEL_KEY".into(), "test-key".into()),
    ];
    agent
}

/// Gemini CLI with the API key auth chosen and the project trusted (see `gemini.rs`).
fn gemini() -> Agent {
    let call = Reply::Call {
        tool: "run_shell_command".into(),
        args: json!({"command": format!("touch {MADE}")}),
    };
    let mut agent = Agent::new(Machine::new(), "gemini", Wire::Gemini, call);
    let dir = agent.machine.home().join(".gemini");
    std::fs::create_dir_all(&dir).expect("~/.gemini");
    std::fs::write(
        dir.join("settings.json"),
        r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}}"#,
    )
    .expect("settings.json");
    let project = agent.machine.project().canonicalize().expect("the project");
    std::fs::write(
        dir.join("trustedFolders.json"),
        json!({ project.to_str().expect("utf-8"): "TRUST_FOLDER" }).to_string(),
    )
    .expect("trustedFolders.json");
    agent.env = vec![
        ("GOOGLE_GEMINI_BASE_URL".into(), agent.model.base_url()),
        ("GEMINI_API_KEY".into(), "test-key".into()),
    ];
    agent
}

/// Under `workspace-write` the agent makes the file in its working directory, through the
/// model on 127.0.0.1, and completes with nothing denied.
fn writes_its_workspace(agent: &Agent) {
    let (out, status) = agent.run("workspace-write", &[]);
    let task = &status["tasks"][0];
    assert!(out.status.success(), "{out:?}\n{status:#}");
    assert_eq!(status["status"], "completed", "{out:?}\n{status:#}");
    assert!(agent.made(), "no {MADE}: {out:?}\n{status:#}");
    assert_eq!(task["sandbox"]["mode"], "workspace-write", "{task}");
    assert_eq!(task["sandbox"]["network"], true, "{task}");
    assert_eq!(task["denials"], 0, "{task}");
    // The model answered the tool's result: both requests reached it from inside.
    assert!(agent.model.turns().len() >= 2, "{:#?}", agent.model.turns());
}

/// Under `read-only` nothing is written, and the refusal is counted and named.
fn refused_read_only(agent: &Agent, tool: &str) {
    let (out, status) = agent.run("read-only", &[]);
    let task = &status["tasks"][0];
    let block = String::from_utf8_lossy(&out.stdout);
    assert!(!agent.made(), "{MADE} was made: {out:?}\n{status:#}");
    assert_eq!(task["sandbox"]["mode"], "read-only", "{task}");
    assert!(task["denials"].as_u64() >= Some(1), "{out:?}\n{status:#}");
    let denied = block
        .lines()
        .map(|l| l.trim_start_matches(['│', ' ']))
        .find(|l| l.starts_with("Denied: "))
        .unwrap_or_else(|| panic!("no Denied line in {block}"));
    assert!(denied.contains(tool) && denied.contains(MADE), "{denied}");
}

/// Besides its file, Claude keeps its configuration: `~/.claude.json`, which it writes in place
/// when the sandbox refuses its temporary file beside it, once hermes has made it.
#[test]
fn a_workspace_write_claude_child_makes_its_file_and_keeps_its_configuration() {
    let agent = claude();
    let config = agent.machine.home().join(".claude.json");
    assert!(!config.exists());
    writes_its_workspace(&agent);
    let text = std::fs::read_to_string(&config).expect("~/.claude.json");
    let written: Value = serde_json::from_str(&text).expect("JSON");
    assert!(
        written.as_object().is_some_and(|o| !o.is_empty()),
        "Claude wrote nothing into {text}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(agent.machine.home())
        .expect("home")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_read_only_claude_child_makes_nothing_and_its_denial_shows() {
    refused_read_only(&claude(), "Bash");
}

#[test]
fn a_workspace_write_codex_child_makes_its_file() {
    writes_its_workspace(&codex());
}

#[test]
fn a_read_only_codex_child_makes_nothing_and_its_denial_shows() {
    refused_read_only(&codex(), "shell");
}

#[test]
fn a_workspace_write_gemini_child_makes_its_file() {
    writes_its_workspace(&gemini());
}

#[test]
fn a_read_only_gemini_child_makes_nothing_and_its_denial_shows() {
    refused_read_only(&gemini(), "run_shell_command");
}

/// The network an agent keeps by default is really the host's: with `--network off` the same
/// child cannot reach its model on 127.0.0.1 (a network namespace of its own), so nothing is
/// made and the unit does not complete.
#[test]
fn an_agent_child_with_its_network_off_cannot_reach_its_model() {
    let agent = claude();
    let (out, status) = agent.run("workspace-write", &["--network", "off"]);
    let task = &status["tasks"][0];
    assert_eq!(task["sandbox"]["network"], false, "{task}");
    assert!(agent.model.turns().is_empty(), "{:#?}", agent.model.turns());
    assert!(!agent.made(), "{out:?}");
    assert_ne!(status["status"], "completed", "{out:?}\n{status:#}");
}
