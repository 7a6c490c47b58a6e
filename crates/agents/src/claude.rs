//! Claude Code. Every fact of its hooks is from its hooks reference,
//! <https://code.claude.com/docs/en/hooks>, and its MCP page, <https://code.claude.com/docs/en/mcp>:
//!
//! - hooks get one JSON object on stdin with `session_id`, `transcript_path`, `cwd`,
//!   `hook_event_name`; `SessionStart` adds `source` (`startup`, `resume`, `clear`, `compact`),
//!   `SessionEnd` a `reason` (`clear`, `logout`, `prompt_input_exit`, `other`, …), `Stop`
//!   `stop_hook_active`, `PostToolUse`/`PostToolUseFailure` the tool; a call made inside a
//!   subagent carries `agent_id` (and `agent_type`);
//! - exit 0 with JSON on stdout is an answer; exit 2 *blocks* (a `UserPromptSubmit` prompt is
//!   erased, a `Stop` keeps Claude going with stderr); any other code is a non-blocking error,
//!   shown to the user, and Claude goes on — which is what a failing hermes must do;
//! - `hookSpecificOutput.additionalContext` of `UserPromptSubmit`, `PostToolUse` and
//!   `PostToolUseFailure` is added to what the model reads, at most 10,000 characters of it
//!   (beyond, the model gets a preview and a file path); `Stop` answers
//!   `{"decision":"block","reason":…}` to keep Claude going with the reason;
//! - but 2.1.332 hands a blocking stop's reason to its model twice, as a user message ("Stop
//!   hook feedback: …") and again as a system message ("Stop hook blocking error from command
//!   …") that stays in the conversation; `hookSpecificOutput.additionalContext` of `Stop` is
//!   "non-error feedback delivered to the model; the conversation continues so the model can
//!   act on it" (its output schema in `@anthropic-ai/claude-code-linux-x64/claude`), and
//!   reaches the model once (`tests/it/real/claude.rs`): hermes answers a stop with that;
//! - project settings are `.claude/settings.json` (committed) and
//!   `.claude/settings.local.json` (not); project MCP servers are `.mcp.json`'s `mcpServers`,
//!   enabled through `enabledMcpjsonServers`, which Claude honours only in a folder whose trust
//!   dialog was accepted (`claude -p` skips the dialog); user settings are `~/.claude/settings.json`, and
//!   user-scoped MCP servers `~/.claude.json`'s `mcpServers`;
//! - it runs on `node`, from a package whose path holds `/claude-code/`.
//!
//! As a child: `claude -p PROMPT --output-format stream-json --verbose [--model M]
//! [--allowedTools …]`, whose stdout is the Agent SDK's messages
//! ([`StreamFormat::SdkMessages`]); format: <https://code.claude.com/docs/en/headless>
//! (`--output-format stream-json`) and the Agent SDK's message types. Its MCP server's tool
//! answers are cut past 25,000 tokens (`MAX_MCP_OUTPUT_TOKENS`), with a warning past 10,000.

use crate::child::asks_stream_json;
use crate::{
    Action, Agent, Answer, ChildProfile, Entry, Permissions, Sandbox, StateDir, HookEvent, Hooks, Install, Layout, Place, Server,
    StartRule, StopActive, StopAnswer, StreamFormat,
};

/// Claude Code.
pub const CLAUDE: Agent = Agent {
    name: "claude",
    title: "Claude Code",
    events: EVENTS,
    executables: &["claude"],
    script_markers: &["/claude-code/"],
    // Claude keeps 10,000 characters of `additionalContext`; hermes stays clear of the edge.
    budget: 9_500,
    // As its model sees MCP tools: `mcp__SERVER__TOOL` (the `tools` of its init event).
    result_tool: "mcp__hermes__delegation_result",
    mcp_budget: None,
    session_field: "session_id",
    subagent_field: Some("agent_id"),
    event_field: "hook_event_name",
    start: StartRule::SOURCE,
    stop_active: StopActive::STOP_HOOK_ACTIVE,
    // A stop, too, answers with `additionalContext`: a result handed over exactly once.
    answer: Answer::AdditionalContext {
        stop: StopAnswer::Context,
    },
    // `SessionEnd`'s reasons are clear, resume, logout, prompt_input_exit, other
    // (`@anthropic-ai/claude-code-linux-x64/claude`): only `/clear` discards the conversation.
    discard: crate::Discard::when("reason", &["clear"]),
    install: Install {
        server: Server::Json {
            file: Place::new(&[".mcp.json"], &[".claude.json"]),
            kind: Some("stdio"),
            all_tools: false,
            pass_env: None,
        },
        hooks: Hooks::Json {
            file: Place::both(&[".claude", "settings.json"]),
            local: Some(&[".claude", "settings.local.json"]),
            layout: Layout::Groups,
            // Seconds Claude gives each hook before it gives up on it.
            entry: Entry::typed("command", Some(("timeout", 10))),
            tool_matcher: Some("*"),
            versioned: false,
            enable_server: Some("enabledMcpjsonServers"),
        },
        print_note: "# (or: claude mcp add hermes -- {quoted} mcp)\n",
        // Verified against Claude Code 2.1.332 (`tests/it/real/claude.rs`).
        advice: "start claude in {project} and accept its folder trust dialog: until the folder is trusted, Claude ignores the project's approval of `hermes` (`claude mcp list` shows it \"Pending approval\"); `claude -p` skips the dialog, so run it only in folders you trust (as root, --dangerously-skip-permissions also needs IS_SANDBOX=1)",
    },
    child: Some(ChildProfile {
        program: "claude",
        argv,
        streams: |args| asks_stream_json(args, &[]),
        toolset,
        stream: StreamFormat::SdkMessages,
        own_home: None,
        not_self: false,
        permissions,
        state: STATE,
    }),
};

/// Its hook events.
const EVENTS: &[HookEvent] = &[
    HookEvent::new("session-start", "SessionStart", Action::Start),
    HookEvent::new("user-prompt-submit", "UserPromptSubmit", Action::TURN),
    HookEvent::new("post-tool-use", "PostToolUse", Action::TOOL),
    HookEvent::new("post-tool-use-failure", "PostToolUseFailure", Action::TOOL),
    HookEvent::new("stop", "Stop", Action::Stop),
    HookEvent::new("session-end", "SessionEnd", Action::End),
];

fn argv(prompt: &str, model: Option<&str>, tools: &[String]) -> Vec<String> {
    let mut argv: Vec<String> = [
        "claude",
        "-p",
        prompt,
        "--output-format",
        "stream-json",
        "--verbose",
    ]
    .map(str::to_owned)
    .to_vec();
    if let Some(model) = model {
        argv.extend(["--model".to_owned(), model.to_owned()]);
    }
    if !tools.is_empty() {
        argv.extend(["--allowedTools".to_owned(), tools.join(",")]);
    }
    argv
}

fn toolset(name: &str) -> &'static [&'static str] {
    match name {
        "terminal" | "shell" => &["Bash"],
        "file" | "files" => &["Read", "Write", "Edit", "Glob", "Grep"],
        "web" => &["WebFetch", "WebSearch"],
        _ => &[],
    }
}

/// Its permission flags, from `claude --help` of the pinned 2.1.332
/// (`tests/agents/package.json`): `--permission-mode` (choices `acceptEdits`, `auto`,
/// `bypassPermissions`, `manual`, `dontAsk`, `plan`), `--permission-prompts none` (in `--print`,
/// "anything that would prompt is denied automatically") and `--allowedTools`. Nothing here
/// needs `bypassPermissions` / `--dangerously-skip-permissions`, which Claude Code refuses as
/// root unless `IS_SANDBOX=1`: the same flags work for every user. The kernel's sandbox is the
/// boundary; these flags only keep Claude from asking a question nobody can answer.
fn permissions(sandbox: Sandbox) -> Permissions {
    match sandbox {
        // Nothing pre-approved and nothing asked: a write is refused and reported in the
        // result's `permission_denials`.
        Sandbox::ReadOnly => Permissions {
            flags: &["--permission-mode", "dontAsk", "--permission-prompts", "none"],
            tools: &[],
        },
        // Edits accepted, commands pre-approved: the sandbox confines what they reach.
        Sandbox::WorkspaceWrite | Sandbox::Full => Permissions {
            flags: &["--permission-mode", "acceptEdits", "--permission-prompts", "none"],
            tools: &["Bash", "Edit", "Write", "MultiEdit", "NotebookEdit"],
        },
    }
}

/// Its state: `~/.claude` (or `$CLAUDE_CONFIG_DIR`) and the `~/.claude.json` file beside it.
/// Claude Code 2.1.332 writes that file atomically, through `~/.claude.json.tmp.PID.HEX` beside
/// it, which the sandbox refuses (`$HOME` is not writable); on `EACCES` it writes the file in
/// place instead, if the file exists (`f6s` and the atomic writer in `bin/claude.exe`). So a
/// missing one starts as `{}`, what Claude reads as an empty configuration (tried: it fills it
/// in on its first run, inside the sandbox as outside).
const STATE: &[StateDir] = &[
    StateDir {
        var: Some("CLAUDE_CONFIG_DIR"),
        home: ".claude",
        file: None,
    },
    StateDir {
        var: None,
        home: ".claude.json",
        file: Some("{}"),
    },
];

#[cfg(test)]
mod tests {
    use super::CLAUDE;
    use crate::Start;
    use serde_json::json;

    #[test]
    fn its_input_names_the_conversation_the_subagent_and_how_it_started() {
        let input = json!({"session_id": "s-1", "source": "resume", "agent_id": "a"});
        assert_eq!(CLAUDE.start(&input), Start::Resume);
        assert_eq!(CLAUDE.start(&json!({"source": "compact"})), Start::Other);
        assert!(CLAUDE.stop_active(&json!({"stop_hook_active": true})));
        assert!(CLAUDE.has_tool_boundary() && CLAUDE.has_session_end());
    }

    #[test]
    fn a_stop_hands_its_text_over_as_additional_context_not_as_a_block_reason() {
        let stop = CLAUDE.event("stop").expect("a stop event");
        let answer = CLAUDE.answer(&stop, "the results");
        assert_eq!(
            answer,
            json!({"hookSpecificOutput": {"hookEventName": "Stop", "additionalContext": "the results"}})
        );
    }
    #[test]
    fn permissions_match_the_sandbox_without_bypassing_anything() {
        use crate::{Sandbox, child};
        let (_, profile) = child("claude").expect("profile");
        let ro = (profile.permissions)(Sandbox::ReadOnly);
        assert_eq!(
            ro.flags,
            ["--permission-mode", "dontAsk", "--permission-prompts", "none"]
        );
        assert!(ro.tools.is_empty());
        let ww = (profile.permissions)(Sandbox::WorkspaceWrite);
        assert_eq!(ww.flags[..2], ["--permission-mode", "acceptEdits"]);
        let tools: Vec<String> = ww.tools.iter().map(|t| t.to_string()).collect();
        let argv = (profile.argv)("p", None, &tools);
        assert_eq!(argv[6..], ["--allowedTools", "Bash,Edit,Write,MultiEdit,NotebookEdit"]);
        for mode in [Sandbox::ReadOnly, Sandbox::WorkspaceWrite, Sandbox::Full] {
            let flags = (profile.permissions)(mode).flags;
            // Works as root: nothing that needs IS_SANDBOX=1.
            assert!(!flags.iter().any(|f| f.contains("dangerously") || *f == "bypassPermissions"));
        }
        assert_eq!(profile.state[0].var, Some("CLAUDE_CONFIG_DIR"));
    }
}
