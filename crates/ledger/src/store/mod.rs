//! The backend seam: typed reads and writes inside one transaction.
//!
//! Every ledger operation (`events.rs`, `units.rs`, `children.rs`, `sessions.rs`, `recovery.rs`,
//! `queries.rs`, …, and the in-transaction steps they share under `txn/`) is written once,
//! against [`ReadTx`] and [`WriteTx`]; the rules it applies live in those files and in
//! `rules.rs`, never in a backend. A backend supplies only transactional storage of the
//! ledger's records and the indexes over them:
//!
//! - `redb/` — the embedded default: one file, typed redb tables, index tables kept in step;
//! - `pg/` — PostgreSQL, shared by many machines: one table per record kind, indexes as
//!   columns, serializable transactions.
//!
//! `backend.rs` is the one place that chooses between them ([`Backend`]). Nothing here imports
//! an operation module (`events`, `units`, `pools`, `sessions`, `recovery`, `queries`).
//!
//! A `Reader` and a `Writer` are a backend's transaction behind these traits; operations never
//! see which backend they run on.

mod backend;
pub(crate) mod pg;
pub(crate) mod redb;

pub(crate) use backend::Backend;
pub use backend::Listen;

use std::cell::Cell;
use std::path::Path;

use crate::error::{LedgerError, Result};
use crate::model::{
    Child, ClaimOutcome, ClaimRecord, ClaimRequest, ClaimToken, DelegationId, Event, EventKey,
    EventPayload, EventRef, HostRecord, ProcessId, Published, Session, SessionId, Stalling,
    Timestamp, UnitRecord, UnitTally,
};

/// The `META` key of the file's format version.
pub(crate) const META_FORMAT_VERSION: &str = "format_version";
/// The `META` key of the next queue sequence number.
pub(crate) const META_NEXT_QUEUE_SEQ: &str = "next_queue_seq";
/// The `META` key of the activity counter: bumped by every change a host must act on (a
/// background dispatch, an interrupt, a session end), so hosts can poll one value cheaply.
pub(crate) const META_ACTIVITY: &str = "activity";

/// The stored form of an event key: `task:N` is `N`, `terminal` is `u32::MAX`.
pub(crate) fn key_code(key: EventKey) -> u32 {
    match key {
        EventKey::Task(n) => n,
        EventKey::Terminal => u32::MAX,
    }
}

/// The event key of a stored code.
pub(crate) fn key_from_code(code: u32) -> EventKey {
    if code == u32::MAX {
        EventKey::Terminal
    } else {
        EventKey::Task(code)
    }
}

/// What [`ReadTx::sweep_look`] is asked.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SweepCutoffs {
    /// Whether to read every host and active unit (the sweep could not skip judging them).
    pub(crate) hosts: bool,
    /// An open event published before this is past the replay limit.
    pub(crate) replay: Timestamp,
    pub(crate) now: Timestamp,
}

/// What a recovery sweep found before writing: whether each of its steps has anything to do.
#[derive(Debug, Default)]
pub(crate) struct SweepLook {
    /// Every host record and every queued or running unit, when asked for.
    pub(crate) hosts: Option<(Vec<HostRecord>, Vec<UnitRecord>)>,
    /// Whether an open event past the replay limit is deliverable now (one to drop).
    pub(crate) replay_expired: bool,
    /// When the oldest open event was published (the replay limit drops none before it ages).
    pub(crate) oldest_open_event: Option<Timestamp>,
    /// When the oldest unit kept was dispatched (the purge removes none before it ages).
    pub(crate) oldest_unit: Option<Timestamp>,
}

/// Rows decoded whose count can grow with a batch's size (children and units), for tests
/// and benchmarks that check how much an operation reads.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) rows: std::sync::atomic::AtomicU64,
}

impl Counters {
    pub(crate) fn count(&self, n: u64) {
        self.rows.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The reads every backend offers inside a transaction. Each returns what was committed before
/// the transaction began plus what it wrote itself.
pub(crate) trait ReadTx {
    /// A session.
    fn session(&self, id: &SessionId) -> Result<Option<Session>>;
    /// Every session.
    fn sessions(&self) -> Result<Vec<Session>>;
    /// The host record of a process.
    fn host(&self, process: ProcessId) -> Result<Option<HostRecord>>;
    /// Every host record.
    fn hosts(&self) -> Result<Vec<HostRecord>>;
    /// The last output a host stored for a running child, if any.
    fn child_tail(&self, id: &DelegationId, index: u32) -> Result<Option<String>>;
    /// A unit.
    fn delegation(&self, id: &str) -> Result<Option<UnitRecord>>;
    /// Whether a unit with this id exists.
    fn delegation_exists(&self, id: &str) -> Result<bool>;
    /// One child of a unit.
    fn child(&self, id: &DelegationId, index: u32) -> Result<Option<Child>>;
    /// Every child of a unit, by index.
    fn children(&self, id: &DelegationId) -> Result<Vec<Child>>;
    /// The children of a unit at `indexes` that exist, by index. A backend where every read
    /// is a round trip answers in one query instead of one per child.
    fn children_at(&self, id: &DelegationId, indexes: &[u32]) -> Result<Vec<Child>> {
        let mut out = Vec::new();
        for &index in indexes {
            out.extend(self.child(id, index)?);
        }
        out.sort_by_key(|c| c.index);
        Ok(out)
    }
    /// The children of a unit found stalling, by index.
    fn stalls(&self, id: &DelegationId) -> Result<Vec<Stalling>>;
    /// The tally of a unit not yet terminal.
    fn tally(&self, id: &DelegationId) -> Result<Option<UnitTally>>;
    /// One event.
    fn event(&self, event: &EventRef) -> Result<Option<Event>>;
    /// Every event of a unit, `task:0..` then `terminal`.
    fn events(&self, id: &DelegationId) -> Result<Vec<Event>>;
    /// Every pending or claimed event of `session` (`None`: of inline units), by unit id then
    /// key.
    fn open_events(&self, session: Option<&SessionId>) -> Result<Vec<EventRef>>;
    /// The records of [`ReadTx::open_events`], in the same order. A backend where every read
    /// is a round trip to a server answers in one query instead of one per event.
    fn open_event_records(&self, session: Option<&SessionId>) -> Result<Vec<Event>> {
        let mut out = Vec::new();
        for event_ref in self.open_events(session)? {
            out.extend(self.event(&event_ref)?);
        }
        Ok(out)
    }
    /// Every pending or claimed event of every session.
    fn all_open_events(&self) -> Result<Vec<EventRef>>;
    /// A claim by its token.
    fn claim_record(&self, token: ClaimToken) -> Result<Option<ClaimRecord>>;
    /// Queued or running units, in id order.
    fn active_units(&self) -> Result<Vec<UnitRecord>>;
    /// [`ReadTx::hosts`] and [`ReadTx::active_units`], of one snapshot: what admission, a
    /// host's pass and the recovery sweep judge by. A backend where every read is a round
    /// trip answers in one query.
    fn hosts_and_active_units(&self) -> Result<(Vec<HostRecord>, Vec<UnitRecord>)> {
        Ok((self.hosts()?, self.active_units()?))
    }
    /// Reads at once what an admission reads next — every host, every active unit, `session`
    /// and the unit `unit` (a dispatch sent again under its id) — where every read is a round
    /// trip to a server, so that those reads then cost none; elsewhere nothing.
    fn admission_look(
        &self,
        session: Option<&SessionId>,
        unit: Option<&DelegationId>,
    ) -> Result<()> {
        let _ = (session, unit);
        Ok(())
    }
    /// Reads at once what a child's finish reads next — its unit's tally (or the unit) and
    /// child `index` — where every read is a round trip to a server; elsewhere nothing.
    fn finish_look(&self, id: &DelegationId, index: u32) -> Result<()> {
        let _ = (id, index);
        Ok(())
    }
    /// What a recovery sweep looks at before it writes anything, as one snapshot (in one
    /// query where every read is a round trip to a server; see [`SweepLook`]).
    fn sweep_look(&self, cutoffs: SweepCutoffs) -> Result<SweepLook> {
        let hosts = if cutoffs.hosts {
            Some(self.hosts_and_active_units()?)
        } else {
            None
        };
        let (mut replay_expired, mut oldest_open_event) = (false, None::<Timestamp>);
        for event_ref in self.all_open_events()? {
            if let Some(e) = self.event(&event_ref)? {
                replay_expired |= e.published_at < cutoffs.replay && e.is_deliverable(cutoffs.now);
                oldest_open_event =
                    Some(oldest_open_event.map_or(e.published_at, |t| t.min(e.published_at)));
            }
        }
        let oldest_unit = self
            .units_before(Timestamp(u64::MAX), None, 1)?
            .first()
            .map(|(at, _)| Timestamp(*at));
        Ok(SweepLook {
            hosts,
            replay_expired,
            oldest_open_event,
            oldest_unit,
        })
    }
    /// How many units are recorded, of `session` or of all sessions, counted no further than
    /// `at_most`: a count of a million units would read them all.
    fn unit_count(&self, session: Option<&SessionId>, at_most: usize) -> Result<usize>;
    /// The `limit` most recently dispatched units, newest first, optionally of one session.
    fn recent_units(&self, session: Option<&SessionId>, limit: usize) -> Result<Vec<UnitRecord>>;
    /// The `limit` most recently dispatched ended units, newest first, optionally of one
    /// session. `live` is how many units are queued or running there: read past by a backend
    /// that cannot tell them apart before reading them.
    fn recent_ended_units(
        &self,
        session: Option<&SessionId>,
        limit: usize,
        live: usize,
    ) -> Result<Vec<UnitRecord>> {
        Ok(ended(self.recent_units(session, limit + live)?, limit))
    }
    /// At most `limit` units dispatched before `cutoff`, oldest first, as (dispatched at, id),
    /// starting after `after` (a key this returned before): a page of the by-time index, so a
    /// caller walks a million units in bounded reads.
    fn units_before(
        &self,
        cutoff: Timestamp,
        after: Option<&(u64, String)>,
        limit: usize,
    ) -> Result<Vec<(u64, String)>>;
    /// A counter of the ledger's metadata (`META_*`).
    fn meta(&self, key: &str) -> Result<Option<u64>>;
    /// The stored metrics base (`census.rs`), encoded; `None` before the first.
    fn metrics_base(&self) -> Result<Option<Vec<u8>>>;
    /// The units of `ids` that exist, in no particular order; as [`ReadTx::children_of`].
    fn delegations_of(&self, ids: &[DelegationId]) -> Result<Vec<UnitRecord>> {
        let mut out = Vec::new();
        for id in ids {
            out.extend(self.delegation(id.as_str())?);
        }
        Ok(out)
    }
    /// The children of every unit of `ids`, by unit then index (whole-ledger views). A backend
    /// where every read is a round trip answers in one query instead of one per unit.
    fn children_of(&self, ids: &[DelegationId]) -> Result<Vec<Child>> {
        let mut out = Vec::new();
        for id in ids {
            out.extend(self.children(id)?);
        }
        Ok(out)
    }
    /// The events of every unit of `ids`, by unit then key; as [`ReadTx::children_of`].
    fn events_of(&self, ids: &[DelegationId]) -> Result<Vec<Event>> {
        let mut out = Vec::new();
        for id in ids {
            out.extend(self.events(id)?);
        }
        Ok(out)
    }
    /// [`ReadTx::children_of`] of units that are all queued or running in this snapshot: a
    /// backend that keeps the children of the active units apart reads them from there.
    fn active_children_of(&self, ids: &[DelegationId]) -> Result<Vec<Child>> {
        self.children_of(ids)
    }
    /// [`ReadTx::events_of`] of units that are all queued or running in this snapshot; as
    /// [`ReadTx::active_children_of`].
    fn active_events_of(&self, ids: &[DelegationId]) -> Result<Vec<Event>> {
        self.events_of(ids)
    }
    /// The stalling children of every unit of `ids`, with their unit; as
    /// [`ReadTx::children_of`].
    fn stalls_of(&self, ids: &[DelegationId]) -> Result<Vec<(DelegationId, Stalling)>> {
        let mut out = Vec::new();
        for id in ids {
            out.extend(self.stalls(id)?.into_iter().map(|s| (id.clone(), s)));
        }
        Ok(out)
    }
}

/// The first `limit` of `units` that have ended.
pub(crate) fn ended(units: Vec<UnitRecord>, limit: usize) -> Vec<UnitRecord> {
    units
        .into_iter()
        .filter(|u| u.status.is_terminal())
        .take(limit)
        .collect()
}

/// The writes every backend offers inside a write transaction. A backend keeps its indexes in
/// step with the rows in the same transaction.
pub(crate) trait WriteTx: ReadTx {
    /// Set by every write, so group commit can tell an operation that failed before writing
    /// from one that left partial writes behind.
    fn dirty(&self) -> &Cell<bool>;
    /// Whether a statement of this transaction failed. A server that aborts the whole
    /// transaction on any failed statement (PostgreSQL) runs nothing more in it, so group
    /// commit must not carry on with the other operations of the group.
    fn aborted(&self) -> bool {
        false
    }
    /// Commits durably.
    fn commit(self: Box<Self>) -> Result<()>;
    /// Stores the last output of a running child.
    fn put_child_tail(&self, id: &DelegationId, index: u32, tail: &str) -> Result<()>;
    /// Inserts or updates a session.
    fn put_session(&self, session: &Session) -> Result<()>;
    /// Inserts or updates a host record.
    fn put_host(&self, host: &HostRecord) -> Result<()>;
    /// Removes a host record.
    fn remove_host(&self, process: ProcessId) -> Result<()>;
    /// Inserts or updates a unit, keeping the active set, the queue and the by-time and
    /// by-session indexes in step.
    fn put_delegation(&self, unit: &UnitRecord) -> Result<()>;
    /// Inserts or updates a child.
    fn put_child(&self, child: &Child) -> Result<()>;
    /// Inserts or updates several children. A backend where every statement is a round trip
    /// writes them in one.
    fn put_children(&self, children: &[Child]) -> Result<()> {
        children.iter().try_for_each(|child| self.put_child(child))
    }
    /// Records a child found stalling.
    fn put_stall(&self, id: &DelegationId, stalling: &Stalling) -> Result<()>;
    /// Inserts or updates a unit's tally.
    fn put_tally(&self, id: &DelegationId, tally: &UnitTally) -> Result<()>;
    /// Removes a unit's tally (it became terminal).
    fn remove_tally(&self, id: &DelegationId) -> Result<()>;
    /// Inserts or updates an event, keeping the open-events index in step with its state.
    fn put_event(&self, event: &Event) -> Result<()>;
    /// Inserts `event` unless an event with its key exists (then nothing changes); whether it
    /// inserted. A backend where every statement is a round trip does it in one.
    fn insert_event(&self, event: &Event) -> Result<bool> {
        if self.event(&event.event_ref())?.is_some() {
            return Ok(false);
        }
        self.put_event(event)?;
        Ok(true)
    }
    /// [`WriteTx::insert_event`] for a caller that does not ask whether it inserted (a child's
    /// finish, whose own record says it was not published yet). A backend where every
    /// statement is a round trip holds it until the commit or its next statement on the
    /// events, and inserts all it holds in one.
    fn add_event(&self, event: &Event) -> Result<()> {
        self.insert_event(event).map(drop)
    }
    /// Inserts or updates a claim.
    fn put_claim(&self, claim: &ClaimRecord) -> Result<()>;
    /// Removes a claim.
    fn remove_claim(&self, token: ClaimToken) -> Result<()>;
    /// Bumps the activity counter ([`META_ACTIVITY`]) and, where the backend can, wakes
    /// every waiter once the transaction commits.
    fn bump_activity(&self) -> Result<()>;
    /// Sets a metadata counter.
    fn set_meta(&self, key: &str, value: u64) -> Result<()>;
    /// Stores the metrics base (`census.rs`), encoded, over the one before.
    fn put_metrics_base(&self, record: &[u8]) -> Result<()>;
    /// Removes a unit with its children, events, claims and index rows (retention).
    fn purge_delegation(&self, unit: &UnitRecord) -> Result<()>;
    /// [`WriteTx::purge_delegation`] of each of `units`. A backend where every statement is a
    /// round trip removes them all in a few.
    fn purge_delegations(&self, units: &[UnitRecord]) -> Result<()> {
        units
            .iter()
            .try_for_each(|unit| self.purge_delegation(unit))
    }
}

/// The hot transitions, each one statement on a backend that has them (PostgreSQL's
/// `store/pg/transitions.sql`: a function per transition, one round trip, at READ COMMITTED
/// under row locks) instead of the operation's read-decide-write transaction. Each applies the
/// same rule as the operation it stands for (`rules.rs`; a property test checks that they
/// agree) and commits on its own. [`Backend::transitions`] is `None` on a backend without them
/// (redb, whose transactions are local and cheap): the operations run as written.
pub(crate) trait Transitions {
    /// `txn::publish::publish_in` for an event of the unit `id` (`ended_with_session`: its payload
    /// says its session's end interrupted it). `None`: there is no such unit.
    fn publish(
        &self,
        id: &DelegationId,
        key: EventKey,
        payload: &EventPayload,
        ended_with_session: bool,
        now: Timestamp,
    ) -> Result<Option<Published>>;
    /// Every request with its fresh token, each all or none on its own keys
    /// (`rules::check_keys`, then `rules::take` or, for exhausted keys, `rules::drop_event`).
    fn claim(
        &self,
        requests: &[(ClaimRequest, ClaimToken)],
        max_attempts: u32,
        now: Timestamp,
    ) -> Result<Vec<ClaimOutcome>>;
    /// Acks every token (`rules::standing`, then `rules::ack` where it holds): where each
    /// stood.
    fn ack(&self, tokens: &[ClaimToken], now: Timestamp) -> Result<Vec<TokenAck>>;
    /// A lease renewal as a compare-and-set: writes `renewed` over the host's record only
    /// where that record is still exactly `held` (which carries the renewing host's epoch).
    /// `false`: it is not (gone, or changed by another process); nothing was written.
    fn renew_host(&self, held: &HostRecord, renewed: &HostRecord) -> Result<bool>;
    /// The read every boundary starts with, in one statement (one snapshot): the session's
    /// record, its open events (by unit, then key), and the units of those it may claim at
    /// `now` — pending, or claimed under a lease that ran out — unless the session ended.
    fn boundary(
        &self,
        session: &SessionId,
        now: Timestamp,
    ) -> Result<(Option<Session>, Vec<Event>, Vec<UnitRecord>)>;
}

/// Where one token stood when [`Transitions::ack`] acked it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TokenAck {
    /// `None`: no claim record (never issued, fenced, settled other than by an ack, purged).
    /// `Holds`: acked now. `Acked`: acked by this token already, nothing changed.
    pub(crate) standing: Option<crate::rules::Standing>,
    /// When the claim's lease ends, if its record was read.
    pub(crate) expires_at: Option<Timestamp>,
    /// The claim's keys (for `Holds` and `Acked`), in key order.
    pub(crate) keys: Vec<EventRef>,
}

/// A read transaction of either backend.
pub(crate) struct Reader<'p>(pub(crate) Box<dyn ReadTx + 'p>);

impl<'p> std::ops::Deref for Reader<'p> {
    type Target = dyn ReadTx + 'p;

    fn deref(&self) -> &Self::Target {
        self.0.as_ref()
    }
}

/// A write transaction of either backend. Dropping it without `commit` aborts it.
pub(crate) struct Writer<'p>(pub(crate) Box<dyn WriteTx + 'p>);

impl<'p> std::ops::Deref for Writer<'p> {
    type Target = dyn WriteTx + 'p;

    fn deref(&self) -> &Self::Target {
        self.0.as_ref()
    }
}

impl Writer<'_> {
    /// Commits durably (counted in `io_counts`).
    pub(crate) fn commit(self) -> Result<()> {
        let started = std::time::Instant::now();
        self.0.commit()?;
        redb::count_commit();
        crate::observe::commit_took(started.elapsed());
        Ok(())
    }
}

/// The session part of an open-events index key (`""` for inline units).
pub(crate) fn session_part(session: Option<&SessionId>) -> &str {
    session.map_or("", SessionId::as_str)
}

/// An event reference from its stored parts.
pub(crate) fn event_ref(path: &Path, id: &str, code: u32) -> Result<EventRef> {
    let delegation_id = DelegationId::new(id).map_err(|err| LedgerError::Damaged {
        path: path.to_owned(),
        reason: format!("event index: {err}"),
    })?;
    Ok(EventRef {
        delegation_id,
        key: key_from_code(code),
    })
}

/// Whether `key` names one of the first `task_count` children.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn is_task_of(key: EventKey, task_count: u32) -> bool {
    matches!(key, EventKey::Task(n) if n < task_count)
}
