//! The ledger's integration tests, one binary: each module a subject, all over the public API
//! (and `hermes_testkit`), on the backend `HERMES_TEST_BACKEND` names.

mod common;

mod acks;
mod files;
mod model_check;
mod overview;
mod pg_faults;
mod pg_pooler;
mod pg_prepared;
mod pools;
mod postgres;
mod recovery;
mod transitions;
