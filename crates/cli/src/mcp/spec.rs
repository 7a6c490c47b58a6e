//! From `delegate_task`'s parameters to the unit they describe, checked like the command
//! line's DISPATCH.

use super::params::{BatchTask, DelegateTask, Delivery, Role};
use crate::args::{DeliveryArg, DispatchArgs, RoleArg};
use crate::exit::{Code, fail};
use crate::tasks_file::{self, TaskEntry, TasksFile};

/// The unit `delegate_task`'s parameters describe, checked like the command line's DISPATCH.
pub fn spec(p: DelegateTask) -> anyhow::Result<ledger::DispatchSpec> {
    let role = |r: Option<Role>| {
        r.map(|r| match r {
            Role::Leaf => RoleArg::Leaf,
            Role::Orchestrator => RoleArg::Orchestrator,
        })
    };
    let args = DispatchArgs {
        goal: p.goal,
        context: p.context,
        toolsets: p.toolsets.unwrap_or_default(),
        role: role(p.role),
        model: p.model,
        delivery: p.result_delivery.map(|d| match d {
            Delivery::AfterTurn => DeliveryArg::AfterTurn,
            Delivery::Inject => DeliveryArg::Inject,
        }),
        timeout: p
            .timeout_seconds
            .map(|t| {
                crate::args::timeout(&t.to_string())
                    .map_err(|why| fail(Code::Usage, format!("timeout_seconds {t} {why}")))
            })
            .transpose()?,
        cwd: p.cwd.map(Into::into),
        group: None,
        pool: p.pool,
        tasks: None,
        agent: p.agent,
        adapter: None,
        command: p.command.unwrap_or_default(),
    };
    let file = match p.tasks {
        Some(_) if !args.command.is_empty() => {
            return Err(fail(
                Code::Usage,
                "delegate_task: give either command or tasks, not both",
            ));
        }
        Some(tasks) => Some(tasks_file::check(
            TasksFile {
                tasks: tasks.into_iter().map(|t| entry(t, &role)).collect(),
                delivery: None,
                group: None,
                pool: None,
            },
            "delegate_task",
        )?),
        None if args.command.is_empty()
            && args.agent.is_none()
            && (args.goal.is_none() || !crate::agent_dispatch::has_default_agent()) =>
        {
            return Err(fail(
                Code::Usage,
                "delegate_task: give command (the program and its arguments), agent, or tasks",
            ));
        }
        None if args.goal.is_none() => {
            return Err(fail(
                Code::Usage,
                "delegate_task: goal is required: say in one sentence what the child should accomplish",
            ));
        }
        None => None,
    };
    crate::dispatch_args::build(&args, file).map_err(|e| e.context("delegate_task"))
}

fn entry(t: BatchTask, role: &dyn Fn(Option<Role>) -> Option<RoleArg>) -> TaskEntry {
    TaskEntry {
        goal: t.goal,
        command: t.command,
        agent: t.agent,
        adapter: None,
        context: t.context,
        toolsets: t.toolsets.unwrap_or_default(),
        role: role(t.role).map(|r| match r {
            RoleArg::Leaf => "leaf".to_owned(),
            RoleArg::Orchestrator => "orchestrator".to_owned(),
        }),
        model: t.model,
    }
}
