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

/// hermes' own variables that an agent passing only a fixed few to its MCP servers must be
/// told to pass: `HERMES_HOME`, and every other one of its settings that is set now. Names
/// only: the values stay in the environment.
fn own_variables() -> Vec<String> {
    hermes_variables()
        .filter(|var| var == "HERMES_HOME" || std::env::var_os(var).is_some())
        .collect()
}

/// Every variable hermes reads: `HERMES_HOME` and one per setting.
fn hermes_variables() -> impl Iterator<Item = String> {
    let settings = hermes_settings::KEYS
        .iter()
        .map(|k| (k.section, k.name))
        .chain(
            hermes_settings::TEXT_KEYS
                .iter()
                .map(|k| (k.section, k.name)),
        )
        .map(|(section, name)| format!("HERMES_{section}_{name}").to_ascii_uppercase());
    std::iter::once("HERMES_HOME".to_owned()).chain(settings)
}
