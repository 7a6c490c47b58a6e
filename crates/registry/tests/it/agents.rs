//! The agents as children, by name: the built-in profiles' argv and adapters, and the stream
//! adapters on recorded streams of each agent (`fixtures/agents/`).

use hermes_ledger::Role;
use hermes_registry::agent::{
    AgentRequest, AgentStream, Report, Sink, adapter_by_name, adapter_for, command_for,
};
use proptest::prelude::*;
use serde_json::Value;

/// A sink that keeps everything, for tests.
#[derive(Default)]
struct Kept {
    lines: Vec<(&'static str, String)>,
    raw: Vec<u8>,
}

impl Sink for Kept {
    fn line(&mut self, tag: &'static str, text: &str) {
        self.lines.push((tag, text.to_owned()));
    }
    fn raw(&mut self, bytes: &[u8]) {
        self.raw.extend_from_slice(bytes);
    }
}

impl Kept {
    fn text(&self) -> String {
        self.lines
            .iter()
            .map(|(tag, text)| format!("{tag} | {text}\n"))
            .collect()
    }
}

/// The lines of a fixture that are sent (directions starting with `#` are not).
fn sent(fixture: &str) -> String {
    fixture
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Replays a fixture through the adapter `name` in small chunks: its report and the
/// readable transcript (`tag | text` lines).
fn replay(name: &str, fixture: &str) -> (Report, String) {
    let adapter = adapter_by_name(name).expect("known").expect("not plain");
    let mut stream = AgentStream::new(adapter, 1 << 20);
    let mut kept = Kept::default();
    let bytes = sent(fixture);
    for chunk in bytes.as_bytes().chunks(7) {
        stream.feed(chunk, &mut kept);
    }
    stream.finish(&mut kept);
    assert_eq!(
        kept.raw,
        bytes.as_bytes(),
        "the raw stream is kept as it came"
    );
    (stream.report().clone(), kept.text())
}

fn fixture_lines() -> Vec<String> {
    [
        include_str!("fixtures/agents/claude.jsonl"),
        include_str!("fixtures/agents/codex.jsonl"),
        include_str!("fixtures/agents/gemini.jsonl"),
        include_str!("fixtures/agents/gemini-error.jsonl"),
    ]
    .iter()
    .flat_map(|f| sent(f).lines().map(str::to_owned).collect::<Vec<_>>())
    .collect()
}

fn piece() -> impl Strategy<Value = Vec<u8>> {
    let lines = fixture_lines();
    let n = lines.len();
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64),
        (0..n).prop_map(move |i| lines[i].clone().into_bytes()),
        ((0..n), any::<prop::sample::Index>()).prop_map({
            let lines = fixture_lines();
            move |(i, cut)| {
                let line = lines[i].as_bytes();
                line[..cut.index(line.len() + 1)].to_vec()
            }
        }),
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Any bytes, cut anywhere, through any adapter: no panic, the raw stream is kept
    /// exactly, and every line that is not a JSON object is in the readable transcript.
    #[test]
    fn any_stream_through_any_adapter_loses_no_output(
        pieces in proptest::collection::vec(piece(), 0..24),
        cuts in proptest::collection::vec(1usize..40, 1..8),
        adapter in 0usize..hermes_agents::children().count(),
    ) {
        let (cli, _) = hermes_agents::children().nth(adapter).expect("an adapter");
        let input: Vec<u8> = pieces.concat();
        let mut stream = AgentStream::new(cli, 1 << 20);
        let mut kept = Kept::default();
        let mut rest = &input[..];
        let mut i = 0;
        while !rest.is_empty() {
            let n = cuts[i % cuts.len()].min(rest.len());
            stream.feed(&rest[..n], &mut kept);
            rest = &rest[n..];
            i += 1;
        }
        stream.finish(&mut kept);
        prop_assert_eq!(&kept.raw, &input);
        for line in input.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if matches!(serde_json::from_slice::<Value>(line), Ok(Value::Object(_))) {
                continue;
            }
            let text = String::from_utf8_lossy(line).into_owned();
            prop_assert!(
                kept.lines.iter().any(|(tag, t)| *tag == "out" && *t == text),
                "{:?} missing from {:?}", text, kept.lines
            );
        }
    }
}

#[test]
fn a_documented_stream_gives_calls_tools_model_answer_and_usage() {
    let (report, text) = replay("claude", include_str!("fixtures/agents/claude.jsonl"));
    assert_eq!(report.model.as_deref(), Some("claude-sonnet-4-5-20250929"));
    assert_eq!(report.api_calls, 3);
    assert_eq!(report.current_tool, None);
    assert_eq!(report.error, None);
    assert_eq!(
        report.answer.as_deref(),
        Some("All 12 tests pass. I ran cargo test; nothing was left undone.")
    );
    let usage = report.usage.expect("usage");
    assert_eq!((usage.input_tokens, usage.output_tokens), (4135, 310));
    assert_eq!(usage.cost_usd, Some(0.0213));
    assert!(text.contains("prg | tool Bash: cargo test\n"), "{text}");
    assert!(
        text.contains("out | assistant: I will run the tests first.\n"),
        "{text}"
    );
    assert!(
        text.contains("prg | init model claude-sonnet-4-5-20250929\n"),
        "{text}"
    );
}

#[test]
fn an_error_result_is_the_agents_failure() {
    let (report, text) = replay("claude", include_str!("fixtures/agents/claude-error.jsonl"));
    assert_eq!(report.error.as_deref(), Some("Credit balance is too low"));
    assert!(
        text.contains("err | error: Credit balance is too low\n"),
        "{text}"
    );
}

#[test]
fn a_documented_stream_gives_calls_the_command_the_last_message_and_usage() {
    let (report, text) = replay("codex", include_str!("fixtures/agents/codex.jsonl"));
    assert_eq!(report.api_calls, 2);
    assert_eq!(report.current_tool, None);
    assert_eq!(
        report.answer.as_deref(),
        Some("The tests pass: 12 passed, 0 failed.")
    );
    let usage = report.usage.expect("usage");
    assert_eq!(
        (
            usage.input_tokens,
            usage.cached_input_tokens,
            usage.output_tokens
        ),
        (24763, 24448, 122)
    );
    assert!(
        text.contains("prg | tool shell: bash -lc 'cargo test'\n"),
        "{text}"
    );
    assert!(text.contains("prg | tool shell done (exit 0)\n"), "{text}");
}

#[test]
fn a_failed_turn_is_the_agents_failure() {
    let (report, _) = replay("codex", include_str!("fixtures/agents/codex-error.jsonl"));
    assert_eq!(
        report.error.as_deref(),
        Some("stream disconnected before completion: model not found")
    );
}

#[test]
fn a_documented_stream_gives_calls_the_tool_the_last_message_and_usage() {
    let (report, text) = replay("gemini", include_str!("fixtures/agents/gemini.jsonl"));
    assert_eq!(report.model.as_deref(), Some("gemini-2.5-pro"));
    assert_eq!(report.api_calls, 2);
    assert_eq!(report.answer.as_deref(), Some("All 12 tests pass."));
    assert_eq!(report.usage.expect("usage").output_tokens, 110);
    assert!(
        text.contains("prg | tool run_shell_command: cargo test\n"),
        "{text}"
    );
    assert!(
        text.contains("out | assistant: I will run the tests.\n"),
        "{text}"
    );
}

/// Gemini CLI's default model is the router's alias `auto` (the init event's); the result's
/// `stats.models` names the models that answered: the router's side call and the model that
/// carried the conversation, which is the child's model.
#[test]
fn a_gemini_child_on_auto_reports_the_model_that_answered() {
    let stream = concat!(
        r#"{"type":"init","session_id":"s","model":"auto"}"#,
        "\n",
        r#"{"type":"message","role":"assistant","content":"ok","delta":true}"#,
        "\n",
        r#"{"type":"result","status":"success","stats":{"input_tokens":2121,"output_tokens":9,"models":{"gemini-3.5-flash-lite":{"input_tokens":121,"output_tokens":2},"gemini-3.8-flash":{"input_tokens":2000,"output_tokens":7}}}}"#,
        "\n",
    );
    let (report, text) = replay("gemini", stream);
    assert_eq!(report.model.as_deref(), Some("gemini-3.8-flash"));
    assert!(text.contains("prg | model gemini-3.8-flash\n"), "{text}");
}

#[test]
fn an_error_result_is_the_agents_failure_and_warnings_are_not() {
    let (report, text) = replay("gemini", include_str!("fixtures/agents/gemini-error.jsonl"));
    assert_eq!(report.error.as_deref(), Some("Please set an Auth method"));
    assert!(
        text.contains("prg | warning: Retrying after a 429\n"),
        "{text}"
    );
}

fn request(agent: &str) -> AgentRequest<'_> {
    AgentRequest {
        agent,
        goal: "review the diff",
        context: None,
        toolsets: &[],
        role: Role::Leaf,
        model: Some("m1"),
        depth: 1,
        max_depth: 2,
        sandbox: hermes_ledger::SandboxMode::Full,
    }
}

fn bin_dir(names: &[&str]) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    for name in names {
        let p = dir.path().join(name);
        std::fs::write(&p, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    dir
}

#[test]
fn builtin_profiles_build_their_headless_streaming_argv() {
    let bin = bin_dir(&["claude", "codex", "gemini"]);
    let path = Some(bin.path().as_os_str());
    let claude = command_for(&request("claude"), &[], path).expect("claude");
    assert_eq!(claude.adapter, "claude");
    assert_eq!(claude.argv[..2], ["claude", "-p"]);
    assert!(claude.argv[2].contains("GOAL:\nreview the diff"));
    assert_eq!(
        claude.argv[3..],
        [
            "--output-format",
            "stream-json",
            "--verbose",
            "--model",
            "m1",
            "--allowedTools",
            "Bash,Edit,Write,MultiEdit,NotebookEdit",
            "--permission-mode",
            "acceptEdits",
            "--permission-prompts",
            "none"
        ]
    );
    let codex = command_for(&request("codex"), &[], path).expect("codex");
    assert_eq!(
        codex.argv[..6],
        [
            "codex",
            "exec",
            "--json",
            "--skip-git-repo-check",
            "-m",
            "m1"
        ]
    );
    assert_eq!(codex.argv[7..], ["--sandbox", "danger-full-access"]);
    let gemini = command_for(&request("gemini"), &[], path).expect("gemini");
    assert_eq!(
        gemini.argv[3..],
        [
            "--output-format",
            "stream-json",
            "-m",
            "m1",
            "--approval-mode",
            "yolo"
        ]
    );
    for c in [&claude, &codex, &gemini] {
        assert_eq!(
            adapter_for(None, &c.argv).map(|a| a.name),
            Some(c.adapter.as_str())
        );
    }
}

#[test]
fn a_sandbox_sets_each_agents_permission_flags_and_toolsets_still_win() {
    use hermes_ledger::SandboxMode;
    let bin = bin_dir(&["claude", "codex", "gemini"]);
    let path = Some(bin.path().as_os_str());
    let at = |agent, sandbox| {
        let r = AgentRequest {
            sandbox,
            ..request(agent)
        };
        command_for(&r, &[], path).expect("builds").argv
    };
    let claude = at("claude", SandboxMode::ReadOnly);
    assert!(!claude.contains(&"--allowedTools".to_owned()), "{claude:?}");
    assert!(
        claude.ends_with(
            &[
                "--permission-mode",
                "dontAsk",
                "--permission-prompts",
                "none"
            ]
            .map(String::from)
        )
    );
    // Codex's own sandbox cannot run inside hermes' (see its profile): off, in every mode.
    let codex = at("codex", SandboxMode::WorkspaceWrite);
    assert!(
        codex
            .windows(2)
            .any(|w| w == ["--sandbox", "danger-full-access"]),
        "{codex:?}"
    );
    let gemini = at("gemini", SandboxMode::ReadOnly);
    assert!(gemini.ends_with(&["--approval-mode", "plan"].map(String::from)));
    // A dispatch that names toolsets keeps its own allow-list.
    let toolsets = ["file".to_owned()];
    let r = AgentRequest {
        toolsets: &toolsets,
        sandbox: SandboxMode::WorkspaceWrite,
        ..request("claude")
    };
    let argv = command_for(&r, &[], path).expect("builds").argv;
    let at = argv
        .iter()
        .position(|a| a == "--allowedTools")
        .expect("allow-list");
    assert!(!argv[at + 1].contains("Bash"), "{argv:?}");
}

#[test]
fn configured_commands_fill_placeholders_and_win_over_builtins() {
    let bin = bin_dir(&["aider", "claude"]);
    let path = Some(bin.path().as_os_str());
    let configured = [
        hermes_settings::AgentOverride {
            name: "aider".into(),
            command: vec![
                "aider".into(),
                "--message".into(),
                "{prompt}".into(),
                "--model".into(),
                "{model}".into(),
            ],
            adapter: None,
        },
        hermes_settings::AgentOverride {
            name: "claude".into(),
            command: vec![
                "claude".into(),
                "-p".into(),
                "{prompt}".into(),
                "--max-turns".into(),
                "3".into(),
            ],
            adapter: None,
        },
    ];
    let aider = command_for(&request("aider"), &configured, path).expect("aider");
    assert_eq!(aider.argv[3..], ["--model", "m1"]);
    assert_eq!(aider.adapter, "plain");
    let no_model = AgentRequest {
        model: None,
        ..request("aider")
    };
    let aider = command_for(&no_model, &configured, path).expect("aider");
    assert_eq!(aider.argv.len(), 3, "{:?}", aider.argv);
    let claude = command_for(&request("claude"), &configured, path).expect("claude");
    assert_eq!(claude.argv[3..], ["--max-turns", "3"]);
    assert_eq!(
        claude.adapter, "claude",
        "a pinned built-in keeps its adapter"
    );
}

#[test]
fn unknown_agents_and_missing_programs_are_named() {
    let empty = tempfile::tempdir().expect("tempdir");
    let err = command_for(&request("claude"), &[], Some(empty.path().as_os_str()))
        .expect_err("not installed");
    assert!(
        err.to_string().contains("\"claude\" is not installed"),
        "{err}"
    );
    let err = command_for(&request("nope"), &[], None).expect_err("unknown");
    assert!(err.to_string().contains("claude, codex, gemini"), "{err}");
    assert!(adapter_by_name("jsonx").is_err());
    assert!(adapter_by_name("plain").expect("plain").is_none());
}

#[test]
fn commands_given_as_is_are_recognised_only_with_their_stream_flags() {
    let argv = |words: &[&str]| words.iter().map(|w| w.to_string()).collect::<Vec<_>>();
    let name = |words: &[&str]| adapter_for(None, &argv(words)).map(|a| a.name);
    assert_eq!(
        name(&["/usr/bin/claude", "-p", "x", "--output-format=stream-json"]),
        Some("claude")
    );
    assert_eq!(name(&["claude", "-p", "x"]), None);
    assert_eq!(name(&["codex", "exec", "--json", "x"]), Some("codex"));
    assert_eq!(name(&["codex", "exec", "x"]), None);
    assert_eq!(
        name(&["gemini", "-p", "x", "-o", "stream-json"]),
        Some("gemini")
    );
    assert_eq!(name(&["echo", "--json"]), None);
    assert_eq!(
        adapter_for(Some("codex"), &argv(&["sh"])).map(|a| a.name),
        Some("codex")
    );
    assert!(
        adapter_for(
            Some("plain"),
            &argv(&["claude", "--output-format", "stream-json"])
        )
        .is_none()
    );
}

#[test]
fn the_calls_claude_refused_are_counted_and_named() {
    // The `result` line's `permission_denials` ({tool_name, tool_use_id, tool_input}), as the
    // pinned Claude Code's SDK schema has it (`permission_denials` in its bundled CLI).
    let stream = concat!(
        r#"{"type":"result","subtype":"success","is_error":false,"result":"I could not.","#,
        r#""permission_denials":[{"tool_name":"Bash","tool_use_id":"t1","#,
        r#""tool_input":{"command":"touch made-by-child.txt"}},"#,
        r#"{"tool_name":"Write","tool_use_id":"t2","tool_input":{"file_path":"/x/y"}}]}"#,
        "\n"
    );
    let (report, text) = replay("claude", stream);
    assert_eq!(
        report.denials,
        ["Bash: touch made-by-child.txt", "Write: /x/y"]
    );
    assert!(
        text.contains("err | permission denied: Bash: touch made-by-child.txt\n"),
        "{text}"
    );
    assert_eq!(report.answer.as_deref(), Some("I could not."));
}
