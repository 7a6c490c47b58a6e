//! DISPATCH options and tasks files turned into a `ledger::DispatchSpec`.

use ledger::{DeliveryMode, DispatchSpec, Role, TaskSpec};

use crate::args::{DeliveryArg, DispatchArgs, RoleArg};
use crate::exit::{Code, fail};
use crate::tasks_file::{self, TasksFile, parse_delivery, parse_role};

fn role(arg: Option<RoleArg>) -> Role {
    match arg {
        Some(RoleArg::Orchestrator) => Role::Orchestrator,
        _ => Role::Leaf,
    }
}

fn delivery(arg: Option<DeliveryArg>) -> Option<DeliveryMode> {
    arg.map(|d| match d {
        DeliveryArg::AfterTurn => DeliveryMode::AfterTurn,
        DeliveryArg::Inject => DeliveryMode::Inject,
    })
}

/// Reads `--tasks` (a path, or `-` for stdin).
fn read_tasks(source: &str) -> anyhow::Result<String> {
    if source == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map_err(|e| {
            fail(
                Code::Usage,
                format!("cannot read the tasks file from stdin: {e}"),
            )
        })?;
        Ok(text)
    } else {
        std::fs::read_to_string(source)
            .map_err(|e| fail(Code::Usage, format!("cannot read tasks file {source}: {e}")))
    }
}

/// The unit the options describe (reading `--tasks`).
pub fn spec(args: &DispatchArgs) -> anyhow::Result<DispatchSpec> {
    let file = match &args.tasks {
        Some(source) => {
            if !args.command.is_empty() {
                return Err(fail(
                    Code::Usage,
                    "give either --tasks or a command after --, not both",
                ));
            }
            Some(tasks_file::parse(&read_tasks(source)?, source)?)
        }
        None => None,
    };
    build(args, file)
}

/// The unit the options describe, with the batch `file` (already checked) instead of
/// `args.command` when given.
pub fn build(args: &DispatchArgs, file: Option<TasksFile>) -> anyhow::Result<DispatchSpec> {
    let settings = crate::agent_dispatch::settings()?;
    // clap checked the bounds; 0 means "the configured default".
    let timeout_ms = args
        .timeout
        .filter(|t| !t.is_zero())
        .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
    let cwd = match &args.cwd {
        Some(dir) if !dir.is_dir() => {
            return Err(fail(
                Code::Usage,
                format!("--cwd {}: not a directory", dir.display()),
            ));
        }
        Some(dir) => Some(
            std::path::absolute(dir)
                .unwrap_or_else(|_| dir.clone())
                .display()
                .to_string(),
        ),
        None => None,
    };
    let file_pool = file.as_ref().and_then(|f| f.pool.clone());
    let pool = args.pool.clone().or(file_pool);
    if let Some(pool) = &pool {
        ledger::check_pool_name(pool).map_err(|e| fail(Code::Usage, e.to_string()))?;
    }
    let (tasks, file_delivery, file_group) = match file {
        Some(file) => {
            let tasks = file
                .tasks
                .into_iter()
                .map(|t| TaskSpec {
                    goal: t.goal,
                    command: t.command,
                    context: t.context.or_else(|| args.context.clone()),
                    toolsets: if t.toolsets.is_empty() {
                        args.toolsets.clone()
                    } else {
                        t.toolsets
                    },
                    role: t
                        .role
                        .as_deref()
                        .and_then(parse_role)
                        .unwrap_or(role(args.role)),
                    model: t.model.or_else(|| args.model.clone()),
                    agent: t.agent,
                    adapter: t.adapter.or_else(|| args.adapter.clone()),
                })
                .collect();
            (
                tasks,
                file.delivery.as_deref().and_then(parse_delivery),
                file.group,
            )
        }
        None => {
            if args.agent.is_some() && !args.command.is_empty() {
                return Err(fail(
                    Code::Usage,
                    "give either --agent or a command after --, not both",
                ));
            }
            // A goal without a command runs an agent: the one named, else the default one.
            let agent = match (&args.agent, &args.goal) {
                (Some(agent), _) => Some(agent.clone()),
                (None, Some(_)) if args.command.is_empty() => {
                    settings.delegation.default_agent.clone()
                }
                (None, _) => None,
            };
            if let Some(agent) = agent {
                let goal = match &args.goal {
                    Some(goal) if !goal.trim().is_empty() => goal.clone(),
                    _ => {
                        return Err(fail(
                            Code::Usage,
                            format!("--agent {agent} needs --goal: what the agent should do"),
                        ));
                    }
                };
                let task = TaskSpec {
                    context: args.context.clone(),
                    toolsets: args.toolsets.clone(),
                    role: role(args.role),
                    model: args.model.clone(),
                    agent: Some(agent),
                    adapter: args.adapter.clone(),
                    ..TaskSpec::new(goal, Vec::new())
                };
                (vec![task], None, None)
            } else {
                single_command(args)?
            }
        }
    };
    let goal = match (&args.goal, tasks.as_slice()) {
        (Some(goal), _) => goal.clone(),
        (None, [one]) => one.goal.clone(),
        (None, many) => format!("{} tasks", many.len()),
    };
    let mut spec = DispatchSpec {
        goal,
        context: args.context.clone(),
        toolsets: args.toolsets.clone(),
        role: role(args.role),
        model: args.model.clone(),
        delivery: delivery(args.delivery)
            .or(file_delivery)
            .unwrap_or_default(),
        timeout_ms,
        cwd,
        group: args.group.clone().or(file_group),
        tasks,
        pool,
        depth: 1,
    };
    crate::agent_dispatch::resolve(&mut spec, &settings)?;
    Ok(spec)
}

type Draft = (Vec<TaskSpec>, Option<DeliveryMode>, Option<String>);

/// The one task of `-- COMMAND`.
fn single_command(args: &DispatchArgs) -> anyhow::Result<Draft> {
    if args.command.is_empty() {
        return Err(fail(
            Code::Usage,
            "nothing to run: give a command after --, an agent with --agent NAME --goal G (or set delegation.default_agent), or a tasks file with --tasks",
        ));
    }
    if args.command[0].is_empty() {
        return Err(fail(Code::Usage, "the command after -- is empty"));
    }
    let goal = match &args.goal {
        Some(goal) if goal.trim().is_empty() => {
            return Err(fail(Code::Usage, "--goal is empty"));
        }
        Some(goal) => goal.clone(),
        None => args.command.join(" "),
    };
    let task = TaskSpec {
        context: args.context.clone(),
        toolsets: args.toolsets.clone(),
        role: role(args.role),
        model: args.model.clone(),
        adapter: args.adapter.clone(),
        ..TaskSpec::new(goal, args.command.clone())
    };
    Ok((vec![task], None, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_goal_defaults_to_the_command_line() {
        let args = DispatchArgs {
            command: vec!["echo".into(), "hi".into()],
            timeout: Some(std::time::Duration::from_millis(1500)),
            ..DispatchArgs::default()
        };
        let s = spec(&args).expect("spec");
        assert_eq!(s.goal, "echo hi");
        assert_eq!(s.tasks[0].goal, "echo hi");
        assert_eq!(s.timeout_ms, Some(1500));
    }

    #[test]
    fn nothing_to_run_is_a_usage_error() {
        let err = spec(&DispatchArgs::default()).expect_err("refused");
        assert_eq!(crate::exit::code_of(&err), Code::Usage);
    }
}
