//! The backend this crate's own unit tests run against, chosen by `HERMES_TEST_BACKEND` as
//! `hermes_testkit::TestBackend` chooses it for the other suites (that one builds the ledger
//! its crate links, not the one under test here), on the testkit's throwaway server.

use std::path::Path;

use super::sql::fresh_database;
use crate::{Location, PgTarget};

/// The backend a unit test runs against.
#[derive(Clone, Debug)]
pub(crate) enum TestBackend {
    /// A redb file per test.
    Redb,
    /// A database per test on this server (its admin URL).
    Postgres(String),
}

impl TestBackend {
    /// The backend `HERMES_TEST_BACKEND` names. Panics (failing the test) on an unknown value,
    /// or when PostgreSQL is asked for and no server can be had: a missing server must fail,
    /// never skip.
    pub(crate) fn from_env() -> TestBackend {
        let var = hermes_testkit::BACKEND_VAR;
        match std::env::var(var).as_deref() {
            Err(_) | Ok("") | Ok("redb") => TestBackend::Redb,
            Ok("postgres") => TestBackend::Postgres(pg_admin_url()),
            Ok(other) => panic!("{var}={other:?}: expected redb or postgres"),
        }
    }

    /// A fresh, empty ledger location: `dir/ledger.redb`, or a new database. The second value
    /// is its URL, if any.
    pub(crate) fn fresh(&self, dir: &Path) -> (Location, Option<String>) {
        match self {
            TestBackend::Redb => (Location::File(dir.join("ledger.redb")), None),
            TestBackend::Postgres(admin) => {
                let url = fresh_database(admin);
                let target = PgTarget::parse(&url, None).expect("the test URL parses");
                (Location::Postgres(Box::new(target)), Some(url))
            }
        }
    }
}

/// The admin URL of the throwaway test server (`hermes_testkit::pg_server`).
pub(crate) fn pg_admin_url() -> String {
    hermes_testkit::pg_admin_url()
}
