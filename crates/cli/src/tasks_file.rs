//! The JSON tasks file of `--tasks FILE|-` (SPEC §8): unknown fields refused, empty lists,
//! goals and commands refused with the path of the bad field.

use ledger::{DeliveryMode, Role};
use serde::Deserialize;

use crate::exit::{Code, fail};

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

/// A tasks file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TasksFile {
    /// The children.
    pub tasks: Vec<TaskEntry>,
    /// `after_turn` or `inject`.
    #[serde(default)]
    pub delivery: Option<String>,
    /// A group name.
    #[serde(default)]
    pub group: Option<String>,
    /// The worker pool that runs the batch (SPEC §12).
    #[serde(default)]
    pub pool: Option<String>,
}

/// One child of a tasks file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskEntry {
    /// What it is for.
    pub goal: String,
    /// argv (empty when `agent` is given).
    #[serde(default)]
    pub command: Vec<String>,
    /// An agent profile to run on the goal instead of a command (SPEC §14).
    #[serde(default)]
    pub agent: Option<String>,
    /// The stream adapter that reads its stdout (`plain`, `claude`, `codex`, `gemini`).
    #[serde(default)]
    pub adapter: Option<String>,
    /// Context.
    #[serde(default)]
    pub context: Option<String>,
    /// Toolsets.
    #[serde(default)]
    pub toolsets: Vec<String>,
    /// `leaf` or `orchestrator`.
    #[serde(default)]
    pub role: Option<String>,
    /// Model.
    #[serde(default)]
    pub model: Option<String>,
}

/// Parses and checks a tasks file; `source` names it in errors.
pub fn parse(text: &str, source: &str) -> anyhow::Result<TasksFile> {
    let file: TasksFile = serde_json::from_str(text)
        .map_err(|e| fail(Code::Usage, format!("tasks file {source}: {e}")))?;
    check(file, &format!("tasks file {source}"))
}

/// Checks a batch however it arrived; `origin` starts each error (`tasks file t.json`).
pub fn check(file: TasksFile, origin: &str) -> anyhow::Result<TasksFile> {
    let bad = |field: String, what: &str| fail(Code::Usage, format!("{origin}: {field} {what}"));
    if file.tasks.is_empty() {
        return Err(bad("tasks".into(), "is empty; give at least one task"));
    }
    for (i, task) in file.tasks.iter().enumerate() {
        if task.goal.trim().is_empty() {
            return Err(bad(format!("tasks[{i}].goal"), "is empty"));
        }
        if task.agent.is_some() && !task.command.is_empty() {
            return Err(bad(
                format!("tasks[{i}]"),
                "has both command and agent; give one",
            ));
        }
        if task.agent.as_deref().is_some_and(|a| a.trim().is_empty()) {
            return Err(bad(format!("tasks[{i}].agent"), "is empty"));
        }
        if task.command.is_empty() && task.agent.is_none() {
            return Err(bad(
                format!("tasks[{i}].command"),
                "is empty; give the program and its arguments, or an agent",
            ));
        }
        if task.command.first().is_some_and(String::is_empty) {
            return Err(bad(format!("tasks[{i}].command[0]"), "is empty"));
        }
        if let Some(role) = &task.role
            && parse_role(role).is_none()
        {
            return Err(bad(
                format!("tasks[{i}].role"),
                "must be leaf or orchestrator",
            ));
        }
    }
    if let Some(delivery) = &file.delivery
        && parse_delivery(delivery).is_none()
    {
        return Err(bad("delivery".into(), "must be after_turn or inject"));
    }
    if let Some(pool) = &file.pool
        && ledger::check_pool_name(pool).is_err()
    {
        return Err(bad(
            "pool".into(),
            "must be 1 to 128 characters from A-Z a-z 0-9 . _ : -",
        ));
    }
    Ok(file)
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
