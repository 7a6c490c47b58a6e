//! From `delegate_task`'s parameters to the unit they describe, checked like the command
//! line's DISPATCH.

use std::time::Duration;

use hermes_settings::Bounds;

use super::params::{BatchTask, DelegateTask};
use crate::services::dispatch::draft::Draft;
use crate::services::dispatch::tasks_file::{self, Batch, TaskDraft};
use crate::services::exit::{Code, fail};

/// The unit `delegate_task`'s parameters describe, checked like the command line's DISPATCH.
pub fn spec(p: DelegateTask) -> anyhow::Result<hermes_ledger::DispatchSpec> {
    let mut draft = Draft {
        goal: p.goal,
        context: p.context,
        toolsets: p.toolsets.unwrap_or_default(),
        role: p.role.map(Into::into),
        model: p.model,
        delivery: p.result_delivery.map(Into::into),
        timeout: p.timeout_seconds.map(timeout).transpose()?,
        cwd: p.cwd.map(Into::into),
        group: None,
        pool: p.pool,
        workspace: p.workspace.map(Into::into),
        sandbox: p.sandbox.map(Into::into),
        network: p.network,
        door: crate::services::dispatch::sandbox::Door::Mcp,
        agent: p.agent,
        adapter: None,
        command: p.command.unwrap_or_default(),
        batch: None,
    };
    match p.tasks {
        Some(_) if !draft.command.is_empty() => {
            return Err(fail(
                Code::Usage,
                "delegate_task: give either command or tasks, not both",
            ));
        }
        Some(tasks) => {
            let tasks = tasks.into_iter().map(task).collect();
            draft.batch = Some(Batch {
                tasks: tasks_file::check(tasks, "delegate_task")?,
                ..Batch::default()
            });
        }
        None if draft.command.is_empty()
            && draft.agent.is_none()
            && (draft.goal.is_none()
                || !crate::services::dispatch::agents::has_default_agent()) =>
        {
            return Err(fail(
                Code::Usage,
                "delegate_task: give command (the program and its arguments), agent, or tasks",
            ));
        }
        None if draft.goal.is_none() => {
            return Err(fail(
                Code::Usage,
                "delegate_task: goal is required: say in one sentence what the child should accomplish",
            ));
        }
        None => {}
    }
    draft.build().map_err(|e| e.context("delegate_task"))
}

/// `timeout_seconds`, within the bounds of `--timeout` (0: the configured default).
fn timeout(seconds: f64) -> anyhow::Result<Duration> {
    let bounds = Bounds::TIMEOUT;
    if !bounds.admits(seconds) {
        return Err(fail(
            Code::Usage,
            format!("timeout_seconds {seconds} must be {}", bounds.expected()),
        ));
    }
    Ok(bounds.duration(seconds).unwrap_or_default())
}

fn task(t: BatchTask) -> TaskDraft {
    TaskDraft {
        goal: t.goal,
        command: t.command,
        agent: t.agent,
        adapter: None,
        context: t.context,
        toolsets: t.toolsets.unwrap_or_default(),
        role: t.role.map(Into::into),
        model: t.model,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_seconds_are_bounded_as_the_flag_is() {
        assert_eq!(timeout(0.0).expect("0 is off"), Duration::ZERO);
        assert_eq!(
            timeout(1.5).expect("in bounds"),
            Duration::from_millis(1500)
        );
        for bad in [-1.0, 0.05, 1e12] {
            let err = timeout(bad).expect_err("out of bounds").to_string();
            assert!(
                err.starts_with(&format!(
                    "timeout_seconds {bad} must be a number from 0.1 to "
                )),
                "{err}"
            );
        }
    }
}
