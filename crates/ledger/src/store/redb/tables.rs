//! Every redb table of the ledger, in one place.
//!
//! Values are `codec`-encoded byte strings. Index tables (`OPEN_EVENTS`, `ACTIVE_RECORDS`,
//! `UNITS_BY_TIME`, `UNITS_BY_SESSION`, `QUEUE`) are maintained in the same transaction as the
//! rows they index, so they are never out of step.

use redb::TableDefinition;

/// `format_version` and counters (`next_queue_seq`, `last_recovery_at`).
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Session id → `Session`.
pub(crate) const SESSIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("sessions");
/// (pid, start time) → `HostRecord`.
pub(crate) const HOSTS: TableDefinition<(u32, u64), &[u8]> = TableDefinition::new("hosts");
/// Delegation id → `UnitRecord`.
pub(crate) const DELEGATIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("delegations");
/// (delegation id, index) → `Child`.
pub(crate) const CHILDREN: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("children");
/// (delegation id, event key code) → `Event`. See `key_code`.
pub(crate) const EVENTS: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("events");
/// Claim token → `ClaimRecord`.
pub(crate) const CLAIMS: TableDefinition<u128, &[u8]> = TableDefinition::new("claims");
/// Queue sequence → delegation id, for queued units in FIFO order.
pub(crate) const QUEUE: TableDefinition<u64, &str> = TableDefinition::new("queue");
/// (session id or "", delegation id, event key code) for every pending or claimed event.
pub(crate) const OPEN_EVENTS: TableDefinition<(&str, &str, u32), ()> =
    TableDefinition::new("open_events");
/// Delegation id → `UnitRecord` (the same bytes as its [`DELEGATIONS`] row) for every queued or
/// running unit. Every command's sweep and every admission reads all of them, and `top` and the
/// metrics their children and events too: kept apart (with [`ACTIVE_CHILDREN`] and
/// [`ACTIVE_EVENTS`]), they sit on a few pages of their own, which a million ended units do not
/// spread out (format 7).
pub(crate) const ACTIVE_RECORDS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("active_records");
/// (delegation id, index) → `Child` (the same bytes as its [`CHILDREN`] row) for every child of
/// a unit in [`ACTIVE_RECORDS`], for the views of the live units (format 7).
pub(crate) const ACTIVE_CHILDREN: TableDefinition<(&str, u32), &[u8]> =
    TableDefinition::new("active_children");
/// (delegation id, event key code) → `Event` (the same bytes as its [`EVENTS`] row) for every
/// event of a unit in [`ACTIVE_RECORDS`], as [`ACTIVE_CHILDREN`] (format 7).
pub(crate) const ACTIVE_EVENTS: TableDefinition<(&str, u32), &[u8]> =
    TableDefinition::new("active_events");
/// Delegation id for every queued or running unit, up to format 6 (then [`ACTIVE_RECORDS`]):
/// read once, by the migration to format 7, which removes it.
pub(crate) const ACTIVE_UNITS_V6: TableDefinition<&str, ()> = TableDefinition::new("active_units");
/// (dispatched at, delegation id) for every unit.
pub(crate) const UNITS_BY_TIME: TableDefinition<(u64, &str), ()> =
    TableDefinition::new("units_by_time");
/// (session id, delegation id) for every background unit.
pub(crate) const UNITS_BY_SESSION: TableDefinition<(&str, &str), ()> =
    TableDefinition::new("units_by_session");

/// (delegation id, index) → the last output of a running child (at most `TAIL_CHARS`), stored
/// with its progress so that recovery on any machine has a tail. Added in format 2.
pub(crate) const CHILD_TAILS: TableDefinition<(&str, u32), &str> =
    TableDefinition::new("child_tails");
/// (delegation id, index) → `Stalling`, for children found stalling (SIGTERM sent, SIGKILL
/// due after the grace period). Added after format 1's first tables: a file without it reads as
/// having no stalling children.
pub(crate) const CHILD_STALLS: TableDefinition<(&str, u32), &[u8]> =
    TableDefinition::new("child_stalls");
/// Delegation id → `UnitTally`, for units not yet terminal: how many children finished, by
/// status, and what publishing needs, so finishing one child reads one child and one tally row
/// instead of the whole batch. A unit without one (recorded by an older build) is settled by
/// reading its children.
pub(crate) const UNIT_TALLIES: TableDefinition<&str, &[u8]> = TableDefinition::new("unit_tallies");
/// `"base"` → the metrics base: the totals of the units that no longer change, up to a
/// watermark (`census.rs`). A file without it reads as having none.
pub(crate) const METRICS_BASE: TableDefinition<&str, &[u8]> = TableDefinition::new("metrics_base");
/// The one key of [`METRICS_BASE`].
pub(crate) const METRICS_BASE_KEY: &str = "base";
