//! The ledger's error type.

use std::path::PathBuf;

use crate::model::{ClaimToken, DelegationId, SessionId};

/// Everything a ledger operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The file could not be opened or read at all.
    #[error("ledger {path} is unavailable: {reason}")]
    Unavailable {
        /// The ledger file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The file was written by a newer hermes.
    #[error(
        "ledger {path} was written by a newer hermes (format {found}, this build reads up to {supported}); upgrade hermes"
    )]
    NewerFormat {
        /// The ledger file.
        path: PathBuf,
        /// The format version found.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },
    /// The file is damaged: a page or a value could not be decoded.
    #[error("ledger {path} is damaged: {reason}; move it aside to start afresh")]
    Damaged {
        /// The ledger file.
        path: PathBuf,
        /// What could not be read.
        reason: String,
    },
    /// The storage engine refused or failed an operation (typed: see [`StorageFault`]). A
    /// damaged page is [`LedgerError::Damaged`] and an I/O failure
    /// [`LedgerError::Unavailable`] instead, once the file is known.
    #[error("ledger storage error: {0}")]
    Storage(StorageFault),
    /// The storage engine panicked during an operation. That is a bug or a damaged page; which
    /// one is not known, so the file is not called damaged.
    #[error(
        "the ledger's storage engine failed unexpectedly on {path} ({what}); the file may well be intact: retry, and report it if it repeats"
    )]
    EnginePanic {
        /// The ledger file.
        path: PathBuf,
        /// The panic's message.
        what: String,
    },
    /// No such delegation.
    #[error("delegation {0} not found")]
    DelegationNotFound(DelegationId),
    /// No such session.
    #[error("session {0} not found")]
    SessionNotFound(SessionId),
    /// No such child.
    #[error("delegation {0} has no task {1}")]
    ChildNotFound(DelegationId, u32),
    /// The session has ended; nothing more can be dispatched into it or delivered from it.
    #[error("session {0} has ended")]
    SessionEnded(SessionId),
    /// The claim token no longer holds every key it claimed (settled, or fenced by a newer claim).
    #[error("claim {0} was lost: it was settled already or another consumer claimed its events")]
    ClaimLost(ClaimToken),
    /// The host a unit was dispatched to has retired (or was never registered); dispatch again
    /// to a live host.
    #[error("host {0} no longer hosts this session; start a new host and dispatch again")]
    HostGone(crate::model::ProcessId),
    /// A host wrote about a unit it no longer owns: the unit was recovered (its host judged
    /// dead) or handed to another host. The write was not applied.
    #[error(
        "{host} no longer owns delegation {delegation} (it was recovered or handed to another host); the write was refused"
    )]
    Fenced {
        /// The unit.
        delegation: DelegationId,
        /// The writing host's fencing epoch.
        host: crate::model::HostId,
    },
    /// A host's lease could not be renewed because its record is gone: another process judged
    /// it dead. The host must stop its children and stop writing.
    #[error("{0} lost its lease: another process judged it dead and recovered its units")]
    LeaseLost(crate::model::HostId),
    /// A host on another machine (or pid namespace) is registered under the same identity:
    /// pid, start time and locality tag all coincide (the tags of two localities, a hash,
    /// almost never do); this process cannot register as a host until it is gone.
    #[error(
        "{process} is already registered as a host by machine {machine} (another process table with the same pid and start time); start this one again"
    )]
    HostCollision {
        /// The shared process identity.
        process: crate::model::ProcessId,
        /// The other host's machine (host name).
        machine: String,
    },
    /// The queue is full.
    #[error("the dispatch queue is full ({max} units waiting); wait for running work to finish")]
    QueueFull {
        /// `max_queued`.
        max: u32,
    },
    /// A request that makes no sense (an empty key set, a batch without children, …).
    #[error("invalid request: {0}")]
    Invalid(String),
}

/// What the storage engine reported, kept typed so that no caller classifies an error by its
/// text.
#[derive(Debug, thiserror::Error)]
pub enum StorageFault {
    /// The operating system failed a read, write or sync.
    #[error("i/o error: {0}")]
    Io(#[source] std::io::Error),
    /// A page or structure of the file is damaged.
    #[error("damaged: {0}")]
    Corrupted(String),
    /// A table the operation needs does not exist (a file no hermes has initialized).
    #[error("table {0} does not exist")]
    MissingTable(String),
    /// Anything else the engine refused (a value too large, a type mismatch, …).
    #[error("{0}")]
    Engine(String),
}

impl From<redb::Error> for StorageFault {
    fn from(err: redb::Error) -> StorageFault {
        match err {
            redb::Error::Io(e) => StorageFault::Io(e),
            redb::Error::Corrupted(reason) => StorageFault::Corrupted(reason),
            redb::Error::TableDoesNotExist(table) => StorageFault::MissingTable(table),
            other => StorageFault::Engine(other.to_string()),
        }
    }
}

impl LedgerError {
    /// Whether the error means the ledger file itself cannot be used.
    pub fn is_unavailable(&self) -> bool {
        match self {
            LedgerError::Unavailable { .. }
            | LedgerError::NewerFormat { .. }
            | LedgerError::Damaged { .. }
            | LedgerError::Storage(_)
            | LedgerError::EnginePanic { .. } => true,
            LedgerError::DelegationNotFound(_)
            | LedgerError::SessionNotFound(_)
            | LedgerError::ChildNotFound(..)
            | LedgerError::SessionEnded(_)
            | LedgerError::ClaimLost(_)
            | LedgerError::HostGone(_)
            | LedgerError::HostCollision { .. }
            | LedgerError::Fenced { .. }
            | LedgerError::LeaseLost(_)
            | LedgerError::QueueFull { .. }
            | LedgerError::Invalid(_) => false,
        }
    }

    /// This error as a command that waited `waited` for the ledger says it: an unreachable
    /// ledger's reason adds that it still was after the wait; any other error is unchanged.
    pub fn after_waiting(self, waited: std::time::Duration) -> LedgerError {
        match self {
            LedgerError::Unavailable { path, reason } => LedgerError::Unavailable {
                path,
                reason: format!(
                    "{reason}; still so after waiting {:.0} s for it",
                    waited.as_secs_f64()
                ),
            },
            other => other,
        }
    }
}

/// Shorthand for ledger results.
pub type Result<T, E = LedgerError> = std::result::Result<T, E>;
