//! Which child a hermes process runs inside of — its lineage — so a `leaf` child cannot
//! delegate and `delegation.max_depth` holds. hermes tells every child its role and depth in
//! `HERMES_CHILD_ROLE`/`HERMES_CHILD_DEPTH`, but an agent may strip them from what it starts
//! (one passes its MCP server a fixed whitelist of variables), so they are not the only witness.
//!
//! Walking up from this process, a process whose parent is a hermes executable may be a child
//! that hermes started: a host (an interactive session, a headless host, a worker, a `-z` run,
//! the MCP server) runs its children as its own direct subprocesses. The ledger records each
//! running child's pid and start time under its host's, so it says for certain whether that
//! process is one, of which unit, and so with which role and depth. When the ledger does not
//! know it (the host has not recorded its pid yet, or this hermes uses another home), the
//! environment the child was *started* with (`/proc/PID/environ`, which its descendants cannot
//! change) still carries the variables hermes gave it.

use std::time::{Duration, Instant};

use hermes_ledger::{ChildStatus, Ledger, ProcessId};

use crate::services::agent_proc::{Proc, ancestors, read_proc};

/// The child a process runs inside of, as far as delegation is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enclosing {
    /// Its role: `leaf` or `orchestrator`.
    pub role: String,
    /// Its depth in the chain of delegations (1: dispatched from outside any child).
    pub depth: u32,
}

/// The child of a hermes host that this process runs inside of, nearest first; `None` outside
/// any. `ledger` opens the ledger, asked only when there is a candidate.
pub fn enclosing(ledger: impl FnOnce() -> Option<Ledger>) -> Option<Enclosing> {
    let own = std::env::current_exe().ok()?;
    let own = own.file_name()?.to_str()?.to_owned();
    let chain = ancestors(std::process::id(), read_proc);
    let candidates: Vec<(&Proc, &Proc)> = chain
        .windows(2)
        .map(|w| (&w[0], &w[1]))
        .filter(|(_, parent)| parent.exe.as_deref() == Some(own.as_str()))
        .collect();
    if candidates.is_empty() {
        return None;
    }
    let ledger = ledger();
    let locality = hermes_registry::procs::current_locality();
    candidates.into_iter().find_map(|(child, parent)| {
        // A host is recorded under its identity in this process table.
        let (child, host) = (id(child), id(parent).as_host_in(&locality));
        let recorded = |wait| ledger.as_ref().and_then(|l| recorded(l, child, host, wait));
        recorded(false)
            .or_else(|| started_with(child))
            .or_else(|| recorded(true))
            // Under a hermes host, yet neither the ledger within reach nor the environment the
            // process was started with says what it is (the environment wiped by an `exec`, the
            // ledger's address with it): the default role, a leaf.
            .or(Some(Enclosing {
                role: hermes_ledger::Role::Leaf.as_str().to_owned(),
                depth: 1,
            }))
    })
}

/// How long a hermes started at once by a child waits for its host to record the child's pid
/// (an inline run records it after a second: see the registry's `START_RECORD_DELAY`).
const RECORD_WAIT: Duration = Duration::from_secs(3);

fn id(p: &Proc) -> ProcessId {
    ProcessId {
        pid: p.pid,
        start_time: p.start_time,
    }
}

/// What the ledger says of `child`, if it is a running child of the host `host`. With `wait`,
/// while the host has running children whose pid it has not recorded yet, it looks again until
/// [`RECORD_WAIT`] has passed.
fn recorded(ledger: &Ledger, child: ProcessId, host: ProcessId, wait: bool) -> Option<Enclosing> {
    let started = Instant::now();
    loop {
        let mut unrecorded = false;
        for unit in ledger.units_of_host(host).ok()? {
            for c in ledger.children(&unit.id).ok()? {
                if c.process
                    .is_some_and(|p| p.names(child.pid, child.start_time))
                {
                    let task = unit.spec.tasks.get(c.index as usize)?;
                    return Some(Enclosing {
                        role: task.role.as_str().to_owned(),
                        depth: unit.spec.depth.max(1),
                    });
                }
                unrecorded |= c.process.is_none() && c.status == ChildStatus::Running;
            }
        }
        if !(wait && unrecorded && started.elapsed() < RECORD_WAIT) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What hermes told `child` when it started it, from the environment it was started with.
fn started_with(child: ProcessId) -> Option<Enclosing> {
    use hermes_registry::agent::{CHILD_DEPTH_VAR, CHILD_ROLE_VAR};
    let environ = hermes_registry::procs::environment(child)?;
    let var = |name: &str| {
        environ
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.to_str())
            .map(str::to_owned)
    };
    let depth = var(CHILD_DEPTH_VAR)?.trim().parse().ok()?;
    Some(Enclosing {
        // Older hermes gave a command child no role: it could delegate.
        role: var(CHILD_ROLE_VAR).unwrap_or_else(|| "orchestrator".to_owned()),
        depth,
    })
}
