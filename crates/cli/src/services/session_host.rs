//! A session's headless host (`hermes host --session S`): whether one lives, starting one,
//! handing it a unit (`into_session_host`, for `delegate` and `hermes mcp`), and
//! starting one for each session a recovery sweep of this machine left with queued units and
//! no host (the queued units of a dead host wait for the next host of their
//! session; without a new dispatch into it, nothing else would start one).

use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hermes_ledger::{
    Channel, DelegationId, Ledger, LedgerError, NewDelegation, ProcessId, RecoveryReport, SessionId,
};
use hermes_registry::RegistryError;

use crate::services::exit::{Code, fail};
use crate::services::home::{Home, now};

/// What a dispatch answer says happens to the unit when the agent that dispatched it exits
/// (`on_agent_exit`): `outlives` when it runs in the session's headless host, not in the
/// dispatching process.
pub fn exit_note(settings: &hermes_settings::Settings, outlives: bool) -> &'static str {
    match (outlives, settings.session.on_agent_exit) {
        (false, _) => {
            "end: no hook has named this conversation, so this server runs the work and it stops when the agent exits"
        }
        (true, hermes_settings::AgentExit::Detach) => {
            "detach: the agent's exit stops nothing; the result waits for the conversation's next process (--resume) and arrives at its first boundary"
        }
        (true, hermes_settings::AgentExit::End) => {
            "end: the agent's session end ends the session (session.on_agent_exit = \"end\"): running work is interrupted, undelivered results are dropped"
        }
    }
}

/// How long a command waits for a headless host it started to claim the session.
const HOST_START_LIMIT: Duration = Duration::from_secs(10);

/// Starts a host for every session `report` left with queued units and no host
/// ([`RecoveryReport::hostless`]: their host, of this machine, is gone with its process), except
/// `hosting`, the session this process is about to host itself. A failure is logged: the units
/// wait, as before, for the next sweep or dispatch.
pub fn host_orphans(
    home: &Home,
    ledger: &Ledger,
    report: &RecoveryReport,
    hosting: Option<&SessionId>,
) {
    for session in report.hostless.iter().filter(|s| Some(*s) != hosting) {
        let started = live(ledger, session).and_then(|host| match host {
            Some(host) => Ok(host),
            None => start(home, ledger, session),
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
    Ok(ledger
        .session_with_live_host(session, &hermes_registry::OsReaper::new(), now())?
        .1)
}

/// The last error line a host wrote to its log from byte `from` on (its own run), without the
/// `hermes: ` prefix; warnings are not errors.
fn host_error(log: &std::path::Path, from: u64) -> Option<String> {
    use std::io::{Read as _, Seek as _};
    let mut file = std::fs::File::open(log).ok()?;
    file.seek(std::io::SeekFrom::Start(from)).ok()?;
    let mut text = String::new();
    // A host that failed at once wrote a few lines; a flood is not read whole.
    file.take(64 * 1024).read_to_string(&mut text).ok()?;
    text.lines()
        .rev()
        .filter_map(|line| line.strip_prefix("hermes: "))
        .find(|line| !line.starts_with("warning:"))
        .map(str::to_owned)
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
    // Where this host's lines begin in the log: what it says if it cannot start is reported here.
    let log_start = log.metadata().map_or(0, |m| m.len());
    let log2 = log.try_clone().context("cannot share the host log")?;
    let mut command = Command::new(exe);
    // The host starts with the user's mask, which it gives to the children it runs.
    crate::services::home::with_user_umask(&mut command);
    // Started for the conversation of this process's agent, it gets what of the agent's
    // environment this process lacks (an MCP server's is filtered): its children run with
    // the person's environment, whichever door dispatched them.
    command.envs(agent_environment(home, session));
    let mut child = command
        .args(["host", "--session", session.as_str(), "--detach", "-v"])
        .env("HERMES_HOME", &home.dir)
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
            // The host's own error (a ledger it could not reach: too many connections, an
            // outage) is the reason, and its exit code says which kind.
            let code = match status.code() {
                Some(6) => Code::LedgerUnavailable,
                _ => Code::WorkFailed,
            };
            let why = host_error(&log_path, log_start).map_or_else(
                || format!("exited ({status})"),
                |why| format!("could not start: {why}"),
            );
            return Err(fail(
                code,
                format!(
                    "the headless host for session {session} {why}; see {}",
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

/// What of the environment of this process's agent a host for `session` gets: the variables
/// this process lacks, when `session` is the agent's conversation (its binding names it).
fn agent_environment(
    home: &Home,
    session: &SessionId,
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let agent = crate::services::binding::agent_process();
    let ours = crate::services::binding::Bindings::new(&home.dir)
        .read(agent)
        .is_some_and(|b| {
            b.conversation(session.as_str()).is_some()
                || b.provisional.as_deref() == Some(session.as_str())
        });
    if !ours {
        return Vec::new();
    }
    crate::services::agent_proc::environment_missing_here(agent)
}

/// Records a background unit of `session` for the session's live host, starting a headless
/// `hermes host --session S` first when it has none (the one way `delegate` and `hermes mcp`
/// hand a named session's work to a host that outlives them). `looked`: the session's live
/// host as the caller just read it (`Some(None)`: none), so the first try reads it no more.
/// Returns the host and the admission.
pub fn into_session_host(
    home: &Home,
    ledger: &Ledger,
    config: &hermes_registry::Config,
    session: &SessionId,
    spec: hermes_ledger::DispatchSpec,
    id: Option<DelegationId>,
    mut looked: Option<Option<ProcessId>>,
) -> anyhow::Result<(ProcessId, hermes_ledger::Admission)> {
    // A host may retire between our look and our dispatch; the ledger then refuses the unit
    // (`HostGone`) and we start a new host. Two tries are enough: a fresh host waits
    // `idle_exit_seconds` before it may retire.
    let mut attempts = 0;
    loop {
        let live = match looked.take() {
            Some(live) => live,
            None => live(ledger, session)?,
        };
        let host = match live {
            Some(host) => host,
            None => start(home, ledger, session)?,
        };
        let new = NewDelegation {
            id: id.clone(),
            session: Some(session.clone()),
            channel: Channel::Background,
            spec: spec.clone(),
            host: Some(host),
            transcript_root: None,
        };
        match hermes_registry::record_dispatch(ledger, config, new, now()) {
            Err(RegistryError::Ledger(LedgerError::HostGone(gone))) if attempts < 2 => {
                tracing::info!(%session, host = %gone, "the session's host retired; starting another");
                attempts += 1;
            }
            result => return Ok((host, result?)),
        }
    }
}
