//! The cli's end-to-end tests, one binary: each module drives the real `hermes` binary with a
//! temp home of its own (`common::Hermes`) on the backend under test (`HERMES_TEST_BACKEND`),
//! and waits on conditions with deadlines. The modules are the former test binaries, one each;
//! those named `pg_*` run on PostgreSQL whatever the backend under test.

mod agents;
mod common;
mod detach;
mod doctor;
mod hermes_agent;
mod home;
mod inputs;
mod interactive;
mod listing;
mod liveness;
mod machines;
mod mcp_and_hooks;
mod oneshot;
mod pg_ops;
mod pg_outage;
mod pg_restart;
mod pool_machines;
mod pools;
mod race;
mod real;
mod sandbox;
mod sessions;
mod top;
mod workspace;
