//! One conversation, one session: the binding between an agent process and the hermes session
//! its hooks and its MCP server share (SPEC §13).
//!
//! A hook-driven agent CLI runs `hermes mcp` as its child and each hook as a child (usually
//! through `sh -c`). Both find *the agent process* the same way — the nearest ancestor that is
//! not a shell or a command wrapper — and meet at one file, `$HERMES_HOME/agents/<pid>-<start
//! time>.json`, keyed by that process's pid and start time (so a reused pid is a different
//! key). The hooks carry the agent's `session_id` and record it there; the server reads it
//! before every tool call, so its dispatches land in the conversation the hooks consume.
//!
//! When the server needs a session before any hook ran (no hooks installed, or a tool call won
//! the race with the first hook), it records a *provisional* session of its own in the file. The
//! first hook then adopts it: the binding names the hook's session and keeps the provisional one
//! in `merged`, and every consumer of the conversation (hooks and `delegation_results`) reads
//! both, so nothing dispatched before the first hook is lost. A new `session_id` for the same
//! agent (`/clear`) starts a fresh binding. Writes are atomic (temp file + rename) under an
//! exclusive lock on `agents/.lock`; the fast path (a hook whose session is already bound) only
//! reads. Files 0600, directories 0700.

use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use ledger::{ProcessId, SessionId};
use serde::{Deserialize, Serialize};

/// Programs that stand between an agent and the hermes process it runs: skipped when looking
/// for the agent.
const WRAPPERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "busybox", "env", "nohup", "timeout",
    "stdbuf", "nice", "setsid", "time", "xargs",
];

/// What the binding file holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    /// The session new work goes to.
    pub session: String,
    /// The agent's own `session_id` it was bound to by a hook; `None` while provisional.
    #[serde(default)]
    pub agent_session_id: Option<String>,
    /// Provisional sessions of this conversation whose results are still consumed with it.
    #[serde(default)]
    pub merged: Vec<String>,
}

impl Binding {
    /// Every session of the conversation: the current one first, then the merged ones.
    pub fn sessions(&self) -> Vec<SessionId> {
        std::iter::once(&self.session)
            .chain(&self.merged)
            .filter_map(|s| SessionId::new(s.clone()).ok())
            .collect()
    }

    /// Whether a hook bound it (the session is the agent's own, and resumable under that id).
    pub fn is_bound(&self) -> bool {
        self.agent_session_id.is_some()
    }
}

/// The agent process a hermes process serves: its nearest ancestor that is not a shell or a
/// command wrapper (the parent itself if every ancestor is one).
pub fn agent_process() -> ProcessId {
    let parent = std::os::unix::process::parent_id();
    let mut pid = parent;
    for _ in 0..64 {
        let Some(stat) = proc_stat(pid) else { break };
        if !WRAPPERS.contains(&stat.comm.as_str()) {
            return ProcessId {
                pid,
                start_time: stat.start_time,
            };
        }
        if stat.ppid <= 1 {
            break;
        }
        pid = stat.ppid;
    }
    ProcessId {
        pid: parent,
        start_time: registry::procs::process_start_time(parent).unwrap_or(0),
    }
}

struct Stat {
    comm: String,
    ppid: u32,
    start_time: u64,
}

fn proc_stat(pid: u32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_owned();
    let fields: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    Some(Stat {
        comm,
        ppid: fields.get(1)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// The bindings of one hermes home.
#[derive(Debug)]
pub struct Bindings {
    dir: PathBuf,
}

impl Bindings {
    /// The bindings under `home`.
    pub fn new(home: &Path) -> Bindings {
        Bindings {
            dir: home.join("agents"),
        }
    }

    fn path(&self, agent: ProcessId) -> PathBuf {
        self.dir
            .join(format!("{}-{}.json", agent.pid, agent.start_time))
    }

    /// The agent's binding, if any. Only reads.
    pub fn read(&self, agent: ProcessId) -> Option<Binding> {
        let text = fs::read(self.path(agent)).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// A hook of `agent` carries `session_id`: records it, adopting a provisional session the
    /// server made meanwhile. Returns the binding in force.
    pub fn bind(&self, agent: ProcessId, session_id: &str) -> anyhow::Result<Binding> {
        if let Some(b) = self.read(agent)
            && b.agent_session_id.as_deref() == Some(session_id)
        {
            return Ok(b);
        }
        let _lock = self.lock()?;
        let old = self.read(agent);
        let merged = match &old {
            Some(b) if b.agent_session_id.as_deref() == Some(session_id) => return Ok(b.clone()),
            // The server's provisional session (and what it had merged) joins this one.
            Some(b) if !b.is_bound() => std::iter::once(b.session.clone())
                .chain(b.merged.iter().cloned())
                .filter(|s| s != session_id)
                .collect(),
            // Unbound, or bound to an earlier conversation of the same agent (`/clear`).
            _ => Vec::new(),
        };
        let binding = Binding {
            session: session_id.to_owned(),
            agent_session_id: Some(session_id.to_owned()),
            merged,
        };
        self.write(agent, &binding)?;
        self.prune_dead(agent);
        Ok(binding)
    }

    /// The server of `agent` needs a session: the bound one, or a provisional one it records
    /// (`make` names it) for the first hook to adopt.
    pub fn resolve(
        &self,
        agent: ProcessId,
        make: impl FnOnce() -> String,
    ) -> anyhow::Result<Binding> {
        if let Some(b) = self.read(agent) {
            return Ok(b);
        }
        let _lock = self.lock()?;
        if let Some(b) = self.read(agent) {
            return Ok(b);
        }
        let binding = Binding {
            session: make(),
            agent_session_id: None,
            merged: Vec::new(),
        };
        self.write(agent, &binding)?;
        Ok(binding)
    }

    /// Forgets the agent's binding (its conversation ended).
    pub fn remove(&self, agent: ProcessId) -> anyhow::Result<()> {
        let _lock = self.lock()?;
        match fs::remove_file(self.path(agent)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("cannot remove {}", self.path(agent).display()))
            }
            _ => Ok(()),
        }
    }

    fn create_dir(&self) -> anyhow::Result<()> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .with_context(|| format!("cannot create {}", self.dir.display()))
    }

    fn lock(&self) -> anyhow::Result<File> {
        self.create_dir()?;
        let path = self.dir.join(".lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        file.lock()
            .with_context(|| format!("cannot lock {}", path.display()))?;
        Ok(file)
    }

    fn write(&self, agent: ProcessId, binding: &Binding) -> anyhow::Result<()> {
        let path = self.path(agent);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let text = serde_json::to_vec(binding).context("cannot encode the binding")?;
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        file.write_all(&text)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))
    }

    /// Removes the bindings of other agents that no longer run (called with the lock held).
    fn prune_dead(&self, keep: ProcessId) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            let Some((pid, start)) = stem.split_once('-') else {
                continue;
            };
            let (Ok(pid), Ok(start_time)) = (pid.parse(), start.parse()) else {
                continue;
            };
            let agent = ProcessId { pid, start_time };
            if agent != keep && !registry::procs::is_alive(agent) {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(pid: u32) -> ProcessId {
        ProcessId { pid, start_time: 7 }
    }

    #[test]
    fn a_hook_adopts_the_servers_provisional_session() {
        let home = tempfile::tempdir().expect("temp dir");
        let b = Bindings::new(home.path());
        let provisional = b.resolve(agent(1), || "mcp-1".into()).expect("resolve");
        assert_eq!(provisional.session, "mcp-1");
        assert!(!provisional.is_bound());
        let bound = b.bind(agent(1), "conv-a").expect("bind");
        assert_eq!(bound.session, "conv-a");
        assert_eq!(bound.merged, ["mcp-1"]);
        let seen = b.resolve(agent(1), || unreachable!()).expect("resolve");
        assert_eq!(seen, bound);
        let names: Vec<String> = seen.sessions().iter().map(|s| s.to_string()).collect();
        assert_eq!(names, ["conv-a", "mcp-1"]);
    }

    #[test]
    fn a_new_conversation_of_the_same_agent_starts_fresh() {
        let home = tempfile::tempdir().expect("temp dir");
        let b = Bindings::new(home.path());
        b.resolve(agent(2), || "mcp-2".into()).expect("resolve");
        b.bind(agent(2), "first").expect("bind");
        let second = b.bind(agent(2), "second").expect("bind");
        assert_eq!(second.session, "second");
        assert!(second.merged.is_empty());
        assert!(b.read(agent(3)).is_none());
        b.remove(agent(2)).expect("remove");
        assert!(b.read(agent(2)).is_none());
    }

    #[test]
    fn the_agent_is_not_a_shell() {
        let me = agent_process();
        let comm = proc_stat(me.pid).map(|s| s.comm).unwrap_or_default();
        assert!(!WRAPPERS.contains(&comm.as_str()), "{comm}");
    }
}
