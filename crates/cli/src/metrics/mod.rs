//! Prometheus metrics (SPEC §15): what they count (`render`), this process's own counts
//! (`process`), and the `/metrics` endpoint of `--metrics-listen` (`serve`).

pub mod process;
pub mod render;
pub mod serve;
