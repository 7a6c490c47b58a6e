//! Test support, compiled only for tests: this crate's own, and the other crates' through the
//! `testing` feature, which only dev-dependencies enable (by way of `hermes-testkit`, which
//! holds the rest: the throwaway server and the backend under test). Never in a shipped build.
//!
//! What is here needs this crate's insides or its PostgreSQL client: the SQL helpers on a test
//! database (`sql.rs`) and the fixtures this crate's unit tests share with the others
//! (`fixtures.rs`); `bulk.rs` loads a ledger of a million units for the scale benchmark;
//! `backend.rs` picks the backend of this crate's unit tests; `threads.rs` reuses threads as
//! the registry's blocking pool does, for the benchmarks' children.

#[cfg(test)]
pub(crate) mod backend;
pub mod bulk;
pub mod fixtures;
pub mod sql;
pub mod threads;

#[cfg(test)]
pub(crate) use backend::{TestBackend, pg_admin_url};
pub use fixtures::{background_unit, running_unit, spec};
pub use sql::{
    backends_of, connection_is_encrypted, connections_named, connections_of, connections_that_ran,
    database_name, deallocate_prepared_statements, drop_database, execute_sql, fail_event_writes,
    fresh_database, fresh_empty_database, prepared_statements, query_bools, refused_event_writes,
    reset_statements, session_setting, set_schema_version, statements_run, terminate_connections,
    top_statements, with_dbname,
};
