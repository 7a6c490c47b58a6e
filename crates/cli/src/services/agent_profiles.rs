//! What the services and the other front-ends ask of the hook-driven agents' profiles: the
//! executable names agent CLIs run as, where hermes' hooks are installed, and which agents get
//! `inject` results at their turn boundary. The profiles themselves live with the hooks
//! (`hook/agents.rs`, `hook/agents/*.rs`, `hook/installed.rs`) until they move into a crate of
//! their own; this module is the one place outside `hook/` that names them, so that move
//! changes only this file.

pub use crate::hook::agent_executables as executables;
pub use crate::hook::{agent_programs, inject_falls_back, installed};
