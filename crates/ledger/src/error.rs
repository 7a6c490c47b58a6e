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
    /// A storage failure during an operation.
    #[error("ledger storage error: {0}")]
    Storage(String),
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

impl LedgerError {
    /// Whether the error means the ledger file itself cannot be used.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            LedgerError::Unavailable { .. }
                | LedgerError::NewerFormat { .. }
                | LedgerError::Damaged { .. }
                | LedgerError::Storage(_)
        )
    }
}

/// Shorthand for ledger results.
pub type Result<T, E = LedgerError> = std::result::Result<T, E>;
