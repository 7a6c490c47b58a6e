//! `hermes ledger migrate|info`: `info` says which ledger, whether it is reachable and which
//! version it holds, and changes nothing.

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
            // Reachable or not, and which version is there: nothing is created or migrated.
            // An unreachable server, a damaged or newer file: one line, exit 6.
            let version = ledger::Ledger::probe(&location)?;
            let supported = match &location {
                ledger::Location::File(_) => u32::from(ledger::FORMAT_VERSION),
                ledger::Location::Postgres(_) => u32::try_from(ledger::SCHEMA_VERSION).unwrap_or(0),
            };
            if json {
                output::print_json(&json!({
                    "backend": backend,
                    "ledger": at,
                    "namespace": namespace,
                    "reachable": true,
                    "schema_version": version,
                    "supported_schema_version": supported,
                }))?;
            } else {
                let state = match version {
                    None => "no ledger yet (the first command that writes creates it)".to_owned(),
                    Some(v) if v > supported => format!(
                        "schema version {v}, newer than this hermes ({supported}): upgrade hermes"
                    ),
                    Some(v) if v < supported => {
                        format!(
                            "schema version {v} (hermes ledger migrate brings it to {supported})"
                        )
                    }
                    Some(v) => format!("schema version {v}"),
                };
                output::print(&format!("{backend} {place}: {state}\n"))?;
            }
        }
    }
    Ok(Code::Ok)
}
