//! `hermes ledger migrate|info`.

use serde_json::json;

use crate::args::LedgerCommand;
use crate::exit::Code;
use crate::home::Home;
use crate::output;

/// Runs a `ledger` subcommand.
pub fn run(command: LedgerCommand) -> anyhow::Result<Code> {
    let home = Home::load()?;
    let location = home.ledger_location()?;
    let (backend, at, namespace) = match &location {
        ledger::Location::File(path) => ("redb", path.display().to_string(), None),
        ledger::Location::Postgres(target) => (
            "postgres",
            target.display().to_owned(),
            Some(target.namespace().to_owned()),
        ),
    };
    // Said only where it applies (PostgreSQL): one home's redb file is one deployment.
    let place = match &namespace {
        Some(ns) => format!("{at} (namespace {ns})"),
        None => at.clone(),
    };
    match command {
        LedgerCommand::Migrate { json } => {
            // Opening creates or migrates the schema; `migrate` says which version is in force.
            let ledger = home.open_ledger()?;
            let version = ledger.migrate()?;
            if json {
                output::print_json(&json!({
                    "backend": backend,
                    "ledger": at,
                    "namespace": namespace,
                    "schema_version": version,
                }))?;
            } else {
                output::print(&format!("{place}: schema version {version} ({backend})\n"))?;
            }
        }
        LedgerCommand::Info { json } => {
            if json {
                output::print_json(
                    &json!({ "backend": backend, "ledger": at, "namespace": namespace }),
                )?;
            } else {
                output::print(&format!("{backend} {place}\n"))?;
            }
        }
    }
    Ok(Code::Ok)
}
