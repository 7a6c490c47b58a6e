//! Where a claim stands, read inside a transaction: its record, its keys' events and whether the
//! token still holds them all.

use crate::error::{LedgerError, Result};
use crate::model::{ClaimRecord, ClaimToken, Event};
use crate::rules::{self, Standing};
use crate::store::Writer;

/// The claim and its events, if `token` still holds every key it claimed.
pub(crate) fn held(w: &Writer<'_>, token: ClaimToken) -> Result<(ClaimRecord, Vec<Event>)> {
    match standing(w, token)? {
        (record, events, Standing::Holds) => Ok((record, events)),
        _ => Err(LedgerError::ClaimLost(token)),
    }
}

/// The claim `token` names, its keys' events and where it stands (`rules::standing`); a token
/// with no record (never issued, fenced, settled other than by an ack, or purged) or a key
/// whose event is gone is `ClaimLost`.
pub(crate) fn standing(
    w: &Writer<'_>,
    token: ClaimToken,
) -> Result<(ClaimRecord, Vec<Event>, Standing)> {
    let record = w
        .claim_record(token)?
        .ok_or(LedgerError::ClaimLost(token))?;
    let mut events = Vec::with_capacity(record.keys.len());
    for key in &record.keys {
        events.push(w.event(key)?);
    }
    let standing = rules::standing(token, &events);
    let events = events
        .into_iter()
        .collect::<Option<Vec<Event>>>()
        .ok_or(LedgerError::ClaimLost(token))?;
    Ok((record, events, standing))
}
