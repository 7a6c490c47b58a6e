//! Writing to stdout: errors (a closed pipe included) are returned, never panics.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use serde::Serialize;

/// Whether this process wrote anything to stdout.
static ANSWERED: AtomicBool = AtomicBool::new(false);

/// Whether this process has written its answer (anything) to stdout: an error after that is not
/// printed there again as JSON.
pub fn answered() -> bool {
    ANSWERED.load(Ordering::Relaxed)
}

/// Writes `text` to stdout and flushes it.
pub fn print(text: &str) -> anyhow::Result<()> {
    if !text.is_empty() {
        ANSWERED.store(true, Ordering::Relaxed);
    }
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("cannot write to stdout")
}

/// Writes `value` as one line of JSON.
pub fn print_json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let mut text = serde_json::to_string(value).context("cannot encode JSON")?;
    text.push('\n');
    print(&text)
}

/// An optional timestamp as RFC 3339, or null.
pub fn time(ts: Option<hermes_ledger::Timestamp>) -> serde_json::Value {
    ts.map_or(serde_json::Value::Null, |t| {
        serde_json::Value::String(hermes_formatter::rfc3339(t))
    })
}
