//! `hermes hook EVENT`: the hooks of hook-driven agent CLIs (SPEC §13). Each reads the hook's
//! JSON on stdin and answers in that protocol on stdout; `install` registers them, with
//! `hermes mcp`, in the agent's settings.

mod event;
mod input;
mod install;

pub use event::run;
