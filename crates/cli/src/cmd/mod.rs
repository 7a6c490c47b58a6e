//! One module per command group.

pub mod completions;
pub mod config;
pub mod delegate;
pub mod delegation;
pub mod delivery;
pub mod doctor;
pub mod drain;
pub mod host;
pub mod ledger;
pub mod metrics;
pub mod rejoin;
pub mod run;
pub mod session;
pub mod top;
pub mod worker;
