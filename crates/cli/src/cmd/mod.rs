//! One module per command group (and `progress_view.rs`, the progress lines of a `-z` or cron
//! run). A command uses the services; it never names another front-end.

pub mod claim;
pub mod completions;
pub mod config;
pub mod delegate;
pub mod delegation;
pub mod doctor;
pub mod drain;
pub mod home;
pub mod host;
pub mod ledger;
pub mod metrics;
mod progress_view;
pub mod rejoin;
pub mod run;
pub mod session;
pub mod worker;
pub mod workspace;
