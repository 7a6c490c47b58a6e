//! What a consumer of a session receives at a boundary, and how racing consumers, restarts
//! inside someone else's live lease and renewed leases never lose or duplicate a result.
//!
//! At a boundary the router takes a snapshot of the session's open events, coalesces the ready
//! ones into one envelope per delegation ([`ready`]), offers them only to a consumer of their own
//! session ([`ownership`]), claims each envelope with one all-or-none claim, classifies every
//! refused key ([`classify`]) and parks envelopes held by someone else's live lease in one
//! deduplicated deadline heap ([`scheduler`]) until that lease runs out. The decisions are pure
//! functions of their inputs; [`driver`] is the thin layer that calls the ledger, reads the
//! clock and sleeps, and holds the in-process routing reservation.
//!
//! Outside `driver.rs` this crate must never do I/O, read a clock or sleep: time is always a
//! parameter. It must never depend on the formatter (callers pass a render function), never
//! offer an event to a session that does not own it, and never claim before rendering.

pub mod classify;
pub mod driver;
mod error;
#[cfg(test)]
mod fixtures;
pub mod heartbeat;
mod outcome;
pub mod ownership;
pub mod ready;
pub mod scheduler;

pub use classify::{Classified, Deferral, Discard, RETRY_SKEW_MS, Standing, Verdict};
pub use driver::{AfterShown, KeepAlive, Router, RouterConfig, WaitStats};
pub use error::RouterError;
pub use heartbeat::Heartbeat;
pub use hermes_ledger::Boundary;
pub use hermes_stdx::{Clock, ManualClock, SystemClock, Watch};
pub use outcome::{BoundaryOutcome, ClaimedEnvelope, RenderFailure};
pub use ownership::Access;
pub use ready::{Offer, Plan, Snapshot, plan, ready_set};
pub use scheduler::{DeferKey, Scheduled, Scheduler};
