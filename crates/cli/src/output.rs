//! Writing to stdout: errors (a closed pipe included) are returned, never panics.

use std::io::Write;

use anyhow::Context as _;
use serde::Serialize;

/// Writes `text` to stdout and flushes it.
pub fn print(text: &str) -> anyhow::Result<()> {
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
pub fn time(ts: Option<ledger::Timestamp>) -> serde_json::Value {
    ts.map_or(serde_json::Value::Null, |t| {
        serde_json::Value::String(formatter::rfc3339(t))
    })
}
