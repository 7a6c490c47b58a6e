//! Color on a terminal: `--color auto|always|never` and `NO_COLOR` (<https://no-color.org>),
//! decided once per process. Only statuses are colored — a delegation's or a child's
//! (`completed`, `failed`, `running`, …) in `delegation list/status` and the interactive
//! session, and `doctor`'s `ok`/`warn`/`fail` — so a line reads the same without color.

use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::args::ColorChoice;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Decides whether this process colors its output: `always`, `never`, or with `auto` when
/// stdout is a terminal and `NO_COLOR` is unset (or empty).
pub fn init(choice: ColorChoice) {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    ENABLED.store(
        decide(choice, std::io::stdout().is_terminal(), no_color),
        Ordering::Relaxed,
    );
}

/// Whether output is colored, for `choice`, a terminal or not, and `NO_COLOR` set or not.
fn decide(choice: ColorChoice, terminal: bool, no_color: bool) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => terminal && !no_color,
    }
}

/// What a status means, and so its color.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tone {
    Good,
    Bad,
    Busy,
    Stopped,
    Quiet,
}

impl Tone {
    fn of(word: &str) -> Option<Tone> {
        Some(match word {
            "completed" | "ok" => Tone::Good,
            "failed" | "error" | "stalled" | "timeout" | "unknown" | "fail" => Tone::Bad,
            "running" | "queued" | "pending" | "stalling" | "partial" | "warn" => Tone::Busy,
            "cancelled" | "interrupted" => Tone::Stopped,
            "info" => Tone::Quiet,
            _ => return None,
        })
    }

    /// The SGR code: green, red, yellow, magenta, dim.
    fn code(self) -> &'static str {
        match self {
            Tone::Good => "32",
            Tone::Bad => "31",
            Tone::Busy => "33",
            Tone::Stopped => "35",
            Tone::Quiet => "2",
        }
    }
}

/// `word` padded to `width` columns, its letters colored by what the status means when color is
/// on (the padding stays outside the color, so columns line up either way).
pub fn status(word: &str, width: usize) -> String {
    paint(word, width, ENABLED.load(Ordering::Relaxed))
}

fn paint(word: &str, width: usize, on: bool) -> String {
    let pad = " ".repeat(width.saturating_sub(word.chars().count()));
    match Tone::of(word).filter(|_| on) {
        Some(tone) => format!("\x1b[{}m{word}\x1b[0m{pad}", tone.code()),
        None => format!("{word}{pad}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_colors_only_a_terminal_without_no_color() {
        assert!(decide(ColorChoice::Auto, true, false));
        assert!(!decide(ColorChoice::Auto, true, true));
        assert!(!decide(ColorChoice::Auto, false, false));
        assert!(decide(ColorChoice::Always, false, true));
        assert!(!decide(ColorChoice::Never, true, false));
    }

    #[test]
    fn statuses_are_colored_and_padded_outside_the_color() {
        assert_eq!(paint("failed", 8, true), "\x1b[31mfailed\x1b[0m  ");
        assert_eq!(paint("completed", 4, true), "\x1b[32mcompleted\x1b[0m");
        assert_eq!(paint("failed", 8, false), "failed  ");
        assert_eq!(paint("whatever", 9, true), "whatever ");
    }
}
