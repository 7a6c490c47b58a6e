//! Sessions inside a transaction: a session made active on first sight, and the interrupt
//! reason its end gives its running units.

use crate::error::{LedgerError, Result};
use crate::model::{Session, SessionId, SessionState, Timestamp};
use crate::store::Writer;

/// The interrupt reason a session's end gives its running units.
pub(crate) const SESSION_END: &str = "session_end";

/// The session, created active if new; `SessionEnded` if it has ended.
pub(crate) fn ensure_active(w: &Writer<'_>, id: &SessionId, now: Timestamp) -> Result<Session> {
    match w.session(id)? {
        Some(session) if session.state == SessionState::Ended => {
            Err(LedgerError::SessionEnded(id.clone()))
        }
        Some(session) => Ok(session),
        None => {
            let session = Session {
                id: id.clone(),
                state: SessionState::Active,
                created_at: now,
                ended_at: None,
                host: None,
            };
            w.put_session(&session)?;
            Ok(session)
        }
    }
}
