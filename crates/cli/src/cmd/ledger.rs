//! `hermes ledger migrate|info`: `info` says which ledger, whether it is reachable and which
//! version it holds, and changes nothing.

use serde_json::json;

use crate::args::LedgerCommand;
use crate::services::exit::Code;
use crate::services::home::Home;
use crate::services::output;

/// Runs a `ledger` subcommand.
pub fn run(command: LedgerCommand) -> anyhow::Result<Code> {
    let home = Home::load()?;
    let location = home.ledger_location()?;
    let which = Which::of(&location);
    match command {
        LedgerCommand::Migrate { json } => {
            // Opening creates or migrates the schema; `migrate` says which version is in force.
            let ledger = home.open_ledger()?;
            let version = ledger.migrate()?;
            if json {
                output::print_json(&json!({
                    "backend": which.backend,
                    "ledger": which.at,
                    "namespace": which.namespace,
                    "schema_version": version,
                }))?;
            } else {
                output::print(&format!(
                    "{}: schema version {version} ({})\n",
                    which.place(),
                    which.backend
                ))?;
            }
        }
        LedgerCommand::Info { json } => info(&location, &which, json)?,
    }
    Ok(Code::Ok)
}

/// Which ledger a home uses, as `ledger` says it.
struct Which {
    backend: &'static str,
    at: String,
    /// PostgreSQL's namespace (one home's redb file is one deployment).
    namespace: Option<String>,
}

impl Which {
    fn of(location: &hermes_ledger::Location) -> Which {
        match location {
            hermes_ledger::Location::File(path) => Which {
                backend: "redb",
                at: path.display().to_string(),
                namespace: None,
            },
            hermes_ledger::Location::Postgres(target) => Which {
                backend: "postgres",
                at: target.display().to_owned(),
                namespace: Some(target.namespace().to_owned()),
            },
        }
    }

    /// The ledger and, where it applies, its namespace.
    fn place(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} (namespace {ns})", self.at),
            None => self.at.clone(),
        }
    }
}

/// `ledger info`: reachable or not, and which version is there; nothing is created or
/// migrated. An unreachable server, a damaged or newer file: one line, exit 6 — and under
/// `--json` an unreachable ledger is an answer too, `"reachable": false` with the error.
fn info(location: &hermes_ledger::Location, which: &Which, json: bool) -> anyhow::Result<()> {
    let supported = match location {
        hermes_ledger::Location::File(_) => u32::from(hermes_ledger::FORMAT_VERSION),
        hermes_ledger::Location::Postgres(_) => {
            u32::try_from(hermes_ledger::SCHEMA_VERSION).unwrap_or(0)
        }
    };
    let version = match hermes_ledger::Ledger::probe(location) {
        Ok(version) => version,
        Err(err @ hermes_ledger::LedgerError::Unavailable { .. }) if json => {
            output::print_json(&json!({
                "backend": which.backend,
                "ledger": which.at,
                "namespace": which.namespace,
                "reachable": false,
                "error": hermes_stdx::one_line(&err.to_string()),
                "code": Code::LedgerUnavailable as u8,
                "schema_version": null,
                "supported_schema_version": supported,
            }))?;
            return Err(err.into());
        }
        Err(err) => return Err(err.into()),
    };
    if json {
        return output::print_json(&json!({
            "backend": which.backend,
            "ledger": which.at,
            "namespace": which.namespace,
            "reachable": true,
            "schema_version": version,
            "supported_schema_version": supported,
        }));
    }
    let state = match version {
        None => "no ledger yet (the first command that writes creates it)".to_owned(),
        Some(v) if v > supported => {
            format!("schema version {v}, newer than this hermes ({supported}): upgrade hermes")
        }
        Some(v) if v < supported => {
            format!("schema version {v} (hermes ledger migrate brings it to {supported})")
        }
        Some(v) => format!("schema version {v}"),
    };
    output::print(&format!("{} {}: {state}\n", which.backend, which.place()))
}
