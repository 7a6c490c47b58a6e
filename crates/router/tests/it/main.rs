//! The router's integration tests, one binary: a module per subject, over a real ledger.

mod common;
mod processes;
mod routing;
