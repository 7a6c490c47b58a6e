//! A headless host leaves the process tree of whoever started it (an agent's MCP server, a
//! hook, `hermes delegate`). An agent may end its MCP server's whole tree when it exits: one of
//! the pinned agent CLIs terminates every descendant of the server (`process_tree.rs` of its
//! runtime), which stopped the conversation's host and children a few hundred milliseconds
//! after a headless dispatch (`tests/it/real/detach.rs`).
//!
//! `hermes host --detach` (as hermes starts a session's host; a host run by hand stays where
//! it is) forks first thing, while it has one thread. The first process (the launcher,
//! its starter's child) waits until the second hosts the session or ends, and exits with that
//! outcome, so the starter still learns why a host could not start (its exit code); the second,
//! in a session of its own, is left to init when the launcher exits.

use std::os::fd::OwnedFd;

use anyhow::Context as _;
use nix::errno::Errno;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::ForkResult;

/// The detached host's end of the launcher's pipe.
pub struct Launcher(Option<OwnedFd>);

impl Launcher {
    /// Tells the launcher that this process hosts the session: it exits 0.
    pub fn hosting(&mut self) {
        if let Some(fd) = self.0.take() {
            let _ = nix::unistd::write(&fd, b"+");
        }
    }
}

/// Forks; returns in the detached process only (the launcher exits with its outcome). Call it
/// before anything starts a thread.
pub fn detach() -> anyhow::Result<Launcher> {
    let (read, write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).context("cannot make the host a pipe")?;
    // SAFETY: the process has one thread (the host calls this first), so the child may go on
    // running any code.
    match unsafe { nix::unistd::fork() }.context("cannot fork the headless host")? {
        ForkResult::Child => {
            drop(read);
            nix::unistd::setsid().context("cannot give the host a session of its own")?;
            Ok(Launcher(Some(write)))
        }
        ForkResult::Parent { child } => {
            drop(write);
            let mut byte = [0u8; 1];
            let hosting = loop {
                match nix::unistd::read(&read, &mut byte) {
                    Err(Errno::EINTR) => continue,
                    read => break read == Ok(1),
                }
            };
            if hosting {
                std::process::exit(0);
            }
            let code = loop {
                match waitpid(child, None) {
                    Err(Errno::EINTR) => continue,
                    Ok(WaitStatus::Exited(_, code)) => break code,
                    _ => break 1,
                }
            };
            std::process::exit(code)
        }
    }
}
