//! `delegate_task` with `background: false`: the unit runs in this server like `-z`, and the
//! call answers with its rendered result, bounded like every answer. While it runs, a request
//! that carries a `progressToken` gets `notifications/progress` each time a child's progress
//! token changes (output, progress messages, API calls), so a client whose request timeout
//! resets on progress (the TypeScript SDK's `resetTimeoutOnProgress`) does not cancel it; a
//! cancelled request stops the unit.

use std::time::Duration;

use hermes_ledger::{DelegationId, InterruptTarget, Ledger, SessionId};
use hermes_registry::DispatchRequest;
use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ContentBlock, ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RequestContext};

use super::tools::{ToolResult, Tools, blocking, ok_text, tool_error};
use crate::services::exit::{Code, fail, one_line};
use crate::services::home::now;

/// How often the children's progress is looked at (the host persists changes within its 100 ms
/// progress interval).
const PROGRESS_POLL: Duration = Duration::from_millis(250);

/// Runs the unit here and answers with its result.
pub async fn run(
    tools: &Tools,
    session: SessionId,
    spec: hermes_ledger::DispatchSpec,
    context: RequestContext<RoleServer>,
) -> ToolResult {
    let dispatched = match tools
        .host
        .dispatch(DispatchRequest::inline(spec, Some(session)))
        .await
    {
        Ok(d) => d,
        Err(e) => return tool_error(&anyhow::Error::new(e)),
    };
    let id = dispatched.delegation.id.clone();
    tools.conversation.add_inline(id.clone());
    let notifier = context.meta.get_progress_token().map(|token| {
        tokio::spawn(notify_progress(
            tools.conversation.ledger().clone(),
            id.clone(),
            context.peer.clone(),
            token,
        ))
    });
    let report = tokio::select! {
        report = tools.host.wait(&id) => report,
        () = context.ct.cancelled() => {
            let _ = tools
                .host
                .interrupt(InterruptTarget::Delegation(id.clone()), "cancelled_by_agent")
                .await;
            tools.host.wait(&id).await
        }
    };
    if let Some(n) = notifier {
        n.abort();
    }
    let Some(report) = report else {
        return tool_error(&fail(
            Code::WorkFailed,
            format!("{id} ended without a report"),
        ));
    };
    let conversation = tools.conversation.clone();
    let finished = blocking(move || {
        let ledger = conversation.ledger();
        let finished = crate::services::inline::finish(ledger, &report, false)?;
        // Claim and ack at once: the caller has the result.
        ledger.settle_inline(&report.delegation_id, now())?;
        Ok(finished)
    })
    .await;
    let how = format!(
        "the MCP tool delegation_result {{\"delegation_id\":\"{id}\"}} (\"task\" for one child, \"offset\" for the next page)"
    );
    let budget = tools.conversation.answer_budget();
    match finished {
        Ok(f) => {
            let text = hermes_formatter::shorten(&f.text, budget, &how);
            match f.failure {
                None => ok_text(text),
                Some(failure) => Ok(CallToolResult::error(vec![
                    ContentBlock::text(text),
                    ContentBlock::text(one_line(&failure)),
                ])),
            }
        }
        Err(e) => tool_error(&e),
    }
}

/// Sends a progress notification each time the unit's children's progress changes, until
/// aborted.
async fn notify_progress(
    ledger: std::sync::Arc<Ledger>,
    id: DelegationId,
    peer: Peer<RoleServer>,
    token: ProgressToken,
) {
    let mut last: Option<u64> = None;
    let mut sent = 0u64;
    loop {
        tokio::time::sleep(PROGRESS_POLL).await;
        let l = ledger.clone();
        let i = id.clone();
        let Ok(children) = blocking(move || Ok(l.children(&i)?)).await else {
            continue;
        };
        let mark: u64 = children
            .iter()
            .map(|c| c.progress.output_bytes + c.progress.progress_seq + c.progress.api_calls)
            .sum();
        let started = children.iter().filter(|c| c.started_at.is_some()).count() as u64;
        let mark = mark + started;
        if last == Some(mark) {
            continue;
        }
        last = Some(mark);
        sent += 1;
        let tool = children
            .iter()
            .find_map(|c| c.progress.current_tool.clone())
            .map(|t| format!(", in {t}"))
            .unwrap_or_default();
        let calls: u64 = children.iter().map(|c| c.progress.api_calls).sum();
        let bytes: u64 = children.iter().map(|c| c.progress.output_bytes).sum();
        let message = format!(
            "{id}: {} child(ren) running, {calls} call(s), {bytes} bytes of output{tool}",
            children.iter().filter(|c| !c.status.is_terminal()).count()
        );
        let param =
            ProgressNotificationParam::new(token.clone(), sent as f64).with_message(message);
        if let Err(e) = peer.notify_progress(param).await {
            tracing::debug!(error = %e, "cannot send a progress notification");
            return;
        }
    }
}
