//! The JSON tasks file of `--tasks FILE|-`: unknown fields refused, empty lists,
//! goals and commands refused with the path of the bad field. Its roles and delivery mode are
//! read here, once, into the ledger's types.

use hermes_ledger::{DeliveryMode, Role};
use serde::Deserialize;

use crate::services::exit::{Code, fail};

/// `leaf` / `orchestrator`.
pub fn parse_role(text: &str) -> Option<Role> {
    match text {
        "leaf" => Some(Role::Leaf),
        "orchestrator" => Some(Role::Orchestrator),
        _ => None,
    }
}

/// `after_turn` (or `after-turn`, as the flag is often typed) / `inject`.
pub fn parse_delivery(text: &str) -> Option<DeliveryMode> {
    match text {
        "after_turn" | "after-turn" => Some(DeliveryMode::AfterTurn),
        "inject" => Some(DeliveryMode::Inject),
        _ => None,
    }
}

/// A batch, checked: a tasks file's, or `delegate_task`'s `tasks`.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    /// The children (at least one).
    pub tasks: Vec<TaskDraft>,
    /// When the result is delivered.
    pub delivery: Option<DeliveryMode>,
    /// A group name.
    pub group: Option<String>,
    /// The worker pool that runs the batch.
    pub pool: Option<String>,
    /// Where its children work.
    pub workspace: Option<hermes_ledger::Workspace>,
    /// What its children may do.
    pub sandbox: Option<hermes_ledger::SandboxMode>,
}

/// One child of a batch; what it leaves out comes from the dispatch around it.
#[derive(Clone, Debug, Default)]
pub struct TaskDraft {
    /// What it is for.
    pub goal: String,
    /// argv (empty when `agent` is given).
    pub command: Vec<String>,
    /// An agent profile to run on the goal instead of a command.
    pub agent: Option<String>,
    /// The stream adapter that reads its stdout (`plain`, or an agent's name).
    pub adapter: Option<String>,
    /// Context.
    pub context: Option<String>,
    /// Toolsets.
    pub toolsets: Vec<String>,
    /// Its role.
    pub role: Option<Role>,
    /// Model.
    pub model: Option<String>,
}

/// A tasks file, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TasksFile {
    tasks: Vec<TaskEntry>,
    /// `after_turn` or `inject`.
    #[serde(default)]
    delivery: Option<String>,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    pool: Option<String>,
    /// `none` or `worktree`.
    #[serde(default)]
    workspace: Option<String>,
    /// `read-only`, `workspace-write` or `full`.
    #[serde(default)]
    sandbox: Option<String>,
}

/// One child of a tasks file, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskEntry {
    goal: String,
    #[serde(default)]
    command: Vec<String>,
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    adapter: Option<String>,
    #[serde(default)]
    context: Option<String>,
    #[serde(default)]
    toolsets: Vec<String>,
    /// `leaf` or `orchestrator`.
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    model: Option<String>,
}

/// A refusal of one field: its path and what is wrong with it.
type Bad = (String, &'static str);

/// Parses and checks a tasks file; `source` names it in errors.
pub fn parse(text: &str, source: &str) -> anyhow::Result<Batch> {
    let file: TasksFile = serde_json::from_str(text)
        .map_err(|e| fail(Code::Usage, format!("tasks file {source}: {e}")))?;
    let origin = format!("tasks file {source}");
    read(file).map_err(|(field, what)| refusal(&origin, &field, what))
}

/// Checks a batch's tasks however they arrived; `origin` starts each error (`delegate_task`).
pub fn check(tasks: Vec<TaskDraft>, origin: &str) -> anyhow::Result<Vec<TaskDraft>> {
    check_tasks(&tasks).map_err(|(field, what)| refusal(origin, &field, what))?;
    Ok(tasks)
}

fn check_tasks(tasks: &[TaskDraft]) -> Result<(), Bad> {
    some_tasks(tasks)?;
    for (i, task) in tasks.iter().enumerate() {
        check_task(i, task)?;
    }
    Ok(())
}

fn refusal(origin: &str, field: &str, what: &str) -> anyhow::Error {
    fail(Code::Usage, format!("{origin}: {field} {what}"))
}

/// The file's values, typed, each checked in the order it is written.
fn read(file: TasksFile) -> Result<Batch, Bad> {
    some_tasks(&file.tasks)?;
    let mut tasks = Vec::with_capacity(file.tasks.len());
    for (i, entry) in file.tasks.into_iter().enumerate() {
        let mut task = TaskDraft {
            goal: entry.goal,
            command: entry.command,
            agent: entry.agent,
            adapter: entry.adapter,
            context: entry.context,
            toolsets: entry.toolsets,
            role: None,
            model: entry.model,
        };
        check_task(i, &task)?;
        if let Some(role) = &entry.role {
            let role = parse_role(role)
                .ok_or_else(|| (format!("tasks[{i}].role"), "must be leaf or orchestrator"))?;
            task.role = Some(role);
        }
        tasks.push(task);
    }
    let delivery = match &file.delivery {
        Some(delivery) => Some(
            parse_delivery(delivery)
                .ok_or_else(|| ("delivery".to_owned(), "must be after_turn or inject"))?,
        ),
        None => None,
    };
    if let Some(pool) = &file.pool
        && hermes_ledger::check_pool_name(pool).is_err()
    {
        return Err((
            "pool".into(),
            "must be 1 to 128 characters from A-Z a-z 0-9 . _ : -",
        ));
    }
    let workspace = match &file.workspace {
        Some(workspace) => Some(
            hermes_ledger::Workspace::parse(workspace)
                .ok_or_else(|| ("workspace".to_owned(), "must be none or worktree"))?,
        ),
        None => None,
    };
    let sandbox = match &file.sandbox {
        Some(mode) => Some(hermes_ledger::SandboxMode::parse(mode).ok_or_else(|| {
            (
                "sandbox".to_owned(),
                "must be read-only, workspace-write or full",
            )
        })?),
        None => None,
    };
    Ok(Batch {
        tasks,
        delivery,
        group: file.group,
        pool: file.pool,
        workspace,
        sandbox,
    })
}

fn some_tasks<T>(tasks: &[T]) -> Result<(), Bad> {
    if tasks.is_empty() {
        return Err(("tasks".into(), "is empty; give at least one task"));
    }
    Ok(())
}

/// The checks of the `i`th task's goal, command and agent.
fn check_task(i: usize, task: &TaskDraft) -> Result<(), Bad> {
    if task.goal.trim().is_empty() {
        return Err((format!("tasks[{i}].goal"), "is empty"));
    }
    if task.agent.is_some() && !task.command.is_empty() {
        return Err((
            format!("tasks[{i}]"),
            "has both command and agent; give one",
        ));
    }
    if task.agent.as_deref().is_some_and(|a| a.trim().is_empty()) {
        return Err((format!("tasks[{i}].agent"), "is empty"));
    }
    if task.command.is_empty() && task.agent.is_none() {
        return Err((
            format!("tasks[{i}].command"),
            "is empty; give the program and its arguments, or an agent",
        ));
    }
    if task.command.first().is_some_and(String::is_empty) {
        return Err((format!("tasks[{i}].command[0]"), "is empty"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_good_file_parses() {
        let f = parse(
            r#"{"tasks":[{"goal":"a","command":["echo","a"],"toolsets":["x"],"role":"orchestrator"}],"delivery":"inject","group":"g"}"#,
            "t.json",
        )
        .expect("parses");
        assert_eq!(f.tasks.len(), 1);
        assert_eq!(f.group.as_deref(), Some("g"));
        assert_eq!(f.tasks[0].role, Some(Role::Orchestrator));
        assert_eq!(f.delivery, Some(DeliveryMode::Inject));
    }

    #[test]
    fn bad_fields_are_named() {
        let cases = [
            (r#"{"tasks":[]}"#, "tasks is empty"),
            (
                r#"{"tasks":[{"goal":"a","command":["x"]},{"goal":"b","command":[]}]}"#,
                "tasks[1].command",
            ),
            (
                r#"{"tasks":[{"goal":" ","command":["x"]}]}"#,
                "tasks[0].goal",
            ),
            (
                r#"{"tasks":[{"goal":"a","command":["x"],"colour":1}]}"#,
                "unknown field `colour`",
            ),
            (
                r#"{"tasks":[{"goal":"a","command":["x"],"role":"boss"}]}"#,
                "tasks[0].role",
            ),
        ];
        for (text, expected) in cases {
            let err = parse(text, "t.json").expect_err(text).to_string();
            assert!(err.contains(expected), "{err} should name {expected}");
        }
    }
}
