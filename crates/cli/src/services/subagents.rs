//! Subagents in flight, for an agent whose hook inputs do not say who made a tool call: its
//! subagents run inside one tool of the main thread (its `invoke_agent`), and the hooks of
//! their calls come between that call's start and its own tool boundary. The hook at the start
//! enters a subagent, the one at its end leaves it, and a tool boundary while one is open is a
//! subagent's: it takes nothing.
//!
//! One directory per conversation of an agent process, `$HERMES_HOME/agents/subagents/
//! <pid>-<start time>-<session>/`, holding one empty file per subagent call open: a hook adds
//! or removes a file, never rewrites one, so hooks that run in parallel need no lock. A turn
//! boundary (no subagent outlives its turn) removes the directory, so a call that never
//! reached its end (the agent was cancelled mid-call) cannot silence later turns.

use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use hermes_ledger::ProcessId;

/// The subagents open in one conversation of one agent process.
pub struct Subagents {
    dir: PathBuf,
}

impl Subagents {
    /// The conversation `session` (a validated session id) of the agent process `agent`.
    pub fn new(home: &Path, agent: ProcessId, session: &str) -> Subagents {
        Subagents {
            dir: home
                .join("agents")
                .join("subagents")
                .join(format!("{}-{}-{session}", agent.pid, agent.start_time)),
        }
    }

    /// A subagent call starts.
    pub fn enter(&self) -> anyhow::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        let name = format!(
            "{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        );
        let path = self.dir.join(name);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(())
    }

    /// A subagent call ended: one open call is closed (none open: nothing to do).
    pub fn leave(&self) -> anyhow::Result<()> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => return Ok(()),
                // Another hook closed this one first: close the next.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(e).with_context(|| format!("removing {}", entry.path().display()));
                }
            }
        }
        Ok(())
    }

    /// Whether a subagent call is open.
    pub fn inside(&self) -> bool {
        std::fs::read_dir(&self.dir).is_ok_and(|mut entries| entries.next().is_some())
    }

    /// A turn boundary: no subagent is open any more.
    pub fn clear(&self) -> anyhow::Result<()> {
        match std::fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("removing {}", self.dir.display()))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_inside_from_its_start_to_its_end_and_a_turn_boundary_closes_all() {
        let home = tempfile::tempdir().expect("home");
        let agent = ProcessId {
            pid: 7,
            start_time: 11,
        };
        let subagents = Subagents::new(home.path(), agent, "s-1");
        assert!(!subagents.inside());
        subagents.leave().expect("nothing open is fine");
        subagents.enter().expect("enter");
        subagents.enter().expect("a second, in parallel");
        assert!(subagents.inside());
        subagents.leave().expect("leave");
        assert!(subagents.inside(), "the other one is still open");
        subagents.leave().expect("leave");
        assert!(!subagents.inside());
        subagents.enter().expect("enter");
        // Another conversation of the same process is not inside.
        assert!(!Subagents::new(home.path(), agent, "s-2").inside());
        subagents.clear().expect("clear");
        assert!(!subagents.inside());
        subagents.clear().expect("clearing twice is fine");
    }
}
