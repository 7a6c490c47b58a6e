//! The hot transitions on PostgreSQL, one statement each: a call of a function of
//! `transitions.sql` in an autocommit transaction of its own (READ COMMITTED, row locks), one
//! round trip with its parameters' types given, instead of a serializable transaction of a
//! dozen statements; and a boundary's read as one statement (one snapshot) instead of a
//! read-only transaction of five. The functions' plans are prepared once per connection by the
//! server (PL/pgSQL caches them for the session), and so is each call once it is hot, on a
//! connection that reaches the server itself (`client/prepared.rs`): a long-lived connection
//! parses and plans nothing again.

use std::time::Duration;

use postgres::error::SqlState;

use super::retry::{Pg, count_conflict, off_runtime, server_gone};
use super::rows::{event_columns, event_of, state_of, token_bytes};
use super::tx::{Columns, Param, Row, int};
use crate::codec;
use crate::error::{LedgerError, Result};
use crate::model::legacy::decode_delegation;
use crate::model::{
    Claim, ClaimOutcome, ClaimRequest, ClaimToken, DelegationId, Event, EventKey, EventPayload,
    EventRef, HostRecord, Published, Refusal, Session, SessionId, Timestamp, UnitRecord,
};
use crate::rules::Standing;
use crate::store::{TokenAck, Transitions, key_code, key_from_code};

/// Deadlocks tolerated before a call gives up (two claims never wait on each other in a cycle;
/// a serializable operation of the generic path may still lock the same rows in another
/// order, and the server ends one of the two).
const MAX_CONFLICTS: u32 = 50;

impl Pg {
    /// Runs one call of a transition function; again after a deadlock, and once more on a new
    /// connection when the connection broke and `rerun` says running it twice is harmless.
    fn call(&self, sql: &'static str, params: &[&dyn Param], rerun: bool) -> Result<Vec<Row>> {
        self.check_reachable()?;
        let typed: Vec<_> = params.iter().map(|p| (p.as_sql(), p.pg_type())).collect();
        off_runtime(|| {
            let sql = self.target.qualify(sql);
            let mut conflicts = 0;
            let mut reconnected = false;
            loop {
                let mut conn = self.take()?;
                let result = conn.client.query_hot(&sql, &typed);
                self.put_back(conn);
                let err = match result {
                    Ok(rows) => return Ok(rows),
                    Err(err) => err,
                };
                let conflict = err.code().is_some_and(|code| {
                    *code == SqlState::T_R_DEADLOCK_DETECTED
                        || *code == SqlState::T_R_SERIALIZATION_FAILURE
                });
                let broken = err.is_closed() || err.as_db_error().is_none() || server_gone(&err);
                if conflict {
                    count_conflict();
                }
                if conflict && conflicts < MAX_CONFLICTS {
                    conflicts += 1;
                    std::thread::sleep(Duration::from_micros(
                        50 * u64::from(conflicts) * (1 + fastrand::u64(..4)),
                    ));
                } else if broken && rerun && !reconnected {
                    reconnected = true;
                    self.let_go();
                } else if broken {
                    self.let_go();
                    return Err(LedgerError::Unavailable {
                        path: self.path.clone(),
                        reason: format!(
                            "the connection to {} broke during a call; the change may or may not have been recorded",
                            self.target.server
                        ),
                    });
                } else {
                    return Err(self.statement_error(&err));
                }
            }
        })
    }
}

impl Transitions for Pg {
    fn boundary(
        &self,
        session: &SessionId,
        now: Timestamp,
    ) -> Result<(Option<Session>, Vec<Event>, Vec<UnitRecord>)> {
        self.boundary_rows(session, now)
    }

    fn renew_host(&self, held: &HostRecord, renewed: &HostRecord) -> Result<bool> {
        let process = held.process;
        // Run again after a broken connection, it finds the renewed record and writes nothing:
        // the caller then renews in a transaction, which is harmless.
        let rows = self.call(
            "UPDATE hermes_hosts SET record = $3 \
             WHERE pid = $1 AND start_time = $2 AND record = $4 RETURNING 1",
            &[
                &i64::from(process.pid),
                &int(process.start_time),
                &codec::encode(renewed),
                &codec::encode(held),
            ],
            true,
        )?;
        Ok(!rows.is_empty())
    }

    fn publish(
        &self,
        id: &DelegationId,
        key: EventKey,
        payload: &EventPayload,
        ended_with_session: bool,
        now: Timestamp,
    ) -> Result<Option<Published>> {
        let rows = self.call(
            "SELECT hermes_publish($1, $2, $3, $4, $5)",
            &[
                &id.as_str(),
                &i64::from(key_code(key)),
                &codec::encode(payload),
                &int(now.0),
                &ended_with_session,
            ],
            true,
        )?;
        let said: Option<&str> = rows.first().map(|row| row.col(&self.path, 0)).transpose()?;
        Ok(match said {
            Some("inserted") => Some(Published::Inserted),
            Some("present") => Some(Published::AlreadyPresent),
            _ => None,
        })
    }

    fn claim(
        &self,
        requests: &[(ClaimRequest, ClaimToken)],
        max_attempts: u32,
        now: Timestamp,
    ) -> Result<Vec<ClaimOutcome>> {
        let (mut req, mut units, mut codes) = (Vec::new(), Vec::new(), Vec::new());
        let (mut sessions, mut consumers, mut tokens, mut expires) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (n, (request, token)) in requests.iter().enumerate() {
            // `hermes_claim` takes each request's keys once each, in the bytewise order of the
            // claim record (and of the locks).
            let keys: std::collections::BTreeSet<(&str, i64)> = request
                .keys
                .iter()
                .map(|key| (key.delegation_id.as_str(), i64::from(key_code(key.key))))
                .collect();
            for (unit, code) in keys {
                req.push(i32::try_from(n).unwrap_or(i32::MAX));
                units.push(unit.to_owned());
                codes.push(code);
            }
            sessions.push(request.session.as_ref().map(|s| s.as_str().to_owned()));
            consumers.push(request.consumer.clone());
            tokens.push(token_bytes(*token));
            expires.push(int(now.plus_ms(request.lease_ms).0));
        }
        // Whether a claim landed when the connection broke is unknown: not run again (its
        // keys would read as held by a live lease, its own); the caller sees the ledger
        // unavailable and the keys come back when the lease runs out.
        let rows = self.call(
            "SELECT * FROM hermes_claim($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            &[
                &req,
                &units,
                &codes,
                &sessions,
                &consumers,
                &tokens,
                &expires,
                &int(now.0),
                &i64::from(max_attempts),
            ],
            false,
        )?;
        // Per request: the events it took, and the keys refused with why.
        type Answer = (Vec<Event>, Vec<(EventRef, Refusal)>);
        let mut outcomes: Vec<Answer> = requests.iter().map(|_| Default::default()).collect();
        for row in &rows {
            let n = usize::try_from(row.col::<i32>(&self.path, 0)?).unwrap_or(usize::MAX);
            let Some((claimed, refused)) = outcomes.get_mut(n) else {
                return Err(self.damaged("hermes_claim answered for a request it was not asked"));
            };
            let key = EventRef {
                delegation_id: DelegationId::new(row.col::<&str>(&self.path, 2)?)
                    .map_err(|err| self.damaged(&format!("hermes_claim: {err}")))?,
                key: key_from_code(
                    u32::try_from(row.col::<i64>(&self.path, 3)?).unwrap_or(u32::MAX),
                ),
            };
            match row.col::<&str>(&self.path, 1)? {
                "claimed" => claimed.push(event_of(&self.path, row, 2)?),
                "ok" => {}
                "missing" => refused.push((key, Refusal::Missing)),
                "not_owned" => refused.push((key, Refusal::NotOwned)),
                "live" => refused.push((
                    key,
                    Refusal::LiveClaim {
                        expires_at: Timestamp(
                            row.col::<Option<i64>>(&self.path, 11)?.unwrap_or(0) as u64
                        ),
                    },
                )),
                // Another transaction holds the row now, most likely a consumer taking it:
                // held, for all this claim knows, by a lease of unknown length, so the router
                // looks again after its retry skew (its next read shows who holds it).
                "busy" => refused.push((key, Refusal::LiveClaim { expires_at: now })),
                "terminal" | "exhausted" => {
                    let state = state_of(&self.path, row.col(&self.path, 6)?)?;
                    refused.push((key, Refusal::Terminal(state)));
                }
                other => return Err(self.damaged(&format!("hermes_claim said {other}"))),
            }
        }
        Ok(outcomes
            .into_iter()
            .zip(requests)
            .map(|((events, refused), (request, token))| {
                if refused.is_empty() {
                    ClaimOutcome::Claimed(Claim {
                        token: *token,
                        expires_at: now.plus_ms(request.lease_ms),
                        events,
                    })
                } else {
                    ClaimOutcome::Refused(refused)
                }
            })
            .collect())
    }

    fn ack(&self, tokens: &[ClaimToken], now: Timestamp) -> Result<Vec<TokenAck>> {
        let bytes: Vec<Vec<u8>> = tokens.iter().map(|t| token_bytes(*t)).collect();
        // Acking again with the same token and the same `now` is a no-op that says so
        // (`rules::standing`): safe to run again after a broken connection.
        let rows = self.call(
            "SELECT * FROM hermes_ack($1, $2)",
            &[&bytes, &int(now.0)],
            true,
        )?;
        let mut acks: Vec<TokenAck> = tokens
            .iter()
            .map(|_| TokenAck {
                standing: None,
                expires_at: None,
                keys: Vec::new(),
            })
            .collect();
        for row in &rows {
            let i = usize::try_from(row.col::<i32>(&self.path, 0)?).unwrap_or(usize::MAX);
            let Some(ack) = acks.get_mut(i) else {
                return Err(self.damaged("hermes_ack answered for a token it was not asked"));
            };
            match row.col::<Option<&str>>(&self.path, 1)? {
                Some(standing) => {
                    ack.expires_at = row
                        .col::<Option<i64>>(&self.path, 2)?
                        .map(|t| Timestamp(t as u64));
                    ack.standing = match standing {
                        "holds" => Some(Standing::Holds),
                        "acked" => Some(Standing::Acked),
                        "lost" => Some(Standing::Lost),
                        "missing" => None,
                        other => {
                            return Err(self.damaged(&format!("hermes_ack said {other}")));
                        }
                    };
                }
                None => ack.keys.push(EventRef {
                    delegation_id: DelegationId::new(row.col::<&str>(&self.path, 3)?)
                        .map_err(|err| self.damaged(&format!("hermes_ack: {err}")))?,
                    key: key_from_code(
                        u32::try_from(row.col::<i64>(&self.path, 4)?).unwrap_or(u32::MAX),
                    ),
                }),
            }
        }
        Ok(acks)
    }
}

/// Columns of no event, for the session's and the units' rows of [`BOUNDARY`].
macro_rules! no_event {
    () => {
        "NULL::text, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::bigint, \
         NULL::bytea, NULL::text, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, \
         NULL::bigint, NULL::text, NULL::bytea"
    };
}

/// `Transitions::boundary`: rows of kind 0 (the session: its record), 1 (an open event: its
/// columns) and 2 (a claimable event's unit: its record), in one snapshot.
const BOUNDARY: &str = concat!(
    "WITH ev AS (SELECT ",
    event_columns!(),
    " FROM hermes_events WHERE open AND session = $1) \
     SELECT 0, s.record, ",
    no_event!(),
    " FROM hermes_sessions s WHERE s.id = $1 \
     UNION ALL SELECT 1, NULL::bytea, ev.* FROM ev \
     UNION ALL SELECT 2, u.record, ",
    no_event!(),
    " FROM hermes_units u WHERE u.id IN (SELECT ev.unit FROM ev WHERE ev.state = 'pending' \
     OR (ev.state = 'claimed' AND (ev.lease_expires_at IS NULL OR ev.lease_expires_at <= $2))) \
     AND NOT EXISTS (SELECT 1 FROM hermes_sessions s WHERE s.id = $1 AND s.ended)"
);

impl Pg {
    /// [`Transitions::boundary`].
    fn boundary_rows(
        &self,
        session: &SessionId,
        now: Timestamp,
    ) -> Result<(Option<Session>, Vec<Event>, Vec<UnitRecord>)> {
        let rows = self.call(BOUNDARY, &[&session.as_str(), &int(now.0)], true)?;
        let (mut record, mut events, mut units) = (None, Vec::new(), Vec::new());
        for row in &rows {
            match row.col::<i32>(&self.path, 0)? {
                0 => {
                    record = Some(codec::decode_record(
                        &self.path,
                        "session",
                        row.col(&self.path, 1)?,
                    )?)
                }
                1 => events.push(event_of(&self.path, row, 2)?),
                _ => units.push(decode_delegation(&self.path, row.col(&self.path, 1)?)?),
            }
        }
        events.sort_by_key(Event::event_ref);
        units.sort_by(|a: &UnitRecord, b: &UnitRecord| a.id.cmp(&b.id));
        Ok((record, events, units))
    }

    fn damaged(&self, reason: &str) -> LedgerError {
        LedgerError::Damaged {
            path: self.path.clone(),
            reason: reason.to_owned(),
        }
    }
}
