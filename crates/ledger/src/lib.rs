//! The durable delivery ledger: the only state hermes processes share.
//!
//! Sessions, delegations (units), children, events and claims live in one redb file opened with
//! `ConcurrencyMode::MultiWriter` (the embedded default), or in one PostgreSQL database shared by
//! any number of machines (`ledger.url`). The operations and the rules they apply are written
//! once (`rules.rs`, and the operation modules over `store::ReadTx`/`WriteTx`); each backend
//! only supplies transactional reads and writes (`store/redb/`, `store/pg/`), and `store::Backend`
//! is the one place that chooses between them. Every state
//! change is one short transaction; every settlement is checked against the claim's fencing
//! token and returns the transition that really happened.
//!
//! Imports go one way: the operation modules (`events.rs`, `units.rs`, `children.rs`, … : thin
//! `impl Ledger` blocks) → `txn/` (what runs inside a transaction and more than one operation
//! uses) → `rules.rs`, `model/`, `store/`. No operation module imports another, and neither
//! `txn/` nor the store imports one (checked by `xtask/src/boundaries.rs`). Test support lives
//! in `hermes-testkit`; what of it needs this crate's insides (`testing/`) is compiled only for
//! tests, with the `testing` feature that only dev-dependencies enable.
//!
//! This crate must never hold a transaction across an `.await`, a child wait or terminal I/O,
//! never read a clock for what it records (callers pass `now`; the only timing here is the
//! pause between retries of a lost serialization race or a failed connection), never touch a
//! process (`/proc`, signals: the registry answers the [`Liveness`] and [`Reaper`] questions),
//! and is the only crate that names redb or a PostgreSQL client.

mod ack;
#[cfg(test)]
mod agree;
mod census;
mod children;
mod codec;
mod error;
mod events;
mod group;
mod interrupts;
mod ledger;
pub mod model;
mod observe;
mod overview;
mod pools;
#[cfg(test)]
mod power_loss;
mod queries;
mod recovery;
mod retention;
mod rules;
mod sessions;
mod store;
/// For this workspace's tests (through `hermes-testkit`): fixtures and SQL on a test database.
/// Compiled only for this crate's tests and with the `testing` feature, which only
/// dev-dependencies enable.
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod testing;
mod txn;
mod units;

pub use ack::Acked;
pub use census::{Census, FOLD_MARGIN_MS, FOLD_MIN, FOLD_PAGE, Held};
pub use codec::FORMAT_VERSION;
pub use error::{LedgerError, Result, StorageFault};
pub use events::{BoundaryView, NewEvent};
pub use ledger::{Ledger, LedgerConfig, TokenSource};
pub use model::*;
pub use observe::{CommitObserver, observe_commits};
pub use pools::WorkerSummary;
pub use queries::{COUNT_LIMIT, HostPass, Listing, SessionSummary, Since};
pub use recovery::{Reaper, RecoveryReport, Sweep, TAIL_CHARS, TAIL_LINES, tail_of};
pub use retention::{PURGE_BATCH, PURGE_BUDGET_MS, PURGE_TXN_MS};
pub use sessions::{HostClaim, SessionEnd};
pub use store::Listen;
pub use store::pg::{
    Listener, Notice, PgEnv, PgTarget, SCHEMA_VERSION, is_postgres_url, serialization_failures,
    url_without_password,
};
pub use store::redb::{IoCounts, io_counts, panic_is_caught};
pub use txn::views::{Overview, UnitView};

/// Where a ledger lives: `ledger.url` unset → the home's redb file; a `postgres://` URL → a
/// PostgreSQL database shared by any number of machines.
#[derive(Clone, Debug)]
pub enum Location {
    /// An embedded redb file.
    File(std::path::PathBuf),
    /// A PostgreSQL database.
    Postgres(Box<PgTarget>),
}

impl Location {
    /// The location `url` names (`None` or empty: `default_file`). A URL without a password
    /// takes `pgpassword` (`PGPASSWORD`).
    pub fn from_url(
        url: Option<&str>,
        default_file: &std::path::Path,
        pgpassword: Option<&str>,
    ) -> Result<Location> {
        let env = PgEnv {
            password: pgpassword.map(str::to_owned),
            ..PgEnv::default()
        };
        Location::from_url_env(url, default_file, &env)
    }

    /// The location `url` names (`None` or empty: `default_file`), what the URL leaves out
    /// taken from libpq's environment (`env`).
    pub fn from_url_env(
        url: Option<&str>,
        default_file: &std::path::Path,
        env: &PgEnv,
    ) -> Result<Location> {
        match url.map(str::trim).filter(|u| !u.is_empty()) {
            None => Ok(Location::File(default_file.to_owned())),
            Some(url) => PgTarget::parse_env(url, env).map(|t| Location::Postgres(Box::new(t))),
        }
    }
}
pub use children::{FinishAs, FinishChild, ProgressUpdate};
pub use txn::interrupt::{InterruptTarget, Interrupts};
pub use txn::liveness::Liveness;
pub use txn::pool::{POOL_NAME_MAX, check_pool_name};
pub use units::{Admission, NewDelegation};
