//! Schema version 2: events and claims as columns, and the transition functions.
//!
//! Version 1 kept an event and a claim as one encoded record each, so every transition was a
//! transaction that read the records, decided in Rust and wrote them back (19 round trips for
//! publish → claim → ack). Version 2 keeps every field a transition tests or changes as a
//! column (`rows.rs`), sessions say whether they ended and units their delivery mode (what
//! publishing reads), and `transitions.sql` adds one function per hot transition.
//!
//! A fresh database is created at version 1 and brought here in the same transaction, so this
//! migration runs on every new ledger as well as on the old ones; on a version 1 database with
//! data, every event and claim is decoded and written again as columns, all under the
//! migration's advisory lock and in its one transaction (all or nothing).

use postgres::types::Type;

use super::client::Transaction;
use super::listen::{ACTIVITY_CHANNEL, EVENTS_CHANNEL};
use super::rows::{EventRow, claim_keys, token_bytes};
use super::tx::{Columns, int};
use super::url::PgTarget;
use crate::codec::decode_record;
use crate::error::{LedgerError, Result};
use crate::model::legacy::{decode_delegation, decode_event};
use crate::model::{ClaimRecord, DeliveryMode, Session, SessionState};

/// The tables of version 2 next to version 1's, renamed out of the way.
const TABLES: &str = r#"
ALTER TABLE hermes_sessions ADD COLUMN ended boolean NOT NULL DEFAULT false;
ALTER TABLE hermes_units ADD COLUMN delivery text NOT NULL DEFAULT 'after_turn';
ALTER TABLE hermes_events RENAME TO hermes_events_v1;
ALTER TABLE hermes_events_v1 RENAME CONSTRAINT hermes_events_pkey TO hermes_events_v1_pkey;
DROP INDEX hermes_events_open;
ALTER TABLE hermes_claims RENAME TO hermes_claims_v1;
ALTER TABLE hermes_claims_v1 RENAME CONSTRAINT hermes_claims_pkey TO hermes_claims_v1_pkey;
CREATE TABLE hermes_events (
    unit text COLLATE "C" NOT NULL,
    code bigint NOT NULL,
    session text COLLATE "C" NOT NULL,
    delivery text NOT NULL,
    state text NOT NULL,
    open boolean GENERATED ALWAYS AS (state IN ('pending', 'claimed')) STORED,
    attempts bigint NOT NULL,
    lease_token bytea,
    lease_consumer text,
    lease_claimed_at bigint,
    lease_expires_at bigint,
    published_at bigint NOT NULL,
    delivered_at bigint,
    dropped_at bigint,
    drop_reason text,
    payload bytea NOT NULL,
    PRIMARY KEY (unit, code)
);
CREATE INDEX hermes_events_open ON hermes_events (session, unit, code) WHERE open;
CREATE TABLE hermes_claims (
    token bytea PRIMARY KEY,
    consumer text NOT NULL,
    claimed_at bigint NOT NULL,
    expires_at bigint NOT NULL,
    units text[] NOT NULL,
    codes bigint[] NOT NULL
);
"#;

/// Rows copied per statement.
const CHUNK: usize = 2_000;

/// Brings a version 1 schema (of `target`'s namespace, on `search_path` for this transaction)
/// to version 2 inside `txn`. The transition functions its triggers call are created first
/// (`v3::install_transitions`).
pub(super) fn migrate(
    target: &PgTarget,
    path: &std::path::Path,
    txn: &mut Transaction<'_>,
) -> Result<()> {
    let fail = |err: postgres::Error| LedgerError::Unavailable {
        path: path.to_owned(),
        reason: format!(
            "migrating the schema to version 2: {}",
            super::retry::one_line(&err)
        ),
    };
    txn.batch_execute(TABLES).map_err(fail)?;
    // Sessions that ended, and units delivered at tool boundaries (the columns' defaults are
    // the other cases).
    let mut ended = Vec::new();
    for row in txn
        .query_typed("SELECT id, record FROM hermes_sessions", &[])
        .map_err(fail)?
    {
        let session: Session = decode_record(path, "session", row.col(path, 1)?)?;
        if session.state == SessionState::Ended {
            ended.push(row.col::<String>(path, 0)?);
        }
    }
    txn.query_typed(
        "UPDATE hermes_sessions SET ended = true WHERE id = ANY($1)",
        &[(&ended, Type::TEXT_ARRAY)],
    )
    .map_err(fail)?;
    let mut inject = Vec::new();
    for row in txn
        .query_typed("SELECT record FROM hermes_units", &[])
        .map_err(fail)?
    {
        let unit = decode_delegation(path, row.col(path, 0)?)?;
        if unit.spec.delivery == DeliveryMode::Inject {
            inject.push(unit.id.as_str().to_owned());
        }
    }
    txn.query_typed(
        "UPDATE hermes_units SET delivery = $1 WHERE id = ANY($2)",
        &[
            (&DeliveryMode::Inject.as_str(), Type::TEXT),
            (&inject, Type::TEXT_ARRAY),
        ],
    )
    .map_err(fail)?;
    let events = txn
        .query_typed(
            "SELECT record FROM hermes_events_v1 ORDER BY unit, code",
            &[],
        )
        .map_err(fail)?
        .iter()
        .map(|row| decode_event(path, row.col(path, 0)?).map(|e| EventRow::of(&e)))
        .collect::<Result<Vec<_>>>()?;
    for chunk in events.chunks(CHUNK) {
        copy_events(txn, chunk).map_err(fail)?;
    }
    let claims = txn
        .query_typed("SELECT record FROM hermes_claims_v1", &[])
        .map_err(fail)?
        .iter()
        .map(|row| decode_record::<ClaimRecord>(path, "claim", row.col(path, 0)?))
        .collect::<Result<Vec<_>>>()?;
    for chunk in claims.chunks(CHUNK) {
        copy_claims(txn, chunk).map_err(fail)?;
    }
    txn.batch_execute("DROP TABLE hermes_events_v1; DROP TABLE hermes_claims_v1;")
        .map_err(fail)?;
    // The triggers that notify, each given its channel (a literal of the namespace's own
    // name, which `qualify` leaves alone: only the default namespace's start with `hermes_`,
    // and it qualifies nothing).
    let literal = |channel: &str| format!("'{}'", target.channel(channel).replace('\'', "''"));
    let (events, activity) = (literal(EVENTS_CHANNEL), literal(ACTIVITY_CHANNEL));
    // (Trigger names belong to their table: no `hermes_` prefix for `qualify` to take for a
    // table's.)
    let triggers = format!(
        "CREATE TRIGGER notify_pending AFTER INSERT OR UPDATE ON hermes_events \
         FOR EACH ROW WHEN (NEW.state = 'pending') EXECUTE FUNCTION hermes_notify_event({events}); \
         CREATE TRIGGER notify_activity AFTER INSERT OR UPDATE ON hermes_meta \
         FOR EACH ROW WHEN (NEW.key = 'activity') EXECUTE FUNCTION hermes_notify_activity({activity});"
    );
    txn.batch_execute(&target.qualify(&triggers)).map_err(fail)
}

fn copy_events(
    txn: &mut Transaction<'_>,
    rows: &[EventRow],
) -> std::result::Result<(), postgres::Error> {
    macro_rules! column {
        ($field:ident) => {
            rows.iter().map(|r| r.$field.clone()).collect::<Vec<_>>()
        };
    }
    let (unit, code, session, delivery, state, attempts) = (
        column!(unit),
        column!(code),
        column!(session),
        column!(delivery),
        column!(state),
        column!(attempts),
    );
    let (lease_token, lease_consumer, lease_claimed_at, lease_expires_at) = (
        column!(lease_token),
        column!(lease_consumer),
        column!(lease_claimed_at),
        column!(lease_expires_at),
    );
    let (published_at, delivered_at, dropped_at, drop_reason, payload) = (
        column!(published_at),
        column!(delivered_at),
        column!(dropped_at),
        column!(drop_reason),
        column!(payload),
    );
    txn.query_typed(
        concat!(
            "INSERT INTO hermes_events (",
            super::rows::event_columns!(),
            ") SELECT * FROM unnest($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, \
             $14, $15)"
        ),
        &[
            (&unit, Type::TEXT_ARRAY),
            (&code, Type::INT8_ARRAY),
            (&session, Type::TEXT_ARRAY),
            (&delivery, Type::TEXT_ARRAY),
            (&state, Type::TEXT_ARRAY),
            (&attempts, Type::INT8_ARRAY),
            (&lease_token, Type::BYTEA_ARRAY),
            (&lease_consumer, Type::TEXT_ARRAY),
            (&lease_claimed_at, Type::INT8_ARRAY),
            (&lease_expires_at, Type::INT8_ARRAY),
            (&published_at, Type::INT8_ARRAY),
            (&delivered_at, Type::INT8_ARRAY),
            (&dropped_at, Type::INT8_ARRAY),
            (&drop_reason, Type::TEXT_ARRAY),
            (&payload, Type::BYTEA_ARRAY),
        ],
    )
    .map(drop)
}

fn copy_claims(
    txn: &mut Transaction<'_>,
    claims: &[ClaimRecord],
) -> std::result::Result<(), postgres::Error> {
    // A claim's keys are two arrays, and `unnest` flattens arrays of arrays: each claim's
    // units and codes go as one comma-separated text each (ids and codes hold no comma).
    let joined = |items: Vec<String>| items.join(",");
    let (mut tokens, mut consumers, mut claimed, mut expires, mut units, mut codes) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for claim in claims {
        let (unit_ids, key_codes) = claim_keys(claim);
        tokens.push(token_bytes(claim.token));
        consumers.push(claim.consumer.clone());
        claimed.push(int(claim.claimed_at.0));
        expires.push(int(claim.expires_at.0));
        units.push(joined(unit_ids));
        codes.push(joined(key_codes.iter().map(i64::to_string).collect()));
    }
    txn.query_typed(
        "INSERT INTO hermes_claims (token, consumer, claimed_at, expires_at, units, codes) \
         SELECT t, c, a, e, string_to_array(u, ','), string_to_array(k, ',')::bigint[] \
         FROM unnest($1, $2, $3, $4, $5, $6) AS x(t, c, a, e, u, k)",
        &[
            (&tokens, Type::BYTEA_ARRAY),
            (&consumers, Type::TEXT_ARRAY),
            (&claimed, Type::INT8_ARRAY),
            (&expires, Type::INT8_ARRAY),
            (&units, Type::TEXT_ARRAY),
            (&codes, Type::TEXT_ARRAY),
        ],
    )
    .map(drop)
}

#[cfg(test)]
mod tests {
    //! A version 1 database with live data — a session that ended, units of both delivery
    //! modes, events pending, claimed under a live lease and delivered by an ack — brought to
    //! version 2's tables (and this build's version) by the first hermes that connects: every record reads back as it was, and
    //! every transition carries on from where version 1 left it.

    use super::super::schema::SCHEMA_V1;
    use super::super::tx::int;
    use super::token_bytes;
    use crate::codec::encode;
    use crate::model::{
        ChildOutcome, ChildStatus, ClaimRecord, ClaimRequest, ClaimToken, DelegationId,
        DeliveryMode, Event, EventKey, EventPayload, EventRef, EventState, Lease, Session,
        SessionId, SessionState, Timestamp,
    };
    use crate::store::key_code;
    use crate::testing::{fresh_empty_database, pg_admin_url, running_unit, spec};
    use crate::{ClaimOutcome, Ledger, LedgerConfig, NewEvent, PgTarget, Published, TokenSource};

    const NOW: Timestamp = Timestamp(1_700_000_000_000);

    fn id(n: u8) -> DelegationId {
        DelegationId::new(format!("deleg_00000000000{n}")).expect("valid")
    }

    fn event(unit: u8, key: EventKey, session: &SessionId, state: EventState) -> Event {
        Event {
            delegation_id: id(unit),
            key,
            session: Some(session.clone()),
            delivery: DeliveryMode::AfterTurn,
            payload: EventPayload::Task(ChildOutcome::new(0, "goal", ChildStatus::Completed, NOW)),
            state,
            attempts: u32::from(state != EventState::Pending),
            lease: None,
            published_at: NOW,
            delivered_at: None,
            dropped_at: None,
            drop_reason: None,
        }
    }

    #[test]
    fn a_version_1_ledger_with_live_data_is_migrated_and_carries_on() {
        let url = fresh_empty_database(&pg_admin_url());
        let live = ClaimToken(0x1111);
        let acked = ClaimToken(0x2222);
        let active = SessionId::new("active").expect("valid");
        let ended = SessionId::new("ended").expect("valid");
        let lease = |token, expires_at| Lease {
            token,
            consumer: "drain".into(),
            claimed_at: NOW,
            expires_at,
        };
        let pending = event(1, EventKey::Task(0), &active, EventState::Pending);
        let mut claimed = event(1, EventKey::Task(1), &active, EventState::Claimed);
        claimed.lease = Some(lease(live, Timestamp(u64::MAX / 4)));
        let mut delivered = event(2, EventKey::Terminal, &active, EventState::Delivered);
        delivered.lease = Some(lease(acked, NOW));
        delivered.delivered_at = Some(NOW);
        let claims = [
            ClaimRecord {
                token: live,
                keys: vec![claimed.event_ref()],
                consumer: "drain".into(),
                claimed_at: NOW,
                expires_at: Timestamp(u64::MAX / 4),
            },
            ClaimRecord {
                token: acked,
                keys: vec![delivered.event_ref()],
                consumer: "drain".into(),
                claimed_at: NOW,
                expires_at: NOW,
            },
        ];
        let mut inject = running_unit(id(1), spec(2), NOW);
        inject.session = Some(active.clone());
        inject.spec.delivery = DeliveryMode::Inject;
        let mut quiet = running_unit(id(3), spec(1), NOW);
        quiet.session = Some(ended.clone());
        let mut done = running_unit(id(2), spec(1), NOW);
        done.session = Some(active.clone());
        crate::store::pg::off_runtime(|| {
            let mut client = postgres::Client::connect(&url, postgres::NoTls)?;
            client.batch_execute(SCHEMA_V1)?;
            for session in [&active, &ended] {
                let state = if session == &ended {
                    SessionState::Ended
                } else {
                    SessionState::Active
                };
                let record = Session {
                    id: session.clone(),
                    state,
                    created_at: NOW,
                    ended_at: None,
                    host: None,
                };
                client.execute(
                    "INSERT INTO hermes_sessions (id, record) VALUES ($1, $2)",
                    &[&session.as_str(), &encode(&record)],
                )?;
            }
            for unit in [&inject, &quiet, &done] {
                client.execute(
                    "INSERT INTO hermes_units (id, session, status, dispatched_at, active, record) \
                     VALUES ($1, $2, 'running', $3, true, $4)",
                    &[
                        &unit.id.as_str(),
                        &unit.session.as_ref().map(SessionId::as_str),
                        &int(NOW.0),
                        &encode(unit),
                    ],
                )?;
            }
            for e in [&pending, &claimed, &delivered] {
                client.execute(
                    "INSERT INTO hermes_events (unit, code, session, state, open, record) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                    &[
                        &e.delegation_id.as_str(),
                        &i64::from(key_code(e.key)),
                        &"active",
                        &e.state.as_str(),
                        &!e.state.is_terminal(),
                        &encode(e),
                    ],
                )?;
            }
            for claim in &claims {
                client.execute(
                    "INSERT INTO hermes_claims (token, record) VALUES ($1, $2)",
                    &[&token_bytes(claim.token), &encode(claim)],
                )?;
            }
            Ok::<(), postgres::Error>(())
        })
        .expect("a version 1 ledger is written");

        let target = PgTarget::parse(&url, None).expect("parses");
        let ledger = Ledger::connect(&target, LedgerConfig::default(), TokenSource::Seeded(7))
            .expect("the ledger connects and migrates");
        let version = ledger
            .backend
            .pg()
            .expect("PostgreSQL")
            .query_value::<i32>("SELECT max(version) FROM hermes_schema")
            .expect("reads");
        assert_eq!(version, super::super::SCHEMA_VERSION);
        for e in [&pending, &claimed, &delivered] {
            assert_eq!(
                ledger.event(&e.event_ref()).expect("reads").as_ref(),
                Some(e)
            );
        }
        for claim in &claims {
            assert_eq!(
                ledger.claim_record(claim.token).expect("reads").as_ref(),
                Some(claim)
            );
        }
        assert_eq!(
            ledger.open_events(&active).expect("reads"),
            vec![pending.clone(), claimed.clone()]
        );

        // The claim taken under version 1 acks; the ack made under version 1 repeats.
        let first = ledger.ack_outcome(live, NOW).expect("acks");
        assert!(!first.repeated);
        assert_eq!(first.transitions.len(), 1);
        assert!(ledger.ack_outcome(acked, NOW).expect("repeats").repeated);
        // The pending event is claimed as any other.
        let request = ClaimRequest {
            keys: vec![pending.event_ref()],
            consumer: "drain".into(),
            session: Some(active.clone()),
            lease_ms: 1_000,
        };
        let ClaimOutcome::Claimed(claim) = ledger.claim(&request, NOW).expect("claims") else {
            panic!("the pending event is claimable after the migration");
        };
        assert_eq!(claim.events[0].attempts, 1);
        // The units' delivery mode and the sessions' end came along: a new event of the
        // inject unit is offered at tool boundaries, one of the ended session's is dropped.
        let publish = |unit: &DelegationId| {
            ledger.publish(
                NewEvent {
                    delegation_id: unit.clone(),
                    key: EventKey::Terminal,
                    payload: pending.payload.clone(),
                },
                NOW,
            )
        };
        assert_eq!(publish(&id(1)).expect("publishes"), Published::Inserted);
        assert_eq!(publish(&id(3)).expect("publishes"), Published::Inserted);
        let terminal = |unit: DelegationId| {
            ledger
                .event(&EventRef {
                    delegation_id: unit,
                    key: EventKey::Terminal,
                })
                .expect("reads")
                .expect("published")
        };
        assert_eq!(terminal(id(1)).delivery, DeliveryMode::Inject);
        assert_eq!(terminal(id(3)).state, EventState::Dropped);
    }
}
