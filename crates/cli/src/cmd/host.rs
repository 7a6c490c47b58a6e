//! `hermes host --session S`: the headless host. Runs S's background units (those recorded for
//! this process by `delegate`) and exits once nothing has run, queued or arrived for
//! `host.idle_exit_seconds`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use ledger::{HostClaim, HostKind, Ledger, ProcessId, SessionId};
use registry::{Host, HostOptions, OsReaper, SystemClock};

use crate::args::HostArgs;
use crate::exit::{Code, fail};
use crate::home::{Home, now};

/// How often the host looks for work and idleness.
const POLL: Duration = Duration::from_millis(200);

/// Runs the headless host.
pub fn run(args: &HostArgs, quiet: bool) -> anyhow::Result<Code> {
    let session =
        SessionId::new(args.session.clone()).map_err(|e| fail(Code::Usage, e.to_string()))?;
    let home = Home::load()?;
    let metrics = args
        .metrics_listen
        .map(crate::metrics::serve::bind)
        .transpose()?;
    let ledger = home.ledger()?;
    let me = registry::procs::current_process();
    match ledger.claim_session_host(&session, me, &OsReaper::new(), now())? {
        HostClaim::HeldBy(other) => {
            tracing::info!(%session, host = %other, "session already hosted; exiting");
            if !quiet {
                eprintln!(
                    "hermes: session {session} is already hosted by process {}; nothing to do",
                    other.pid
                );
            }
            return Ok(Code::Ok);
        }
        HostClaim::Acquired | HostClaim::AlreadyHeld => {}
    }
    let adopted = ledger.adopt_units(&session, me)?;
    tracing::info!(%session, pid = me.pid, adopted, "headless host started");
    let runtime = crate::home::runtime()?;
    let idle_exit = home.settings.host.idle_exit;
    let limits = crate::top::model::Limits::from_settings(&home.settings);
    if args.metrics_listen.is_some() {
        crate::metrics::process::install();
    }
    runtime.block_on(async move {
        if let Some(listener) = metrics {
            crate::metrics::serve::spawn(
                listener,
                crate::metrics::process::source(ledger.clone(), limits),
            )?;
        }
        let host = Host::start(
            ledger.clone(),
            home.registry(),
            Arc::new(SystemClock),
            HostOptions {
                kind: HostKind::Headless,
                session: Some(session.clone()),
                worker: None,
            },
        )
        .await?;
        // The hooks of this session deliver through this process (`relay`): no ledger of their
        // own to open and close. Without the socket they deliver by themselves.
        let _relay = crate::relay::serve(
            &home.dir,
            &session,
            Arc::clone(&ledger),
            Arc::new(home.settings.clone()),
        )
        .inspect_err(|e| tracing::warn!(error = %format!("{e:#}"), "hooks of this session deliver without the host"))
        .ok();
        let reason = serve_until_idle(&host, &ledger, &session, idle_exit).await?;
        tracing::info!(%session, reason, "headless host stopping");
        host.shutdown(reason).await;
        anyhow::Ok(())
    })?;
    Ok(Code::Ok)
}

/// Keeps `host` running its units until nothing has run, queued or arrived for it for
/// `idle_exit` and it could retire (then `"idle_exit"`), or until SIGTERM/SIGINT
/// (`"host_stopped"`). The caller shuts the host down with the reason.
pub async fn serve_until_idle(
    host: &Host,
    ledger: &Ledger,
    session: &SessionId,
    idle_exit: Duration,
) -> anyhow::Result<&'static str> {
    let me = host.process();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot watch SIGTERM")?;
    let mut last_busy = Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = term.recv() => return Ok("host_stopped"),
            _ = tokio::signal::ctrl_c() => return Ok("host_stopped"),
        }
        if host.is_fenced() {
            return Err(fail(
                Code::WorkFailed,
                format!(
                    "the host of session {session} lost its lease and stopped its children; their units are recovered by other hermes processes"
                ),
            ));
        }
        if !host.running().is_empty() || has_work(ledger, me)? {
            last_busy = Instant::now();
            continue;
        }
        if last_busy.elapsed() < idle_exit {
            continue;
        }
        // Retire atomically: only if nothing is assigned to this host, and from then on
        // nothing can be (a racing `delegate` gets `HostGone` and starts a new host).
        if !ledger.retire_host(me)? {
            tracing::info!(%session, "work arrived while leaving; staying");
            last_busy = Instant::now();
            continue;
        }
        return Ok("idle_exit");
    }
}

/// Whether the ledger holds unfinished units for this host.
fn has_work(ledger: &Ledger, me: ProcessId) -> anyhow::Result<bool> {
    let listing = ledger.list(None, 0)?;
    Ok(listing
        .running
        .iter()
        .chain(&listing.queued)
        .any(|u| u.host == Some(me)))
}
