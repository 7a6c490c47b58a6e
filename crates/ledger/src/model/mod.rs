//! The ledger's data types: what is stored, and what the other crates read.
//!
//! Everything here is plain data (serde-encoded with postcard behind a format version, see
//! `codec.rs`), one file per kind of record; the records older formats wrote, and how each is
//! read as today's, are in `legacy.rs`. Times are [`Timestamp`]s: milliseconds since the Unix
//! epoch, always passed in by the caller, never read from a clock here.

mod claim;
mod dispatch;
mod event;
mod host;
mod ids;
pub(crate) mod legacy;
mod legacy_v3;
mod legacy_v4;
mod legacy_v5;
mod session;
mod status;
mod totals;
mod unit;

pub use claim::{Claim, ClaimOutcome, ClaimRecord, ClaimRequest, Published, Refusal, Transition};
pub use dispatch::*;
pub use event::*;
pub use host::*;
pub use ids::*;
pub use session::*;
pub use status::*;
pub use totals::*;
pub use unit::*;
