//! A finished inline unit (`-z`, cron, a foreground `delegate_task`) as its caller shows it:
//! the result block or its JSON, and whether the run counts as failed.

use anyhow::Context as _;
use hermes_formatter::{Boundary, Envelope};
use hermes_ledger::UnitStatus;

use crate::services::exit::{Code, fail};
use crate::services::home::render_context;

/// A finished inline unit, as its caller shows it.
pub struct Finished {
    /// The result block (or the JSON of `--json`, one line).
    pub text: String,
    /// Why the run counts as failed (exit 1): not every child completed.
    pub failure: Option<anyhow::Error>,
}

/// Renders a finished inline unit from the ledger (`-z`, cron, and a foreground
/// `delegate_task`); the caller settles its events once it has shown them.
pub fn finish(
    ledger: &hermes_ledger::Ledger,
    report: &hermes_registry::UnitReport,
    json: bool,
) -> anyhow::Result<Finished> {
    let id = &report.delegation_id;
    let delegation = ledger
        .delegation(id)?
        .ok_or_else(|| fail(Code::WorkFailed, format!("{id} vanished from the ledger")))?;
    let mut events = ledger.events(id)?;
    events.sort_by_key(|e| e.key);
    let envelope = Envelope::new(&delegation, &events);
    let text = if json {
        let mut line = serde_json::to_string(&hermes_formatter::run_json(&envelope))
            .context("cannot encode JSON")?;
        line.push('\n');
        line
    } else {
        hermes_formatter::render_boundary(&[envelope], Boundary::Turn, &render_context())
    };
    let failure = (report.status != UnitStatus::Completed).then(|| {
        let done = report
            .outcomes
            .iter()
            .filter(|o| o.status == hermes_ledger::ChildStatus::Completed)
            .count();
        fail(
            Code::WorkFailed,
            format!(
                "{id} {}: {done} of {} tasks completed",
                report.status,
                delegation.task_count()
            ),
        )
    });
    Ok(Finished { text, failure })
}
