//! `hermes top`: a live full-screen view over the ledger.

pub mod live;
pub mod model;
pub mod terminal;
#[cfg(test)]
mod tests;
pub mod ui;
pub mod view;
