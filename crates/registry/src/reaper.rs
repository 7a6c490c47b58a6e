//! The operating system's answers to the ledger's recovery questions: where this process runs,
//! whether a process of this locality still runs, what may be killed of a dead host's child,
//! the tail of a transcript on this machine, and the outcomes a dead host kept here because it
//! could not record them ([`crate::unrecorded`]), and what a dead host's child left in its own
//! worktree, committed ([`crate::workspace`]).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

use hermes_ledger::{
    Changes, Child, ChildOutcome, DelegationId, Liveness, Locality, ProcessId, Reaper, UnitRecord,
};
use nix::sys::signal::Signal;

use crate::procs::{self, OsProcesses};

/// The real operating system, for [`hermes_ledger::Ledger::recover`] and for judging hosts.
#[derive(Clone, Debug)]
pub struct OsReaper {
    locality: Locality,
}

impl OsReaper {
    /// The reaper of this process's locality.
    pub fn new() -> OsReaper {
        OsReaper {
            locality: procs::current_locality(),
        }
    }
}

impl Default for OsReaper {
    fn default() -> OsReaper {
        OsReaper::new()
    }
}

impl Liveness for OsReaper {
    fn locality(&self) -> Locality {
        self.locality.clone()
    }

    fn is_alive(&self, process: ProcessId) -> bool {
        procs::is_alive(process)
    }
}

impl Reaper for OsReaper {
    fn kill_child(&self, unit: &DelegationId, child: &Child) {
        // A child recorded running without a pid (an inline unit's, between its dispatch and
        // the record of its pid) is found by its marker alone.
        let marker = procs::child_marker(unit, child.index);
        let killed = procs::signal_orphan(&OsProcesses, child.process, &marker, Signal::SIGKILL);
        tracing::info!(delegation = %unit, index = child.index, killed, "killed a dead host's child");
    }

    fn transcript_tail(&self, path: &str) -> Option<String> {
        read_tail(path)
    }

    fn unrecorded_outcome(&self, _unit: &DelegationId, child: &Child) -> Option<ChildOutcome> {
        let kept = crate::unrecorded::read(child.transcript.as_deref()?, child.index)?;
        Some(kept.outcome)
    }

    fn workspace_changes(&self, unit: &UnitRecord, child: &Child) -> Option<Changes> {
        let cwd = match &unit.spec.cwd {
            Some(cwd) => std::path::PathBuf::from(cwd),
            None => std::env::current_dir().ok()?,
        };
        let tree = crate::workspace::find(&cwd, &unit.id, child.index)?;
        let changes =
            crate::workspace::finish(&tree, &crate::workspace::commit_note(unit, child.index));
        tracing::info!(delegation = %unit.id, index = child.index, branch = %changes.branch, commits = changes.commits.len(), "committed a dead host's child's worktree");
        Some(changes)
    }
}

/// The last `TAIL_LINES` lines of a file, at most `TAIL_CHARS` characters.
pub fn read_tail(path: &str) -> Option<String> {
    let mut file = File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let start = len.saturating_sub(16 * 1024);
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    Some(hermes_ledger::tail_of(&String::from_utf8_lossy(&bytes)))
}
