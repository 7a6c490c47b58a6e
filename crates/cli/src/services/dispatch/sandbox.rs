//! What a dispatch's children may do. The person sets the policy in `[sandbox]` (a default per
//! door, the widest the MCP tool may ask for, the network per kind of child) and `mcp.commands`;
//! a dispatch may name its own sandbox, and through MCP only within `sandbox.mcp_max`. A
//! sandbox this machine cannot enforce is refused before anything starts, never run wider in
//! silence.

use clap::builder::{PossibleValuesParser, TypedValueParser};
use hermes_ledger::{DispatchSpec, Role, Sandbox, SandboxMode};
use hermes_registry::sandbox::Policy;
use hermes_settings::Settings;

use crate::services::exit::{Code, fail};

/// `--sandbox`: `read-only`, `workspace-write` or `full`.
pub fn mode_parser() -> impl TypedValueParser<Value = SandboxMode> {
    PossibleValuesParser::new(SandboxMode::ALL.map(SandboxMode::as_str)).try_map(|text| {
        SandboxMode::parse(&text).ok_or("must be read-only, workspace-write or full")
    })
}

/// `--network`: `on` or `off`.
pub fn network_parser() -> impl TypedValueParser<Value = bool> {
    PossibleValuesParser::new(["on", "off"]).map(|text| text == "on")
}

/// The door a dispatch came through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Door {
    /// The command line, a tasks file, cron, a pool: `sandbox.default`, no ceiling.
    #[default]
    CommandLine,
    /// `delegate_task`: `sandbox.mcp_default`, at most `sandbox.mcp_max`, commands within
    /// `mcp.commands`.
    Mcp,
}

/// What a dispatch asked for.
#[derive(Clone, Copy, Debug)]
pub struct Asked {
    /// Its mode, if it named one.
    pub mode: Option<SandboxMode>,
    /// Its network, if it named it.
    pub network: Option<bool>,
    /// The door.
    pub door: Door,
}

/// The sandbox of `spec` as `asked` within `settings`; refused (exit 2 / a tool error, one
/// line naming the setting) when it is wider than the door allows, runs a command the MCP tool
/// may not, or cannot be enforced here.
pub fn choose(asked: &Asked, spec: &DispatchSpec, settings: &Settings) -> anyhow::Result<Sandbox> {
    let s = &settings.sandbox;
    let named = |name: &str| SandboxMode::parse(name).unwrap_or_default();
    let default = match asked.door {
        Door::CommandLine => named(s.default),
        Door::Mcp => named(s.mcp_default),
    };
    let mut mode = asked.mode.unwrap_or(default);
    if asked.door == Door::Mcp {
        let max = named(s.mcp_max);
        if asked.mode.is_some_and(|m| m > max) {
            return Err(fail(
                Code::Usage,
                format!(
                    "sandbox {mode} is wider than this person allows delegate_task (sandbox.mcp_max = {max})"
                ),
            ));
        }
        // A default wider than the ceiling is held to it.
        mode = mode.min(max);
        check_commands(spec, &settings.mcp_commands)?;
    }
    let sandbox = Sandbox {
        mode,
        commands_network: asked.network.unwrap_or(s.network_commands),
        agents_network: asked.network.unwrap_or(s.network_agents),
    };
    check_enforceable(sandbox, spec)?;
    Ok(sandbox)
}

/// Refuses a plain command whose program `mcp.commands` does not list.
fn check_commands(
    spec: &DispatchSpec,
    allowed: &hermes_settings::McpCommands,
) -> anyhow::Result<()> {
    for task in spec.tasks.iter().filter(|t| t.agent.is_none()) {
        let Some(program) = task.command.first() else {
            continue;
        };
        if !allowed.allows(program) {
            return Err(fail(
                Code::Usage,
                format!(
                    "delegate_task may not run {program:?}: mcp.commands = {} in this person's config.toml",
                    allowed.shown()
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses a sandbox the kernel of this machine cannot enforce (a pool unit runs elsewhere:
/// its worker refuses it there, visibly, if it cannot).
fn check_enforceable(sandbox: Sandbox, spec: &DispatchSpec) -> anyhow::Result<()> {
    if spec.pool.is_some() {
        return Ok(());
    }
    let cwd = match &spec.cwd {
        Some(cwd) => std::path::PathBuf::from(cwd),
        None => std::env::current_dir().unwrap_or_else(|_| "/".into()),
    };
    // The children get this process's home: writable for an orchestrator, a read-only hole for
    // a leaf (which may need a mount namespace), as their spawn will confine them.
    let home = crate::services::config::home_dir(&crate::services::home::env_var).ok();
    for agent in [false, true] {
        for role in [Role::Leaf, Role::Orchestrator] {
            if !spec
                .tasks
                .iter()
                .any(|t| t.agent.is_some() == agent && t.role == role)
            {
                continue;
            }
            let home = home.iter().cloned().collect::<Vec<_>>();
            let (writable, read_only) = match role {
                Role::Orchestrator => (home, Vec::new()),
                Role::Leaf => (Vec::new(), home),
            };
            let policy = Policy {
                mode: sandbox.mode,
                network: sandbox.network(agent),
                writable,
                read_only,
            };
            hermes_registry::sandbox::check(&policy, &cwd)
                .map_err(|e| fail(Code::Usage, e.to_string()))?;
        }
    }
    Ok(())
}
