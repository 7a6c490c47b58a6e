//! Codex CLI. Its hooks have the groups shape ([`Layout::Groups`]); the facts of them are from its
//! hooks page, <https://developers.openai.com/codex/hooks>, the input and output schemas it
//! publishes (`codex-rs/hooks/schema/generated/*.schema.json` in
//! <https://github.com/openai/codex>) and its MCP page, <https://developers.openai.com/codex/mcp>,
//! each checked against Codex CLI 0.171.0 (the npm package `@openai/codex`, whose native binary
//! is `codex-linux-x64/vendor/*/bin/codex`; `codex exec --help`) by the tests driving it
//! (`crates/cli/tests/it/real/codex.rs`):
//!
//! - hooks live in `hooks.json` beside a config layer: `<repo>/.codex/hooks.json`,
//!   `$CODEX_HOME/hooks.json` (`~/.codex` when `CODEX_HOME` is unset, which also holds
//!   `config.toml`); the shape is groups (event → groups → `{type: "command", command,
//!   timeout}`, the timeout in seconds, `SessionEnd`'s clamped to 3);
//! - two trusts stand before them, and both fail silently in `codex exec`: a project's
//!   `.codex/` is read only in a trusted project (`codex exec --trust`, or the prompt of an
//!   interactive `codex`; else a warning on stderr), and every hook needs its own review
//!   (`/hooks` in an interactive `codex`, persisted per command: a moved binary or an
//!   `--absolute` path is a new command to review) — unreviewed hooks are skipped without a word
//!   (`--dangerously-bypass-hook-trust` runs them for one invocation);
//! - the events are `SessionStart` (`source` `startup`|`resume`|`clear`), `UserPromptSubmit`,
//!   `PreToolUse`, `PermissionRequest`, `PostToolUse`, `Stop` (`stop_hook_active`),
//!   `SessionEnd` (`codex exec` fires it at exit, reason `other`), and the compaction ones;
//! - every input has `session_id`, `cwd`, `hook_event_name`, `model`, `transcript_path`;
//!   `hookSpecificOutput.additionalContext` of `SessionStart`, `UserPromptSubmit` and
//!   `PostToolUse` is added to the model's context; `Stop` answers
//!   `{"decision":"block","reason":…}` to keep going; exit 2 blocks, other codes are errors
//!   Codex reports and goes on;
//! - MCP servers are `[mcp_servers.NAME]` tables (`command`, `args`, `env`) of `config.toml`; a
//!   server gets only a fixed few variables (PATH, HOME, …) and those `env_vars` lists; its
//!   tools reach the model as one `namespace` tool, `mcp__hermes`; `codex exec` refuses an MCP
//!   tool call that needs approval ("approval policy is never") unless the server's
//!   `default_tools_approval_mode` is `approve`.
//!
//! Budgets. The injected context is small: Codex keeps far less of a hook's context than the
//! 10,000 characters others keep (about 2,500 tokens, per issue 20's survey), so hermes fits hook
//! answers to 2,500 characters. An MCP tool's answer, for a model without an entry in Codex's
//! catalog, is cut to about 12,000 bytes (its head and tail, the middle replaced by
//! `…N tokens truncated…`; measured with a 30,000-character answer), so MCP answers are fitted
//! to 8,000 characters, which stays under that with room for multi-byte characters.
//!
//! As a child: `codex exec --json --skip-git-repo-check [-m M] PROMPT` (outside a git
//! repository codex refuses to run without the flag), whose stdout is JSONL thread events
//! ([`StreamFormat::ThreadItems`]). Codex has no per-tool allow-list, so toolsets are recorded
//! only. Format: <https://github.com/openai/codex/blob/main/docs/exec.md> and
//! `codex-rs/exec/src/exec_events.rs`.

use crate::{
    Action, Agent, Answer, ChildProfile, Entry, HomeVar, HookEvent, Hooks, Install, Layout,
    Permissions, Place, Sandbox, Server, StartRule, StateDir, StopActive, StopAnswer, StreamFormat,
};

/// `CODEX_HOME`, when set, is the directory codex reads instead of `~/.codex`.
const CODEX_HOME: &[HomeVar] = &[HomeVar::dir("CODEX_HOME")];

/// Codex CLI.
pub const CODEX: Agent = Agent {
    name: "codex",
    title: "Codex",
    events: EVENTS,
    executables: &["codex"],
    script_markers: &[],
    // Characters of one answer (see the module's documentation).
    budget: 2_500,
    // Its MCP tools reach the model as one namespace tool, `mcp__hermes`.
    result_tool: "delegation_result (namespace mcp__hermes)",
    mcp_budget: Some(8_000),
    session_field: "session_id",
    subagent_field: Some("agent_id"),
    event_field: "hook_event_name",
    start: StartRule::SOURCE,
    stop_active: StopActive::STOP_HOOK_ACTIVE,
    answer: Answer::AdditionalContext {
        stop: StopAnswer::Decision("block"),
    },
    discard: crate::Discard::NEVER,
    install: Install {
        server: Server::Toml {
            file: Place::both(&[".codex", "config.toml"]).moved_by(CODEX_HOME),
            env_list: Some("env_vars"),
            settings: &[("default_tools_approval_mode", "approve")],
        },
        hooks: Hooks::Json {
            file: Place::both(&[".codex", "hooks.json"]).moved_by(CODEX_HOME),
            local: None,
            layout: Layout::Groups,
            // Seconds Codex gives each hook.
            entry: Entry::typed("command", Some(("timeout", 10))),
            tool_matcher: None,
            versioned: false,
            enable_server: None,
        },
        print_note: "",
        advice: "codex skips these hooks without a word until you review them: run `codex` in {project}, trust the project when it asks (`codex exec --trust` does it too), type /hooks and trust each hermes hook; review them again after moving hermes or installing with --absolute (a new command is a new hook to review)",
    },
    child: Some(ChildProfile {
        program: "codex",
        argv,
        streams,
        toolset: |_| &[],
        stream: StreamFormat::ThreadItems,
        own_home: None,
        not_self: false,
        permissions,
        state: STATE,
    }),
};

const EVENTS: &[HookEvent] = &[
    HookEvent::new("session-start", "SessionStart", Action::Start),
    HookEvent::new("user-prompt-submit", "UserPromptSubmit", Action::TURN),
    HookEvent::new("post-tool-use", "PostToolUse", Action::TOOL),
    HookEvent::new("stop", "Stop", Action::Stop),
    // Codex gives a session end's hooks 3 seconds at most.
    HookEvent::new("session-end", "SessionEnd", Action::End).timeout_at_most(3),
];

fn argv(prompt: &str, model: Option<&str>, _tools: &[String]) -> Vec<String> {
    let mut argv: Vec<String> = ["codex", "exec", "--json", "--skip-git-repo-check"]
        .map(String::from)
        .to_vec();
    if let Some(model) = model {
        argv.extend(["-m".to_owned(), model.to_owned()]);
    }
    argv.push(prompt.to_owned());
    argv
}

fn streams(args: &[String]) -> bool {
    args.first().is_some_and(|a| a == "exec" || a == "e")
        && args
            .iter()
            .any(|a| a == "--json" || a == "--experimental-json")
}

/// Its permission flags, from `codex exec --help` of the pinned 0.171.0
/// (`tests/agents/package.json`): `--sandbox read-only|workspace-write|danger-full-access`
/// (codex's own sandbox for the commands it runs, set to the child's so the two agree). Its
/// `--skip-git-repo-check` is in every argv (a child's working directory need not be a
/// repository).
fn permissions(sandbox: Sandbox) -> Permissions {
    let flags: &'static [&'static str] = match sandbox {
        Sandbox::ReadOnly => &["--sandbox", "read-only"],
        Sandbox::WorkspaceWrite => &["--sandbox", "workspace-write"],
        Sandbox::Full => &["--sandbox", "danger-full-access"],
    };
    Permissions { flags, tools: &[] }
}

/// Its state: `$CODEX_HOME`, by default `~/.codex`.
const STATE: &[StateDir] = &[StateDir {
    var: Some("CODEX_HOME"),
    home: ".codex",
        file: false,
}];

#[cfg(test)]
mod tests {

    #[test]
    fn permissions_set_codex_own_sandbox_to_the_childs() {
        use crate::{Sandbox, child};
        let (_, profile) = child("codex").expect("profile");
        let flags = |s| (profile.permissions)(s).flags;
        assert_eq!(
            flags(Sandbox::ReadOnly),
            ["--sandbox", "read-only"]
        );
        assert_eq!(flags(Sandbox::WorkspaceWrite)[1], "workspace-write");
        assert_eq!(flags(Sandbox::Full)[1], "danger-full-access");
        assert_eq!(profile.state[0].var, Some("CODEX_HOME"));
    }
}
