//! The registry runs hermes' delegated children. It spawns each child exactly as asked (its own
//! process group, stdin `/dev/null`, a progress pipe on `HERMES_PROGRESS_FD`), admits units
//! through the ledger's capacity check and FIFO queue, watches every child's progress token,
//! stops children that stall, time out or are interrupted (SIGTERM to the process group, SIGKILL
//! after a grace period), keeps a bounded head-and-tail of their output for the result, writes
//! their live transcripts, and publishes each child's outcome through the ledger the moment it
//! ends. A [`Host`] does all this for one process, inline (`-z`, cron) or in the background.
//!
//! The registry must never finalize a child twice, hold a ledger transaction across an `.await`
//! or a child wait, buffer a child's output without bound, signal a process it cannot prove its
//! own ([`procs`]: the recorded pid + start time or the child's marker, same locality only), or
//! know about terminals, clap or exit codes (that is the CLI's job). It is the one crate that
//! knows `/proc` and signals, and answers the ledger's [`hermes_ledger::Liveness`] questions. Time
//! comes from a [`Clock`]; the ledger is the only state shared with other processes.
//!
//! An inline run (`hermes -z`, cron) in outline:
//!
//! ```no_run
//! # async fn run(ledger: std::sync::Arc<hermes_ledger::Ledger>, spec: hermes_ledger::DispatchSpec) -> Result<(), hermes_registry::RegistryError> {
//! use hermes_registry::{Config, DispatchRequest, Host, HostOptions, SystemClock};
//! let config = Config::new(std::path::Path::new("/home/me/.hermes"));
//! let options = HostOptions { kind: hermes_ledger::HostKind::Inline, session: None, worker: None };
//! let host = Host::start(ledger, config, std::sync::Arc::new(SystemClock), options).await?;
//! let dispatched = host.dispatch(DispatchRequest::inline(spec, None)).await?;
//! if let Some(mut progress) = dispatched.progress {
//!     // Draw progress bars from `progress.borrow()` on each `progress.changed().await`.
//! }
//! let report = host.wait(&dispatched.delegation.id).await;
//! host.shutdown("done").await;
//! # Ok(()) }
//! ```
//!
//! A background host (`hermes host --session S`, an interactive session) starts the same way
//! with its kind and session, dispatches with [`DispatchRequest::background`], and picks up the
//! units other processes record for it with [`record_dispatch`]; [`Host::shutdown`] stops it.
//! A worker (`hermes worker`) starts with [`HostOptions::worker`] set and runs the units of its
//! pool that other processes recorded with a pool and no host.

pub mod agent;
pub mod capture;
mod child;
pub mod config;
pub mod counts;
mod error;
mod host;
pub mod housekeeping;
pub mod procs;
pub mod progress;
mod reader;
mod reaper;
pub mod sandbox;
pub mod spawn;
pub mod stall;
mod supervise;
pub mod transcript;
mod unit;
pub mod unrecorded;
pub mod workspace;

pub use child::ChildProgress;
pub use config::Config;
pub use error::RegistryError;
pub use hermes_stdx::{Clock, ManualClock, SystemClock};
pub use host::{
    DispatchRequest, Dispatched, Host, HostOptions, record_dispatch,
    record_dispatch_to_session_host,
};
pub use reaper::{OsReaper, read_tail};
pub use unit::{UnitProgress, UnitReport};
