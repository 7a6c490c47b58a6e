//! The loop of `hermes top`: read the ledger (one read per refresh), build the model, draw,
//! and answer keys, until `q`, Esc, Ctrl-C or a signal.
//!
//! A refresh happens when the ledger says something changed — a PostgreSQL notification
//! (activity or a deliverable event), or redb's activity counter moving — after a key that
//! changed something, and at least every second for the clocks.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hermes_ledger::{InterruptTarget, Ledger, Liveness as _, Overview};
use ratatui::crossterm::event::{self, Event, KeyEventKind, MouseEventKind};

use super::terminal::FullScreen;
use super::ui::{KeyAction, Pane, Ui};
use super::view::{self, LogTail};
use crate::services::home::now;
use crate::services::overview::{self as model, Limits, Model};

/// How many finished units are shown (toggled with `t`).
pub const RECENT: usize = 20;
/// The clocks move at least this often.
const TICK: Duration = Duration::from_secs(1);
/// How long one wait for a key lasts; the wake flags are looked at between waits.
const POLL: Duration = Duration::from_millis(100);
/// How often redb's activity counter is read.
const COUNTER_EVERY: Duration = Duration::from_millis(250);
/// The reason a unit stopped from here is interrupted with.
pub const STOP_REASON: &str = "stopped_by_user";
/// How much of a transcript's end the log pane reads.
const LOG_TAIL_BYTES: u64 = 64 * 1024;

/// What tells the loop the ledger changed.
enum Wake {
    /// A thread follows PostgreSQL's notifications and raises the flag.
    Notified(Arc<AtomicBool>),
    /// redb: the activity counter, read every `COUNTER_EVERY`.
    Counter { last: u64, read_at: Instant },
}

impl Wake {
    fn start(ledger: &Arc<Ledger>, stop: &Arc<AtomicBool>) -> Wake {
        let listener = match ledger.listen(&[
            hermes_ledger::Listen::Activity,
            hermes_ledger::Listen::Events,
        ]) {
            Ok(Some(listener)) => listener,
            Ok(None) | Err(_) => {
                return Wake::Counter {
                    last: ledger.activity().unwrap_or(0),
                    read_at: Instant::now(),
                };
            }
        };
        let flag = Arc::new(AtomicBool::new(false));
        let (raise, stop) = (Arc::clone(&flag), Arc::clone(stop));
        std::thread::spawn(move || {
            let mut listener = listener;
            while !stop.load(Ordering::Relaxed) {
                // A failed wait is retried by the listener itself, with backoff.
                if listener
                    .wait(Duration::from_millis(500))
                    .is_ok_and(|n| !n.is_empty())
                {
                    raise.store(true, Ordering::Relaxed);
                }
            }
        });
        Wake::Notified(flag)
    }

    /// Whether the ledger changed since the last call.
    fn changed(&mut self, ledger: &Ledger) -> bool {
        match self {
            Wake::Notified(flag) => flag.swap(false, Ordering::Relaxed),
            Wake::Counter { last, read_at } => {
                if read_at.elapsed() < COUNTER_EVERY {
                    return false;
                }
                *read_at = Instant::now();
                match ledger.activity() {
                    Ok(value) if value != *last => {
                        *last = value;
                        true
                    }
                    _ => false,
                }
            }
        }
    }
}

/// Runs the view until the person quits or a signal comes.
pub fn run(ledger: &Arc<Ledger>, limits: Limits) -> anyhow::Result<()> {
    let mut screen = FullScreen::enter()?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut wake = Wake::start(ledger, &stop);
    let reaper = hermes_registry::OsReaper::new();
    let here = reaper.locality();
    let name = ledger.path().display().to_string();
    let mut ui = Ui::default();
    let (mut model, mut log) = (Model::default(), None::<LogTail>);
    let mut refreshed: Option<Instant> = None;
    let (mut dirty, mut redraw) = (true, true);
    let mut at = now();
    let result = loop {
        if screen.signalled() {
            break Ok(());
        }
        if dirty || refreshed.is_none_or(|r| r.elapsed() >= TICK) || wake.changed(ledger) {
            at = now();
            match ledger.overview(RECENT) {
                Ok(overview) => {
                    model = model::build(&overview, at, &limits, &|h| {
                        h.is_dead(&here, at, &|p| reaper.is_alive(p))
                    });
                    log = log_tail(ledger, &overview, &ui.pane);
                }
                Err(err) => ui.note = Some(format!("cannot read the ledger: {err}")),
            }
            refreshed = Some(Instant::now());
            (dirty, redraw) = (false, true);
        }
        if redraw {
            let frame = view::Screen {
                model: &model,
                ui: &ui,
                now: at,
                ledger: &name,
                log: log.as_ref(),
            };
            if let Err(err) = screen.terminal.draw(|f| view::draw(f, &frame)) {
                break Err(anyhow::Error::new(err).context("cannot draw on the terminal"));
            }
            redraw = false;
        }
        match event::poll(POLL) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(err) => break Err(anyhow::Error::new(err).context("cannot read the terminal")),
        }
        let pane = ui.pane.clone();
        match event::read() {
            Ok(Event::Key(key)) if key.kind != KeyEventKind::Release => {
                match ui.on_key(key, &model) {
                    KeyAction::Quit => break Ok(()),
                    KeyAction::Stop(id) => {
                        ui.note = Some(stop_unit(ledger, &id));
                        dirty = true;
                    }
                    KeyAction::None => {}
                }
            }
            Ok(Event::Mouse(mouse)) => {
                let rows = ui.visible(&model);
                match mouse.kind {
                    MouseEventKind::ScrollUp => ui.move_by(-1, &rows),
                    MouseEventKind::ScrollDown => ui.move_by(1, &rows),
                    _ => {}
                }
            }
            Ok(_) => {}
            Err(err) => break Err(anyhow::Error::new(err).context("cannot read the terminal")),
        }
        // A pane opened or changed: fill it now, not at the next tick.
        dirty |= ui.pane != pane && matches!(ui.pane, Pane::Log(_));
        redraw = true;
    };
    stop.store(true, Ordering::Relaxed);
    drop(screen);
    result
}

/// Stops a unit as `delegation stop` does; returns what happened, in words.
fn stop_unit(ledger: &Ledger, id: &hermes_ledger::DelegationId) -> String {
    match ledger.request_interrupt(&InterruptTarget::Delegation(id.clone()), STOP_REASON, now()) {
        Ok(done) if done.flagged.contains(id) => format!("{id}: stopping ({STOP_REASON})"),
        Ok(done) if done.cancelled.contains(id) => format!("{id}: cancelled ({STOP_REASON})"),
        Ok(_) => format!("{id}: nothing to stop"),
        Err(err) => format!("{id}: cannot stop it: {err}"),
    }
}

/// The end of the transcript of the unit in the log pane: its first unfinished child's (else
/// its first child's), read here; on another machine, what the ledger keeps of its output.
fn log_tail(ledger: &Ledger, overview: &Overview, pane: &Pane) -> Option<LogTail> {
    let Pane::Log(id) = pane else {
        return None;
    };
    let view = overview
        .running
        .iter()
        .chain(&overview.queued)
        .chain(&overview.recent)
        .find(|v| &v.unit.id == id)?;
    let child = view
        .children
        .iter()
        .find(|c| !c.status.is_terminal() && c.transcript.is_some())
        .or_else(|| view.children.iter().find(|c| c.transcript.is_some()))?;
    let path = child.transcript.clone()?;
    let task = format!("task {}/{}", child.index + 1, view.children.len());
    match read_end(&path) {
        Some(text) => Some(LogTail {
            title: format!("{task} {path}"),
            lines: lines_of(&text),
        }),
        None => {
            let (text, machine) = ledger.stored_output(id, child.index).ok()?;
            Some(LogTail {
                title: format!(
                    "{task}: the full log is on {}; the ledger's copy of its last output",
                    machine.unwrap_or_else(|| "the machine that ran it".to_owned())
                ),
                lines: lines_of(&text.unwrap_or_default()),
            })
        }
    }
}

fn read_end(path: &str) -> Option<String> {
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)))
        .ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

fn lines_of(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| hermes_formatter::terminal_safe(l).replace('\t', "    "))
        .collect()
}
