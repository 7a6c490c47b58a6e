//! What to dispatch, however it was asked for: the DISPATCH options of the command line
//! (`Draft::from_args`, reading `--tasks`), or `delegate_task`'s parameters (`mcp::spec`), as
//! one typed `Draft`; `Draft::build` turns it into the `hermes_ledger::DispatchSpec` it describes.

use std::path::PathBuf;
use std::time::Duration;

use hermes_ledger::{DeliveryMode, DispatchSpec, Role, SandboxMode, TaskSpec, Workspace};

use crate::args::DispatchArgs;
use crate::services::dispatch::tasks_file::{self, Batch};
use crate::services::exit::{Code, fail};

/// A dispatch as asked for, before defaults, agents and checks of the whole.
#[derive(Clone, Debug, Default)]
pub struct Draft {
    /// What the unit is for (default: its one task's goal, or "N tasks").
    pub goal: Option<String>,
    /// Context passed along with the goal.
    pub context: Option<String>,
    /// Toolsets.
    pub toolsets: Vec<String>,
    /// The children's role (default: leaf).
    pub role: Option<Role>,
    /// The model the children use.
    pub model: Option<String>,
    /// When the result is delivered (default: the batch's, else after the turn).
    pub delivery: Option<DeliveryMode>,
    /// Wall-clock limit per child, its bounds checked; zero: the configured default.
    pub timeout: Option<Duration>,
    /// Working directory of the children.
    pub cwd: Option<PathBuf>,
    /// A group name for the unit.
    pub group: Option<String>,
    /// The worker pool that runs it.
    pub pool: Option<String>,
    /// Where each child works (default: the batch's, else `delegation.workspace`).
    pub workspace: Option<Workspace>,
    /// What each child may do (default: the batch's, else the door's default).
    pub sandbox: Option<SandboxMode>,
    /// Whether the children reach the network (default: `[sandbox]`'s, per kind of child).
    pub network: Option<bool>,
    /// The door it came through, whose defaults and ceiling apply.
    pub door: super::sandbox::Door,
    /// An agent to run on the goal instead of a command.
    pub agent: Option<String>,
    /// How to read the child's stdout.
    pub adapter: Option<String>,
    /// The one command to run (ignored when `batch` is given).
    pub command: Vec<String>,
    /// A batch, checked, run instead of `command`.
    pub batch: Option<Batch>,
}

/// `--cwd`, checked to be a directory, made absolute.
fn absolute_cwd(cwd: Option<&PathBuf>) -> anyhow::Result<Option<String>> {
    match cwd {
        Some(dir) if !dir.is_dir() => Err(fail(
            Code::Usage,
            format!("--cwd {}: not a directory", dir.display()),
        )),
        Some(dir) => Ok(Some(
            std::path::absolute(dir)
                .unwrap_or_else(|_| dir.clone())
                .display()
                .to_string(),
        )),
        None => Ok(None),
    }
}

/// The unit's workspace (`asked`, else `delegation.workspace`) and its children's working
/// directory: for a worktree, absolute and checked to be in a repository fit to branch from.
fn workspace_of(
    asked: Option<Workspace>,
    cwd: Option<String>,
    settings: &hermes_settings::Settings,
) -> anyhow::Result<(Workspace, Option<String>)> {
    let workspace = asked
        .or(Workspace::parse(settings.delegation.workspace))
        .unwrap_or_default();
    Ok(match workspace {
        Workspace::Worktree => (workspace, Some(super::workspace::repository_cwd(cwd)?)),
        Workspace::None => (workspace, cwd),
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

impl Draft {
    /// What the DISPATCH options ask for, reading and checking `--tasks`.
    pub fn from_args(args: &DispatchArgs) -> anyhow::Result<Draft> {
        let batch = match &args.tasks {
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
        Ok(Draft {
            goal: args.goal.clone(),
            context: args.context.clone(),
            toolsets: args.toolsets.clone(),
            role: args.role,
            model: args.model.clone(),
            delivery: args.delivery,
            timeout: args.timeout,
            cwd: args.cwd.clone(),
            group: args.group.clone(),
            pool: args.pool.clone(),
            workspace: args.workspace,
            sandbox: args.sandbox,
            network: args.network,
            door: super::sandbox::Door::CommandLine,
            agent: args.agent.clone(),
            adapter: args.adapter.clone(),
            command: args.command.clone(),
            batch,
        })
    }

    /// The unit the draft describes: its batch when given, else its agent or command.
    pub fn build(mut self) -> anyhow::Result<DispatchSpec> {
        let settings = crate::services::dispatch::agents::settings()?;
        // The bounds were checked; 0 means "the configured default".
        let timeout_ms = self
            .timeout
            .filter(|t| !t.is_zero())
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
        let cwd = absolute_cwd(self.cwd.as_ref())?;
        let batch = self.batch.take();
        let (workspace, cwd) = workspace_of(
            self.workspace.or(batch.as_ref().and_then(|b| b.workspace)),
            cwd,
            &settings,
        )?;
        let asked = super::sandbox::Asked {
            mode: self.sandbox.or(batch.as_ref().and_then(|b| b.sandbox)),
            network: self.network,
            door: self.door,
        };
        let batch_pool = batch.as_ref().and_then(|b| b.pool.clone());
        let pool = self.pool.clone().or(batch_pool);
        if let Some(pool) = &pool {
            hermes_ledger::check_pool_name(pool).map_err(|e| fail(Code::Usage, e.to_string()))?;
        }
        let role = self.role.unwrap_or_default();
        let (tasks, batch_delivery, batch_group) = match batch {
            Some(batch) => {
                let tasks = batch
                    .tasks
                    .into_iter()
                    .map(|t| TaskSpec {
                        goal: t.goal,
                        command: t.command,
                        context: t.context.or_else(|| self.context.clone()),
                        toolsets: if t.toolsets.is_empty() {
                            self.toolsets.clone()
                        } else {
                            t.toolsets
                        },
                        role: t.role.unwrap_or(role),
                        model: t.model.or_else(|| self.model.clone()),
                        agent: t.agent,
                        adapter: t.adapter.or_else(|| self.adapter.clone()),
                    })
                    .collect();
                (tasks, batch.delivery, batch.group)
            }
            None => {
                if self.agent.is_some() && !self.command.is_empty() {
                    return Err(fail(
                        Code::Usage,
                        "give either --agent or a command after --, not both",
                    ));
                }
                // A goal without a command runs an agent: the one named, else the default one.
                let agent = match (&self.agent, &self.goal) {
                    (Some(agent), _) => Some(agent.clone()),
                    (None, Some(_)) if self.command.is_empty() => {
                        settings.delegation.default_agent.clone()
                    }
                    (None, _) => None,
                };
                let task = match agent {
                    Some(agent) => self.agent_task(agent)?,
                    None => self.command_task()?,
                };
                (vec![task], None, None)
            }
        };
        let goal = match (&self.goal, tasks.as_slice()) {
            (Some(goal), _) => goal.clone(),
            (None, [one]) => one.goal.clone(),
            (None, many) => format!("{} tasks", many.len()),
        };
        let mut spec = DispatchSpec {
            goal,
            context: self.context,
            toolsets: self.toolsets,
            role,
            model: self.model,
            delivery: self.delivery.or(batch_delivery).unwrap_or_default(),
            timeout_ms,
            cwd,
            group: self.group.or(batch_group),
            tasks,
            pool,
            depth: 1,
            workspace,
            sandbox: hermes_ledger::Sandbox::FULL,
        };
        spec.sandbox = super::sandbox::choose(&asked, &spec, &settings)?;
        crate::services::dispatch::agents::resolve(&mut spec, &settings)?;
        Ok(spec)
    }

    /// The one task of `--agent NAME --goal G` (or of a goal alone, with a default agent).
    fn agent_task(&self, agent: String) -> anyhow::Result<TaskSpec> {
        let goal = match &self.goal {
            Some(goal) if !goal.trim().is_empty() => goal.clone(),
            _ => {
                return Err(fail(
                    Code::Usage,
                    format!("--agent {agent} needs --goal: what the agent should do"),
                ));
            }
        };
        Ok(TaskSpec {
            context: self.context.clone(),
            toolsets: self.toolsets.clone(),
            role: self.role.unwrap_or_default(),
            model: self.model.clone(),
            agent: Some(agent),
            adapter: self.adapter.clone(),
            ..TaskSpec::new(goal, Vec::new())
        })
    }

    /// The one task of `-- COMMAND`.
    fn command_task(&self) -> anyhow::Result<TaskSpec> {
        if self.command.is_empty() {
            return Err(fail(
                Code::Usage,
                "nothing to run: give a command after --, an agent with --agent NAME --goal G (or set delegation.default_agent), or a tasks file with --tasks",
            ));
        }
        if self.command[0].is_empty() {
            return Err(fail(Code::Usage, "the command after -- is empty"));
        }
        let goal = match &self.goal {
            Some(goal) if goal.trim().is_empty() => {
                return Err(fail(Code::Usage, "--goal is empty"));
            }
            Some(goal) => goal.clone(),
            None => self.command.join(" "),
        };
        Ok(TaskSpec {
            context: self.context.clone(),
            toolsets: self.toolsets.clone(),
            role: self.role.unwrap_or_default(),
            model: self.model.clone(),
            adapter: self.adapter.clone(),
            ..TaskSpec::new(goal, self.command.clone())
        })
    }
}

/// Refuses (exit 2, one line) a unit that will run on this machine, as a session's unit does on
/// the session's host, when a task's program cannot be found where its child will look: on
/// `PATH`, from the unit's working directory. The spawn would fail the same way, only later.
/// A pool unit is not checked (a worker on another machine may have the program), nor an
/// inline run (`-z`, which reports a child that cannot start at once).
pub fn check_programs_here(spec: &DispatchSpec) -> anyhow::Result<()> {
    if spec.pool.is_some() {
        return Ok(());
    }
    let path = std::env::var_os("PATH");
    let cwd = spec.cwd.as_deref().map(std::path::Path::new);
    let batch = spec.tasks.len() > 1;
    for (i, task) in spec.tasks.iter().enumerate() {
        let Some(program) = task.command.first() else {
            continue;
        };
        if hermes_registry::spawn::resolve_program(program, path.as_deref(), cwd).is_some() {
            continue;
        }
        let place = match (program.contains('/'), cwd) {
            (false, _) => "on PATH".to_owned(),
            (true, Some(dir)) if !program.starts_with('/') => format!("in {}", dir.display()),
            (true, _) => "there".to_owned(),
        };
        let at = if batch {
            format!("tasks[{i}]: ")
        } else {
            String::new()
        };
        return Err(fail(
            Code::Usage,
            format!(
                "{at}cannot run {program:?}: no executable file of that name {place}; install it or give its path"
            ),
        ));
    }
    Ok(())
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
        let s = Draft::from_args(&args)
            .and_then(Draft::build)
            .expect("spec");
        assert_eq!(s.goal, "echo hi");
        assert_eq!(s.tasks[0].goal, "echo hi");
        assert_eq!(s.timeout_ms, Some(1500));
    }

    #[test]
    fn nothing_to_run_is_a_usage_error() {
        let err = Draft::default().build().expect_err("refused");
        assert_eq!(crate::services::exit::code_of(&err), Code::Usage);
    }

    #[test]
    fn a_batch_task_keeps_its_own_role_and_the_rest_come_from_the_draft() {
        let batch = Batch {
            tasks: vec![
                tasks_file::TaskDraft {
                    goal: "a".into(),
                    command: vec!["echo".into(), "a".into()],
                    role: Some(Role::Leaf),
                    ..Default::default()
                },
                tasks_file::TaskDraft {
                    goal: "b".into(),
                    command: vec!["echo".into(), "b".into()],
                    ..Default::default()
                },
            ],
            delivery: Some(DeliveryMode::Inject),
            ..Batch::default()
        };
        let s = Draft {
            role: Some(Role::Orchestrator),
            model: Some("m".into()),
            batch: Some(batch),
            ..Draft::default()
        }
        .build()
        .expect("spec");
        assert_eq!(s.goal, "2 tasks");
        assert_eq!(s.delivery, DeliveryMode::Inject);
        let roles: Vec<Role> = s.tasks.iter().map(|t| t.role).collect();
        assert_eq!(roles, [Role::Leaf, Role::Orchestrator]);
        assert_eq!(s.tasks[1].model.as_deref(), Some("m"));
    }
}
