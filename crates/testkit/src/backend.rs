//! The backend the suites run against, chosen by `HERMES_TEST_BACKEND` (`redb`, the default,
//! or `postgres`), and a fresh ledger of it per test: a file in the test's own directory, or a
//! new database on the throwaway server, dropped when the test is done.

use std::path::Path;

use hermes_ledger::testing::{database_name, drop_database, fresh_database};
use hermes_ledger::{Ledger, LedgerConfig, Location, PgTarget, TokenSource};

use crate::server::pg_server;

/// The variable naming the backend under test.
pub const BACKEND_VAR: &str = "HERMES_TEST_BACKEND";

/// The backend the suites run against.
#[derive(Clone, Debug)]
pub enum TestBackend {
    /// A redb file per test.
    Redb,
    /// A database per test on this server (its admin URL).
    Postgres(String),
}

impl TestBackend {
    /// The backend `HERMES_TEST_BACKEND` names. Panics (failing the test) on an unknown value,
    /// or when PostgreSQL is asked for and no server can be had ([`pg_server`]): a missing
    /// server must fail, never skip.
    pub fn from_env() -> TestBackend {
        match std::env::var(BACKEND_VAR).as_deref() {
            Err(_) | Ok("") | Ok("redb") => TestBackend::Redb,
            Ok("postgres") => TestBackend::Postgres(pg_server().admin_url.clone()),
            Ok(other) => panic!("{BACKEND_VAR}={other:?}: expected redb or postgres"),
        }
    }

    /// Whether this is PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        matches!(self, TestBackend::Postgres(_))
    }

    /// A fresh, empty ledger location: `dir/ledger.redb`, or a new database. The second value
    /// is the URL to hand to a `hermes` process (`HERMES_LEDGER_URL`), if any.
    pub fn fresh(&self, dir: &Path) -> (Location, Option<String>) {
        match self {
            TestBackend::Redb => (Location::File(dir.join("ledger.redb")), None),
            TestBackend::Postgres(admin) => {
                let url = fresh_database(admin);
                let target = PgTarget::parse(&url, None).expect("the test URL parses");
                (Location::Postgres(Box::new(target)), Some(url))
            }
        }
    }

    /// [`TestBackend::fresh`], with a guard that drops the database when the test is done
    /// (each costs the server some megabytes; a suite makes hundreds).
    pub fn fresh_owned(&self, dir: &Path) -> (Location, Option<String>, Option<TestDatabase>) {
        let (location, url) = self.fresh(dir);
        let guard = match (self, &url) {
            (TestBackend::Postgres(admin), Some(url)) => Some(TestDatabase {
                admin: admin.clone(),
                name: database_name(url),
            }),
            _ => None,
        };
        (location, url, guard)
    }

    /// A fresh ledger, opened with a seeded token source. (Its database, on PostgreSQL, stays
    /// until the server goes: prefer `fresh_owned` where a fixture can hold the guard.)
    pub fn open(&self, dir: &Path, config: LedgerConfig, seed: u64) -> Ledger {
        open_location(&self.fresh(dir).0, config, seed)
    }
}

/// A test database, dropped (with any connection still open to it) when this is dropped.
#[derive(Debug)]
pub struct TestDatabase {
    admin: String,
    name: String,
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        drop_database(&self.admin, &self.name);
    }
}

/// Opens (another handle on) the ledger at `location` with a seeded token source.
pub fn open_location(location: &Location, config: LedgerConfig, seed: u64) -> Ledger {
    match location {
        Location::File(path) => Ledger::open_with(path, config, TokenSource::Seeded(seed)),
        Location::Postgres(target) => Ledger::connect(target, config, TokenSource::Seeded(seed)),
    }
    .expect("the test ledger opens")
}
