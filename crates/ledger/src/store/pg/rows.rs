//! Events and claims as rows of schema version 2: every field a transition tests or changes is
//! a column of its own (so one statement can decide and change it, `transitions.sql`), and an
//! event's payload, which no transition reads, is the one encoded value.

use std::path::Path;

use super::tx::{Columns, Param, Row, int, uint};
use crate::codec;
use crate::error::{LedgerError, Result};
use crate::model::{
    ClaimRecord, ClaimToken, DelegationId, DeliveryMode, DropReason, Event, EventRef, EventState,
    Lease, SessionId, Timestamp,
};
use crate::store::{key_code, key_from_code, session_part};

/// The columns of an event, in the order [`event_of`] reads them (`SELECT` lists name them
/// with `concat!`).
macro_rules! event_columns {
    () => {
        "unit, code, session, delivery, state, attempts, lease_token, lease_consumer, \
         lease_claimed_at, lease_expires_at, published_at, delivered_at, dropped_at, \
         drop_reason, payload"
    };
}
pub(super) use event_columns;

/// The columns of a claim, in the order [`claim_of`] reads them.
macro_rules! claim_columns {
    () => {
        "token, consumer, claimed_at, expires_at, units, codes"
    };
}
pub(super) use claim_columns;

fn damaged(path: &Path, what: &str, reason: impl std::fmt::Display) -> LedgerError {
    LedgerError::Damaged {
        path: path.to_owned(),
        reason: format!("{what}: {reason}"),
    }
}

pub(super) fn token_bytes(token: ClaimToken) -> Vec<u8> {
    token.0.to_be_bytes().to_vec()
}

pub(super) fn token_of(path: &Path, bytes: &[u8]) -> Result<ClaimToken> {
    let bytes: [u8; 16] = bytes
        .try_into()
        .map_err(|_| damaged(path, "claim token", format!("{} bytes", bytes.len())))?;
    Ok(ClaimToken(u128::from_be_bytes(bytes)))
}

pub(super) fn state_of(path: &Path, name: &str) -> Result<EventState> {
    Ok(match name {
        "pending" => EventState::Pending,
        "claimed" => EventState::Claimed,
        "delivered" => EventState::Delivered,
        "dropped" => EventState::Dropped,
        other => return Err(damaged(path, "event state", other)),
    })
}

fn delivery_of(path: &Path, name: &str) -> Result<DeliveryMode> {
    match name {
        n if n == DeliveryMode::AfterTurn.as_str() => Ok(DeliveryMode::AfterTurn),
        n if n == DeliveryMode::Inject.as_str() => Ok(DeliveryMode::Inject),
        other => Err(damaged(path, "delivery mode", other)),
    }
}

fn unit_of(path: &Path, id: &str) -> Result<DelegationId> {
    DelegationId::new(id).map_err(|err| damaged(path, "event", err))
}

fn time(value: Option<i64>) -> Option<Timestamp> {
    value.map(|v| Timestamp(uint(v)))
}

/// An event from the columns of [`event_columns`], starting at column `at`.
pub(super) fn event_of(path: &Path, row: &Row, at: usize) -> Result<Event> {
    let column = |n: usize| at + n;
    let session: &str = row.col(path, column(2))?;
    let lease = match row.col::<Option<&[u8]>>(path, column(6))? {
        None => None,
        Some(token) => Some(Lease {
            token: token_of(path, token)?,
            consumer: row
                .col::<Option<String>>(path, column(7))?
                .unwrap_or_default(),
            claimed_at: time(row.col(path, column(8))?).unwrap_or_default(),
            expires_at: time(row.col(path, column(9))?).unwrap_or_default(),
        }),
    };
    Ok(Event {
        delegation_id: unit_of(path, row.col(path, column(0))?)?,
        key: key_from_code(u32::try_from(row.col::<i64>(path, column(1))?).unwrap_or(u32::MAX)),
        session: match session {
            "" => None,
            s => Some(SessionId::new(s).map_err(|err| damaged(path, "event session", err))?),
        },
        delivery: delivery_of(path, row.col(path, column(3))?)?,
        state: state_of(path, row.col(path, column(4))?)?,
        attempts: u32::try_from(row.col::<i64>(path, column(5))?).unwrap_or(u32::MAX),
        lease,
        published_at: Timestamp(uint(row.col(path, column(10))?)),
        delivered_at: time(row.col(path, column(11))?),
        dropped_at: time(row.col(path, column(12))?),
        drop_reason: row
            .col::<Option<&str>>(path, column(13))?
            .map(DropReason::parse),
        payload: crate::model::legacy::decode_payload(path, row.col(path, column(14))?)?,
    })
}

/// An event as the values of its columns, in [`event_columns`] order.
pub(super) struct EventRow {
    pub(super) unit: String,
    pub(super) code: i64,
    pub(super) session: String,
    pub(super) delivery: &'static str,
    pub(super) state: &'static str,
    pub(super) attempts: i64,
    pub(super) lease_token: Option<Vec<u8>>,
    pub(super) lease_consumer: Option<String>,
    pub(super) lease_claimed_at: Option<i64>,
    pub(super) lease_expires_at: Option<i64>,
    pub(super) published_at: i64,
    pub(super) delivered_at: Option<i64>,
    pub(super) dropped_at: Option<i64>,
    pub(super) drop_reason: Option<String>,
    pub(super) payload: Vec<u8>,
}

impl EventRow {
    pub(super) fn of(event: &Event) -> EventRow {
        let lease = event.lease.as_ref();
        EventRow {
            unit: event.delegation_id.as_str().to_owned(),
            code: i64::from(key_code(event.key)),
            session: session_part(event.session.as_ref()).to_owned(),
            delivery: event.delivery.as_str(),
            state: event.state.as_str(),
            attempts: i64::from(event.attempts),
            lease_token: lease.map(|l| token_bytes(l.token)),
            lease_consumer: lease.map(|l| l.consumer.clone()),
            lease_claimed_at: lease.map(|l| int(l.claimed_at.0)),
            lease_expires_at: lease.map(|l| int(l.expires_at.0)),
            published_at: int(event.published_at.0),
            delivered_at: event.delivered_at.map(|t| int(t.0)),
            dropped_at: event.dropped_at.map(|t| int(t.0)),
            drop_reason: event.drop_reason.as_ref().map(|r| r.as_str().to_owned()),
            payload: codec::encode(&event.payload),
        }
    }
}

/// Events as the columns of their table, one array each: the parameters of a statement that
/// writes many at once (`held.rs`; the scale bench's loader, `testing/bulk.rs`).
pub(crate) struct EventColumns {
    pub(crate) units: Vec<String>,
    pub(crate) codes: Vec<i64>,
    pub(crate) sessions: Vec<String>,
    pub(crate) deliveries: Vec<String>,
    pub(crate) states: Vec<String>,
    pub(crate) attempts: Vec<i64>,
    pub(crate) tokens: Vec<Option<Vec<u8>>>,
    pub(crate) consumers: Vec<Option<String>>,
    pub(crate) claimed: Vec<Option<i64>>,
    pub(crate) expires: Vec<Option<i64>>,
    pub(crate) published: Vec<i64>,
    pub(crate) delivered: Vec<Option<i64>>,
    pub(crate) dropped: Vec<Option<i64>>,
    pub(crate) reasons: Vec<Option<String>>,
    pub(crate) payloads: Vec<Vec<u8>>,
}

impl EventColumns {
    /// The columns of `rows`.
    pub(super) fn of(rows: Vec<EventRow>) -> EventColumns {
        fn each<T>(rows: &[EventRow], f: impl Fn(&EventRow) -> T) -> Vec<T> {
            rows.iter().map(f).collect()
        }
        EventColumns {
            units: each(&rows, |r| r.unit.clone()),
            codes: each(&rows, |r| r.code),
            sessions: each(&rows, |r| r.session.clone()),
            deliveries: each(&rows, |r| r.delivery.to_owned()),
            states: each(&rows, |r| r.state.to_owned()),
            attempts: each(&rows, |r| r.attempts),
            tokens: each(&rows, |r| r.lease_token.clone()),
            consumers: each(&rows, |r| r.lease_consumer.clone()),
            claimed: each(&rows, |r| r.lease_claimed_at),
            expires: each(&rows, |r| r.lease_expires_at),
            published: each(&rows, |r| r.published_at),
            delivered: each(&rows, |r| r.delivered_at),
            dropped: each(&rows, |r| r.dropped_at),
            reasons: each(&rows, |r| r.drop_reason.clone()),
            payloads: each(&rows, |r| r.payload.clone()),
        }
    }

    /// The columns of `events`.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn of_events<'e>(events: impl IntoIterator<Item = &'e Event>) -> EventColumns {
        EventColumns::of(events.into_iter().map(EventRow::of).collect())
    }
}

impl EventRow {
    /// The statement parameters of its columns, in [`event_columns`] order.
    pub(super) fn params(&self) -> [&dyn Param; 15] {
        [
            &self.unit,
            &self.code,
            &self.session,
            &self.delivery,
            &self.state,
            &self.attempts,
            &self.lease_token,
            &self.lease_consumer,
            &self.lease_claimed_at,
            &self.lease_expires_at,
            &self.published_at,
            &self.delivered_at,
            &self.dropped_at,
            &self.drop_reason,
            &self.payload,
        ]
    }
}

/// A claim from the columns of [`claim_columns`].
pub(super) fn claim_of(path: &Path, row: &Row) -> Result<ClaimRecord> {
    let units: Vec<&str> = row.col(path, 4)?;
    let codes: Vec<i64> = row.col(path, 5)?;
    if units.len() != codes.len() {
        return Err(damaged(
            path,
            "claim",
            "its keys' units and codes differ in number",
        ));
    }
    let keys = units
        .into_iter()
        .zip(codes)
        .map(|(unit, code)| {
            Ok(EventRef {
                delegation_id: unit_of(path, unit)?,
                key: key_from_code(u32::try_from(code).unwrap_or(u32::MAX)),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(ClaimRecord {
        token: token_of(path, row.col(path, 0)?)?,
        consumer: row.col(path, 1)?,
        claimed_at: Timestamp(uint(row.col(path, 2)?)),
        expires_at: Timestamp(uint(row.col(path, 3)?)),
        keys,
    })
}

/// A claim's keys as the two arrays of its row.
pub(super) fn claim_keys(claim: &ClaimRecord) -> (Vec<String>, Vec<i64>) {
    claim
        .keys
        .iter()
        .map(|k| {
            (
                k.delegation_id.as_str().to_owned(),
                i64::from(key_code(k.key)),
            )
        })
        .unzip()
}
