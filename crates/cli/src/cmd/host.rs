//! `hermes host --session S`: the headless host. Runs S's background units (those recorded for
//! this process by `delegate`) and exits once nothing has run, queued or arrived for
//! `host.idle_exit_seconds`, or once its session ended and its units were finalized. A host that fenced itself (a long outage) hosts the session again
//! with a fresh epoch once its old units were recovered, if the session still has queued
//! units; otherwise it exits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_ledger::{HostClaim, HostKind, Ledger, ProcessId, SessionId};
use hermes_registry::{Host, HostOptions, OsReaper};

use crate::args::HostArgs;
use crate::cmd::rejoin::{self, Backoff, Signals};
use crate::services::exit::{Code, fail};
use crate::services::home::{Home, now};

/// How often the host looks for work and idleness.
const POLL: Duration = Duration::from_millis(200);

/// Runs the headless host.
pub fn run(args: &HostArgs, quiet: bool) -> anyhow::Result<Code> {
    let mut launcher = args
        .detach
        .then(crate::services::host_detach::detach)
        .transpose()?;
    let session =
        SessionId::new(args.session.clone()).map_err(|e| fail(Code::Usage, e.to_string()))?;
    let home = Home::load()?;
    let metrics = args
        .metrics_listen
        .map(crate::services::metrics::serve::bind)
        .transpose()?;
    let ledger = home.open_ledger_and_sweep_as_host(&session)?;
    let me = hermes_registry::procs::current_host();
    if let Some(other) = take_session(&ledger, &session, me)? {
        held_by(&session, other, quiet);
        return Ok(Code::Ok);
    }
    let runtime = crate::services::home::runtime()?;
    let idle_exit = home.settings.host.idle_exit;
    let limits = crate::services::overview::Limits::from_settings(&home.settings);
    if args.metrics_listen.is_some() {
        crate::services::metrics::process::install();
    }
    runtime.block_on(async move {
        let mut signals = Signals::watch()?;
        if let Some(listener) = metrics {
            crate::services::metrics::serve::spawn(
                listener,
                crate::services::metrics::process::source(ledger.clone(), limits),
            )?;
        }
        let mut host = start(&ledger, &home, &session).await?;
        if let Some(launcher) = launcher.as_mut() {
            launcher.hosting();
        }
        // The hooks of this session deliver through this process (`relay`): no ledger of their
        // own to open and close. Without the socket they deliver by themselves.
        let _relay = crate::services::relay::serve(
            &home.dir,
            &session,
            Arc::clone(&ledger),
            Arc::new(home.settings.clone()),
        )
        .inspect_err(|e| tracing::warn!(error = %format!("{e:#}"), "hooks of this session deliver without the host"))
        .ok();
        loop {
            if let Some(reason) =
                serve_until_idle(&host, &ledger, &session, idle_exit, &mut signals).await
            {
                tracing::info!(%session, reason, "headless host stopping");
                host.shutdown(reason).await;
                return anyhow::Ok(());
            }
            // Fenced. A long outage ends no host whose session has work: once the
            // ledger answers again and the fenced epoch's units were recovered, it carries on
            // under a fresh one.
            tracing::warn!(%session, pid = me.pid, "host fenced; hosting again with a fresh epoch once the ledger answers, if the session has work");
            if !quiet {
                eprintln!(
                    "hermes: the host of session {session} lost its lease and stopped its children (their units are recovered); hosting again once the ledger answers, if the session has work"
                );
            }
            match rejoin(&ledger, &home, &session, &host, &mut signals).await {
                Rejoined::Host(fresh) => host = fresh,
                Rejoined::Stopped => return Ok(()),
                Rejoined::NoWork => {
                    tracing::info!(%session, "the fenced host's session has no work; exiting");
                    if !quiet {
                        eprintln!(
                            "hermes: session {session} has no work left for its host; exiting"
                        );
                    }
                    return Ok(());
                }
                Rejoined::HeldBy(other) => {
                    held_by(&session, other, quiet);
                    return Ok(());
                }
            }
            tracing::info!(%session, pid = me.pid, "host re-registered with a fresh epoch");
            if !quiet {
                eprintln!("hermes: the host of session {session} re-registered with a fresh epoch");
            }
        }
    })?;
    Ok(Code::Ok)
}

/// Makes this process `me` the host of `session` (registering, next, hands it the session's
/// queued units). `Some(other)`: another live process hosts it, and nothing changed.
fn take_session(
    ledger: &Ledger,
    session: &SessionId,
    me: ProcessId,
) -> hermes_ledger::Result<Option<ProcessId>> {
    match ledger.claim_session_host(session, me, &OsReaper::new(), now())? {
        HostClaim::HeldBy(other) => return Ok(Some(other)),
        HostClaim::Acquired | HostClaim::AlreadyHeld => {}
    }
    tracing::info!(%session, pid = me.pid, "headless host started");
    Ok(None)
}

fn held_by(session: &SessionId, other: ProcessId, quiet: bool) {
    tracing::info!(%session, host = %other, "session already hosted; exiting");
    if !quiet {
        eprintln!(
            "hermes: session {session} is already hosted by process {}; nothing to do",
            other.pid
        );
    }
}

/// Starts the host of `session`: a fresh fencing epoch, registered, running its units.
async fn start(
    ledger: &Arc<Ledger>,
    home: &Home,
    session: &SessionId,
) -> Result<Host, hermes_registry::RegistryError> {
    rejoin::start(
        ledger,
        home,
        HostOptions {
            kind: HostKind::Headless,
            session: Some(session.clone()),
            worker: None,
        },
    )
    .await
}

/// How a fenced headless host's wait ended.
enum Rejoined {
    /// It hosts the session again under a fresh epoch.
    Host(Host),
    /// SIGTERM or SIGINT came while it waited.
    Stopped,
    /// Its session has no queued unit left to run.
    NoWork,
    /// Another live process hosts the session now.
    HeldBy(ProcessId),
}

/// Once the ledger answers and the fenced epoch's units were recovered
/// (`rejoin::await_recovery`), hosts `session` again with a fresh epoch if it has queued
/// units for a host to run.
async fn rejoin(
    ledger: &Arc<Ledger>,
    home: &Home,
    session: &SessionId,
    fenced: &Host,
    signals: &mut Signals,
) -> Rejoined {
    let me = fenced.process();
    if !rejoin::await_recovery(ledger, &home.registry(), me, fenced.host_id(), signals).await {
        return Rejoined::Stopped;
    }
    let mut backoff = Backoff::new();
    loop {
        let (ledger2, session2) = (Arc::clone(ledger), session.clone());
        let take = move || -> anyhow::Result<Option<Rejoined>> {
            if !session_has_work(&ledger2, &session2)? {
                return Ok(Some(Rejoined::NoWork));
            }
            Ok(take_session(&ledger2, &session2, me)?.map(Rejoined::HeldBy))
        };
        match rejoin::blocking(signals, take).await {
            None => return Rejoined::Stopped,
            Some(Ok(Some(done))) => return done,
            Some(Ok(None)) => {
                tokio::select! {
                    started = start(ledger, home, session) => match started {
                        Ok(host) => return Rejoined::Host(host),
                        Err(e) => tracing::warn!(error = %e, "cannot register the host again yet"),
                    },
                    () = signals.received() => return Rejoined::Stopped,
                }
            }
            Some(Err(e)) => {
                tracing::warn!(error = %format!("{e:#}"), "the ledger does not answer yet")
            }
        }
        if !backoff.pause(signals).await {
            return Rejoined::Stopped;
        }
    }
}

/// Whether `session` has queued units for its host to run (pool units are the workers').
fn session_has_work(ledger: &Ledger, session: &SessionId) -> hermes_ledger::Result<bool> {
    Ok(ledger
        .list(None, 0)?
        .queued
        .iter()
        .any(|u| u.session.as_ref() == Some(session) && u.pool().is_none()))
}

/// Keeps `host` running its units until nothing has run, queued or arrived for it for
/// `idle_exit` and it could retire (then `Some("idle_exit")`), until its session ended (seen
/// when its last running unit ends, or at SIGTERM: `Some("session_end")`), until SIGTERM/SIGINT
/// (`Some("host_stopped")`), or until it fenced itself (`None`). The caller shuts the host
/// down with the reason. A ledger that does not answer counts as work: the host stays.
pub async fn serve_until_idle(
    host: &Host,
    ledger: &Ledger,
    session: &SessionId,
    idle_exit: Duration,
    signals: &mut Signals,
) -> Option<&'static str> {
    let me = host.process();
    let mut last_busy = Instant::now();
    let mut ran = false;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            // `session end` asks this way too: the session's end is then the reason.
            () = signals.received() => {
                return Some(if has_ended(ledger, session) { SESSION_END } else { "host_stopped" });
            }
        }
        if host.is_fenced() {
            return None;
        }
        if !host.running().is_empty() {
            last_busy = Instant::now();
            ran = true;
            continue;
        }
        // The last running unit just ended: if it ended because the session did, so does the
        // host (one read each time the host falls idle, not one a poll).
        if std::mem::take(&mut ran) && has_ended(ledger, session) {
            return Some(SESSION_END);
        }
        if last_busy.elapsed() < idle_exit {
            continue;
        }
        // The ledger is asked only once the host could leave (a poll of every active unit five
        // times a second cost an idle host on PostgreSQL a statement each time): units queued
        // for it count as work, and it stays another `idle_exit`.
        let queued = has_work(ledger, me).unwrap_or_else(|e| {
            tracing::warn!(error = %format!("{e:#}"), "cannot read this host's units");
            true
        });
        if queued {
            last_busy = Instant::now();
            continue;
        }
        // Retire atomically: only if nothing is assigned to this host, and from then on
        // nothing can be (a racing `delegate` gets `HostGone` and starts a new host).
        match ledger.retire_host(me) {
            Ok(true) => return Some("idle_exit"),
            Ok(false) => tracing::info!(%session, "work arrived while leaving; staying"),
            Err(e) => tracing::warn!(error = %e, "cannot retire the host; staying"),
        }
        last_busy = Instant::now();
    }
}

/// The reason a host gives when it leaves because its session ended.
const SESSION_END: &str = "session_end";

/// Whether `session` has ended (a ledger that does not answer: not known to have).
fn has_ended(ledger: &Ledger, session: &SessionId) -> bool {
    ledger
        .session(session)
        .is_ok_and(|s| s.is_some_and(|s| s.state == hermes_ledger::SessionState::Ended))
}

/// Whether the ledger holds unfinished units for this host.
fn has_work(ledger: &Ledger, me: ProcessId) -> anyhow::Result<bool> {
    Ok(!ledger.units_of_host(me)?.is_empty())
}
