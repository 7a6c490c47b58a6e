//! The router's error type.

use hermes_ledger::{ClaimToken, LedgerError, SessionId};

/// Everything a routing operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    /// The consumer's session has ended: its events were dropped and nothing more is delivered
    /// from it.
    #[error("session {0} has ended; its results were dropped and nothing more is delivered")]
    SessionEnded(SessionId),
    /// The claim token no longer holds every key it claimed (settled already, or fenced by a
    /// newer claim after its lease ran out).
    #[error(
        "claim {0} was lost: it was settled already or another consumer claimed its events after the lease ran out"
    )]
    ClaimLost(ClaimToken),
    /// The heartbeat thread could not be started.
    #[error("could not start the heartbeat thread for claim {token}: {reason}")]
    Heartbeat {
        /// The claim being kept alive.
        token: ClaimToken,
        /// What the operating system said.
        reason: String,
    },
    /// Any other ledger failure.
    #[error(transparent)]
    Ledger(LedgerError),
}

impl From<LedgerError> for RouterError {
    fn from(err: LedgerError) -> RouterError {
        match err {
            LedgerError::ClaimLost(token) => RouterError::ClaimLost(token),
            LedgerError::SessionEnded(session) => RouterError::SessionEnded(session),
            other => RouterError::Ledger(other),
        }
    }
}

impl RouterError {
    /// Whether the ledger file itself cannot be used (see [`LedgerError::is_unavailable`]).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, RouterError::Ledger(err) if err.is_unavailable())
    }
}
