//! Dispatch: what to run, however it was asked for. `draft.rs` turns the command line's
//! DISPATCH options, a tasks file (`tasks_file.rs`) or `delegate_task`'s parameters into one
//! `DispatchSpec`; `agents.rs` gives agent tasks their argv and every unit its delegation depth.
//! `sandbox.rs` chooses what the children may do, within the person's ceiling for the door
//! it came through, and checks the kernel can enforce it. `workspace.rs` checks a `--workspace worktree` dispatch before anything starts. Handing a
//! spec to a session's headless host is `session_host.rs`.

pub mod agents;
pub mod draft;
pub mod sandbox;
pub mod tasks_file;
pub mod workspace;
