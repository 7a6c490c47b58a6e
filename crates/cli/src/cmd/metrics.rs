//! `hermes metrics`: the ledger's state in the Prometheus text exposition format on stdout,
//! for the node exporter's textfile collector or a cron scrape. `--metrics-listen ADDR` on
//! `worker` and `host` serves the same at `/metrics` (`crate::metrics::serve`).

use crate::exit::Code;
use crate::home::Home;
use crate::output;
use crate::top::model::Limits;

/// Runs `hermes metrics`.
pub fn run() -> anyhow::Result<Code> {
    crate::metrics::process::install();
    let home = Home::load()?;
    let ledger = home.ledger()?;
    let limits = Limits::from_settings(&home.settings);
    let mut scrapes = crate::metrics::process::Scrapes::default();
    let text = crate::metrics::process::snapshot(&ledger, &limits, &mut scrapes)?;
    output::print(&text)?;
    Ok(Code::Ok)
}
