//! Sessions: parent conversations and their lifecycle.

use serde::{Deserialize, Serialize};

use super::{ProcessId, SessionId, Timestamp};

/// A session's lifecycle state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionState {
    /// Accepting dispatches and deliveries.
    Active,
    /// Ended: dispatches refused, pending events dropped.
    Ended,
}

impl SessionState {
    /// `active` or `ended`.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Active => "active",
            SessionState::Ended => "ended",
        }
    }
}

/// A parent conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// Its id.
    pub id: SessionId,
    /// Active or ended.
    pub state: SessionState,
    /// When the ledger first saw it.
    pub created_at: Timestamp,
    /// When it ended.
    pub ended_at: Option<Timestamp>,
    /// The process hosting its children, if one is registered.
    pub host: Option<ProcessId>,
}
