//! Exit codes and the one-line error every non-zero exit prints — and, for a command given
//! `--json`, the same error as `{"error":…,"code":n,…}` on stdout, unless the command already
//! answered there. Every command's errors go through [`report`]: no command prints its own.

use std::fmt;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value};

use hermes_ledger::{IdError, LedgerError};
use hermes_registry::RegistryError;
use hermes_router::RouterError;

/// The documented exit codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// 0: everything went as asked.
    Ok = 0,
    /// 1: the work failed (a `-z`/cron child did not complete, a refused dispatch).
    WorkFailed = 1,
    /// 2: usage or bad input.
    Usage = 2,
    /// 3: claim lost (a stale or fenced token).
    ClaimLost = 3,
    /// 4: not found.
    NotFound = 4,
    /// 5: the session has ended or is not owned.
    SessionEnded = 5,
    /// 6: the ledger is unavailable (unreadable, damaged, newer format).
    LedgerUnavailable = 6,
    /// 130: interrupted by Ctrl-C (as shells report a process SIGINT ended).
    Interrupted = 130,
}

/// An error that carries its exit code.
#[derive(Debug)]
pub struct Failure {
    /// The exit code.
    pub code: Code,
    /// What went wrong, as one sentence.
    pub message: String,
    /// Fields the JSON error carries besides `error` and `code` (the id involved, …).
    pub details: Map<String, Value>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// An error with an explicit exit code.
pub fn fail(code: Code, message: impl Into<String>) -> anyhow::Error {
    fail_with(code, message, Map::new())
}

/// [`fail`], with fields for the JSON error (`{"delegation_id":…}`); a field named `error`
/// replaces the message there.
pub fn fail_with(
    code: Code,
    message: impl Into<String>,
    details: Map<String, Value>,
) -> anyhow::Error {
    anyhow::Error::new(Failure {
        code,
        message: message.into(),
        details,
    })
}

/// Whether errors are also printed as JSON on stdout (the command was given `--json`).
static JSON_ERRORS: AtomicBool = AtomicBool::new(false);

/// Errors of this process are printed as JSON on stdout too (see [`report`]).
pub fn report_errors_as_json() {
    JSON_ERRORS.store(true, Ordering::Relaxed);
}

/// Every ledger error's code, spelled out: a new variant does not compile until it has one.
fn ledger_code(e: &LedgerError) -> Code {
    match e {
        LedgerError::Unavailable { .. }
        | LedgerError::NewerFormat { .. }
        | LedgerError::Damaged { .. }
        | LedgerError::Storage(_)
        | LedgerError::EnginePanic { .. } => Code::LedgerUnavailable,
        LedgerError::DelegationNotFound(_)
        | LedgerError::SessionNotFound(_)
        | LedgerError::ChildNotFound(..) => Code::NotFound,
        LedgerError::SessionEnded(_) => Code::SessionEnded,
        LedgerError::ClaimLost(_) | LedgerError::Fenced { .. } => Code::ClaimLost,
        LedgerError::LeaseLost(_) => Code::WorkFailed,
        LedgerError::QueueFull { .. }
        | LedgerError::HostGone(_)
        | LedgerError::HostCollision { .. } => Code::WorkFailed,
        LedgerError::Invalid(_) => Code::Usage,
    }
}

fn router_code(e: &RouterError) -> Code {
    match e {
        RouterError::SessionEnded(_) => Code::SessionEnded,
        RouterError::ClaimLost(_) => Code::ClaimLost,
        RouterError::Ledger(e) => ledger_code(e),
        RouterError::Heartbeat { .. } => Code::WorkFailed,
    }
}

fn registry_code(e: &RegistryError) -> Code {
    match e {
        RegistryError::Ledger(e) => ledger_code(e),
        RegistryError::EmptyCommand { .. } => Code::Usage,
        RegistryError::Transcripts { .. } | RegistryError::Worker(_) | RegistryError::Fenced(_) => {
            Code::WorkFailed
        }
    }
}

fn id_code(e: &IdError) -> Code {
    match e {
        IdError::Session(_)
        | IdError::Delegation(_)
        | IdError::EventKey(_)
        | IdError::ClaimToken(_)
        | IdError::Pool(_) => Code::Usage,
    }
}

/// The exit code an error deserves: the first typed error in its chain decides; an error of no
/// known type (a failed write, a context message) means the work failed.
pub fn code_of(err: &anyhow::Error) -> Code {
    for cause in err.chain() {
        if let Some(f) = cause.downcast_ref::<Failure>() {
            return f.code;
        }
        if let Some(e) = cause.downcast_ref::<LedgerError>() {
            return ledger_code(e);
        }
        if let Some(e) = cause.downcast_ref::<RouterError>() {
            return router_code(e);
        }
        if let Some(e) = cause.downcast_ref::<RegistryError>() {
            return registry_code(e);
        }
        if let Some(e) = cause.downcast_ref::<IdError>() {
            return id_code(e);
        }
        if let Some(e) = cause.downcast_ref::<std::io::Error>()
            && e.kind() == std::io::ErrorKind::BrokenPipe
        {
            // Nobody reads our output any more (`hermes … | head`): not a failure.
            return Code::Ok;
        }
    }
    Code::WorkFailed
}

/// The one line a failure prints: `hermes: ` and the error with its causes.
pub fn one_line(err: &anyhow::Error) -> String {
    format!("hermes: {}", hermes_stdx::one_line(&format!("{err:#}")))
}

/// The JSON form of an error: `{"error": message, "code": n}` and the failure's details.
pub fn error_json(err: &anyhow::Error) -> Value {
    let line = one_line(err);
    let mut object = Map::new();
    object.insert(
        "error".into(),
        Value::from(line.strip_prefix("hermes: ").unwrap_or(&line)),
    );
    object.insert("code".into(), Value::from(code_of(err) as u8));
    if let Some(f) = err.chain().find_map(|c| c.downcast_ref::<Failure>()) {
        object.extend(f.details.clone());
    }
    Value::Object(object)
}

/// Prints the error as one line on stderr and gives the exit code. Under `--json`
/// ([`report_errors_as_json`]) the error goes to stdout as [`error_json`] too, unless the
/// command already wrote its answer there (an inline run's result, a drain's envelopes).
pub fn report(err: &anyhow::Error) -> ExitCode {
    let code = code_of(err);
    if code != Code::Ok {
        if JSON_ERRORS.load(Ordering::Relaxed) && !crate::services::output::answered() {
            // Best effort: the line on stderr says the same.
            let _ = crate::services::output::print_json(&error_json(err));
        }
        eprintln!("{}", one_line(err));
    }
    ExitCode::from(code as u8)
}

/// One line for a panic, and none for a panic the ledger catches (it returns it as an error,
/// which is reported as usual).
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        if hermes_ledger::panic_is_caught() {
            return;
        }
        let payload = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let payload: String = payload.split_whitespace().collect::<Vec<_>>().join(" ");
        eprintln!("hermes: internal error: {payload}{at}");
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_error_has_the_message_the_code_and_the_details() {
        let plain = error_json(&fail(Code::Usage, "bad --id"));
        assert_eq!(plain, serde_json::json!({"error": "bad --id", "code": 2}));
        let mut details = Map::new();
        details.insert("error".into(), "not found".into());
        details.insert("delegation_id".into(), "deleg_000000000000".into());
        let found = error_json(&fail_with(Code::NotFound, "deleg_… not found", details));
        assert_eq!(
            found,
            serde_json::json!({"error": "not found", "code": 4, "delegation_id": "deleg_000000000000"})
        );
        let ledger = anyhow::Error::new(LedgerError::Invalid("x".into())).context("reading");
        assert_eq!(error_json(&ledger)["code"], 2);
    }

    #[test]
    fn ledger_errors_map_to_their_codes() {
        let id = hermes_ledger::DelegationId::from_bits(1);
        assert_eq!(
            code_of(&anyhow::Error::new(LedgerError::DelegationNotFound(id))),
            Code::NotFound
        );
        assert_eq!(
            code_of(&anyhow::Error::new(LedgerError::ClaimLost(
                hermes_ledger::ClaimToken(1)
            ))),
            Code::ClaimLost
        );
        assert_eq!(
            code_of(&anyhow::Error::new(RegistryError::Ledger(
                LedgerError::Damaged {
                    path: "x".into(),
                    reason: "y".into()
                }
            ))),
            Code::LedgerUnavailable
        );
        let pipe = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        assert_eq!(
            code_of(&anyhow::Error::new(pipe).context("writing")),
            Code::Ok
        );
        assert_eq!(code_of(&fail(Code::SessionEnded, "x")), Code::SessionEnded);
        for storage in [
            LedgerError::EnginePanic {
                path: "x".into(),
                what: "boom".into(),
            },
            LedgerError::Storage(hermes_ledger::StorageFault::Engine("refused".into())),
        ] {
            assert_eq!(
                code_of(&anyhow::Error::new(storage)),
                Code::LedgerUnavailable
            );
        }
        assert_eq!(
            code_of(&anyhow::Error::new(LedgerError::Invalid("x".into()))),
            Code::Usage
        );
        assert_eq!(
            code_of(&anyhow::Error::new(RouterError::SessionEnded(
                hermes_ledger::SessionId::new("s").expect("id")
            ))),
            Code::SessionEnded
        );
    }
}
