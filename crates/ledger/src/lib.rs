//! The durable delivery ledger: the only state hermes processes share.
//!
//! Sessions, delegations (units), children, events and claims live in one redb file opened with
//! `ConcurrencyMode::MultiWriter`, so any number of hermes processes may use one home at once.
//! Every state change is one short write transaction; every settlement is checked against the
//! claim's fencing token and returns the transition that really happened.
//!
//! This crate must never hold a transaction across an `.await`, a child wait or terminal I/O,
//! never read a clock (callers pass `now`), and is the only crate that names redb.

mod codec;
mod error;
mod events;
mod ledger;
pub mod model;
pub mod procs;
mod queries;
mod recovery;
mod sessions;
mod store;
mod tables;
mod units;

pub use codec::FORMAT_VERSION;
pub use error::{LedgerError, Result, StorageFault};
pub use events::{Claim, ClaimOutcome, ClaimRequest, NewEvent, Published, Refusal, Transition};
pub use ledger::panic_is_caught;
pub use ledger::{Ledger, LedgerConfig, TokenSource};
pub use model::*;
pub use queries::{Listing, SessionSummary};
pub use recovery::{OsReaper, Reaper, RecoveryReport, TAIL_CHARS, TAIL_LINES, read_tail, tail_of};
pub use sessions::{HostClaim, SessionEnd};
pub use store::ClaimRecord;
pub use units::{
    Admission, Capacity, FinishChild, InterruptTarget, Interrupts, NewDelegation, ProgressUpdate,
};
