//! The server's life: start a host, serve the tools on stdio until the client goes away, then
//! leave as the conversation's state asks.
//!
//! While it serves, the process is a host like an interactive session: it runs the children it
//! dispatched, renews its host lease, persists their progress, acts on interrupts from other
//! processes; its registry host runs the recovery sweep every `host.recovery_interval_seconds`.
//!
//! When the client goes away (stdin closes):
//! - a conversation the agent named (its hooks bound it, or `HERMES_SESSION_ID`) can be resumed
//!   (`claude --resume` brings the same `session_id`): the server keeps hosting the children
//!   still running until they end, so their results wait in the ledger, then exits;
//! - a provisional conversation no hook ever bound cannot be named again: it is ended (children
//!   stopped, undelivered results dropped) and the server exits;
//! - an ended conversation (the `session-end` hook ran) has nothing left: the server exits.
//!
//! SIGTERM stops the children at once and exits. SIGINT is ignored: a terminal's Ctrl-C meant
//! for the agent reaches its whole process group, and must not stop the work.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use ledger::{HostKind, Ledger, SessionId};
use registry::{Host, HostOptions, SystemClock};
use rmcp::ServiceExt as _;
use tokio::signal::unix::{SignalKind, signal};

use super::conversation::{Conversation, Setup};
use super::tools::Tools;
use crate::binding::{self, Bindings};
use crate::exit::{Code, fail};
use crate::home::{Home, env_var, now};

/// Why serving ended.
enum End {
    ClientGone,
    Terminated,
}

/// Runs `hermes mcp`.
pub fn run() -> anyhow::Result<Code> {
    let home = Home::load()?;
    let fixed = env_var("HERMES_SESSION_ID")
        .filter(|s| !s.is_empty())
        .map(|s| {
            SessionId::new(s).map_err(|e| fail(Code::Usage, format!("HERMES_SESSION_ID: {e}")))
        })
        .transpose()?;
    let ledger = home.ledger()?;
    let agent = binding::agent_process();
    let runtime = crate::home::runtime()?;
    runtime.block_on(async move {
        let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
        let host = Host::start(
            ledger.clone(),
            home.registry(),
            Arc::new(SystemClock),
            HostOptions {
                kind: HostKind::Interactive,
                session: fixed.clone(),
                worker: None,
            },
        )
        .await?;
        let conversation = Arc::new(Conversation::new(Setup {
            ledger: ledger.clone(),
            me: host.process(),
            bindings: Bindings::new(&home.dir),
            agent,
            fixed,
            settings: home.settings.clone(),
        }));
        let tools = Tools::new(
            conversation.clone(),
            host.clone(),
            home.settings.delegation.max_concurrent_children,
        );
        let serve = async {
            match tools.serve(rmcp::transport::stdio()).await {
                Ok(running) => {
                    if let Err(e) = running.waiting().await {
                        tracing::warn!(error = %e, "the MCP service ended abnormally");
                    }
                }
                Err(e) => tracing::info!(error = %e, "the MCP client left during initialization"),
            }
        };
        tokio::pin!(serve);
        let end = loop {
            tokio::select! {
                () = &mut serve => break End::ClientGone,
                _ = term.recv() => break End::Terminated,
                _ = int.recv() => tracing::info!("SIGINT ignored: stop hermes mcp with SIGTERM"),
            }
        };
        match end {
            End::Terminated => host.shutdown("mcp_stopped").await,
            End::ClientGone => leave(&conversation, &host, &ledger).await?,
        }
        anyhow::Ok(())
    })?;
    Ok(Code::Ok)
}

/// The client went away: see the module's documentation.
async fn leave(conversation: &Conversation, host: &Host, ledger: &Ledger) -> anyhow::Result<()> {
    let Some(sessions) = conversation.current() else {
        host.shutdown("client_gone").await;
        return Ok(());
    };
    if sessions.named {
        tracing::info!(session = %sessions.current, "client gone; hosting the running children until they end");
        let reason =
            crate::cmd::host::serve_until_idle(host, ledger, &sessions.current, Duration::ZERO)
                .await?;
        host.shutdown(reason).await;
        return Ok(());
    }
    for session in &sessions.all {
        if ledger.session(session)?.is_some() {
            let end = ledger.end_session(session, now())?;
            tracing::info!(%session, interrupted = end.interrupted.len(), "provisional session ended with its client");
        }
    }
    conversation.forget()?;
    host.shutdown("client_gone").await;
    Ok(())
}
