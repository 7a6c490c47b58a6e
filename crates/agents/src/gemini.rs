//! Gemini CLI. Every fact of its hooks is from its hooks reference,
//! <https://geminicli.com/docs/hooks/reference> (`docs/hooks/reference.md` in
//! <https://github.com/google-gemini/gemini-cli>), and its MCP settings
//! (<https://geminicli.com/docs/tools/mcp-server>):
//!
//! - hooks are the `hooks` object of `settings.json` (`<project>/.gemini/settings.json`,
//!   `~/.gemini/settings.json`): event → groups with a `matcher` (a regular expression for
//!   tool events, an exact string for lifecycle ones) and `hooks` of
//!   `{type: "command", command, name, timeout}`, the **timeout in milliseconds** (default
//!   60,000);
//! - every input has `session_id`, `transcript_path`, `cwd`, `hook_event_name`, `timestamp`;
//!   `SessionStart` adds `source` (`startup`|`resume`|`clear`), `SessionEnd` a `reason`,
//!   `AfterAgent` `prompt`, `prompt_response` and `stop_hook_active`;
//! - `BeforeAgent` (after the user's prompt, before planning) and `AfterTool` answer
//!   `hookSpecificOutput.additionalContext`, appended to the prompt or the tool's result;
//!   `AfterAgent` answers `{"decision":"deny","reason":…}` to reject the final response and
//!   retry with `reason` as a new prompt; `SessionEnd` is best effort (not awaited);
//! - exit 0 with JSON on stdout is an answer, exit 2 blocks, any other code is a warning and
//!   the CLI goes on; stdout must hold nothing but the JSON;
//! - MCP servers are `mcpServers` in the same `settings.json` (`command`, `args`, `env`);
//! - it refuses MCP tool schemas holding `$ref`, `$defs` or `null` types.
//!
//! The reference names no limit on added context; hermes keeps the 9,500 characters it gives
//! an agent that keeps 10,000.
//!
//! Subagents run inside the tool `invoke_agent` (`agent_name`, `prompt`) of the same process,
//! and their tool calls fire the same `BeforeTool`/`AfterTool` hooks with the process's
//! `session_id` and nothing naming the subagent (0.61.0: `createBaseInput` in the bundle). So
//! hermes also hooks `BeforeTool` of `invoke_agent`: every `AfterTool` until that call's own is
//! a subagent's, and hands nothing over.
//!
//! As a child: `gemini -p PROMPT --output-format stream-json [-m M] [--allowed-tools …]`, whose
//! stdout is JSONL headless events ([`StreamFormat::HeadlessEvents`]). Format:
//! <https://geminicli.com/docs/cli/headless/>.

use crate::child::asks_stream_json;
use crate::{
    Action, Agent, Answer, ChildProfile, Entry, HookEvent, Hooks, Install, Layout, Permissions,
    Place, Sandbox, Server, StartRule, StateDir, StopActive, StopAnswer, StreamFormat, SubagentTool,
};

/// Gemini CLI's settings file, which holds both its MCP servers and its hooks.
const SETTINGS: Place = Place::both(&[".gemini", "settings.json"]);

/// Gemini CLI.
pub const GEMINI: Agent = Agent {
    name: "gemini",
    title: "Gemini CLI",
    events: EVENTS,
    executables: &["gemini"],
    script_markers: &[],
    budget: 9_500,
    result_tool: "mcp_hermes_delegation_result",
    mcp_budget: None,
    session_field: "session_id",
    subagent_field: None,
    event_field: "hook_event_name",
    start: StartRule::SOURCE,
    stop_active: StopActive::STOP_HOOK_ACTIVE,
    answer: Answer::AdditionalContext {
        stop: StopAnswer::Decision("deny"),
    },
    // `SessionEndReason`: exit, clear, logout, prompt_input_exit, other
    // (`@google/gemini-cli/bundle/chunk-5FZXKDXH.js`): only `/clear` discards the conversation.
    discard: crate::Discard::when("reason", &["clear"]),
    install: Install {
        server: Server::Json {
            file: SETTINGS,
            kind: None,
            all_tools: false,
            // Its MCP servers lose every variable whose name looks secret, and with
            // `GITHUB_SHA` set (or `SURFACE=Github`) its hooks and MCP servers lose every
            // variable outside a fixed few, unless the settings allow it by name
            // (`sanitizeEnvironment`, `shouldRedactEnvironmentVariable` and the settings'
            // `security.environmentVariableRedaction.allowed` in
            // `@google/gemini-cli/bundle/chunk-JDPZ4CE3.js` of 0.61.0).
            pass_env: Some(&["security", "environmentVariableRedaction", "allowed"]),
        },
        hooks: Hooks::Json {
            file: SETTINGS,
            local: None,
            layout: Layout::Groups,
            // Milliseconds Gemini gives each hook.
            entry: Entry {
                named: true,
                ..Entry::typed("command", Some(("timeout", 10_000)))
            },
            // A regular expression for tool events: every tool.
            tool_matcher: Some(".*"),
            versioned: false,
            enable_server: None,
        },
        print_note: "",
        advice: "start gemini in {project}",
    },
    child: Some(ChildProfile {
        program: "gemini",
        argv,
        streams: |args| asks_stream_json(args, &["-o"]),
        toolset,
        stream: StreamFormat::HeadlessEvents,
        own_home: None,
        not_self: false,
        permissions,
        state: STATE,
    }),
};

/// The tool that runs a subagent.
const INVOKE_AGENT: SubagentTool = SubagentTool {
    field: "tool_name",
    name: "invoke_agent",
};

const EVENTS: &[HookEvent] = &[
    HookEvent::new("session-start", "SessionStart", Action::Start),
    HookEvent::new("pre-tool-use", "BeforeTool", Action::EnterSubagent(INVOKE_AGENT)),
    HookEvent::new("user-prompt-submit", "BeforeAgent", Action::TURN),
    HookEvent::new("post-tool-use", "AfterTool", Action::TOOL),
    HookEvent::new("stop", "AfterAgent", Action::Stop),
    HookEvent::new("session-end", "SessionEnd", Action::End),
];

fn argv(prompt: &str, model: Option<&str>, tools: &[String]) -> Vec<String> {
    let mut argv: Vec<String> = ["gemini", "-p", prompt, "--output-format", "stream-json"]
        .map(str::to_owned)
        .to_vec();
    if let Some(model) = model {
        argv.extend(["-m".to_owned(), model.to_owned()]);
    }
    if !tools.is_empty() {
        argv.extend(["--allowed-tools".to_owned(), tools.join(",")]);
    }
    argv
}

fn toolset(name: &str) -> &'static [&'static str] {
    match name {
        "terminal" | "shell" => &["run_shell_command"],
        "file" | "files" => &[
            "read_file",
            "write_file",
            "replace",
            "glob",
            "search_file_content",
            "list_directory",
        ],
        "web" => &["web_fetch", "google_web_search"],
        _ => &[],
    }
}

/// Its permission flags, from `gemini --help` of the pinned 0.61.0
/// (`tests/agents/package.json`): `--approval-mode` — `plan` ("read-only mode"), `yolo`
/// ("auto-approve all tools"; the kernel's sandbox confines what they reach). Its own sandbox
/// stays off unless configured (`loadSandboxConfig` in its bundle: `--yolo` does not turn it
/// on).
fn permissions(sandbox: Sandbox) -> Permissions {
    let flags: &'static [&'static str] = match sandbox {
        Sandbox::ReadOnly => &["--approval-mode", "plan"],
        Sandbox::WorkspaceWrite | Sandbox::Full => &["--approval-mode", "yolo"],
    };
    Permissions { flags, tools: &[] }
}

/// Its state: `~/.gemini`.
const STATE: &[StateDir] = &[StateDir {
    var: None,
    home: ".gemini",
        file: None,
}];

#[cfg(test)]
mod tests {
    use super::GEMINI;
    use serde_json::json;

    #[test]
    fn it_says_when_a_stop_hook_kept_it_going_and_has_no_subagent_field() {
        let input = json!({"session_id": "g-1", "stop_hook_active": true, "agent_id": "x"});
        assert!(GEMINI.stop_active(&input));
        assert!(GEMINI.subagent_field.is_none());
    }

    #[test]
    fn its_subagents_run_inside_the_invoke_agent_tool() {
        assert_eq!(GEMINI.subagent_tool().map(|t| t.name), Some("invoke_agent"));
        let call = |tool: &str| json!({"session_id": "g-1", "tool_name": tool});
        assert!(GEMINI.calls_subagent_tool(&call("invoke_agent")));
        assert!(!GEMINI.calls_subagent_tool(&call("list_directory")));
        assert!(!GEMINI.calls_subagent_tool(&json!({"session_id": "g-1"})));
    }

    #[test]
    fn permissions_pick_the_approval_mode() {
        use crate::{Sandbox, child};
        let (_, profile) = child("gemini").expect("profile");
        let flags = |s| (profile.permissions)(s).flags;
        assert_eq!(flags(Sandbox::ReadOnly), ["--approval-mode", "plan"]);
        assert_eq!(flags(Sandbox::WorkspaceWrite), ["--approval-mode", "yolo"]);
        assert_eq!(profile.state[0].home, ".gemini");
    }
}
