//! `hermes metrics`: the ledger's state on stdout, in the Prometheus text format (version
//! 0.0.4, what the node exporter's textfile collector reads) or, with `--format openmetrics`,
//! in OpenMetrics. `--metrics-listen ADDR` on `worker` and `host` serves the same at `/metrics`
//! (`crate::services::metrics::serve`).

use crate::args::MetricsArgs;
use crate::services::exit::Code;
use crate::services::home::Home;
use crate::services::output;
use crate::services::overview::Limits;

/// Runs `hermes metrics`.
pub fn run(args: &MetricsArgs) -> anyhow::Result<Code> {
    crate::services::metrics::process::install();
    let home = Home::load()?;
    let ledger = home.open_ledger_and_sweep()?;
    let limits = Limits::from_settings(&home.settings);
    let mut scrapes = crate::services::metrics::process::Scrapes::default();
    let exposition = crate::services::metrics::process::snapshot(&ledger, &limits, &mut scrapes)?;
    output::print(&exposition.encode(args.format))?;
    Ok(Code::Ok)
}
