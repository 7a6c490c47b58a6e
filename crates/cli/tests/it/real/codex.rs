//! Codex CLI (`@openai/codex`, pinned in `tests/agents/package.json`) with hermes, against the
//! scripted OpenAI Responses server. Facts these tests lean on, each checked against the
//! installed 0.171.0 (`codex exec --help`, `codex mcp list --json`, and what it sent):
//!
//! - a provider of one's own is `model_provider` plus `[model_providers.NAME]` with
//!   `base_url`, `wire_api = "responses"`, `env_key` (and `request_max_retries`,
//!   `stream_max_retries`, accepted by `--strict-config`) in `$CODEX_HOME/config.toml`;
//! - a project's `.codex/` is read only once the project is trusted (`codex exec --trust`
//!   saves that trust; without it codex warns on stderr and offers no MCP server);
//! - hooks need a review of their own (`/hooks` in the interactive `codex`); `codex exec` skips
//!   unreviewed ones without a word, `--dangerously-bypass-hook-trust` runs them for one run;
//! - `codex exec` fires `SessionEnd` at exit; `codex exec resume ID PROMPT` is the next turn;
//! - codex refuses to create its helper binaries under `/tmp`, so the agent's home is under the
//!   target directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use hermes_testkit::model::{ModelServer, Reply, Script, Turn, Wire, occurrences};
use serde_json::{Value, json};

use super::Machine;
use crate::common::wait_for;

/// The variable naming the scripted provider's key.
pub(super) const KEY_VAR: &str = "SCRIPTED_MODEL_KEY";

/// The `hermes` command line with a machine's hermes home, for scripts running in the model
/// server's thread.
#[derive(Clone)]
pub(super) struct HermesCli {
    home: PathBuf,
    ledger_url: Option<String>,
}

impl HermesCli {
    fn json(&self, args: &[&str]) -> Value {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hermes"));
        c.args(args).env("HERMES_HOME", &self.home);
        if let Some(url) = &self.ledger_url {
            c.env("HERMES_LEDGER_URL", url);
        }
        let out = c.output().expect("hermes runs");
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    }

    /// `delegation status ID --json` once its first child has a result.
    pub(super) fn finished(&self, id: &str) -> Value {
        wait_for(Duration::from_secs(30), "the child's result", || {
            let status = self.json(&["delegation", "status", id, "--json"]);
            (!status["tasks"][0]["result"].is_null()).then_some(status)
        })
    }
}

/// A person's machine with Codex on it, talking to a scripted model.
pub(super) struct Codex {
    pub(super) machine: Machine,
    pub(super) model: ModelServer,
}

impl Codex {
    /// Codex configured for the scripted model; `script` gets the machine's hermes.
    pub(super) fn new(script: impl FnOnce(HermesCli) -> Script) -> Codex {
        let machine = Machine::in_temp(Path::new(env!("CARGO_TARGET_TMPDIR")));
        let cli = HermesCli {
            home: machine.hermes.path().to_owned(),
            ledger_url: machine.hermes.ledger_url.clone(),
        };
        let model = ModelServer::with_script(Wire::Responses, script(cli));
        let codex = Codex { machine, model };
        std::fs::create_dir_all(codex.codex_home()).expect("CODEX_HOME");
        std::fs::write(
            codex.codex_home().join("config.toml"),
            format!(
                "model = \"test-model\"\nmodel_provider = \"scripted\"\n\n[model_providers.scripted]\nname = \"scripted\"\nbase_url = \"{}/v1\"\nwire_api = \"responses\"\nenv_key = \"{KEY_VAR}\"\nrequest_max_retries = 0\nstream_max_retries = 0\n",
                codex.model.base_url()
            ),
        )
        .expect("config.toml");
        codex
    }

    pub(super) fn codex_home(&self) -> PathBuf {
        self.machine.home().join(".codex")
    }

    /// `hermes hook install codex` in the project, as the README says; its output.
    pub(super) fn install(&self) -> String {
        let out = self
            .machine
            .command("hermes")
            .args(["hook", "install", "codex"])
            .output()
            .expect("hermes runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `codex ARGS` on this machine, killed if it runs past a deadline (a script that fails
    /// leaves codex waiting for its model).
    pub(super) fn codex(&self, args: &[&str]) -> Command {
        let mut c = self.machine.command("timeout");
        c.arg("120")
            .arg(super::agent_bin().join("codex"))
            .args(args)
            .env("CODEX_HOME", self.codex_home())
            .env(KEY_VAR, "test-key");
        c
    }

    /// `codex exec --json ARGS` (hooks run without their review, as only the interactive
    /// `/hooks` can give it), which must succeed.
    pub(super) fn exec(&self, args: &[&str]) -> Output {
        let mut all = vec!["exec", "--json", "--dangerously-bypass-hook-trust"];
        all.extend(args);
        let out = self.codex(&all).output().expect("codex runs");
        assert!(out.status.success(), "codex {all:?}: {out:?}");
        out
    }

    /// The thread id `codex exec --json` printed.
    pub(super) fn thread(out: &Output) -> String {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| e["type"] == "thread.started")
            .and_then(|e| e["thread_id"].as_str().map(str::to_owned))
            .expect("a thread.started event")
    }
}

/// The texts of the tool results in a request's input, in order.
pub(super) fn tool_outputs(request: &Value) -> Vec<String> {
    request["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| item["type"] == "function_call_output")
        .map(|item| match &item["output"] {
            Value::String(s) => s.clone(),
            other => hermes_testkit::model::text_of(other),
        })
        .collect()
}

/// A shell command printing `marker` without containing it (the model's input holds the
/// command too).
pub(super) fn printing(marker: &str) -> String {
    let (a, b) = marker.split_at(marker.len() / 2);
    format!("echo {a}\"\"{b}")
}

/// The delegation id in a dispatch answer.
pub(super) fn delegation_id(text: &str) -> Option<String> {
    let start = text.find("deleg_")?;
    Some(
        text[start..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect(),
    )
}

/// A call of hermes' tool `name` (in its `mcp__hermes` namespace) with `args`.
pub(super) fn hermes_call(name: &str, args: Value) -> Reply {
    Reply::Call {
        tool: format!("mcp__hermes.{name}"),
        args,
    }
}

/// A script that walks `steps` by the number of tool results the request carries: the first
/// request gets `steps[0]`, the one answering its call `steps[1]`, and so on; past the end,
/// the text `done`.
/// One step of [`steps`].
pub(super) type Step = Box<dyn Fn(&Turn<'_>) -> Reply + Send + Sync>;

/// The model's step that dispatches `args` through hermes' `delegate_task`.
pub(super) fn dispatch_step(args: Value) -> Step {
    Box::new(move |_| hermes_call("delegate_task", args.clone()))
}

/// The model's step after a dispatch: once the unit its answer names has finished, `then`.
pub(super) fn once_finished(cli: HermesCli, then: Reply) -> Step {
    Box::new(move |turn| {
        let id =
            delegation_id(&tool_outputs(&turn.request.body).join("")).expect("a delegation id");
        cli.finished(&id);
        then.clone()
    })
}

pub(super) fn steps(steps: Vec<Step>) -> Script {
    Arc::new(move |turn: &Turn<'_>| {
        let n = tool_outputs(&turn.request.body).len();
        steps
            .get(n)
            .map_or_else(|| Reply::Text("done".into()), |step| step(turn))
    })
}

pub(super) fn say(text: &str) -> Step {
    let text = text.to_owned();
    Box::new(move |_| Reply::Text(text.clone()))
}

#[test]
fn install_registers_what_codex_needs_and_its_hooks_run_once_reviewed() {
    let codex = Codex::new(|_| Arc::new(hermes_testkit::model::by_prompt));
    let said = codex.install();
    assert!(
        said.contains("/hooks") && said.contains("--absolute") && said.contains("--trust"),
        "the installer says how codex's hook review and project trust are given: {said}"
    );
    let config =
        std::fs::read_to_string(codex.machine.project().join(".codex/config.toml")).unwrap();
    assert!(
        config.contains("default_tools_approval_mode = \"approve\""),
        "{config}"
    );
    // Untrusted, the project's configuration is not read: no MCP server, a warning.
    let untrusted = codex.exec(&["SAY hello"]);
    assert!(
        String::from_utf8_lossy(&untrusted.stderr).contains("--trust"),
        "{untrusted:?}"
    );
    let listed = codex
        .codex(&["mcp", "list", "--json"])
        .output()
        .expect("codex runs");
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap_or(Value::Null);
    assert!(
        !listed.to_string().contains("\"hermes\""),
        "untrusted: {listed}"
    );
    // Trusted: codex lists the server with hermes' variables passed on, and the model is
    // offered hermes' tools under the namespace.
    let trusted = codex
        .codex(&[
            "exec",
            "--json",
            "--trust",
            r#"CALL delegate_task {"goal": "nothing", "command": ["true"]}"#,
        ])
        .output()
        .expect("codex runs");
    assert!(trusted.status.success(), "{trusted:?}");
    let unreviewed = Codex::thread(&trusted);
    let listed = codex
        .codex(&["mcp", "list", "--json"])
        .output()
        .expect("codex runs");
    let listed: Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    let hermes = listed
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == "hermes"))
        .unwrap_or_else(|| panic!("hermes is listed: {listed}"));
    assert_eq!(hermes["enabled"], true);
    // HERMES_HOME, and hermes' settings that were set when it was installed (the tests'
    // short timings among them).
    let passed = hermes["transport"]["env_vars"].as_array();
    for var in ["HERMES_HOME", "HERMES_HOST_IDLE_EXIT_SECONDS"] {
        assert!(passed.is_some_and(|v| v.contains(&json!(var))), "{hermes}");
    }
    let turns = codex.model.turns();
    let offered = &turns[turns.len() - 2].body;
    let namespaces: Vec<&Value> = offered["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["name"] == "mcp__hermes")
        .collect();
    assert_eq!(namespaces.len(), 1, "{offered}");
    assert!(namespaces[0].to_string().contains("delegate_task"));
    // Without their review the hooks were skipped silently: the dispatch answer says so and
    // what to do, and hermes never heard of codex's thread.
    let answer = tool_outputs(&turns[turns.len() - 1].body).join("");
    assert!(
        answer.contains("\"warning\"") && answer.contains("/hooks"),
        "the warning names codex's hook review: {answer}"
    );
    let sessions = codex.machine.hermes.json(&["session", "list", "--json"]);
    assert!(!sessions.to_string().contains(&unreviewed), "{sessions}");
    // Reviewed (here: bypassed for the run), they reach hermes: the dispatch lands in
    // codex's thread, with nothing to warn about.
    let out = codex.exec(&[r#"CALL delegate_task {"goal": "nothing", "command": ["true"]}"#]);
    let thread = Codex::thread(&out);
    let turns = codex.model.turns();
    let answer = tool_outputs(&turns[turns.len() - 1].body).join("");
    assert!(
        answer.contains(&format!("\"session\":\"{thread}\"")) && !answer.contains("warning"),
        "{answer}"
    );
}

#[test]
fn a_user_install_goes_where_codex_home_points() {
    let codex = Codex::new(|_| Arc::new(hermes_testkit::model::by_prompt));
    let out = codex
        .machine
        .command("hermes")
        .args(["hook", "install", "codex", "--user"])
        .env("CODEX_HOME", codex.codex_home())
        .env("HOME", codex.machine.project())
        .output()
        .expect("hermes runs");
    assert!(out.status.success(), "{out:?}");
    let config = std::fs::read_to_string(codex.codex_home().join("config.toml")).unwrap();
    assert!(
        config.contains("model_provider = \"scripted\"") && config.contains("[mcp_servers.hermes]"),
        "merged into $CODEX_HOME/config.toml: {config}"
    );
    assert!(codex.codex_home().join("hooks.json").exists());
    assert!(
        !codex.machine.project().join(".codex").exists(),
        "nothing under ~/.codex"
    );
    let listed = codex
        .codex(&["mcp", "list", "--json"])
        .output()
        .expect("codex runs");
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("\"hermes\""),
        "{listed:?}"
    );
}

#[test]
fn a_delegate_task_call_dispatches_and_the_stop_hook_hands_the_result_over_once() {
    let marker = "RESULT-OF-THE-CHILD-7f3a";
    let codex = Codex::new(|cli| {
        steps(vec![
            Box::new(move |_| {
                hermes_call(
                    "delegate_task",
                    json!({"goal": "say it", "command": ["sh", "-c", printing(marker)]}),
                )
            }),
            Box::new(move |turn| {
                let answer = tool_outputs(&turn.request.body).join("");
                let id = delegation_id(&answer).expect("a delegation id");
                cli.finished(&id);
                Reply::Text("dispatched".into())
            }),
        ])
    });
    codex.install();
    codex
        .codex(&["exec", "--trust", "SAY trusted"])
        .output()
        .expect("codex runs");
    let before = codex.model.turns().len();
    let out = codex.exec(&["delegate it"]);
    let thread = Codex::thread(&out);
    let turns = &codex.model.turns()[before..];
    // The call, its answer, and one more request after the stop hook blocked with the
    // result; the second stop (stop_hook_active, nothing new) lets codex end.
    assert_eq!(turns.len(), 3, "{turns:#?}");
    let answer = tool_outputs(&turns[1].body).join("");
    assert!(answer.contains("\"dispatched\""), "{answer}");
    assert!(
        answer.contains(&thread) && !answer.contains("warning"),
        "dispatched into codex's own session, bound by its hooks: {answer}"
    );
    assert_eq!(occurrences(&turns[1].body, marker), 0);
    assert_eq!(
        occurrences(&turns[2].body, marker),
        1,
        "{:#}",
        turns[2].body
    );
    let id = delegation_id(&answer).expect("an id");
    let status = codex
        .machine
        .hermes
        .json(&["delegation", "status", &id, "--json"]);
    assert_eq!(
        status["tasks"][0]["delivery"]["state"], "delivered",
        "{status}"
    );
    let stream = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stream.contains("clamping"),
        "codex takes the hooks' timeouts as written: {stream}"
    );
    // The stream shows the stop hook's continuation only as a second message in a row (what
    // hermes counts as another model call when codex is its child).
    let items: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "item.completed" && e["item"]["type"] != "error")
        .map(|e| e["item"]["type"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        items,
        ["mcp_tool_call", "agent_message", "agent_message"],
        "{out:?}"
    );
}

#[test]
fn an_inject_result_arrives_after_the_next_tool_call() {
    let marker = "INJECTED-RESULT-51c2";
    // The child finishes only once the model has the dispatch's answer: a result ready by the
    // dispatch call's own hook would rightly ride on that call instead.
    let gate = tempfile::tempdir().expect("a gate dir");
    let go = gate.path().join("go");
    let (half, rest) = marker.split_at(marker.len() / 2);
    let command = crate::common::until_told(&go, &format!("{half}\"\"{rest}"));
    let codex = Codex::new(|cli| {
        let then = once_finished(cli, hermes_call("delegation_list", json!({})));
        let go = go.clone();
        steps(vec![
            dispatch_step(json!({"goal": "say it", "result_delivery": "inject",
                           "command": ["sh", "-c", command]})),
            Box::new(move |turn| {
                std::fs::write(&go, b"go").expect("the gate opens");
                then(turn)
            }),
            say("seen"),
        ])
    });
    codex.install();
    codex
        .codex(&["exec", "--trust", "SAY trusted"])
        .output()
        .expect("codex runs");
    let before = codex.model.turns().len();
    codex.exec(&["delegate it"]);
    let turns = &codex.model.turns()[before..];
    assert_eq!(turns.len(), 3, "no stop-hook continuation: {turns:#?}");
    assert_eq!(occurrences(&turns[1].body, marker), 0);
    assert_eq!(
        occurrences(&turns[2].body, marker),
        1,
        "after the second tool call: {:#}",
        turns[2].body
    );
}

/// `codex exec` fires `SessionEnd` at exit while the child still runs: the session must
/// detach, not end, for the child to finish and its result to wait for `codex exec resume`
/// (a session end that ends the session interrupts the child and drops its result).
#[test]
fn codex_exec_resume_gets_an_after_turn_result_exactly_once() {
    let marker = "RESUMED-RESULT-9d41";
    let go = tempfile::NamedTempFile::new()
        .expect("a gate")
        .into_temp_path();
    let gate = go.with_extension("go");
    let script = format!(
        "while [ ! -e '{}' ]; do sleep 0.05; done; {}",
        gate.display(),
        printing(marker)
    );
    let codex = Codex::new(|_| {
        let script = script.clone();
        steps(vec![Box::new(move |turn| {
            if turn.last_user.contains("delegate it") {
                hermes_call(
                    "delegate_task",
                    json!({"goal": "wait", "command": ["sh", "-c", script]}),
                )
            } else {
                Reply::Text("next".into())
            }
        })])
    });
    codex.install();
    codex
        .codex(&["exec", "--trust", "SAY trusted"])
        .output()
        .expect("codex runs");
    let out = codex.exec(&["delegate it"]);
    let thread = Codex::thread(&out);
    let first = codex.model.turns().len();
    let id =
        delegation_id(&tool_outputs(&codex.model.turns()[first - 1].body).join("")).expect("an id");
    std::fs::write(&gate, "").expect("the gate");
    let cli = HermesCli {
        home: codex.machine.hermes.path().to_owned(),
        ledger_url: codex.machine.hermes.ledger_url.clone(),
    };
    cli.finished(&id);
    codex.exec(&["resume", &thread, "SAY next turn"]);
    let turns = codex.model.turns();
    assert_eq!(
        occurrences(&turns[first].body, marker),
        1,
        "the resumed turn's first request: {:#}",
        turns[first].body
    );
    codex.exec(&["resume", &thread, "SAY third turn"]);
    let last = codex.model.turns().pop().expect("a request");
    assert_eq!(
        occurrences(&last.body, marker),
        1,
        "nothing delivered twice"
    );
    let _ = std::fs::remove_file(&gate);
}

#[test]
fn a_3000_line_result_reaches_the_model_whole_within_codex_budget() {
    let codex = Codex::new(|cli| {
        steps(vec![
            dispatch_step(json!({"goal": "many lines", "command": ["sh", "-c",
                        "seq -f 'line %05g of the long result' 1 3000"]})),
            once_finished(cli, hermes_call("delegation_results", json!({}))),
            Box::new(move |turn| {
                let outputs = tool_outputs(&turn.request.body);
                let id = delegation_id(&outputs[0]).expect("an id");
                hermes_call("delegation_result", json!({"delegation_id": id}))
            }),
            Box::new(move |turn| {
                let outputs = tool_outputs(&turn.request.body);
                let id = delegation_id(&outputs[0]).expect("an id");
                let next = next_offset(&outputs[2]).expect("a next page");
                hermes_call(
                    "delegation_result",
                    json!({"delegation_id": id, "offset": next}),
                )
            }),
        ])
    });
    codex.install();
    codex
        .codex(&["exec", "--trust", "SAY trusted"])
        .output()
        .expect("codex runs");
    let before = codex.model.turns().len();
    codex.exec(&["delegate it"]);
    let turns = &codex.model.turns()[before..];
    let last = &turns.last().expect("requests").body;
    let outputs = tool_outputs(last);
    assert_eq!(outputs.len(), 4, "{outputs:#?}");
    for output in &outputs {
        assert!(
            !output.contains("tokens truncated"),
            "codex cut an answer: {output}"
        );
    }
    let block = &outputs[1];
    assert!(
        block.contains("line 00001 of") && block.contains("line 03000 of"),
        "head and tail: {block}"
    );
    assert!(
        block.contains("delegation_result"),
        "names the way to all of it"
    );
    // Two pages join up: the line cut at the first page's end continues on the second.
    let (first, second) = (page_body(&outputs[2]), page_body(&outputs[3]));
    let joined = format!("{first}{second}");
    let lines: Vec<&str> = joined.lines().collect();
    for (i, line) in lines.iter().enumerate().take(lines.len() - 1) {
        assert_eq!(*line, format!("line {:05} of the long result", i + 1));
    }
    assert!(lines.len() > 100, "{} lines in two pages", lines.len());
}

#[test]
fn a_3000_line_result_at_the_stop_hook_reaches_the_model_within_its_hook_budget() {
    let codex = Codex::new(|cli| {
        steps(vec![
            dispatch_step(json!({"goal": "many lines", "command": ["sh", "-c",
                        "seq -f 'line %05g of the long result' 1 3000"]})),
            once_finished(cli, Reply::Text("dispatched".into())),
        ])
    });
    codex.install();
    codex
        .codex(&["exec", "--trust", "SAY trusted"])
        .output()
        .expect("codex runs");
    let before = codex.model.turns().len();
    codex.exec(&["delegate it"]);
    let turns = &codex.model.turns()[before..];
    assert_eq!(turns.len(), 3, "{turns:#?}");
    let last = &turns[2].body["input"];
    for line in ["line 00001 of", "line 03000 of", "delegation_result"] {
        assert_eq!(occurrences(last, line), 1, "{line}: {last:#}");
    }
    assert_eq!(occurrences(last, "tokens truncated"), 0, "{last:#}");
}

/// The `offset` a `delegation_result` page names for the next one.
fn next_offset(page: &str) -> Option<u64> {
    let rest = &page[page.find("next page: offset ")? + "next page: offset ".len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// A `delegation_result` page's text after its header line.
fn page_body(page: &str) -> &str {
    let start = page.find("[RESULT OF").expect("a page header");
    let body = &page[start..];
    body.split_once('\n').map_or("", |(_, b)| b)
}

/// Codex as a child: `hermes -z --agent codex` outside any git repository.
pub(super) fn child_codex(script: Script) -> (Codex, tempfile::TempDir) {
    let codex = Codex::new(|_| script);
    let config = codex.codex_home().join("config.toml");
    let mut text = std::fs::read_to_string(&config).expect("config");
    // The child's shell commands run unsandboxed in the test's container.
    text.insert_str(
        0,
        "sandbox_mode = \"danger-full-access\"\napproval_policy = \"never\"\n",
    );
    std::fs::write(&config, text).expect("config");
    let outside =
        tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a directory outside git");
    (codex, outside)
}

#[test]
fn codex_as_a_child_reports_model_calls_tool_answer_and_usage() {
    let go = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let gate = go.path().join("go");
    let wait = crate::common::until_told(&gate, "waited");
    let (codex, outside) = child_codex(steps(vec![
        Box::new(move |_| Reply::Call {
            tool: "exec_command".into(),
            args: json!({"cmd": wait}),
        }),
        say("the child's answer"),
    ]));
    let mut run = codex.machine.command("hermes");
    run.args(["-z", "--json", "--agent", "codex", "--model", "test-model"])
        .args(["--goal", "run the command", "--cwd"])
        .arg(outside.path())
        .env("CODEX_HOME", codex.codex_home())
        .env(KEY_VAR, "test-key");
    let child = run
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("hermes runs");
    let h = &codex.machine.hermes;
    let running = wait_for(Duration::from_secs(60), "the child's current tool", || {
        let list = h.json(&["delegation", "list", "--json", "--all"]);
        let id = list["running"][0]["delegation_id"]
            .as_str()
            .or_else(|| list["running"][0]["id"].as_str())?
            .to_owned();
        let status = h.json(&["delegation", "status", &id, "--json"]);
        (!status["tasks"][0]["progress"]["current_tool"].is_null()).then_some(status)
    });
    assert_eq!(
        running["tasks"][0]["progress"]["current_tool"], "shell",
        "{running}"
    );
    std::fs::write(&gate, "").expect("the gate");
    let out = child.wait_with_output().expect("hermes ends");
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    let text = report.to_string();
    assert!(out.status.success(), "{report:#}");
    assert!(text.contains("the child's answer"), "{report:#}");
    assert!(!text.contains("skip-git-repo-check"), "{report:#}");
    let id = delegation_id(&text).expect("an id");
    let status = h.json(&["delegation", "status", &id, "--json"]);
    let child = &status["tasks"][0];
    assert_eq!(child["model"], "test-model", "{status}");
    assert_eq!(child["progress"]["api_calls"], 2, "{status}");
    assert_eq!(
        child["usage"]["input_tokens"],
        2 * hermes_testkit::model::USAGE_INPUT_TOKENS,
        "{status}"
    );
}

#[test]
fn a_codex_child_whose_model_fails_ends_failed_with_codex_message() {
    let (codex, outside) = child_codex(Arc::new(|_: &Turn<'_>| Reply::Error {
        status: 400,
        message: "the scripted model refuses: quota exceeded".into(),
    }));
    let out = codex
        .machine
        .command("hermes")
        .args([
            "-z", "--json", "--agent", "codex", "--goal", "anything", "--cwd",
        ])
        .arg(outside.path())
        .env("CODEX_HOME", codex.codex_home())
        .env(KEY_VAR, "test-key")
        .output()
        .expect("hermes runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    let id = delegation_id(&text).unwrap_or_else(|| panic!("an id in {text}"));
    let status = codex
        .machine
        .hermes
        .json(&["delegation", "status", &id, "--json"]);
    let child = &status["tasks"][0];
    assert_eq!(child["status"], "failed", "{status}");
    assert!(
        child.to_string().contains("quota exceeded"),
        "codex's message: {status}"
    );
}

#[test]
fn a_codex_child_dispatched_with_delegate_answers_in_the_background() {
    let (codex, outside) = child_codex(steps(vec![say("answered in the background")]));
    let out = codex
        .machine
        .command("hermes")
        .args([
            "delegate",
            "--json",
            "--session",
            "codex-child",
            "--agent",
            "codex",
        ])
        .args(["--goal", "answer", "--cwd"])
        .arg(outside.path())
        .env("CODEX_HOME", codex.codex_home())
        .env(KEY_VAR, "test-key")
        .output()
        .expect("hermes runs");
    assert!(out.status.success(), "{out:?}");
    let id = delegation_id(&String::from_utf8_lossy(&out.stdout)).expect("an id");
    let cli = HermesCli {
        home: codex.machine.hermes.path().to_owned(),
        ledger_url: codex.machine.hermes.ledger_url.clone(),
    };
    let status = cli.finished(&id);
    let task = &status["tasks"][0];
    assert_eq!(task["status"], "completed", "{status}");
    assert!(
        task["result"]
            .as_str()
            .is_some_and(|r| r.contains("answered in the background")),
        "{status}"
    );
    assert_eq!(task["progress"]["api_calls"], 1, "{status}");
}
