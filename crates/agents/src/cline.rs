//! Cline. Every fact here is from its hook reference,
//! <https://docs.cline.bot/features/hooks/hook-reference> (`docs/features/hooks/hook-reference.mdx`
//! in <https://github.com/cline/cline>), its hooks page,
//! <https://docs.cline.bot/customization/hooks>, and its CLI's MCP page,
//! <https://docs.cline.bot/cline-cli/mcp-servers>:
//!
//! - a hook is an executable **script named after its event** (`TaskStart`, `TaskResume`,
//!   `UserPromptSubmit`, `PostToolUse`, …, no extension) in `<workspace>/.clinerules/hooks/`
//!   or, for every project, `~/Documents/Cline/Rules/Hooks/` (the reference's "Hook Discovery";
//!   the overview page says `~/Documents/Cline/Hooks/`);
//! - every input is camelCase: `clineVersion`, `hookName`, `timestamp`, `taskId`,
//!   `workspaceRoots`, `userId`, and one object named after the event (`postToolUse`, …);
//! - the answer is the last JSON object on stdout: `{"cancel": false, "contextModification":
//!   …}` (at most 50 KB), injected into the conversation for the model's next request — after
//!   a tool (`PostToolUse`) and with a prompt (`UserPromptSubmit`); no JSON: the action
//!   proceeds;
//! - **a non-zero exit, invalid JSON or a timeout blocks the action**: a failing hermes
//!   therefore prints `{"cancel": false}` and exits 0, its one `hermes:` line on stderr;
//! - a task starts (`TaskStart`), resumes (`TaskResume`), is cancelled (`TaskCancel`, and can
//!   be resumed) or completes (`TaskComplete`, and the user may go on with it): no event ends
//!   a conversation for good, so its session ends by idleness and its results wait;
//! - the CLI's MCP servers are `mcpServers` of `.cline/mcp.json` (`{command, args, type:
//!   "stdio"}`); the VS Code extension keeps them in its MCP settings.

use crate::{
    Action, Agent, Answer, HookEvent, Hooks, Install, Place, Server, Start, StartRule, StopActive,
};

/// Cline.
pub const CLINE: Agent = Agent {
    name: "cline",
    title: "Cline",
    events: EVENTS,
    executables: &["cline"],
    script_markers: &[],
    // Cline keeps 50 KB of `contextModification`; in characters, with room for wide ones.
    budget: 12_000,
    mcp_budget: None,
    session_field: "taskId",
    subagent_field: None,
    event_field: "hookName",
    start: StartRule {
        field: Some("hookName"),
        resume: "TaskResume",
        fresh: &[],
        other: Start::Fresh,
    },
    stop_active: StopActive::Never,
    answer: Answer::ContextModification,
    install: Install {
        server: Server::Json {
            file: Place::both(&[".cline", "mcp.json"]),
            kind: Some("stdio"),
            all_tools: false,
        },
        hooks: Hooks::Scripts {
            dir: Place {
                project: &[".clinerules", "hooks"],
                user: Some(&["Documents", "Cline", "Rules", "Hooks"]),
                user_var: None,
            },
            title: "Cline",
        },
        print_note: "",
        advice: "turn hooks on in Cline's settings if they are off (the VS Code extension takes its MCP servers from its MCP settings: add `{quoted} mcp` there); Cline has no hook that ends a conversation, so its session ends when idle and its results wait for a resume",
    },
    child: None,
};

const EVENTS: &[HookEvent] = &[
    HookEvent::new("session-start", "TaskStart", Action::Start),
    HookEvent::new("session-start", "TaskResume", Action::Start),
    HookEvent::new("user-prompt-submit", "UserPromptSubmit", Action::TURN),
    HookEvent::new("post-tool-use", "PostToolUse", Action::TOOL),
];
