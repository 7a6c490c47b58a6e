//! Prometheus metrics (SPEC §15): what they count (`render`), this process's own counts
//! (`process`), what each unit adds and a long-lived endpoint keeps (`tally`), and the `/metrics` endpoint of `--metrics-listen` (`serve`).

pub mod process;
pub mod render;
pub mod serve;
pub mod tally;
