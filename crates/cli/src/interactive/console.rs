//! The terminal, shared by the prompt (the main thread), the idle poller and progress notes.
//!
//! The console is either *idle* (the prompt waits for a line: the poller may print above it,
//! through rustyline's external printer, which keeps the typed line intact) or *paused* (a turn
//! is being handled: only the main thread writes, straight to stdout). Pausing waits until the
//! poller has finished the round it is in, so nothing it claimed is ever printed inside a turn's
//! output: a round that finds the console paused gives its claims back unshown.

use std::io::Write as _;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How long a pause waits for the poller before going ahead anyway (the poller is stuck
/// writing to a terminal nobody reads).
const PAUSE_LIMIT: Duration = Duration::from_secs(5);
/// How often a pause wakes the poller again while waiting for it.
const PAUSE_NUDGE: Duration = Duration::from_millis(20);

/// Prints above the prompt.
pub type ExternalPrinter = Box<dyn rustyline::ExternalPrinter + Send>;

#[derive(Default)]
struct State {
    /// A turn is being handled: the poller must not print.
    paused: bool,
    /// The poller is inside a round (it may hold claims).
    busy: bool,
    /// The session is over: the poller stops.
    stopped: bool,
    /// Progress notes waiting to be printed.
    notes: Vec<String>,
}

/// The terminal of one interactive session.
pub struct Console {
    state: Mutex<State>,
    changed: Condvar,
    printer: Mutex<Option<ExternalPrinter>>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console").finish_non_exhaustive()
    }
}

/// What the poller may print through, while its round lasts.
pub struct Printer<'a> {
    external: &'a mut Option<ExternalPrinter>,
}

impl Printer<'_> {
    /// Prints `text` (whole lines) above the prompt; false if it could not be written.
    pub fn print(&mut self, text: &str) -> bool {
        if text.is_empty() {
            return true;
        }
        match self.external.as_mut() {
            Some(printer) => printer.print(text.to_owned()).is_ok(),
            None => print_plain(text),
        }
    }
}

/// Writes `text` to stdout and flushes it.
pub fn print_plain(text: &str) -> bool {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}

impl Console {
    /// A console printing above the prompt through `printer`, or plainly to stdout without one
    /// (standard input or output is not a terminal).
    pub fn new(printer: Option<ExternalPrinter>) -> Console {
        Console {
            state: Mutex::new(State {
                paused: true,
                ..State::default()
            }),
            changed: Condvar::new(),
            printer: Mutex::new(printer),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The prompt is about to wait for a line: the poller may print.
    pub fn resume(&self) {
        self.state().paused = false;
        self.changed.notify_all();
    }

    /// A turn begins: waits until the poller is out of its round. `wake` makes a waiting
    /// poller return early (it is called again every few milliseconds while waiting).
    pub fn pause(&self, wake: &dyn Fn()) {
        let mut state = self.state();
        state.paused = true;
        let started = Instant::now();
        while state.busy && started.elapsed() < PAUSE_LIMIT {
            wake();
            state = self
                .changed
                .wait_timeout(state, PAUSE_NUDGE)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        if state.busy {
            tracing::warn!("the idle poller did not finish its round; going ahead");
        }
    }

    /// Stops the poller for good (it finishes its round first, printing nothing).
    pub fn stop(&self) {
        let mut state = self.state();
        state.stopped = true;
        state.paused = true;
        self.changed.notify_all();
    }

    /// Queues a progress note: printed above the prompt while idle, else at the end of the turn.
    pub fn note(&self, text: String) {
        self.state().notes.push(text);
    }

    /// Takes the queued notes (the main thread prints them at the end of a turn).
    pub fn take_notes(&self) -> String {
        join_notes(std::mem::take(&mut self.state().notes))
    }

    /// Poller: waits until idle delivery is allowed and enters a round; false once stopped.
    pub fn enter_round(&self) -> bool {
        let mut state = self.state();
        while state.paused && !state.stopped {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if state.stopped {
            return false;
        }
        state.busy = true;
        true
    }

    /// Poller: ends the round. `present` gets a printer if the console is still idle (it prints
    /// and settles what it claimed), or `None` if a turn began meanwhile (it gives its claims
    /// back unshown). Queued notes are printed first.
    pub fn finish_round<R>(&self, present: impl FnOnce(Option<&mut Printer<'_>>) -> R) -> R {
        let mut state = self.state();
        let result = if state.paused || state.stopped {
            present(None)
        } else {
            let notes = join_notes(std::mem::take(&mut state.notes));
            let mut external = self.printer.lock().unwrap_or_else(PoisonError::into_inner);
            let mut printer = Printer {
                external: &mut external,
            };
            printer.print(&notes);
            present(Some(&mut printer))
        };
        state.busy = false;
        drop(state);
        self.changed.notify_all();
        result
    }
}

fn join_notes(notes: Vec<String>) -> String {
    let mut text = String::new();
    for note in notes {
        text.push_str(&note);
        if !note.ends_with('\n') {
            text.push('\n');
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn a_round_that_outlives_the_idle_time_prints_nothing() {
        let console = Arc::new(Console::new(None));
        console.resume();
        assert!(console.enter_round());
        let paused = Arc::new(AtomicBool::new(false));
        let pauser = {
            let (console, paused) = (console.clone(), paused.clone());
            std::thread::spawn(move || {
                console.pause(&|| {});
                paused.store(true, Ordering::SeqCst);
            })
        };
        // The pause waits for the round; once it has begun, the round may not print.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !console.state().paused {
            assert!(Instant::now() < deadline, "pause never began");
            std::thread::yield_now();
        }
        assert!(!paused.load(Ordering::SeqCst));
        let shown = console.finish_round(|printer| printer.is_some());
        assert!(!shown);
        pauser.join().expect("pauser");
        assert!(paused.load(Ordering::SeqCst));
    }

    #[test]
    fn notes_wait_for_whoever_prints_next() {
        let console = Console::new(None);
        console.note("one".into());
        console.note("two\n".into());
        assert_eq!(console.take_notes(), "one\ntwo\n");
        assert_eq!(console.take_notes(), "");
    }

    #[test]
    fn a_stopped_console_ends_the_poller() {
        let console = Console::new(None);
        console.stop();
        assert!(!console.enter_round());
    }
}
