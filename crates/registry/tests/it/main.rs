//! The registry's integration tests, one binary: a module per subject, over a real ledger and
//! real child processes.

mod agents;
mod capacity;
mod children;
mod common;
mod flood;
mod pg_faults;
mod sandbox;
