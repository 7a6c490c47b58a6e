//! `hermes doctor`: one line per check of this machine — the home, the configuration, the
//! ledger, each agent CLI, the installed hooks and the kernel's sandbox support — each `ok`,
//! `info`, `warn` or `fail`. It creates nothing: the ledger's writability is proven by a write
//! transaction that is rolled back, the home's by a file removed at once.
//!
//! Exit: 0 when nothing failed (warnings and notes included); 2 when the configuration is bad
//! (or no home can be found); 6 when the ledger is unreachable or unusable; 1 when another
//! check failed.

mod agents;
mod sandbox;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use hermes_settings::Source;
use serde_json::json;

use crate::services::color;
use crate::services::config;
use crate::services::exit::{Code, code_of};
use crate::services::home::{Home, env_var};
use crate::services::output;

/// How a check went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// As it should be.
    Ok,
    /// Worth knowing, nothing wrong (an agent CLI that is not installed).
    Info,
    /// hermes works, but something may not do what you expect.
    Warn,
    /// Something hermes needs is broken.
    Fail,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Info => "info",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One check's outcome.
#[derive(Clone, Debug)]
pub struct Check {
    /// How it went.
    pub status: Status,
    /// What was checked (`home`, `ledger`, `agent NAME`, …).
    pub name: String,
    /// What was found, on one line.
    pub detail: String,
    /// For a failure, the exit code it asks for.
    pub code: Code,
}

impl Check {
    /// A check that went as it should, or is only worth a note or a warning.
    pub fn new(status: Status, name: impl Into<String>, detail: impl Into<String>) -> Check {
        Check {
            status,
            name: name.into(),
            detail: detail.into(),
            code: Code::Ok,
        }
    }

    /// A failed check, asking for exit `code`.
    pub fn fail(name: impl Into<String>, detail: impl Into<String>, code: Code) -> Check {
        Check {
            status: Status::Fail,
            code,
            ..Check::new(Status::Fail, name, detail)
        }
    }
}

/// Runs every check, prints them and exits as the worst failure asks.
pub fn run(json_out: bool) -> anyhow::Result<Code> {
    let checks = checks();
    let code = exit_code(&checks);
    if json_out {
        let items: Vec<_> = checks
            .iter()
            .map(|c| json!({"status": c.status.word(), "name": c.name, "detail": c.detail}))
            .collect();
        output::print_json(&json!({"checks": items, "exit_code": code as u8}))?;
    } else {
        let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
        let mut text = String::new();
        for c in &checks {
            text.push_str(&format!(
                "{} {:<width$}  {}\n",
                color::status(c.status.word(), 4),
                c.name,
                hermes_stdx::one_line(&c.detail)
            ));
        }
        output::print(&text)?;
    }
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c.status == Status::Fail)
        .map(|c| c.name.as_str())
        .collect();
    if !failed.is_empty() {
        // The one line every non-zero exit prints; the checks said the rest.
        eprintln!("hermes: doctor: failed: {}", failed.join(", "));
    }
    Ok(code)
}

/// Bad configuration first (2), then the ledger (6), then anything else (1).
fn exit_code(checks: &[Check]) -> Code {
    let failed: Vec<Code> = checks
        .iter()
        .filter(|c| c.status == Status::Fail)
        .map(|c| c.code)
        .collect();
    [Code::Usage, Code::LedgerUnavailable]
        .into_iter()
        .find(|code| failed.contains(code))
        .unwrap_or(if failed.is_empty() {
            Code::Ok
        } else {
            Code::WorkFailed
        })
}

fn checks() -> Vec<Check> {
    let mut checks = Vec::new();
    let (dir, source) = match config::home_source(&env_var) {
        Ok(found) => found,
        Err(e) => {
            checks.push(Check::fail("home", e.to_string(), Code::Usage));
            return checks;
        }
    };
    checks.push(home(&dir));
    if source == config::HomeSource::Legacy {
        checks.push(Check::new(
            Status::Warn,
            "home",
            format!(
                "{} was made by an older hermes in upstream Hermes Agent's home: `hermes home migrate` moves hermes' files to a home of their own",
                dir.display()
            ),
        ));
    }
    let settings = match config::load_with_sources(&dir.join("config.toml"), config::environment())
    {
        Ok((settings, sources)) => {
            checks.push(configuration(&dir.join("config.toml"), &sources));
            Some(settings)
        }
        Err(e) => {
            checks.push(Check::fail("config", e.to_string(), Code::Usage));
            None
        }
    };
    match &settings {
        Some(settings) => checks.push(ledger(&Home::at(dir, settings.clone()))),
        None => checks.push(Check::new(
            Status::Warn,
            "ledger",
            "not checked: the configuration is invalid",
        )),
    }
    let configured = settings.as_ref().map_or(&[][..], |s| &s.agents[..]);
    checks.extend(agents::agent_clis(configured));
    checks.extend(agents::hooks());
    checks.extend(sandbox::checks());
    checks
}

/// The home: there, a directory, private, writable.
fn home(dir: &Path) -> Check {
    let meta = match std::fs::metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Check::new(
                Status::Warn,
                "home",
                format!(
                    "{} does not exist yet; the first hermes command creates it (0700)",
                    dir.display()
                ),
            );
        }
        Err(e) => {
            return Check::fail("home", format!("{}: {e}", dir.display()), Code::WorkFailed);
        }
    };
    if !meta.is_dir() {
        return Check::fail(
            "home",
            format!("{} is not a directory", dir.display()),
            Code::WorkFailed,
        );
    }
    let mode = meta.permissions().mode() & 0o777;
    let probe = dir.join(format!(".doctor-{}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map(drop);
    let _ = std::fs::remove_file(&probe);
    match written {
        Err(e) => Check::fail(
            "home",
            format!("{} is not writable: {e}", dir.display()),
            Code::WorkFailed,
        ),
        Ok(()) if mode & 0o077 != 0 => Check::new(
            Status::Warn,
            "home",
            format!(
                "{} (mode {mode:o}) is readable by other users, and results are stored there in plain text: chmod 700 it",
                dir.display()
            ),
        ),
        Ok(()) => Check::new(
            Status::Ok,
            "home",
            format!("{} (mode {mode:o}, writable)", dir.display()),
        ),
    }
}

/// The configuration loaded: say how much of it is not the defaults, and from where.
fn configuration(file: &Path, sources: &hermes_settings::Sources) -> Check {
    let all = sources.effective();
    let from_file = all
        .iter()
        .filter(|e| matches!(e.source, Source::File(_)))
        .count();
    let variables: Vec<&str> = all
        .iter()
        .filter_map(|e| match &e.source {
            Source::Environment(name) => Some(name.as_str()),
            _ => None,
        })
        .collect();
    let file_words = if file.is_file() {
        format!("{} ({from_file} set there)", file.display())
    } else {
        format!("no {} (defaults)", file.display())
    };
    let env_words = if variables.is_empty() {
        String::new()
    } else {
        format!("; overridden by {}", variables.join(", "))
    };
    Check::new(
        Status::Ok,
        "config",
        format!("{file_words}{env_words}; see hermes config show"),
    )
}

/// The ledger: reachable, at a version this hermes reads, and writable (a rolled-back write).
fn ledger(home: &Home) -> Check {
    let failed = |e: anyhow::Error| {
        let code = match code_of(&e) {
            Code::Usage => Code::Usage,
            _ => Code::LedgerUnavailable,
        };
        Check::fail("ledger", hermes_stdx::one_line(&format!("{e:#}")), code)
    };
    let location = match home.ledger_location() {
        Ok(location) => location,
        Err(e) => return failed(e),
    };
    let (place, supported) = match &location {
        hermes_ledger::Location::File(path) => (
            format!("redb {}", path.display()),
            u32::from(hermes_ledger::FORMAT_VERSION),
        ),
        hermes_ledger::Location::Postgres(target) => (
            format!(
                "postgres {} (namespace {})",
                target.display(),
                target.namespace()
            ),
            u32::try_from(hermes_ledger::SCHEMA_VERSION).unwrap_or(0),
        ),
    };
    let version = match hermes_ledger::Ledger::probe(&location) {
        Ok(version) => version,
        Err(e) => return failed(e.into()),
    };
    let detail = match version {
        None => format!("{place}: no ledger yet (the first command that writes creates it)"),
        Some(v) if v > supported => {
            return Check::fail(
                "ledger",
                format!(
                    "{place}: version {v}, newer than this hermes ({supported}): upgrade hermes"
                ),
                Code::LedgerUnavailable,
            );
        }
        Some(v) if v < supported => {
            return Check::new(
                Status::Warn,
                "ledger",
                format!(
                    "{place}: schema version {v}; hermes ledger migrate brings it to {supported}"
                ),
            );
        }
        Some(v) => {
            let writable = home
                .open_ledger()
                .and_then(|l| l.check_writable().map_err(anyhow::Error::from));
            if let Err(e) = writable {
                return failed(e.context(format!("{place}: not writable")));
            }
            format!("{place}: version {v}, reachable and writable")
        }
    };
    Check::new(Status::Ok, "ledger", detail)
}

/// `PATH`'s directories, for the agent checks.
fn path_dirs() -> Vec<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_code_is_the_worst_failure_by_kind() {
        let ok = Check::new(Status::Warn, "a", "b");
        let other = Check::fail("x", "y", Code::WorkFailed);
        let ledger = Check::fail("ledger", "down", Code::LedgerUnavailable);
        let config = Check::fail("config", "bad", Code::Usage);
        assert_eq!(exit_code(std::slice::from_ref(&ok)), Code::Ok);
        assert_eq!(exit_code(&[ok.clone(), other.clone()]), Code::WorkFailed);
        assert_eq!(
            exit_code(&[other.clone(), ledger.clone()]),
            Code::LedgerUnavailable
        );
        assert_eq!(exit_code(&[ledger, config, other]), Code::Usage);
    }
}
