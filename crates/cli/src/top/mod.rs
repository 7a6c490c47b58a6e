//! `hermes top`: a live full-screen view over the ledger (`command.rs` checks for a terminal and
//! starts `live.rs`'s loop). What it shows is computed by `services::overview`, which the
//! metrics read too.

mod command;
mod live;
mod terminal;
#[cfg(test)]
mod tests;
mod ui;
mod view;

pub use command::run;
