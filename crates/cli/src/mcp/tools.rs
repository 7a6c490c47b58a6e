//! The MCP tools. Each is a thin adapter over what the command line does — dispatch
//! (`delegate`, `-z`), `delegation status/list/stop`, `drain` — answering with the same JSON
//! and the same rendered blocks. A failure is a tool error carrying the command line's one-line
//! message. Arguments that do not fit a tool's schema are answered by rmcp as a tool error the
//! model can correct; a `tools/call` (or any other known method) whose params cannot be read at
//! all — arguments that are not an object, no tool name — is a JSON-RPC error -32602 (invalid
//! params), and an unknown method -32601; none of them ends the server.

use std::sync::Arc;

use hermes_ledger::InterruptTarget;
use hermes_registry::Host;
use hermes_router::Boundary;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, CustomRequest, CustomResult, ErrorCode};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use serde_json::json;

use super::conversation::Conversation;
use super::params::{
    BoundaryParam, DelegateTask, DelegationIdParam, DelegationList, DelegationResult,
    DelegationResults,
};
use crate::services::exit::{Code, fail, one_line};
use crate::services::home::{Home, now};
use crate::services::reports;

/// Recent units `delegation_list` shows without `all`.
const RECENT: usize = 20;
/// Recent units `delegation_list` shows with `all`.
const RECENT_ALL: usize = 1_000_000;

/// Characters of one tool answer, for an agent that keeps at least that many (an agent's
/// profile may name fewer: `Conversation::answer_budget`). An agent may warn when an MCP tool's output passes 10,000
/// tokens and cut it at 25,000 (the first agent of `hermes_agents`' table, whose file cites
/// its MCP page); 30,000 characters stay under the warning.
pub const ANSWER_BUDGET: usize = 30_000;

/// The description of `delegate_task`; `{example}` is an agent CLI's command from the table of
/// agents.
const DELEGATE: &str = "Delegate work to a child process: a script, a build, a test run or another agent CLI (e.g. {example}). By default it runs in the background and this call returns at once with a delegation id; the child's result is later handed to you by itself, once, as a block starting with [ASYNC DELEGATION COMPLETE …] (with the next user message, or right after a tool call when result_delivery is inject and your agent has a hook there; if it has none, the answer's note says the result comes at the next turn boundary instead) — do not poll for it, unless the answer carries a warning saying results cannot arrive by themselves. With background=false the call waits (sending progress notifications) and returns that result block itself. Give tasks (instead of goal/command) to run several children in parallel as one delegation.";

/// The description of `delegate_task`, its example command from the table of agents.
fn delegate_description() -> String {
    let example = serde_json::to_string(&hermes_agents::example_command("…")).unwrap_or_default();
    DELEGATE.replace("{example}", &example)
}

/// What `delegation_results` says when nothing is ready.
pub const NOTHING_READY: &str = "No delegation results are ready. Background results also arrive by themselves at the next turn (or after a tool call for result_delivery=inject); use delegation_list to see what is still running.";

/// The MCP server's tools.
#[derive(Clone, Debug)]
pub struct Tools {
    pub(super) conversation: Arc<Conversation>,
    pub(super) host: Host,
    pub(super) home: Arc<Home>,
}

pub(super) type ToolResult = Result<CallToolResult, ErrorData>;

pub(super) fn ok_text(text: impl Into<String>) -> ToolResult {
    Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
}

pub(super) fn ok_json(value: &serde_json::Value) -> ToolResult {
    ok_text(value.to_string())
}

pub(super) fn tool_error(err: &anyhow::Error) -> ToolResult {
    Ok(CallToolResult::error(vec![ContentBlock::text(one_line(
        err,
    ))]))
}

/// Runs blocking ledger work off the async workers.
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| anyhow::anyhow!("internal error: {e}"))?
}

impl Tools {
    /// The tools of `conversation`, whose inline and provisional children `host` runs.
    pub fn new(conversation: Arc<Conversation>, host: Host, home: Arc<Home>) -> Tools {
        Tools {
            conversation,
            host,
            home,
        }
    }
}

#[tool_router(vis = "pub(crate)")]
impl Tools {
    /// Runs commands (scripts, builds, other agent CLIs) as background children and hands you
    /// each result exactly once.
    #[tool(
        description = delegate_description(),
        input_schema = super::schema::input::<DelegateTask>()
    )]
    async fn delegate_task(
        &self,
        Parameters(p): Parameters<DelegateTask>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let background = p.background.unwrap_or(true);
        if !background && p.pool.is_some() {
            return tool_error(&fail(Code::Usage, INLINE_POOL));
        }
        let wanted = p.session.clone();
        let spec = match super::spec::spec(p) {
            Ok(spec) => spec,
            Err(e) => return tool_error(&e),
        };
        let conversation = self.conversation.clone();
        let sessions =
            match blocking(move || conversation.session_for_dispatch(wanted.as_deref())).await {
                Ok(sessions) => sessions,
                Err(e) => return tool_error(&e),
            };
        if background {
            super::background::background(self, sessions, spec).await
        } else {
            super::inline::run(self, sessions.current, spec, context).await
        }
    }

    /// A delegation's children: status, progress, result, delivery.
    #[tool(
        description = "Show one delegation of this conversation as JSON: its status, and per child the status, exit code, duration, progress (api calls, current tool, quiet seconds), result once finished, transcript path and whether the result was delivered.",
        input_schema = super::schema::input::<DelegationIdParam>()
    )]
    async fn delegation_status(&self, Parameters(p): Parameters<DelegationIdParam>) -> ToolResult {
        let conversation = self.conversation.clone();
        let found = blocking(move || {
            let unit = conversation.own_unit(&p.delegation_id)?;
            let ledger = conversation.ledger();
            let children = ledger.children(&unit.id)?;
            Ok(reports::status_json(ledger, &unit, &children, now())?)
        })
        .await;
        match found {
            Ok(value) => ok_json(&value),
            Err(e) => tool_error(&e),
        }
    }

    /// The conversation's delegations.
    #[tool(
        description = "List this conversation's delegations as JSON: running (background=false ones too, while they run), queued and recently finished (the 20 most recent unless all=true). running_count and queued_count count this conversation's delegations; max_concurrent_children is how many children may run at once on this machine, across every conversation.",
        input_schema = super::schema::input::<DelegationList>()
    )]
    async fn delegation_list(&self, Parameters(p): Parameters<DelegationList>) -> ToolResult {
        let conversation = self.conversation.clone();
        let max = self.home.settings.delegation.max_concurrent_children;
        let limit = if p.all.unwrap_or(false) {
            RECENT_ALL
        } else {
            RECENT
        };
        let listed = blocking(move || {
            let listing = super::results::listing(&conversation, p.session.as_deref(), limit)?;
            Ok(reports::list_json(&listing, max))
        })
        .await;
        match listed {
            Ok(value) => ok_json(&value),
            Err(e) => tool_error(&e),
        }
    }

    /// Stops a delegation.
    #[tool(
        description = "Stop a delegation of this conversation: running children get SIGTERM (SIGKILL after a grace period) and end as interrupted; a queued one is cancelled. Its result block still arrives, saying so.",
        input_schema = super::schema::input::<DelegationIdParam>()
    )]
    async fn delegation_stop(&self, Parameters(p): Parameters<DelegationIdParam>) -> ToolResult {
        let conversation = self.conversation.clone();
        let unit = match blocking(move || conversation.own_unit(&p.delegation_id)).await {
            Ok(unit) => unit,
            Err(e) => return tool_error(&e),
        };
        let done = self
            .host
            .interrupt(
                InterruptTarget::Delegation(unit.id.clone()),
                "stopped_by_agent",
            )
            .await;
        match done {
            Ok(done) => {
                let status = if done.cancelled.contains(&unit.id) {
                    "cancelled"
                } else if done.flagged.contains(&unit.id) {
                    "stopping"
                } else {
                    unit.status.as_str()
                };
                ok_json(&json!({"delegation_id": unit.id.to_string(), "status": status}))
            }
            Err(e) => tool_error(&anyhow::Error::new(e)),
        }
    }

    /// Takes the conversation's ready results now.
    #[tool(
        description = "Take this conversation's finished background results now, instead of waiting for them to be handed over at the next turn. Returns the same completion blocks, and each result only once: what this returns will not be delivered again. An answer holds what fits in what your agent keeps of a tool's answer (at most about 30,000 characters); the rest stays ready for the next call, and a result too large alone is shortened and says how to read all of it with delegation_result.",
        input_schema = super::schema::input::<DelegationResults>()
    )]
    async fn delegation_results(&self, Parameters(p): Parameters<DelegationResults>) -> ToolResult {
        let boundary = match p.boundary {
            Some(BoundaryParam::Tool) => Boundary::Tool,
            _ => Boundary::Turn,
        };
        let conversation = self.conversation.clone();
        let taken =
            blocking(move || super::results::take(&conversation, boundary, p.session.as_deref()))
                .await;
        match taken {
            Ok(text) if text.is_empty() => ok_text(NOTHING_READY),
            Ok(text) => ok_text(text),
            Err(e) => tool_error(&e),
        }
    }

    /// Reads a stored result in full, page by page.
    #[tool(
        description = "Read the full stored result of one child of a delegation of this conversation, one page per call (as much as your agent keeps of a tool's answer, at most about 30,000 characters): use it when a delivered block was shortened to fit. Give task for one child of a batch (0 for the first) and offset (the character the previous page's answer names) for the next page. Reading delivers nothing and acknowledges nothing.",
        input_schema = super::schema::input::<DelegationResult>()
    )]
    async fn delegation_result(&self, Parameters(p): Parameters<DelegationResult>) -> ToolResult {
        let conversation = self.conversation.clone();
        let page = blocking(move || super::results::page(&conversation, &p)).await;
        match page {
            Ok(text) => ok_text(text),
            Err(e) => tool_error(&e),
        }
    }
}

#[tool_handler(
    name = "hermes",
    instructions = "hermes runs delegated work as child processes and hands each result back to this conversation exactly once. Dispatch with delegate_task; background results arrive by themselves as [ASYNC DELEGATION COMPLETE …] blocks, so there is no need to poll."
)]
impl ServerHandler for Tools {
    /// A request rmcp could not read as any method it knows arrives here: for a method MCP
    /// defines (a `tools/call` whose arguments are not an object, or without a name) the
    /// params are at fault (-32602); any other method does not exist (-32601).
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let CustomRequest { method, .. } = request;
        if KNOWN_METHODS.contains(&method.as_str()) {
            return Err(ErrorData::new(
                ErrorCode::INVALID_PARAMS,
                format!(
                    "invalid params for {method}: see the MCP schema (tools/call needs a tool name and an arguments object)"
                ),
                None,
            ));
        }
        Err(ErrorData::new(ErrorCode::METHOD_NOT_FOUND, method, None))
    }
}

/// The client requests MCP defines.
const KNOWN_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/call",
    "tools/list",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
];

/// Why `background: false` with a pool is refused (as `-z --pool` is).
const INLINE_POOL: &str = "pool: a pool unit runs in the background on a worker; leave background true (its result arrives in this conversation) or leave pool out to wait for it here";
