//! The PostgreSQL backend: one ledger shared by any number of machines.
//!
//! Each record kind is a table whose key parts and index fields are columns (text keys in the
//! `"C"` collation, so they sort bytewise as redb's do) and whose record is the same
//! `codec`-encoded value the redb backend stores — except events and claims, which since
//! schema version 2 (`v2.rs`) are columns through and through (`rows.rs`: state, attempts,
//! lease, token, keys; only an event's payload stays encoded), so that one statement can decide
//! and change them. The redb index tables become columns with partial indexes (`open`,
//! `active`, `queue_seq`).
//!
//! The hot transitions — publish, claim, ack — are one call each of a function of
//! `transitions.sql` (`transitions.rs`, behind `store::Transitions`): an autocommit statement
//! at READ COMMITTED under row locks, one round trip. Every other operation runs inside one
//! transaction: reads at `REPEATABLE READ` (one snapshot), writes at `SERIALIZABLE`, and a
//! write that loses a serialization race is run again from the start (operations are
//! re-runnable closures), so concurrent promoters and finishers behave exactly as under redb's
//! one-writer-at-a-time transactions; a transaction reads each host, session, tally and unit
//! once (`tx::Seen`; a unit's read joins its host's record through the unit's host columns,
//! the read that finds a unit has no tally brings the unit, its host and its session along, a
//! child's read its unit and host, and the hosts list is kept until a host is written). As on
//! redb, operations issued concurrently by one process's threads may
//! share one transaction and its one commit (group commit, `group.rs`); each
//! still gets its own result. `NOTIFY` is issued by the writes themselves (triggers on events
//! written pending and on the activity counter) and wakes waiters when the transaction commits.
//!
//! The client is hermes' own synchronous one (`client.rs`), which drives `tokio-postgres` on a
//! small runtime of each connection's own over a socket it opened itself, so that every round
//! trip has a deadline; a call made from inside a tokio runtime runs on a scoped thread, since
//! that runtime cannot be blocked on from there.

mod client;
mod connect;
mod credentials;
mod held;
mod hub;
mod listen;
mod pool;
mod read;
mod retry;
mod rows;
mod schema;
mod tls;
mod transitions;
mod tx;
mod url;
mod v2;
mod v3;
mod write;

pub use credentials::url_without_password;
pub use listen::{Listener, Notice};
pub(crate) use retry::Pg;
#[cfg(any(test, feature = "testing"))]
pub(crate) use retry::off_runtime;
pub use retry::serialization_failures;
#[cfg(any(test, feature = "testing"))]
pub(crate) use rows::EventColumns;
pub use schema::SCHEMA_VERSION;
pub use url::{PgEnv, PgTarget, is_postgres_url};
