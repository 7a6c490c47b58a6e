//! The server's life: start a host, serve the tools on stdio until the client goes away or
//! SIGTERM comes, then leave as the conversation's state asks.
//!
//! A named conversation's background children (its hooks bound it, or `HERMES_SESSION_ID`) run
//! in the session's headless host (`hermes host`, started for it as `hermes delegate` starts
//! one), never in this process: the server is a front end that can come and go, and
//! an agent's resume (`--resume`) finds their results. What the server itself runs — `background: false`
//! units, and the units of a provisional session no hook ever named — is its own: a registry
//! host that renews its lease, persists progress, acts on interrupts and sweeps.
//!
//! It leaves when the client closes stdin, or at SIGTERM even while stdin stays open (the MCP
//! SDKs close stdin, wait 2 s, then send SIGTERM). Either way it stops what it runs itself
//! (inline units, whose requests are gone; a provisional session is ended: nobody can name it
//! again) and exits promptly, without waiting on the stdin reader. SIGINT is ignored: a
//! terminal's Ctrl-C meant for the agent reaches its whole process group, and must not stop
//! the work.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use hermes_ledger::{HostKind, Ledger, SessionId};
use hermes_registry::{Host, HostOptions, SystemClock};
use rmcp::ServiceExt as _;
use tokio::signal::unix::{SignalKind, signal};

use super::conversation::{Conversation, Setup};
use super::tools::Tools;
use crate::services::binding::{self, Bindings};
use crate::services::exit::{Code, fail};
use crate::services::home::{Home, env_var, now};

/// Why serving ended.
enum End {
    ClientGone,
    Terminated,
}

/// Runs `hermes mcp`.
pub fn run() -> anyhow::Result<Code> {
    let home = Arc::new(Home::load()?);
    let fixed = env_var("HERMES_SESSION_ID")
        .filter(|s| !s.is_empty())
        .map(|s| {
            SessionId::new(s).map_err(|e| fail(Code::Usage, format!("HERMES_SESSION_ID: {e}")))
        })
        .transpose()?;
    let ledger = home.open_ledger_and_sweep()?;
    let agent = binding::agent_process();
    let runtime = crate::services::home::runtime()?;
    let served = runtime.block_on(async move {
        let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
        // The children this server runs itself get the environment its agent withheld from it.
        // hermes' own variables come last, so that they win.
        let mut config = home.registry();
        let mut env: Vec<(String, String)> =
            crate::services::agent_proc::environment_missing_here(agent)
                .into_iter()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect();
        env.append(&mut config.child_env);
        config.child_env = env;
        let host = Host::start(
            ledger.clone(),
            config,
            Arc::new(SystemClock),
            HostOptions {
                kind: HostKind::Interactive,
                // Named sessions are hosted by their headless hosts; this host runs inline
                // units and claims provisional sessions one by one.
                session: None,
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
        let tools = Tools::new(conversation.clone(), host.clone(), home.clone());
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
        if matches!(end, End::Terminated) {
            tracing::info!("SIGTERM: leaving");
        }
        leave(&conversation, &host, &ledger).await
    });
    // The stdin reader may still block in a read (SIGTERM with stdin open): do not wait for it.
    runtime.shutdown_timeout(Duration::from_millis(100));
    served?;
    Ok(Code::Ok)
}

/// The client went away or SIGTERM came: see the module's documentation.
async fn leave(conversation: &Conversation, host: &Host, ledger: &Ledger) -> anyhow::Result<()> {
    let provisional = match conversation.current(None) {
        Ok(Some(sessions)) if !sessions.named => Some(sessions.all),
        _ => None,
    };
    if let Some(sessions) = provisional {
        for session in &sessions {
            if ledger.session(session)?.is_some() {
                let end = ledger.end_session(session, now())?;
                tracing::info!(%session, interrupted = end.interrupted.len(), "provisional session ended with its client");
            }
        }
        conversation.forget()?;
    }
    host.shutdown("client_gone").await;
    Ok(())
}
