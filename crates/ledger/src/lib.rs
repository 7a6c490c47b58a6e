//! The durable delivery ledger: the only state hermes processes share.
//!
//! Sessions, delegations (units), children, events and claims live in one redb file opened with
//! `ConcurrencyMode::MultiWriter`, so any number of hermes processes may use one home at once.
//! Every state change is one short write transaction; every settlement is checked against the
//! claim's fencing token and returns the transition that really happened.
//!
//! This crate must never hold a transaction across an `.await`, a child wait or terminal I/O,
//! never read a clock (callers pass `now`), and is the only crate that names redb.

pub mod model;

pub use model::*;
