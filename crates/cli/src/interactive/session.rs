//! Starting or resuming the session, and its turns.

use std::collections::HashSet;
use std::hash::{BuildHasher as _, Hasher as _};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context as _;
use hermes_ledger::{
    DelegationId, EventState, HostClaim, HostKind, InterruptTarget, Ledger, ProcessId, SessionId,
    SessionState, Sweep, UnitStatus,
};
use hermes_registry::{
    DispatchRequest, Host, HostOptions, OsReaper, SystemClock, housekeeping, procs,
};
use hermes_router::{Boundary, Router, RouterConfig, RouterError};
use hermes_stdx::one_line;
use rustyline::error::ReadlineError;
use rustyline::history::FileHistory;
use rustyline::{Config, DefaultEditor, Editor};
use tokio::runtime::Runtime;
use tokio::sync::watch;

use super::console::{self, Console, ExternalPrinter};
use super::line::{self, LineCommand, Parsed};
use super::progress::{self, Announced};
use super::{foreground, poller, views};
use crate::args::DispatchArgs;
use crate::services::delivery::printed;
use crate::services::dispatch::draft::Draft;
use crate::services::exit::{Code, fail};
use crate::services::home::{Home, now};
use crate::services::reports;

const PROMPT: &str = "hermes> ";
/// Consumer names of interactive sessions: `interactive:<pid>:<start time>`.
const CONSUMER_PREFIX: &str = "interactive:";
/// Lines kept in `$HERMES_HOME/history`.
const HISTORY_LINES: usize = 1000;

/// Runs the interactive session: a new one, or `resume` re-attached.
pub fn run(resume: Option<&str>) -> anyhow::Result<Code> {
    let home = Home::load()?;
    // A resumed session's queued units wait for this process, which hosts it.
    let ledger = match resume.and_then(|raw| SessionId::new(raw).ok()) {
        Some(resumed) => home.open_ledger_and_sweep_as_host(&resumed)?,
        None => home.open_ledger_and_sweep()?,
    };
    let me = procs::current_host();
    let (session, greeting) = match resume {
        Some(raw) => resume_session(&ledger, &home.registry(), raw, me)?,
        None => {
            let id = new_session(&ledger, me)?;
            let text = format!(
                "session {id} started · type help for the commands · exit or Ctrl-D ends it (resume later with hermes --resume {id})\n"
            );
            (id, text)
        }
    };
    let runtime = crate::services::home::runtime()?;
    let host = runtime.block_on(Host::start(
        ledger.clone(),
        home.registry(),
        Arc::new(SystemClock),
        HostOptions {
            kind: HostKind::Interactive,
            session: Some(session.clone()),
            worker: None,
        },
    ))?;
    let router = Arc::new(Router::new(
        ledger.clone(),
        RouterConfig::from_settings(
            session.clone(),
            format!("{CONSUMER_PREFIX}{}:{}", me.pid, me.start_time),
            &home.settings,
        ),
    ));
    let interrupts = foreground::watch_interrupts(&runtime)?;
    let mut editor = editor(&home)?;
    let printer: Option<ExternalPrinter> = editor
        .create_external_printer()
        .ok()
        .map(|p| Box::new(p) as ExternalPrinter);
    let console = Arc::new(Console::new(printer));
    let ended = Arc::new(AtomicBool::new(false));
    let announced: Announced = Arc::new(Mutex::new(HashSet::new()));
    let (stop_tx, stop_rx) = watch::channel(false);
    runtime.spawn(progress::watch_units(
        host.clone(),
        console.clone(),
        router.clone(),
        announced.clone(),
        stop_rx,
    ));
    let poller = poller::spawn(router.clone(), console.clone(), ended.clone())
        .context("cannot start the idle delivery thread")?;
    let mut turns = Turns {
        history: home.dir.join("history"),
        max_running: home.settings.delegation.max_concurrent_children,
        session,
        ledger,
        runtime,
        host,
        router,
        console,
        ended,
        announced,
        interrupts,
        poller: Some(poller),
    };
    say(&greeting);
    let result = turns.run_turns_until_exit(&mut editor);
    let _ = stop_tx.send(true);
    turns.stop_poller();
    if result.is_err() || matches!(result, Ok(Code::SessionEnded)) {
        turns
            .runtime
            .block_on(turns.host.shutdown("interactive_host_stopped"));
    }
    result
}

/// The line editor, with its history loaded.
fn editor(home: &Home) -> anyhow::Result<DefaultEditor> {
    let config = Config::builder()
        .max_history_size(HISTORY_LINES)
        .and_then(|b| b.history_ignore_dups(true))
        .map(|b| b.auto_add_history(false).build())
        .context("cannot configure the line editor")?;
    let mut editor: Editor<(), FileHistory> =
        Editor::with_config(config).context("cannot start the line editor")?;
    let history = home.dir.join("history");
    if history.exists()
        && let Err(e) = editor.load_history(&history)
    {
        tracing::warn!(path = %history.display(), error = %e, "cannot read the history");
    }
    Ok(editor)
}

/// Writes to stdout (the console is paused whenever the main thread writes).
fn say(text: &str) {
    if !text.is_empty() {
        console::print_plain(text);
    }
}

/// A fresh session id, hosted by this process.
fn new_session(ledger: &Ledger, me: ProcessId) -> anyhow::Result<SessionId> {
    loop {
        let bits = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let id = SessionId::new(format!("sess_{:012x}", bits & 0xffff_ffff_ffff))
            .map_err(|e| anyhow::anyhow!("cannot make a session id: {e}"))?;
        if ledger.session(&id)?.is_some() {
            continue;
        }
        match ledger.claim_session_host(&id, me, &OsReaper::new(), now())? {
            HostClaim::Acquired | HostClaim::AlreadyHeld => return Ok(id),
            HostClaim::HeldBy(_) => continue,
        }
    }
}

/// Re-attaches to `raw`: refused if it is unknown, ended, or hosted by another live process.
/// The units its dead host was running are finalized (`unknown`), claims its dead consumer held
/// are given back, and what waited is delivered at the first boundary.
fn resume_session(
    ledger: &Ledger,
    registry: &hermes_registry::Config,
    raw: &str,
    me: ProcessId,
) -> anyhow::Result<(SessionId, String)> {
    let id = SessionId::new(raw.to_owned()).map_err(|e| fail(Code::Usage, e.to_string()))?;
    match ledger.session(&id)? {
        None => {
            return Err(fail(
                Code::NotFound,
                format!("no session {id} in this hermes home; start a new one with plain hermes"),
            ));
        }
        Some(s) if s.state == SessionState::Ended => {
            return Err(fail(
                Code::SessionEnded,
                format!("session {id} has ended; start a new one with plain hermes"),
            ));
        }
        Some(_) => {}
    }
    match ledger.claim_session_host(&id, me, &OsReaper::new(), now())? {
        HostClaim::Acquired | HostClaim::AlreadyHeld => {}
        HostClaim::HeldBy(other) => {
            return Err(fail(
                Code::SessionEnded,
                format!(
                    "session {id} is hosted by another live process (pid {}); leave that one first, or use hermes delegate/drain --session {id}",
                    other.pid
                ),
            ));
        }
    }
    let report = housekeeping::sweep(ledger, &OsReaper::new(), registry, now(), Sweep::Now)?;
    let mut finalized = 0;
    for unit in &report.finalized {
        if ledger
            .delegation(unit)?
            .is_some_and(|u| u.session.as_ref() == Some(&id))
        {
            finalized += 1;
        }
    }
    let released = release_dead_claims(ledger, &id, me)?;
    let mut text = format!("session {id} resumed · type help for the commands");
    if finalized > 0 {
        text.push_str(&format!(
            " · {finalized} unit(s) its previous host was running ended as unknown"
        ));
    }
    if released > 0 {
        text.push_str(&format!(
            " · {released} result(s) the previous host had claimed are offered again"
        ));
    }
    text.push('\n');
    Ok((id, text))
}

/// Gives back the claims an earlier interactive process of this session held when it died, so
/// its results are delivered now rather than when the lease runs out.
fn release_dead_claims(
    ledger: &Ledger,
    session: &SessionId,
    me: ProcessId,
) -> anyhow::Result<usize> {
    let mut tokens = Vec::new();
    for event in ledger.open_events(session)? {
        if event.state != EventState::Claimed {
            continue;
        }
        let Some(lease) = &event.lease else { continue };
        let Some(process) = consumer_process(&lease.consumer) else {
            continue;
        };
        if process != me
            && !hermes_registry::procs::is_alive(process)
            && !tokens.contains(&lease.token)
        {
            tokens.push(lease.token);
        }
    }
    let mut released = 0;
    for token in tokens {
        match ledger.release(token, now()) {
            Ok(transitions) => released += transitions.len(),
            Err(e) => {
                tracing::info!(%token, error = %e, "a dead consumer's claim was settled meanwhile")
            }
        }
    }
    Ok(released)
}

/// The process behind an interactive consumer name.
fn consumer_process(consumer: &str) -> Option<ProcessId> {
    let rest = consumer.strip_prefix(CONSUMER_PREFIX)?;
    let (pid, start) = rest.split_once(':')?;
    Some(ProcessId {
        pid: pid.parse().ok()?,
        start_time: start.parse().ok()?,
    })
}

/// Whether the session goes on after a turn.
enum Flow {
    Continue,
    Exit(Code),
}

/// Everything a turn needs.
struct Turns {
    history: PathBuf,
    max_running: u32,
    session: SessionId,
    ledger: Arc<Ledger>,
    runtime: Runtime,
    host: Host,
    router: Arc<Router>,
    console: Arc<Console>,
    ended: Arc<AtomicBool>,
    announced: Announced,
    interrupts: watch::Sender<u64>,
    poller: Option<JoinHandle<()>>,
}

impl Turns {
    /// The prompt loop: reads a line, runs it as a turn, delivers what is ready after it, until
    /// the user exits or the session is ended elsewhere.
    fn run_turns_until_exit(&mut self, editor: &mut DefaultEditor) -> anyhow::Result<Code> {
        // What waited (a resumed session) is delivered before the first prompt.
        if let Flow::Exit(code) = self.end_of_turn() {
            return Ok(code);
        }
        loop {
            self.console.resume();
            let read = editor.readline(PROMPT);
            let router = self.router.clone();
            self.console.pause(&|| router.interrupt_waits());
            if self.ended.load(Ordering::SeqCst) {
                return Ok(self.ended_elsewhere());
            }
            let flow = match read {
                Ok(text) => {
                    self.remember(editor, &text);
                    self.turn(editor, &text)
                }
                // Ctrl-C at the prompt drops the line, not the session.
                Err(ReadlineError::Interrupted) => Flow::Continue,
                Err(ReadlineError::Eof) => {
                    say("exit\n");
                    self.exit(editor)
                }
                Err(e) => return Err(e).context("cannot read from the terminal"),
            };
            if let Flow::Exit(code) = flow {
                return Ok(code);
            }
            if let Flow::Exit(code) = self.end_of_turn() {
                return Ok(code);
            }
        }
    }

    /// Adds a line to the history, on disk at once (a crash keeps it).
    fn remember(&self, editor: &mut DefaultEditor, text: &str) {
        if text.trim().is_empty() {
            return;
        }
        if editor.add_history_entry(text).unwrap_or(false)
            && let Err(e) = editor.append_history(&self.history)
        {
            tracing::warn!(path = %self.history.display(), error = %e, "cannot save the history");
        }
    }

    /// Notes queued during the turn, then the post-turn delivery.
    fn end_of_turn(&self) -> Flow {
        say(&self.console.take_notes());
        self.deliver(Boundary::Turn)
    }

    /// Delivers what is ready at `boundary`, printed straight to stdout (the console is paused).
    fn deliver(&self, boundary: Boundary) -> Flow {
        match printed::take(&self.router, boundary) {
            Ok(claimed) => {
                printed::present(&self.router, claimed, boundary, console::print_plain);
                Flow::Continue
            }
            Err(RouterError::SessionEnded(_)) => Flow::Exit(self.ended_elsewhere()),
            Err(e) => {
                say(&format!("hermes: cannot deliver results now: {e}\n"));
                Flow::Continue
            }
        }
    }

    fn ended_elsewhere(&self) -> Code {
        eprintln!(
            "hermes: session {} was ended by another process (hermes session end); leaving",
            self.session
        );
        Code::SessionEnded
    }

    fn turn(&mut self, editor: &mut DefaultEditor, text: &str) -> Flow {
        let command = match line::parse(text) {
            Parsed::Empty => return Flow::Continue,
            Parsed::Invalid(why) => {
                say(&format!("hermes: {why}\n"));
                return Flow::Continue;
            }
            Parsed::Command(command) => *command,
        };
        let done = match command {
            LineCommand::Exit => return self.exit(editor),
            LineCommand::Help => Ok(line::HELP.to_owned()),
            LineCommand::Delegate { dispatch } => self.delegate(&dispatch),
            LineCommand::Run { command } => return self.foreground(&command),
            LineCommand::Agents => {
                views::agents(&self.ledger, &self.host, &self.session, self.max_running)
            }
            LineCommand::Status { id } => {
                parse_id(&id).and_then(|id| views::status(&self.ledger, &self.host, &id))
            }
            LineCommand::Log { id, task } => {
                parse_id(&id).and_then(|id| views::log(&self.ledger, &id, task))
            }
            LineCommand::Stop { target } => self.stop(&target),
        };
        match done {
            Ok(text) => say(&text),
            Err(e) => say(&format!("hermes: {}\n", one_line(&format!("{e:#}")))),
        }
        Flow::Continue
    }

    fn delegate(&self, dispatch: &DispatchArgs) -> anyhow::Result<String> {
        if dispatch.tasks.as_deref() == Some("-") {
            return Err(anyhow::anyhow!(
                "--tasks - reads standard input, which is this prompt; give the tasks file's path"
            ));
        }
        let mut draft = Draft::from_args(dispatch)?;
        // Without --goal the goal is the command line, quoted the way it was typed.
        if draft.goal.is_none() && draft.batch.is_none() && !draft.command.is_empty() {
            draft.goal = shlex::try_join(draft.command.iter().map(String::as_str)).ok();
        }
        let spec = draft.build()?;
        crate::services::dispatch::draft::check_programs_here(&spec)?;
        let goal = hermes_formatter::one_line(&spec.goal, 80);
        let dispatched = self.runtime.block_on(
            self.host
                .dispatch(DispatchRequest::background(self.session.clone(), spec)),
        )?;
        let unit = &dispatched.delegation;
        let mut text = if let Some(pool) = unit.pool() {
            let workers = reports::live_workers(&self.ledger, pool).unwrap_or(0);
            format!(
                "{} queued in pool {pool} (position {}, {workers} live worker(s)): {goal}\n",
                unit.id,
                dispatched.queue_position.unwrap_or(0)
            )
        } else if unit.status == UnitStatus::Queued {
            format!(
                "{} {} (position {}): {goal}\n",
                unit.id,
                crate::services::color::status("queued", 0),
                dispatched.queue_position.unwrap_or(0)
            )
        } else {
            self.announced
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(unit.id.clone());
            format!(
                "{} {}: {} task(s) · {goal}\n",
                unit.id,
                crate::services::color::status("running", 0),
                unit.task_count()
            )
        };
        if let Some(first) = dispatched.transcripts.first() {
            text.push_str(&format!("  live transcript: {}", first.display()));
            if dispatched.transcripts.len() > 1 {
                text.push_str(&format!(" (+{} more)", dispatched.transcripts.len() - 1));
            }
            text.push('\n');
        }
        Ok(text)
    }

    /// `run`: the command's own output, its summary line, then `inject` results with the
    /// tool-boundary carrier.
    fn foreground(&self, command: &[String]) -> Flow {
        match foreground::run(&self.runtime, command, &self.session, &self.interrupts) {
            Ok(summary) => say(&format!("{summary}\n")),
            Err(e) => say(&format!("hermes: {}\n", one_line(&format!("{e:#}")))),
        }
        self.deliver(Boundary::Tool)
    }

    fn stop(&self, target: &str) -> anyhow::Result<String> {
        let target = if target == "all" {
            InterruptTarget::Session(self.session.clone())
        } else {
            let id = parse_id(target)?;
            match self.ledger.delegation(&id)? {
                Some(unit) if unit.session.as_ref() == Some(&self.session) => {}
                Some(_) => {
                    return Err(anyhow::anyhow!(
                        "{id} belongs to another session; stop it with hermes delegation stop {id}"
                    ));
                }
                None => return Err(anyhow::anyhow!("no delegation {id}")),
            }
            InterruptTarget::Delegation(id)
        };
        let done = self
            .runtime
            .block_on(self.host.interrupt(target, "stopped_by_user"))?;
        Ok(reports::stop_text(&done, reports::StopWording::Plain))
    }

    /// `exit` and Ctrl-D: asks first while units run or wait; then delivers what is ready, ends
    /// the session (its units are interrupted with reason `session_end`) and stops the host.
    fn exit(&mut self, editor: &mut DefaultEditor) -> Flow {
        let busy = match self.ledger.list(Some(&self.session), 0) {
            Ok(listing) => listing.running.len() + listing.queued.len(),
            Err(e) => {
                say(&format!("hermes: {e}\n"));
                0
            }
        };
        if busy > 0 {
            let question = format!(
                "{busy} unit(s) still running or queued; stop them and end the session? [y/N] "
            );
            match editor.readline(&question) {
                Ok(answer) if matches!(answer.trim(), "y" | "Y" | "yes") => {}
                // The input is gone: nobody is left to ask.
                Err(ReadlineError::Eof) => say("\n"),
                _ => {
                    say("the session goes on\n");
                    return Flow::Continue;
                }
            }
        }
        if let Flow::Exit(code) = self.deliver(Boundary::Turn) {
            return Flow::Exit(code);
        }
        self.stop_poller();
        let end = match self.ledger.end_session(&self.session, now()) {
            Ok(end) => end,
            Err(e) => {
                say(&format!(
                    "hermes: cannot end session {}: {e}\n",
                    self.session
                ));
                self.runtime
                    .block_on(self.host.shutdown("interactive_host_stopped"));
                return Flow::Exit(crate::services::exit::code_of(&anyhow::Error::new(e)));
            }
        };
        let running = self.host.running();
        let interrupted = self.runtime.block_on(async {
            let _ = self
                .host
                .interrupt(
                    InterruptTarget::Session(self.session.clone()),
                    "session_end",
                )
                .await;
            let wait_all = async {
                for id in &running {
                    self.host.wait(id).await;
                }
            };
            let limit = self.host.config().delegation.kill_grace + Duration::from_secs(5);
            let finished = tokio::time::timeout(limit, wait_all).await.is_ok();
            self.host.shutdown("session_end").await;
            finished
        });
        if !interrupted {
            say("hermes: some children did not stop in time; the next recovery sweep kills them\n");
        }
        let mut text = format!("session {} ended", self.session);
        if !end.interrupted.is_empty() {
            text.push_str(&format!(", {} unit(s) interrupted", end.interrupted.len()));
        }
        if !end.cancelled.is_empty() {
            text.push_str(&format!(
                ", {} queued unit(s) cancelled",
                end.cancelled.len()
            ));
        }
        text.push('\n');
        say(&text);
        Flow::Exit(Code::Ok)
    }

    fn stop_poller(&mut self) {
        self.console.stop();
        self.router.interrupt_waits();
        if let Some(poller) = self.poller.take() {
            // The poller ends its round within one wait; keep interrupting until it has.
            while !poller.is_finished() {
                self.router.interrupt_waits();
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = poller.join();
        }
    }
}

fn parse_id(id: &str) -> anyhow::Result<DelegationId> {
    DelegationId::new(id).map_err(|e| anyhow::anyhow!("{e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_names_carry_the_process() {
        let p = consumer_process("interactive:42:1234").expect("parses");
        assert_eq!(
            p,
            ProcessId {
                pid: 42,
                start_time: 1234
            }
        );
        assert_eq!(consumer_process("drain:42"), None);
        assert_eq!(consumer_process("interactive:x:1"), None);
    }
}
