//! `hermes hook …`: the events an agent CLI's installed hooks run, and `hook install` /
//! `hook uninstall`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::agent_help;

#[derive(Debug, Subcommand)]
pub enum HookCommand {
    /// The conversation starts (or resumes): binds it to this agent process.
    SessionStart(HookEventArgs),
    /// Before the model reads a prompt: `after_turn` results as additional context.
    UserPromptSubmit(HookEventArgs),
    /// Before a tool call: notes a subagent starting, for an agent whose hooks say nothing
    /// else of who made a call.
    PreToolUse(HookEventArgs),
    /// After each tool call: `inject` results, behind the tool carrier, as additional context.
    PostToolUse(HookEventArgs),
    /// After a tool call that failed: as `post-tool-use`.
    PostToolUseFailure(HookEventArgs),
    /// The model wants to stop: blocks it once with the results that are ready.
    Stop(HookEventArgs),
    /// The conversation ends: stops its work and drops what it never received.
    SessionEnd(HookEventArgs),
    /// Registers `hermes mcp` and the hooks with an agent CLI.
    Install(HookInstallArgs),
    /// Removes what `hook install` wrote: only hermes' entries (the same `--user`/`--local`).
    Uninstall(HookInstallArgs),
}

#[derive(Debug, Args)]
pub struct HookEventArgs {
    // The agent CLI whose hook this is (the agents listed from the table).
    #[arg(
        long,
        default_value = hermes_agents::DEFAULT_HOOK_AGENT,
        value_name = "NAME",
        help = agent_help::hook()
    )]
    pub agent: String,
}

#[derive(Debug, Args)]
pub struct HookInstallArgs {
    // The agent CLI (the agents listed from the table).
    #[arg(value_name = "AGENT", help = agent_help::install())]
    pub agent: String,
    /// Print the settings instead of writing them.
    #[arg(long)]
    pub print: bool,
    /// The project directory whose agent settings are written (default: the current
    /// directory).
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// Write this binary's absolute path instead of `hermes` (found on PATH).
    #[arg(long)]
    pub absolute: bool,
    // Write the hooks into the agent's per-user, uncommitted project settings (the files listed
    // from the table), with the absolute path.
    #[arg(long, help = agent_help::local())]
    pub local: bool,
    /// Write the agent's user-level configuration (under your home directory) instead of the
    /// project's, where the agent has one.
    #[arg(long, conflicts_with = "local")]
    pub user: bool,
    /// The agent's own home, for an agent whose configuration lives there (default:
    /// `~/.hermes`; hermes' `HERMES_HOME` is hermes' own).
    #[arg(long, value_name = "DIR")]
    pub agent_home: Option<PathBuf>,
}
