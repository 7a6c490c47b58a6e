//! Dispatch by agent: a task that names an agent instead of a command gets the
//! agent's argv and stream adapter from the registry's profiles (or `[agents.NAME]`), and every
//! unit gets its delegation depth — refused inside a `leaf` child (an agent or a command), or at
//! `delegation.max_depth`, with one line and exit 2.

use hermes_ledger::DispatchSpec;
use hermes_registry::agent::{
    AgentRequest, CHILD_DEPTH_VAR, CHILD_ROLE_VAR, adapter_by_name, command_for, depth_for_dispatch,
};
use hermes_settings::Settings;

use crate::services::exit::{Code, fail};
use crate::services::home::env_var;

/// The settings in force (`config.toml` and the environment), read for a dispatch.
pub fn settings() -> anyhow::Result<Settings> {
    let home = crate::services::config::home_dir(&env_var)?;
    crate::services::config::load(
        &home.join("config.toml"),
        crate::services::config::environment(),
    )
}

/// Whether `delegation.default_agent` is set (a goal without a command then runs it).
pub fn has_default_agent() -> bool {
    settings().is_ok_and(|s| s.delegation.default_agent.is_some())
}

/// The depth of a unit dispatched from this process, or why it may not dispatch: the stricter of
/// what its environment says (`HERMES_CHILD_*`) and what its lineage — the process tree and the
/// ledger, which no agent between them can strip — says (see `lineage.rs`).
fn depth_here(max_depth: u32) -> anyhow::Result<u32> {
    let refused =
        |refusal: hermes_registry::agent::DepthRefusal| fail(Code::Usage, refusal.to_string());
    let role = env_var(CHILD_ROLE_VAR);
    let depth = env_var(CHILD_DEPTH_VAR);
    let by_env =
        depth_for_dispatch(role.as_deref(), depth.as_deref(), max_depth).map_err(refused)?;
    let open_ledger = || {
        crate::services::home::Home::load()
            .and_then(|home| home.open_ledger())
            .ok()
    };
    let Some(enclosing) = crate::services::lineage::enclosing(open_ledger) else {
        return Ok(by_env);
    };
    let by_tree = depth_for_dispatch(
        Some(&enclosing.role),
        Some(&enclosing.depth.to_string()),
        max_depth,
    )
    .map_err(refused)?;
    Ok(by_env.max(by_tree))
}

/// Gives `spec` its depth and each agent task its argv and adapter; checks forced adapters.
pub fn resolve(spec: &mut DispatchSpec, settings: &Settings) -> anyhow::Result<()> {
    let max_depth = settings.delegation.max_depth;
    spec.depth = depth_here(max_depth)?;
    let path = std::env::var_os("PATH");
    let batch = spec.tasks.len() > 1;
    for (i, task) in spec.tasks.iter_mut().enumerate() {
        let at = |e: hermes_registry::agent::AgentError| {
            let text = if batch {
                format!("tasks[{i}]: {e}")
            } else {
                e.to_string()
            };
            fail(Code::Usage, text)
        };
        if let Some(adapter) = &task.adapter {
            adapter_by_name(adapter).map_err(at)?;
        }
        let Some(agent) = task.agent.clone() else {
            continue;
        };
        if !task.command.is_empty() {
            continue;
        }
        let request = AgentRequest {
            agent: &agent,
            goal: &task.goal,
            context: task.context.as_deref(),
            toolsets: &task.toolsets,
            role: task.role,
            model: task.model.as_deref(),
            depth: spec.depth,
            max_depth,
            sandbox: spec.sandbox.mode,
        };
        let command = command_for(&request, &settings.agents, path.as_deref()).map_err(at)?;
        task.command = command.argv;
        task.adapter.get_or_insert(command.adapter);
    }
    Ok(())
}
