//! What runs inside a transaction and more than one operation module uses: functions over a
//! `&Writer` (or plain checks and types they share), below the operation modules and above
//! `rules`, `model` and `store`. Imports go one way: an operation module imports from here,
//! never from another operation module, and nothing here imports an operation module (checked
//! by `xtask/src/boundaries.rs`).

pub(crate) mod assign;
pub(crate) mod claims;
pub(crate) mod finalize;
pub(crate) mod hosts;
pub(crate) mod inline;
pub(crate) mod interrupt;
pub(crate) mod liveness;
pub(crate) mod metrics_base;
pub(crate) mod pool;
pub(crate) mod publish;
pub(crate) mod sessions;
pub(crate) mod views;
