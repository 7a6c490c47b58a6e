//! Prometheus metrics of the ledger and of this process: what they count (`render`), the two
//! text formats (`exposition`), this process's own counts (`process`), what each unit adds and
//! a long-lived endpoint keeps (`tally`), and the `/metrics` endpoint of `--metrics-listen`
//! (`serve`).

pub mod exposition;
pub mod process;
pub mod render;
pub mod serve;
pub mod tally;
