//! The durable delivery ledger: the only state hermes processes share.
//!
//! Sessions, delegations (units), children, events and claims live in one redb file opened with
//! `ConcurrencyMode::MultiWriter`, so any number of hermes processes may use one home at once.
//! Every state change is one short write transaction; every settlement is checked against the
//! claim's fencing token and returns the transition that really happened.
//!
//! This crate must never hold a transaction across an `.await`, a child wait or terminal I/O,
//! never read a clock (callers pass `now`), never touch a process (`/proc`, signals: the
//! registry answers the [`Liveness`] and [`Reaper`] questions), and is the only crate that
//! names redb.

mod backend;
mod codec;
mod error;
mod events;
mod group;
mod ledger;
pub mod model;
mod pools;
#[cfg(test)]
mod power_loss;
mod queries;
mod recovery;
mod sessions;
mod store;
mod tables;
mod units;

pub use backend::{IoCounts, io_counts};
pub use codec::FORMAT_VERSION;
pub use error::{LedgerError, Result, StorageFault};
pub use events::{Claim, ClaimOutcome, ClaimRequest, NewEvent, Published, Refusal, Transition};
pub use ledger::panic_is_caught;
pub use ledger::{Ledger, LedgerConfig, TokenSource};
pub use model::*;
pub use pools::{POOL_NAME_MAX, WorkerSummary, check_pool_name};
pub use queries::{Listing, SessionSummary};
pub use recovery::{Reaper, RecoveryReport, TAIL_CHARS, TAIL_LINES, tail_of};
pub use sessions::{HostClaim, Liveness, SessionEnd};
pub use store::ClaimRecord;
pub use units::{
    Admission, Capacity, FinishChild, InterruptTarget, Interrupts, NewDelegation, ProgressUpdate,
};
