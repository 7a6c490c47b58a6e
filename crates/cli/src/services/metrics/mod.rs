//! Prometheus metrics of the ledger and of this process: what they count (`render`), the two
//! text formats (`exposition`), this process's own counts and what a long-lived endpoint keeps
//! between scrapes (`process`), and the `/metrics` endpoint of `--metrics-listen` (`serve`).

pub mod exposition;
pub mod process;
pub mod render;
pub mod serve;
