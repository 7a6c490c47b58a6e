//! `hermes top`: the live view (`live.rs`). Not a terminal → exit 2, pointing at the
//! machine-readable view.

use std::io::IsTerminal as _;

use crate::services::exit::{Code, fail};
use crate::services::home::Home;
use crate::services::overview::Limits;

/// Runs `hermes top`.
pub fn run() -> anyhow::Result<Code> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(fail(
            Code::Usage,
            "hermes top needs a terminal; for a machine-readable view use `hermes delegation list --json`",
        ));
    }
    let home = Home::load()?;
    let ledger = home.open_ledger_and_sweep()?;
    let limits = Limits::from_settings(&home.settings);
    // Long-lived: it sweeps while it shows.
    home.sweeping(&ledger, || super::live::run(&ledger, limits))?;
    Ok(Code::Ok)
}
