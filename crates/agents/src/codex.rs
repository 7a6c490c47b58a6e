//! Codex CLI. Its hooks have the groups shape ([`Layout::Groups`]); every fact of them is from its hooks page,
//! <https://developers.openai.com/codex/hooks>, the input and output schemas it publishes
//! (`codex-rs/hooks/schema/generated/*.schema.json` in <https://github.com/openai/codex>) and
//! its MCP page, <https://developers.openai.com/codex/mcp>:
//!
//! - hooks live in `hooks.json` (or an inline `[hooks]` table of `config.toml`) beside a
//!   config layer: `<repo>/.codex/hooks.json`, `~/.codex/hooks.json`; the shape is groups
//!   (event → groups → `{type: "command", command, timeout}`, the timeout in seconds); hooks
//!   run only in a project the user trusts, and on older releases only with
//!   `[features] codex_hooks = true`;
//! - the events are `SessionStart` (`source` `startup`|`resume`|`clear`), `UserPromptSubmit`,
//!   `PreToolUse`, `PermissionRequest`, `PostToolUse`, `Stop` (`stop_hook_active`), and the
//!   compaction ones; there is **no `SessionEnd`**: a Codex session ends by idleness;
//! - every input has `session_id`, `turn_id`, `cwd`, `hook_event_name`, `model`,
//!   `transcript_path`; `hookSpecificOutput.additionalContext` of `SessionStart`,
//!   `UserPromptSubmit` and `PostToolUse` is added to the model's context; `Stop` answers
//!   `{"decision":"block","reason":…}` to keep going; exit 2 blocks, other codes are errors
//!   Codex reports and goes on;
//! - MCP servers are `[mcp_servers.NAME]` tables (`command`, `args`, `env`) of `config.toml`.
//!
//! The injected context is small: Codex keeps far less of it than the 10,000 characters others keep (about 2,500
//! tokens, per issue 20's survey; the page names no number), so hermes fits answers to 2,500
//! characters and a long result is shortened with the way to read all of it.
//!
//! As a child: `codex exec --json [-m M] PROMPT`, whose stdout is JSONL thread events
//! ([`StreamFormat::ThreadItems`]). Codex has no per-tool allow-list, so toolsets are recorded
//! only. Format: <https://github.com/openai/codex/blob/main/docs/exec.md> and
//! `codex-rs/exec/src/exec_events.rs`.

use crate::{
    Action, Agent, Answer, ChildProfile, Entry, Permissions, Sandbox, StateDir, HookEvent, Hooks, Install, Layout, Place, Server,
    StartRule, StopActive, StreamFormat,
};

/// Codex CLI.
pub const CODEX: Agent = Agent {
    name: "codex",
    title: "Codex",
    events: EVENTS,
    executables: &["codex"],
    script_markers: &[],
    // Characters of one answer (see the module's documentation).
    budget: 2_500,
    session_field: "session_id",
    subagent_field: Some("agent_id"),
    event_field: "hook_event_name",
    start: StartRule::SOURCE,
    stop_active: StopActive::STOP_HOOK_ACTIVE,
    answer: Answer::AdditionalContext {
        stop_decision: "block",
    },
    install: Install {
        server: Server::Toml {
            file: Place::both(&[".codex", "config.toml"]),
        },
        hooks: Hooks::Json {
            file: Place::both(&[".codex", "hooks.json"]),
            local: None,
            layout: Layout::Groups,
            // Seconds Codex gives each hook.
            entry: Entry::typed("command", Some(("timeout", 10))),
            tool_matcher: None,
            versioned: false,
            enable_server: None,
        },
        print_note: "",
        advice: "trust the project when codex asks, so its hooks run (older codex releases also need [features] codex_hooks = true); Codex has no session-end hook, so a conversation's session ends when idle and its results wait for a resume",
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
];

fn argv(prompt: &str, model: Option<&str>, _tools: &[String]) -> Vec<String> {
    let mut argv: Vec<String> = vec!["codex".into(), "exec".into(), "--json".into()];
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
/// (codex's own sandbox for the commands it runs, set to the child's so the two agree) and
/// `--skip-git-repo-check` ("allow running Codex outside a Git repository": a child's working
/// directory need not be one).
fn permissions(sandbox: Sandbox) -> Permissions {
    let flags: &'static [&'static str] = match sandbox {
        Sandbox::ReadOnly => &["--sandbox", "read-only", "--skip-git-repo-check"],
        Sandbox::WorkspaceWrite => &["--sandbox", "workspace-write", "--skip-git-repo-check"],
        Sandbox::Full => &["--sandbox", "danger-full-access", "--skip-git-repo-check"],
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
            ["--sandbox", "read-only", "--skip-git-repo-check"]
        );
        assert_eq!(flags(Sandbox::WorkspaceWrite)[1], "workspace-write");
        assert_eq!(flags(Sandbox::Full)[1], "danger-full-access");
        assert_eq!(profile.state[0].var, Some("CODEX_HOME"));
    }
}
