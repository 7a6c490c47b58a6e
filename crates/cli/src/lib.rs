//! The `hermes` command-line tool as a library of services under thin front-ends; the binary
//! (`main.rs`) only calls [`app::main`].
//!
//! `services/` holds what every front-end shares: the home and its settings, dispatch,
//! delivery, the relay, bindings, reports, the metrics, exit codes and output. The front-ends
//! are the ways in: `cmd/` (one module per command group), `mcp/` (`hermes mcp`), `hook/`
//! (`hermes hook`), `interactive/` (bare `hermes`) and `top/` (`hermes top`). `args.rs` is the
//! command line clap parses, and `app.rs` runs the command it names.
//!
//! **A front-end never imports another front-end**: each uses `services` (and `args`), and what
//! two of them need moves down into `services`. `app.rs`, the dispatcher, is the one module that
//! names them all (checked by `layers.rs`).

pub mod app;
mod args;
mod cmd;
mod hook;
mod interactive;
#[cfg(test)]
mod layers;
mod mcp;
mod services;
mod top;
