//! A session's headless host (`hermes host --session S`): whether one lives, starting one, and
//! starting one for a session a recovery sweep left with queued units and no host (SPEC §10:
//! the queued units of a dead host wait for the next host of their session, and without a new
//! dispatch nothing else would start one).

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use ledger::{Channel, Ledger, ProcessId, RecoveryReport, SessionId, UnitStatus};

use crate::exit::{Code, fail};
use crate::home::{Home, now};

/// How long a command waits for a headless host it started to claim the session.
const HOST_START_LIMIT: Duration = Duration::from_secs(10);

/// Starts a host for every session whose queued units `report` handed over to no host (their
/// host died and the session had no other), except `hosting`, the session this process is
/// about to host itself. A failure is logged: the units wait, as they did, for the next
/// dispatch or sweep.
pub fn host_orphans(
    home: &Home,
    ledger: &Ledger,
    report: &RecoveryReport,
    hosting: Option<&SessionId>,
) {
    let mut sessions: BTreeSet<SessionId> = BTreeSet::new();
    for id in &report.adopted {
        match ledger.delegation(id) {
            Ok(Some(unit))
                if unit.status == UnitStatus::Queued
                    && unit.host.is_none()
                    && unit.channel == Channel::Background
                    && unit.spec.pool.is_none() =>
            {
                sessions.extend(unit.session.filter(|s| Some(s) != hosting));
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(delegation = %id, error = %e, "cannot read a handed-over unit")
            }
        }
    }
    for session in sessions {
        let started = live(ledger, &session).and_then(|host| match host {
            Some(host) => Ok(host),
            None => start(home, ledger, &session),
        });
        match started {
            Ok(host) => {
                tracing::info!(%session, %host, "a host runs the queued units of a dead host")
            }
            Err(e) => {
                tracing::warn!(%session, error = %format!("{e:#}"), "cannot start a host for queued units")
            }
        }
    }
}

/// S's host, if it is alive (its lease and, from this locality, its process).
pub fn live(ledger: &Ledger, session: &SessionId) -> anyhow::Result<Option<ProcessId>> {
    let Some(host) = ledger.session(session)?.and_then(|s| s.host) else {
        return Ok(None);
    };
    Ok(ledger
        .host_is_live(host, &registry::OsReaper::new(), now())?
        .then_some(host))
}

/// Starts `hermes host --session S` detached, and waits until it (or another) hosts S.
pub fn start(home: &Home, ledger: &Ledger, session: &SessionId) -> anyhow::Result<ProcessId> {
    let exe = std::env::current_exe().context("cannot find the hermes executable")?;
    let log_path = home.host_log(session.as_str());
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("cannot open {}", log_path.display()))?;
    let log2 = log.try_clone().context("cannot share the host log")?;
    let mut command = Command::new(exe);
    // The host starts with the user's mask, which it gives to the children it runs.
    crate::home::with_user_umask(&mut command);
    let mut child = command
        .args(["host", "--session", session.as_str(), "-v"])
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log2))
        .process_group(0)
        .spawn()
        .context("cannot start the headless host")?;
    let started = Instant::now();
    loop {
        // Hosting counts once the host has registered too: its record says which machine it is
        // on, which admission needs (capacity is per machine).
        if let Some(host) = live(ledger, session)?
            && ledger.host(host)?.is_some()
        {
            // The host outlives us; reap it if it already ended so no zombie is left meanwhile.
            let _ = child.try_wait();
            return Ok(host);
        }
        if let Ok(Some(status)) = child.try_wait()
            && live(ledger, session)?.is_none()
        {
            return Err(fail(
                Code::WorkFailed,
                format!(
                    "the headless host for session {session} exited ({status}) before taking the session; see {}",
                    log_path.display()
                ),
            ));
        }
        if started.elapsed() > HOST_START_LIMIT {
            return Err(fail(
                Code::WorkFailed,
                format!(
                    "the headless host for session {session} did not start within {}s; see {}",
                    HOST_START_LIMIT.as_secs(),
                    log_path.display()
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
