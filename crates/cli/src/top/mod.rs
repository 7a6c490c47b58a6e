//! `hermes top`: a live full-screen view over the ledger (SPEC §15).

pub mod live;
pub mod model;
pub mod terminal;
pub mod ui;
pub mod view;
