//! The files `hermes hook install` writes into an agent's settings (its MCP server entry and
//! its hooks), written (`install.rs`) and found again for `hermes doctor` (`installed.rs`), with
//! the merging that keeps the user's own entries and order (`merge.rs`, over the order-keeping
//! JSON value of `doc.rs`), and taken out again (`uninstall.rs`). What each agent's files are
//! is its profile's, in `hermes_agents`.

mod doc;
pub mod install;
pub mod installed;
mod jsonc;
mod merge;
pub mod plugin;
mod uninstall;

pub use install::{run as install, uninstall};
pub use installed::installed;
