//! Test support for hermes' workspace, used only as a dev-dependency (and by the `tests`
//! crate's helper binaries): never part of a shipped build.
//!
//! The backend the suites run against, chosen by `HERMES_TEST_BACKEND` (`redb`, the default,
//! or `postgres`), and a fresh ledger of it per test (a file in the test's own directory, or a
//! new database on the throwaway server); the throwaway server itself (`server.rs`); and, from
//! the ledger's `testing` feature, the fixtures and the SQL helpers on a test database (only
//! the ledger may name a PostgreSQL client). `cargo xtask ci` runs the backend suites once per
//! backend; nothing here ever skips a test: what cannot be had panics, failing the test.

mod agents;
mod backend;
pub mod model;
mod server;

pub use agents::agent_bin;
pub use backend::{BACKEND_VAR, TestBackend, TestDatabase, open_location};
pub use hermes_ledger::testing::{
    backends_of, background_unit, connection_is_encrypted, connections_named, connections_of,
    connections_that_ran, deallocate_prepared_statements, execute_sql, fail_event_writes,
    fresh_database, fresh_empty_database, prepared_statements, query_bools, refused_event_writes,
    reset_statements, running_unit, session_setting, set_schema_version, spec, statements_run,
    terminate_connections, top_statements, with_dbname,
};
pub use server::{
    PG_URL_VAR, PoolMode, TestServer, pg_admin_url, pg_authority, pg_bouncer, pg_server,
};
