//! The services every front-end uses. Nothing here imports a front-end (`cmd`, `mcp`, `hook`,
//! `interactive`, `top`). What hermes knows of each agent is `hermes_agents`'. From the command line (`args.rs`) two services
//! take the types clap fills: `color.rs` its `ColorChoice`, `dispatch/draft.rs` its
//! `DispatchArgs` (`Draft::from_args`, the low args turned into the one typed draft).
//!
//! - Where things are: `home.rs` (the home, the settings in force, the ledger opened and swept),
//!   `config.rs` (`config.toml` and the environment).
//! - Work in: `dispatch/` (what to run, from flags, a tasks file or MCP parameters),
//!   `session_host.rs` (a session's headless host: look, start, hand it a unit), `inline.rs` (a
//!   finished inline unit as shown), `lineage.rs` (which child this process runs inside of).
//! - Results out: `delivery/` (take, show, settle), `relay.rs` (a hook's delivery through its
//!   session's host), `binding.rs` (one conversation, one session), `agent_proc.rs` (which
//!   process is the agent), `hook_files/` (the files `hook install` writes, and finds again).
//! - Views: `reports.rs` (JSON and text shared by the command line and MCP), `overview.rs` (the
//!   machine, pool and unit lines of `hermes top` and the metrics), `metrics/` (Prometheus).
//! - The process's edges: `exit.rs` (exit codes, the one error report), `output.rs` (stdout),
//!   `color.rs`, `logfile.rs`.

pub mod agent_proc;
pub mod binding;
pub mod color;
pub mod config;
pub mod delivery;
pub mod dispatch;
pub mod exit;
pub mod home;
pub mod hook_files;
pub mod host_detach;
pub mod inline;
pub mod lineage;
pub mod logfile;
pub mod metrics;
pub mod output;
pub mod overview;
pub mod relay;
pub mod reports;
pub mod session_host;
pub mod subagents;
