//! The registry's error type.

use std::path::PathBuf;

use hermes_ledger::LedgerError;

/// Everything a registry operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The ledger refused or failed (a full queue, an ended session, an unusable file, …).
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// A task has nothing to run.
    #[error("task {index} has an empty command; give the program to run after `--`")]
    EmptyCommand {
        /// The task's index.
        index: usize,
    },
    /// The transcript directory could not be created.
    #[error(
        "cannot create the transcript directory {path}: {source}; check that $HERMES_HOME is writable"
    )]
    Transcripts {
        /// The directory.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The host fenced itself (its lease was lost or could not be renewed in time): it writes
    /// nothing more to the ledger.
    #[error("{0} fenced itself after losing its lease; it no longer writes to the ledger")]
    Fenced(hermes_ledger::HostId),
    /// A ledger call was lost because its worker thread died.
    #[error("a ledger call did not complete: {0}")]
    Worker(String),
}
