//! The redb backend: the embedded default, one file per home.
//!
//! `store.rs` opens the file (read-only first, writable on the first write) and runs
//! transactions on it; `tx.rs` is a transaction seen as the ledger's typed reads and writes,
//! every record kind a typed table of `tables.rs` with its index tables written in the same
//! transaction; `guard.rs` turns redb's failures and panics into the ledger's errors;
//! `counting.rs` counts what reaches the disk.

mod counting;
mod guard;
mod open;
mod read;
mod store;
mod tables;
mod tx;

pub(crate) use counting::count_commit;
pub use counting::{IoCounts, io_counts};
pub use guard::panic_is_caught;
pub(crate) use store::RedbStore;
