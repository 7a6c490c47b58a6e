//! The MCP tools. Each is a thin adapter over what the command line does — dispatch
//! (`delegate`, `-z`), `delegation status/list/stop`, `drain` — answering with the same JSON
//! and the same rendered blocks. A failure is a tool error carrying the command line's one-line
//! message; parameters that do not fit the schema are a protocol error (rmcp's invalid params).

use std::sync::Arc;

use ledger::{InterruptTarget, SessionId};
use registry::{DispatchRequest, Host};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use router::{Boundary, RouterError};
use serde_json::json;

use super::conversation::Conversation;
use super::params::{
    BatchTask, BoundaryParam, DelegateTask, DelegationId, DelegationList, DelegationResults,
    Delivery, Role,
};
use crate::args::{DeliveryArg, DispatchArgs, RoleArg};
use crate::deliver;
use crate::exit::{Code, fail, one_line};
use crate::home::now;
use crate::reports;
use crate::tasks_file::{self, TaskEntry, TasksFile};

/// Recent units `delegation_list` shows without `all`.
const RECENT: usize = 20;
/// Recent units `delegation_list` shows with `all`.
const RECENT_ALL: usize = 1_000_000;

/// What `delegation_results` says when nothing is ready.
pub const NOTHING_READY: &str = "No delegation results are ready. Background results also arrive by themselves at the next turn (or after a tool call for result_delivery=inject); use delegation_list to see what is still running.";

/// The MCP server's tools.
#[derive(Clone, Debug)]
pub struct Tools {
    conversation: Arc<Conversation>,
    host: Host,
    max_running: u32,
}

type ToolResult = Result<CallToolResult, ErrorData>;

fn ok_text(text: impl Into<String>) -> ToolResult {
    Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
}

fn ok_json(value: &serde_json::Value) -> ToolResult {
    ok_text(value.to_string())
}

fn tool_error(err: &anyhow::Error) -> ToolResult {
    Ok(CallToolResult::error(vec![ContentBlock::text(one_line(
        err,
    ))]))
}

/// Runs blocking ledger work off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| anyhow::anyhow!("internal error: {e}"))?
}

impl Tools {
    /// The tools of `conversation`, whose children `host` runs.
    pub fn new(conversation: Arc<Conversation>, host: Host, max_running: u32) -> Tools {
        Tools {
            conversation,
            host,
            max_running,
        }
    }
}

#[tool_router]
impl Tools {
    /// Runs commands (scripts, builds, other agent CLIs) as background children and hands you
    /// each result exactly once.
    #[tool(
        description = "Delegate work to a child process: a script, a build, a test run or another agent CLI (e.g. [\"claude\",\"-p\",\"…\"]). By default it runs in the background and this call returns at once with a delegation id; the child's result is later handed to you by itself, once, as a block starting with [ASYNC DELEGATION COMPLETE …] (with the next user message, or right after a tool call when result_delivery is inject) — do not poll for it. With background=false the call waits and returns that result block itself. Give tasks (instead of goal/command) to run several children in parallel as one delegation."
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
        let spec = match spec(p) {
            Ok(spec) => spec,
            Err(e) => return tool_error(&e),
        };
        let conversation = self.conversation.clone();
        let session = match blocking(move || conversation.session_for_dispatch()).await {
            Ok(session) => session,
            Err(e) => return tool_error(&e),
        };
        if background {
            self.dispatch_background(session, spec).await
        } else {
            self.run_inline(session, spec, context).await
        }
    }

    /// A delegation's children: status, progress, result, delivery.
    #[tool(
        description = "Show one delegation of this conversation as JSON: its status, and per child the status, exit code, duration, progress (api calls, current tool, quiet seconds), result once finished, transcript path and whether the result was delivered."
    )]
    async fn delegation_status(&self, Parameters(p): Parameters<DelegationId>) -> ToolResult {
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
        description = "List this conversation's delegations as JSON: running, queued and recently finished (the 20 most recent unless all=true), with the machine-wide running and queued counts against max_concurrent_children."
    )]
    async fn delegation_list(&self, Parameters(p): Parameters<DelegationList>) -> ToolResult {
        let conversation = self.conversation.clone();
        let max = self.max_running;
        let limit = if p.all.unwrap_or(false) {
            RECENT_ALL
        } else {
            RECENT
        };
        let listed = blocking(move || {
            let mut listing = ledger::Listing::default();
            for session in conversation.current().map(|s| s.all).unwrap_or_default() {
                let part = conversation.ledger().list(Some(&session), limit)?;
                listing.running.extend(part.running);
                listing.queued.extend(part.queued);
                listing.recent.extend(part.recent);
                listing.recent_total += part.recent_total;
            }
            listing
                .recent
                .sort_by_key(|u| std::cmp::Reverse(u.dispatched_at));
            listing.recent.truncate(limit);
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
        description = "Stop a delegation of this conversation: running children get SIGTERM (SIGKILL after a grace period) and end as interrupted; a queued one is cancelled. Its result block still arrives, saying so."
    )]
    async fn delegation_stop(&self, Parameters(p): Parameters<DelegationId>) -> ToolResult {
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
        description = "Take this conversation's finished background results now, instead of waiting for them to be handed over at the next turn. Returns the same completion blocks, and each result only once: what this returns will not be delivered again."
    )]
    async fn delegation_results(&self, Parameters(p): Parameters<DelegationResults>) -> ToolResult {
        let boundary = match p.boundary {
            Some(BoundaryParam::Tool) => Boundary::Tool,
            _ => Boundary::Turn,
        };
        let conversation = self.conversation.clone();
        let taken = blocking(move || take_results(&conversation, boundary)).await;
        match taken {
            Ok(text) if text.is_empty() => ok_text(NOTHING_READY),
            Ok(text) => ok_text(text),
            Err(e) => tool_error(&e),
        }
    }
}

#[tool_handler(
    name = "hermes",
    instructions = "hermes runs delegated work as child processes and hands each result back to this conversation exactly once. Dispatch with delegate_task; background results arrive by themselves as [ASYNC DELEGATION COMPLETE …] blocks, so there is no need to poll."
)]
impl ServerHandler for Tools {}

impl Tools {
    async fn dispatch_background(
        &self,
        session: SessionId,
        spec: ledger::DispatchSpec,
    ) -> ToolResult {
        let dispatched = self
            .host
            .dispatch(DispatchRequest::background(session.clone(), spec))
            .await;
        match dispatched {
            Ok(d) => {
                let transcripts: Vec<String> = d
                    .transcripts
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                let workers = match d.delegation.pool().map(str::to_owned) {
                    Some(pool) => {
                        let conversation = self.conversation.clone();
                        blocking(move || crate::reports::live_workers(conversation.ledger(), &pool))
                            .await
                            .ok()
                    }
                    None => None,
                };
                let host_pid = d
                    .delegation
                    .pool()
                    .is_none()
                    .then(|| self.host.process().pid);
                ok_json(&reports::dispatch_json(
                    &d.delegation,
                    &session,
                    &transcripts,
                    d.queue_position,
                    host_pid,
                    workers,
                ))
            }
            Err(e) => tool_error(&anyhow::Error::new(e)),
        }
    }

    /// `background: false`: runs the unit here like `-z` and returns its rendered result; a
    /// cancelled request stops it.
    async fn run_inline(
        &self,
        session: SessionId,
        spec: ledger::DispatchSpec,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let dispatched = match self
            .host
            .dispatch(DispatchRequest::inline(spec, Some(session)))
            .await
        {
            Ok(d) => d,
            Err(e) => return tool_error(&anyhow::Error::new(e)),
        };
        let id = dispatched.delegation.id.clone();
        self.conversation.add_inline(id.clone());
        let report = tokio::select! {
            report = self.host.wait(&id) => report,
            () = context.ct.cancelled() => {
                let _ = self
                    .host
                    .interrupt(InterruptTarget::Delegation(id.clone()), "cancelled_by_agent")
                    .await;
                self.host.wait(&id).await
            }
        };
        let Some(report) = report else {
            return tool_error(&fail(
                Code::WorkFailed,
                format!("{id} ended without a report"),
            ));
        };
        let conversation = self.conversation.clone();
        let finished = blocking(move || {
            let ledger = conversation.ledger();
            let finished = crate::cmd::run::finish(ledger, &report, false)?;
            // Claim and ack at once: the caller has the result.
            ledger.settle_inline(&report.delegation_id, now())?;
            Ok(finished)
        })
        .await;
        match finished {
            Ok(f) => match f.failure {
                None => ok_text(f.text),
                Some(failure) => Ok(CallToolResult::error(vec![
                    ContentBlock::text(f.text),
                    ContentBlock::text(one_line(&failure)),
                ])),
            },
            Err(e) => tool_error(&e),
        }
    }
}

/// Why `background: false` with a pool is refused (as `-z --pool` is).
const INLINE_POOL: &str = "pool: a pool unit runs in the background on a worker; leave background true (its result arrives in this conversation) or leave pool out to wait for it here";

/// Claims, renders and acknowledges what is ready at `boundary` in the conversation's sessions.
fn take_results(conversation: &Conversation, boundary: Boundary) -> anyhow::Result<String> {
    let Some(sessions) = conversation.current() else {
        return Ok(String::new());
    };
    let mut taken = Vec::new();
    for (i, session) in sessions.all.iter().enumerate() {
        let router = conversation.router(session);
        match router.take_ready(boundary, now(), deliver::render_check) {
            Ok(round) => taken.extend(round.delivered),
            // An adopted provisional session that has ended has nothing to give.
            Err(RouterError::SessionEnded(_)) if i > 0 => {}
            Err(e) => {
                deliver::settle(conversation.ledger(), &taken, false, false)?;
                return Err(e.into());
            }
        }
    }
    let text = deliver::text(&taken, boundary);
    deliver::settle(conversation.ledger(), &taken, false, true)?;
    Ok(text)
}

/// The unit `delegate_task`'s parameters describe, checked like the command line's DISPATCH.
fn spec(p: DelegateTask) -> anyhow::Result<ledger::DispatchSpec> {
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
