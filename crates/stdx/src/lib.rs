//! What every hermes crate needs and none should write again: the one [`Timestamp`] and the one
//! [`Clock`] (with the system's clock, a manual one for tests and the [`Signal`]/[`Watch`] that
//! cut a sleep short), a poison-tolerant [`lock`], [`one_line`] for messages, and
//! [`output_within`] for a short command run under a time limit.
//!
//! This crate sits below every other crate of the workspace and depends on none of them. It
//! must never grow a concept of hermes (sessions, units, events): only the plumbing those are
//! built from.

mod clock;
mod hash;
mod process;
mod sync;
mod text;
mod time;

pub use clock::{Clock, Generations, ManualClock, Signal, SystemClock, Watch};
pub use hash::fnv1a;
pub use process::output_within;
pub use sync::lock;
pub use text::one_line;
pub use time::Timestamp;
