//! A ledger of a given size, fast: the scale benchmark's loader (`bench_scale`).
//!
//! History is what the product leaves behind: background units of one `true` task each, ended
//! (completed, a few failed) with their child and their terminal event delivered, dropped
//! because their session ended, or dropped as `replay_expired`, spread over a hundred ended
//! sessions. The records are the product's own: one unit is dispatched and finished through
//! the ledger's API, and the history is that unit's records (unit, child, events) copied under
//! other ids and times, written through the same `WriteTx` as every operation on redb (one
//! transaction per [`REDB_CHUNK`] units) and with multi-row `unnest` inserts into the same
//! tables and columns on PostgreSQL (one transaction per [`PG_CHUNK`] units). The live part
//! (queued units, running children, ready events) goes through the ledger's API.

use crate::error::Result;
use crate::model::{
    Capacity, Channel, Child, ChildOutcome, ChildStatus, ClaimToken, DelegationId, DispatchSpec,
    DropReason, Event, EventState, HostId, Lease, ProcessId, Session, SessionId, SessionState,
    TaskSpec, Timestamp, UnitRecord, UnitStatus,
};
use crate::{Ledger, NewDelegation};

/// Units per write transaction on redb.
pub const REDB_CHUNK: usize = 25_000;
/// Units per transaction on PostgreSQL.
pub const PG_CHUNK: usize = 20_000;
/// Ended sessions the history is spread over.
pub const HISTORY_SESSIONS: usize = 100;

/// What to load.
#[derive(Clone, Debug)]
pub struct History {
    /// Ended units.
    pub units: usize,
    /// When the oldest one ended; unit `i` ended at `first_end + i * step_ms` and was
    /// dispatched a second before.
    pub first_end: Timestamp,
    /// Milliseconds between two units' ends.
    pub step_ms: u64,
}

impl History {
    /// When history unit `i` ended.
    pub fn ended_at(&self, i: usize) -> Timestamp {
        Timestamp(self.first_end.0 + i as u64 * self.step_ms)
    }
}

/// The live part: units queued for hosts that are not there, inline units whose child runs,
/// and events ready in sessions of their own.
#[derive(Clone, Debug)]
pub struct Live {
    /// Queued background units, over ten sessions.
    pub queued: usize,
    /// Running inline units (their child started; no host: nothing recovers them).
    pub running: usize,
    /// Finished background units whose terminal event is pending, one session each.
    pub ready: usize,
}

/// The id of history unit `i`: as random-looking as the product's, and never twice
/// (a bijection of 48 bits).
pub fn history_id(i: usize) -> DelegationId {
    const MASK: u64 = (1 << 48) - 1;
    let mut x = (i as u64 ^ 0x5ca1e).wrapping_mul(0x9E37_79B9_7F4B) & MASK;
    x ^= x >> 24;
    DelegationId::new(format!("deleg_{x:012x}")).expect("12 hex digits")
}

/// The records of one unit: the unit, its children, its events.
struct Records {
    unit: UnitRecord,
    children: Vec<Child>,
    events: Vec<Event>,
}

/// Loads `history` and `live` into `ledger` (empty or not). `pg_url` is the URL of the
/// ledger's database when it is on PostgreSQL (the history goes in over a connection of its
/// own); `None` for redb.
pub fn load(ledger: &Ledger, pg_url: Option<&str>, history: &History, live: &Live) -> Result<()> {
    let template = template(ledger, history.first_end)?;
    let sessions: Vec<Session> = (0..HISTORY_SESSIONS)
        .map(|k| Session {
            id: history_session(k),
            state: SessionState::Ended,
            created_at: history.first_end,
            ended_at: Some(history.ended_at(history.units)),
            host: None,
        })
        .collect();
    ledger.write(|w| sessions.iter().try_for_each(|s| w.put_session(s)))?;
    let chunk = if pg_url.is_some() {
        PG_CHUNK
    } else {
        REDB_CHUNK
    };
    let mut start = 0;
    while start < history.units {
        let end = (start + chunk).min(history.units);
        let records: Vec<Records> = (start..end).map(|i| copy(&template, history, i)).collect();
        match pg_url {
            Some(url) => insert_pg(url, &records)?,
            None => ledger.write(|w| {
                for r in &records {
                    w.put_delegation(&r.unit)?;
                    w.put_children(&r.children)?;
                    r.events.iter().try_for_each(|e| w.put_event(e))?;
                }
                Ok(())
            })?,
        }
        start = end;
    }
    if let Some(url) = pg_url {
        vacuum_analyze_pg(url)?;
    }
    load_live(ledger, live, history.ended_at(history.units))
}

/// Vacuums the tables just filled and gathers the planner's statistics, as autovacuum does
/// within a minute of a table growing that much: a ledger that grew to a million units over
/// days has been vacuumed and analyzed. Without it, a plan chosen on the statistics of an
/// empty table would measure the load, not the ledger, and autovacuum's first pass over
/// millions of inserted rows would run during the measurements instead of before them.
fn vacuum_analyze_pg(url: &str) -> Result<()> {
    crate::store::pg::off_runtime(|| {
        let mut client = postgres::Client::connect(url, postgres::NoTls)?;
        client.batch_execute("VACUUM (ANALYZE)")
    })
    .map_err(|err| crate::error::LedgerError::Invalid(format!("vacuuming the tables: {err}")))
}

fn history_session(k: usize) -> SessionId {
    SessionId::new(format!("history-{k}")).expect("a valid session id")
}

/// One unit dispatched, run and finished through the ledger's API, then read back and
/// removed: what each history unit is a copy of.
fn template(ledger: &Ledger, at: Timestamp) -> Result<Records> {
    let task = TaskSpec::new("history", vec!["true".into()]);
    let admitted = ledger.dispatch(
        NewDelegation {
            id: None,
            session: Some(history_session(0)),
            channel: Channel::Background,
            spec: DispatchSpec::new("history", vec![task]),
            host: None,
            transcript_root: None,
        },
        roomy(),
        at,
    )?;
    let id = admitted.delegation.id;
    ledger.child_started(
        HostId(0),
        &id,
        0,
        ProcessId {
            pid: 4_000_000,
            start_time: 1,
        },
        at,
    )?;
    let outcome = ChildOutcome {
        exit_code: Some(0),
        started_at: Some(at),
        result: "ok\n".into(),
        ..ChildOutcome::new(0, "history", ChildStatus::Completed, at)
    };
    ledger.finish_child(HostId(0), &id, outcome, at)?;
    ledger.write(|w| {
        let unit = w.delegation(id.as_str())?.expect("the template unit");
        let records = Records {
            children: w.children(&id)?,
            events: w.events(&id)?,
            unit,
        };
        w.purge_delegation(&records.unit)?;
        Ok(records)
    })
}

fn roomy() -> Capacity {
    Capacity {
        max_running: 1_000_000,
        max_queued: 1_000_000,
    }
}

/// History unit `i`: the template under its own id, session and times, with its events
/// delivered (seven in ten), dropped with their session (two) or expired (one); one in twenty
/// failed.
fn copy(template: &Records, history: &History, i: usize) -> Records {
    let id = history_id(i);
    let ended = history.ended_at(i);
    let dispatched = Timestamp(ended.0.saturating_sub(1_000));
    let session = history_session(i % HISTORY_SESSIONS);
    let failed = i % 20 == 19;
    let mut unit = template.unit.clone();
    unit.id = id.clone();
    unit.session = Some(session.clone());
    unit.dispatched_at = dispatched;
    unit.started_at = Some(Timestamp(dispatched.0 + 10));
    unit.ended_at = Some(ended);
    if failed {
        unit.status = UnitStatus::Failed;
    }
    let children = template
        .children
        .iter()
        .map(|c| {
            let mut c = c.clone();
            c.delegation_id = id.clone();
            c.started_at = unit.started_at;
            c.ended_at = Some(ended);
            if failed {
                c.status = ChildStatus::Failed;
                c.exit_code = Some(1);
            }
            c
        })
        .collect();
    let events = template
        .events
        .iter()
        .map(|e| {
            let mut e = e.clone();
            e.delegation_id = id.clone();
            e.session = Some(session.clone());
            e.published_at = ended;
            let settled = Timestamp(ended.0 + 500);
            match i % 10 {
                7 | 8 => {
                    e.state = EventState::Dropped;
                    e.lease = None;
                    e.dropped_at = Some(settled);
                    e.drop_reason = Some(DropReason::SessionEnded);
                }
                9 => {
                    e.state = EventState::Dropped;
                    e.lease = None;
                    e.dropped_at = Some(settled);
                    e.drop_reason = Some(DropReason::ReplayExpired);
                }
                _ => {
                    e.state = EventState::Delivered;
                    e.attempts = 1;
                    e.delivered_at = Some(settled);
                    e.lease = Some(Lease {
                        token: ClaimToken(u128::from(i as u64) << 64 | 0x5ca1e),
                        consumer: format!("hook:{}", session.as_str()),
                        claimed_at: Timestamp(ended.0 + 100),
                        expires_at: Timestamp(ended.0 + 30_100),
                    });
                }
            }
            e
        })
        .collect();
    Records {
        unit,
        children,
        events,
    }
}

/// The units, children and events of `records` in one transaction, a statement per table,
/// in the columns `store/pg/write.rs` writes.
fn insert_pg(url: &str, records: &[Records]) -> Result<()> {
    use crate::codec::encode;
    let int = |t: Timestamp| i64::try_from(t.0).unwrap_or(i64::MAX);
    let mut u = UnitColumns::default();
    let mut c = (Vec::new(), Vec::new(), Vec::new());
    for r in records {
        let unit = &r.unit;
        u.id.push(unit.id.to_string());
        u.session
            .push(unit.session.as_ref().map(|s| s.as_str().to_owned()));
        u.status.push(unit.status.as_str().to_owned());
        u.dispatched_at.push(int(unit.dispatched_at));
        u.delivery.push(unit.spec.delivery.as_str().to_owned());
        u.record.push(encode(unit));
        for child in &r.children {
            c.0.push(child.delegation_id.to_string());
            c.1.push(i64::from(child.index));
            c.2.push(encode(child));
        }
    }
    let e = crate::store::pg::EventColumns::of_events(records.iter().flat_map(|r| &r.events));
    crate::store::pg::off_runtime(|| {
        let mut client = postgres::Client::connect(url, postgres::NoTls)?;
        let mut txn = client.transaction()?;
        txn.execute(
            "INSERT INTO hermes_units (id, session, status, dispatched_at, active, queue_seq, \
             delivery, record, host_pid, host_start) \
             SELECT id, session, status, at, false, NULL, delivery, record, NULL, NULL \
             FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], \
             $6::bytea[]) AS u(id, session, status, at, delivery, record)",
            &[
                &u.id,
                &u.session,
                &u.status,
                &u.dispatched_at,
                &u.delivery,
                &u.record,
            ],
        )?;
        txn.execute(
            "INSERT INTO hermes_children (unit, idx, record) \
             SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])",
            &[&c.0, &c.1, &c.2],
        )?;
        txn.execute(
            "INSERT INTO hermes_events (unit, code, session, delivery, state, attempts, \
             lease_token, lease_consumer, lease_claimed_at, lease_expires_at, published_at, \
             delivered_at, dropped_at, drop_reason, payload) \
             SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], \
             $6::bigint[], $7::bytea[], $8::text[], $9::bigint[], $10::bigint[], $11::bigint[], \
             $12::bigint[], $13::bigint[], $14::text[], $15::bytea[])",
            &[
                &e.units,
                &e.codes,
                &e.sessions,
                &e.deliveries,
                &e.states,
                &e.attempts,
                &e.tokens,
                &e.consumers,
                &e.claimed,
                &e.expires,
                &e.published,
                &e.delivered,
                &e.dropped,
                &e.reasons,
                &e.payloads,
            ],
        )?;
        txn.commit()
    })
    .map_err(|err| crate::error::LedgerError::Invalid(format!("loading the history: {err}")))
}

#[derive(Default)]
struct UnitColumns {
    id: Vec<String>,
    session: Vec<Option<String>>,
    status: Vec<String>,
    dispatched_at: Vec<i64>,
    delivery: Vec<String>,
    record: Vec<Vec<u8>>,
}

/// Queued units in ten sessions of no host, running inline units, and ready events, each
/// through the ledger's API, dispatched after the history.
fn load_live(ledger: &Ledger, live: &Live, at: Timestamp) -> Result<()> {
    let unit = |session: Option<SessionId>, n: usize| {
        let task = TaskSpec::new(format!("live {n}"), vec!["true".into()]);
        NewDelegation {
            id: None,
            channel: if session.is_some() {
                Channel::Background
            } else {
                Channel::Inline
            },
            session,
            spec: DispatchSpec::new(format!("live {n}"), vec![task]),
            host: None,
            transcript_root: None,
        }
    };
    let live_session = |name: &str, k: usize| SessionId::new(format!("{name}-{k}")).expect("id");
    for n in 0..live.queued {
        ledger.dispatch(unit(Some(live_session("queued", n % 10)), n), roomy(), at)?;
    }
    for n in 0..live.running {
        let id = ledger.dispatch(unit(None, n), roomy(), at)?.delegation.id;
        let process = ProcessId {
            pid: 4_100_000 + u32::try_from(n).unwrap_or(0),
            start_time: 1,
        };
        ledger.child_started(HostId(0), &id, 0, process, at)?;
    }
    for n in 0..live.ready {
        let id = ledger
            .dispatch(unit(Some(live_session("ready", n)), n), roomy(), at)?
            .delegation
            .id;
        let outcome = ChildOutcome {
            exit_code: Some(0),
            started_at: Some(at),
            result: "ok\n".into(),
            ..ChildOutcome::new(0, format!("live {n}"), ChildStatus::Completed, at)
        };
        ledger.finish_child(HostId(0), &id, outcome, at)?;
    }
    Ok(())
}

/// The bytes hermes' tables take in the database of `url`, their indexes and TOAST included
/// (`pg_total_relation_size`).
pub fn pg_bytes(url: &str) -> Result<u64> {
    crate::store::pg::off_runtime(|| {
        let mut client = postgres::Client::connect(url, postgres::NoTls)?;
        let row = client.query_one(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind = 'r' AND c.relname LIKE 'hermes\\_%' \
             AND n.nspname = current_schema()",
            &[],
        )?;
        Ok::<i64, postgres::Error>(row.get(0))
    })
    .map(|n| u64::try_from(n).unwrap_or(0))
    .map_err(|err| crate::error::LedgerError::Invalid(format!("the size of hermes' tables: {err}")))
}

/// How many units `ledger` keeps, every one counted (its whole by-time index read): for a
/// benchmark's bookkeeping, not a product path.
pub fn kept_units(ledger: &Ledger) -> Result<usize> {
    ledger.read(|r| {
        Ok(
            r.units_before(Timestamp(i64::MAX as u64), None, usize::MAX)?
                .len(),
        )
    })
}
