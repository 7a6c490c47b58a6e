//! The terminal while `hermes top` runs: raw mode, the alternate screen and mouse reports on
//! entry, and everything put back on every way out — a normal return, an error, a panic
//! (the panic hook restores before the message is printed) and SIGTERM/SIGHUP/SIGINT (flags
//! the loop reads; it then returns normally).

use std::io::{Stdout, Write as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{DisableMouseCapture, EnableMouseCapture};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};

/// The terminal in full-screen mode; dropping it restores the terminal.
pub struct FullScreen {
    pub terminal: Terminal<CrosstermBackend<Stdout>>,
    /// Set by SIGTERM, SIGHUP or SIGINT.
    pub signalled: Arc<AtomicBool>,
}

impl std::fmt::Debug for FullScreen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FullScreen").finish_non_exhaustive()
    }
}

/// Puts the terminal back as it was: leaves the alternate screen, stops mouse reports, shows
/// the cursor, leaves raw mode. Safe to run more than once.
pub fn restore() {
    let mut out = std::io::stdout();
    let _ = execute!(
        out,
        DisableMouseCapture,
        LeaveAlternateScreen,
        ratatui::crossterm::cursor::Show
    );
    let _ = disable_raw_mode();
    let _ = out.flush();
}

impl FullScreen {
    /// Enters full-screen mode.
    pub fn enter() -> anyhow::Result<FullScreen> {
        let signalled = Arc::new(AtomicBool::new(false));
        for signal in [
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
            signal_hook::consts::SIGINT,
        ] {
            signal_hook::flag::register(signal, Arc::clone(&signalled))
                .context("cannot watch signals")?;
        }
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
        enable_raw_mode().context("cannot put the terminal in raw mode")?;
        let mut out = std::io::stdout();
        if let Err(err) = execute!(out, EnterAlternateScreen, EnableMouseCapture) {
            restore();
            return Err(err).context("cannot switch to the alternate screen");
        }
        let terminal = match Terminal::new(CrosstermBackend::new(out)) {
            Ok(terminal) => terminal,
            Err(err) => {
                restore();
                return Err(err).context("cannot draw on the terminal");
            }
        };
        Ok(FullScreen {
            terminal,
            signalled,
        })
    }

    /// Whether a signal asked the view to end.
    pub fn signalled(&self) -> bool {
        self.signalled.load(Ordering::Relaxed)
    }
}

impl Drop for FullScreen {
    fn drop(&mut self) {
        restore();
    }
}
