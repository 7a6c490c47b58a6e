//! The tools' parameters. Their JSON Schemas are derived from these types, and the doc comments
//! become the schema's descriptions: they say what the schema's types cannot.

use rmcp::schemars::{self, JsonSchema};
use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde_json::Value;

/// A non-string argument some clients send as JSON text: the MCP Inspector's `--cli` passes
/// `--tool-arg 'command=["echo","x"]'` as the string `["echo","x"]`, and `background=false`
/// as `"false"`. The text is read as JSON when it is; anything else is judged as given.
fn lenient<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => match serde_json::from_str::<T>(&text) {
            Ok(t) => Ok(Some(t)),
            Err(_) => serde_json::from_value(Value::String(text))
                .map(Some)
                .map_err(D::Error::custom),
        },
        Some(v) => serde_json::from_value(v)
            .map(Some)
            .map_err(D::Error::custom),
    }
}

/// `delegate_task`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DelegateTask {
    /// What the child should accomplish, in one sentence. It heads the result block, so make it
    /// specific. Required unless `tasks` is given.
    pub goal: Option<String>,
    // The program and its arguments, run as given; its description names an agent CLI's
    // command from the table of agents ([`described::command`]).
    #[serde(default, deserialize_with = "lenient")]
    #[schemars(description = described::command())]
    pub command: Option<Vec<String>>,
    // Run this agent CLI on the goal instead of a command; its description lists the agents
    // from the table ([`described::agent`]).
    #[schemars(description = described::agent())]
    pub agent: Option<String>,
    /// Background the child needs that is not in the goal; shown again with its result.
    pub context: Option<String>,
    /// Toolset names, recorded with the task and shown with its result.
    #[serde(default, deserialize_with = "lenient")]
    pub toolsets: Option<Vec<String>>,
    /// `leaf` (default) does the work itself; `orchestrator` may delegate further.
    pub role: Option<RoleParam>,
    /// The model the child uses, if it is an agent; recorded and shown with the result.
    pub model: Option<String>,
    /// A batch: several children run in parallel as one delegation, and their results arrive
    /// as one block. Use instead of `goal`/`command`; `context`, `toolsets`, `role` and `model`
    /// above apply to every task that does not set its own.
    #[serde(default, deserialize_with = "lenient")]
    pub tasks: Option<Vec<BatchTask>>,
    /// true (default): return at once with a delegation id; the result arrives later, by
    /// itself, in this conversation. false: wait for the children and return their result.
    #[serde(default, deserialize_with = "lenient")]
    pub background: Option<bool>,
    /// When a background result is handed to you: `after_turn` (default) with the next user
    /// message, or `inject` right after your next tool call, while you are still working.
    pub result_delivery: Option<Delivery>,
    /// Wall-clock limit per child, in seconds; the child is stopped and reported as `timeout`.
    /// 0 or absent: no limit.
    #[serde(default, deserialize_with = "lenient")]
    pub timeout_seconds: Option<f64>,
    /// Working directory of the children (default: the directory hermes was started in).
    pub cwd: Option<String>,
    /// Run on a worker pool (`hermes worker --pool NAME`, here or on another machine sharing
    /// the ledger) instead of in this conversation's host; `"default"` is the default pool.
    /// The result still arrives in this conversation. Only with background true.
    pub pool: Option<String>,
    /// `worktree`: each child works in its own git worktree of the repository holding `cwd`,
    /// on a new branch `hermes/<delegation>-<task>`; what it changes comes back committed on
    /// that branch, with its commits and diffstat in the result. `none` (default unless
    /// configured): in `cwd` itself.
    pub workspace: Option<WorkspaceParam>,
    /// What the children may do, enforced by the operating system: `read-only` (write only
    /// their own temporary directory), `workspace-write` (also under `cwd`; `.git` stays
    /// read-only) or `full`. Default and the widest allowed are the person's settings
    /// (`sandbox.mcp_default`, `sandbox.mcp_max`); asking for more is an error.
    pub sandbox: Option<SandboxParam>,
    /// Whether the children reach the network (default: the person's settings; agents need
    /// it for their model).
    pub network: Option<bool>,
    /// The conversation (its session id) this is for. Needed only when one server serves
    /// several conversations at once; otherwise leave it out.
    pub session: Option<String>,
}

/// One task of a batch.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchTask {
    /// What this child should accomplish.
    pub goal: String,
    /// Its program and arguments, run as given (or give `agent` instead).
    #[serde(default)]
    pub command: Vec<String>,
    /// An agent CLI to run on this goal instead of a command.
    pub agent: Option<String>,
    /// Background for this child (default: the batch's `context`).
    pub context: Option<String>,
    /// Its toolsets (default: the batch's).
    pub toolsets: Option<Vec<String>>,
    /// Its role (default: the batch's).
    pub role: Option<RoleParam>,
    /// Its model (default: the batch's).
    pub model: Option<String>,
}

/// A child's role.
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RoleParam {
    Leaf,
    Orchestrator,
}

/// When a background result is delivered.
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    AfterTurn,
    Inject,
}

/// What each child may do (named as in config.toml and on the command line).
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxParam {
    ReadOnly,
    WorkspaceWrite,
    Full,
}

impl From<SandboxParam> for hermes_ledger::SandboxMode {
    fn from(sandbox: SandboxParam) -> Self {
        match sandbox {
            SandboxParam::ReadOnly => hermes_ledger::SandboxMode::ReadOnly,
            SandboxParam::WorkspaceWrite => hermes_ledger::SandboxMode::WorkspaceWrite,
            SandboxParam::Full => hermes_ledger::SandboxMode::Full,
        }
    }
}

/// Where each child works.
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceParam {
    None,
    Worktree,
}

impl From<WorkspaceParam> for hermes_ledger::Workspace {
    fn from(workspace: WorkspaceParam) -> Self {
        match workspace {
            WorkspaceParam::None => hermes_ledger::Workspace::None,
            WorkspaceParam::Worktree => hermes_ledger::Workspace::Worktree,
        }
    }
}

impl From<RoleParam> for hermes_ledger::Role {
    fn from(role: RoleParam) -> Self {
        match role {
            RoleParam::Leaf => hermes_ledger::Role::Leaf,
            RoleParam::Orchestrator => hermes_ledger::Role::Orchestrator,
        }
    }
}

impl From<Delivery> for hermes_ledger::DeliveryMode {
    fn from(delivery: Delivery) -> Self {
        match delivery {
            Delivery::AfterTurn => hermes_ledger::DeliveryMode::AfterTurn,
            Delivery::Inject => hermes_ledger::DeliveryMode::Inject,
        }
    }
}

/// `delegation_status`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DelegationIdParam {
    /// The id `delegate_task` returned, `deleg_` and 12 hex digits.
    pub delegation_id: String,
}

/// `delegation_list`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DelegationList {
    /// Every finished delegation of this conversation, not only the 20 most recent.
    #[serde(default, deserialize_with = "lenient")]
    pub all: Option<bool>,
    /// Only this conversation (its session id), when the server serves several.
    pub session: Option<String>,
}

/// `delegation_results`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DelegationResults {
    /// `turn` (default): every ready result. `tool`: only those dispatched with
    /// `result_delivery: inject`, wrapped as background evidence.
    pub boundary: Option<BoundaryParam>,
    /// The conversation (its session id), when the server serves several.
    pub session: Option<String>,
}

/// `delegation_result`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DelegationResult {
    /// The delegation whose stored result to read, `deleg_` and 12 hex digits.
    pub delegation_id: String,
    /// The child of a batch, by its index (0 for the first; the block's TASK 1/N). Needed
    /// only for a batch of several children.
    #[serde(default, deserialize_with = "lenient")]
    pub task: Option<u32>,
    /// Where to start reading, in characters (the previous page's answer names the next).
    #[serde(default, deserialize_with = "lenient")]
    pub offset: Option<u64>,
}

/// A delivery boundary.
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BoundaryParam {
    Turn,
    Tool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_booleans_and_numbers_sent_as_json_text_are_read() {
        let p: DelegateTask = serde_json::from_value(serde_json::json!({
            "goal": "hi", "command": "[\"echo\",\"x\"]", "background": "false",
            "timeout_seconds": "5", "toolsets": ["web"]
        }))
        .expect("reads");
        assert_eq!(p.command, Some(vec!["echo".to_owned(), "x".to_owned()]));
        assert_eq!((p.background, p.timeout_seconds), (Some(false), Some(5.0)));
        assert_eq!(p.toolsets, Some(vec!["web".to_owned()]));
        let bad = serde_json::from_value::<DelegateTask>(serde_json::json!({"command": "echo x"}));
        assert!(bad.is_err(), "a bare string is no command");
        let r: DelegationResult =
            serde_json::from_value(serde_json::json!({"delegation_id": "d", "offset": "10"}))
                .expect("reads");
        assert_eq!(r.offset, Some(10));
    }
}

/// Descriptions that name agents: from `hermes_agents`' table, never by hand.
mod described {
    /// `command` of a task.
    pub fn command() -> String {
        let example =
            serde_json::to_string(&hermes_agents::example_command("review the diff in src/"))
                .unwrap_or_default();
        format!(
            "The program and its arguments, run as given (no shell: use [\"sh\",\"-c\",\"…\"] for one).\nRequired unless `tasks` or `agent` is given (or hermes has a default agent). Another\nagent CLI works too, e.g. {example}."
        )
    }

    /// `agent` of a task.
    pub fn agent() -> String {
        let names: Vec<String> = hermes_agents::children()
            .map(|(a, _)| format!("\"{}\"", a.name))
            .collect();
        format!(
            "Run this agent CLI on the goal instead of a command: {} or\none configured in hermes. It gets the goal and context as a subagent and reports its\nprogress, model, answer and token usage. Without command and agent, hermes' default\nagent (delegation.default_agent) runs the goal.",
            hermes_agents::listed(names.iter().map(String::as_str), "")
        )
    }
}
