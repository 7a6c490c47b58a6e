//! One conversation, one session: the binding between an agent process and the hermes sessions
//! its hooks and its MCP server share.
//!
//! A hook-driven agent CLI runs `hermes mcp` as its child and each hook as a child (usually
//! through `sh -c`). Both find *the agent process* the same way (`agent_proc.rs`: past shells,
//! wrappers and launchers) and meet at one file, `$HERMES_HOME/agents/<pid>-<start time>.json`,
//! keyed by that process's pid and start time (so a reused pid is a different key).
//!
//! The file holds the agent's *conversations*, each named by the agent's `session_id` (one
//! process may serve several at once: an IDE, an app server), and at most one *provisional*
//! session the server made when it needed one before any hook ran:
//!
//! - the first hook of a conversation records it, adopting the provisional session (its
//!   results are consumed with the conversation, nothing dispatched early is lost);
//! - a session start while the agent's other conversations have seen nothing but session
//!   starts adopts them: an agent's resume (`--resume`) may fire two (a fresh id and the resumed one,
//!   in either order), and what a dispatch between them collected stays the conversation's; a
//!   later hook naming the other id only makes that one current;
//! - `session-end` removes its conversation (a `/clear` then starts a fresh one); one that is no
//!   discard (the process exits, the person may `--resume` tomorrow) records it as *detached* in
//!   `agents/detached.json`, as does the pruning of an agent that exited without saying so, until
//!   a hook of a later process names it again (`hermes session list` shows it);
//! - the server asks which conversation a tool call is for: with one, that one; with several,
//!   the call must say (`session`), never "the last one seen".
//!
//! Writes are atomic (temp file + rename) under an exclusive lock on `agents/.lock`; the fast
//! path (a hook of a conversation already recorded) only reads. Files 0600, directories 0700.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use hermes_ledger::{ProcessId, SessionId};
use serde::{Deserialize, Serialize};

pub use crate::services::agent_proc::agent_process;

/// One conversation of an agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conv {
    /// The session new work goes to: the id the agent's hooks named last.
    pub session: String,
    /// Other sessions whose results are consumed with it: another id the agent gave it, the
    /// provisional session it adopted.
    #[serde(default)]
    pub merged: Vec<String>,
    /// Only session starts have named it so far.
    #[serde(default)]
    pub started_only: bool,
}

impl Conv {
    /// Every session of the conversation: the current one first, then the merged ones.
    pub fn sessions(&self) -> Vec<SessionId> {
        std::iter::once(&self.session)
            .chain(&self.merged)
            .filter_map(|s| SessionId::new(s.clone()).ok())
            .collect()
    }

    /// Whether `id` is one of its sessions.
    pub fn names(&self, id: &str) -> bool {
        self.session == id || self.merged.iter().any(|m| m == id)
    }
}

/// What the binding file holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    /// The conversations the agent's hooks named, oldest first.
    #[serde(default)]
    pub conversations: Vec<Conv>,
    /// The session the server made before any hook ran, until a hook adopts it.
    #[serde(default)]
    pub provisional: Option<String>,
    /// The agent profile the hooks named (`--agent`), so the server knows which boundaries
    /// its agent offers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

impl Binding {
    /// The conversation `id` names.
    pub fn conversation(&self, id: &str) -> Option<&Conv> {
        self.conversations.iter().find(|c| c.names(id))
    }
}

/// The conversations whose agent process left them without discarding them: session id →
/// when (milliseconds since the epoch).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Detached {
    #[serde(default)]
    sessions: BTreeMap<String, u64>,
}

/// How long a detached conversation is remembered as such: past a week (the ledger's default
/// retention) nobody resumes it.
const DETACHED_KEPT_MS: u64 = 7 * 24 * 3_600_000;

/// How a hook names its conversation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    /// A session start of a conversation the agent starts or resumes: it adopts the agent's
    /// conversations that have seen only session starts.
    Start,
    /// A session start of another kind (`/clear`, a compaction).
    OtherStart,
    /// Any other hook.
    Hook,
}

/// Which session a server's tool call acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// One conversation (or the provisional session): its sessions, current first, and
    /// whether a hook named it.
    One {
        sessions: Vec<SessionId>,
        named: bool,
    },
    /// Several conversations: the call must say which (their current sessions).
    Several(Vec<String>),
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

    /// A hook of `agent` names `session_id`: records it (see the module's documentation) and
    /// returns its conversation.
    /// `profile` is the agent profile the hook ran for.
    pub fn bind(
        &self,
        agent: ProcessId,
        profile: &str,
        session_id: &str,
        naming: Naming,
    ) -> anyhow::Result<Conv> {
        let fresh_enough =
            |c: &Conv| c.session == session_id && !(c.started_only && naming == Naming::Hook);
        if let Some(conv) = self
            .read(agent)
            .filter(|b| b.agent.as_deref() == Some(profile))
            .and_then(|b| b.conversations.into_iter().find(|c| fresh_enough(c)))
        {
            return Ok(conv);
        }
        let _lock = self.lock()?;
        let mut binding = self.read(agent).unwrap_or_default();
        binding.agent = Some(profile.to_owned());
        let conv = bind_in(&mut binding, session_id, naming);
        self.write(agent, &binding)?;
        self.prune_dead(agent);
        // A later process of a detached conversation: it is attached again.
        self.update_detached(|d| {
            conv.sessions()
                .iter()
                .any(|s| d.remove(s.as_str()).is_some())
        })?;
        Ok(conv)
    }

    /// The server of `agent` needs a session: `wanted` (which must be one of the agent's
    /// conversations), its one conversation, or the provisional session (`make` names a new
    /// one) for the first hook to adopt.
    pub fn resolve(
        &self,
        agent: ProcessId,
        wanted: Option<&str>,
        make: impl FnOnce() -> String,
    ) -> anyhow::Result<Option<Resolved>> {
        let found = |b: &Binding| -> Option<Option<Resolved>> {
            if let Some(id) = wanted {
                return Some(b.conversation(id).map(|c| Resolved::One {
                    sessions: c.sessions(),
                    named: true,
                }));
            }
            match b.conversations.as_slice() {
                [one] => Some(Some(Resolved::One {
                    sessions: one.sessions(),
                    named: true,
                })),
                [] => b.provisional.as_ref().map(|p| {
                    Some(Resolved::One {
                        sessions: SessionId::new(p.clone()).into_iter().collect(),
                        named: false,
                    })
                }),
                many => Some(Some(Resolved::Several(
                    many.iter().map(|c| c.session.clone()).collect(),
                ))),
            }
        };
        if let Some(r) = self.read(agent).as_ref().and_then(found) {
            return Ok(r);
        }
        if wanted.is_some() {
            return Ok(None);
        }
        let _lock = self.lock()?;
        let mut binding = self.read(agent).unwrap_or_default();
        if let Some(r) = found(&binding) {
            return Ok(r);
        }
        binding.provisional = Some(make());
        self.write(agent, &binding)?;
        Ok(found(&binding).flatten())
    }

    /// The agent's conversation `session_id` ended: removes it and returns its sessions (just
    /// `session_id` when it was not recorded).
    pub fn end(&self, agent: ProcessId, session_id: &str) -> anyhow::Result<Vec<SessionId>> {
        if self.read(agent).is_none() {
            return Ok(SessionId::new(session_id.to_owned()).into_iter().collect());
        }
        let _lock = self.lock()?;
        self.end_locked(agent, session_id)
    }

    /// [`Bindings::end`], with the lock held.
    fn end_locked(&self, agent: ProcessId, session_id: &str) -> anyhow::Result<Vec<SessionId>> {
        let Some(mut binding) = self.read(agent) else {
            return Ok(SessionId::new(session_id.to_owned()).into_iter().collect());
        };
        let sessions = match binding
            .conversations
            .iter()
            .position(|c| c.names(session_id))
        {
            Some(i) => binding.conversations.remove(i).sessions(),
            None => SessionId::new(session_id.to_owned()).into_iter().collect(),
        };
        if binding.conversations.is_empty() && binding.provisional.is_none() {
            self.remove_file(agent)?;
        } else {
            self.write(agent, &binding)?;
        }
        Ok(sessions)
    }

    /// The agent's conversation `session_id` ended without a discard (its process exits):
    /// its binding goes as at an end, and its sessions are recorded as detached, under one
    /// lock, so that the conversation's next process binding it meanwhile is not undone.
    pub fn detach(&self, agent: ProcessId, session_id: &str) -> anyhow::Result<Vec<SessionId>> {
        let _lock = self.lock()?;
        let sessions = self.end_locked(agent, session_id)?;
        let at = crate::services::home::now().as_millis();
        self.update_detached(|d| {
            for s in &sessions {
                d.insert(s.to_string(), at);
            }
            true
        })?;
        Ok(sessions)
    }

    /// The sessions detached from their agent process: recorded so at a session end, or named
    /// by the binding of an agent that no longer runs, and named by no running agent. Only
    /// reads.
    pub fn detached(&self) -> BTreeSet<String> {
        let mut detached: BTreeSet<String> = self.read_detached().sessions.into_keys().collect();
        let mut attached = BTreeSet::new();
        for (agent, path) in self.binding_files() {
            let Some(binding) = fs::read(&path)
                .ok()
                .and_then(|t| serde_json::from_slice::<Binding>(&t).ok())
            else {
                continue;
            };
            let named = binding.conversations.iter().flat_map(Conv::sessions);
            if hermes_registry::procs::is_alive(agent) {
                attached.extend(named.map(|s| s.to_string()));
            } else {
                detached.extend(named.map(|s| s.to_string()));
            }
        }
        &detached - &attached
    }

    fn detached_path(&self) -> PathBuf {
        self.dir.join("detached.json")
    }

    fn read_detached(&self) -> Detached {
        fs::read(self.detached_path())
            .ok()
            .and_then(|t| serde_json::from_slice(&t).ok())
            .unwrap_or_default()
    }

    /// Changes the detached record with `change` (which says whether it changed anything) and
    /// forgets what is older than [`DETACHED_KEPT_MS`]; called with the lock held.
    fn update_detached(
        &self,
        change: impl FnOnce(&mut BTreeMap<String, u64>) -> bool,
    ) -> anyhow::Result<()> {
        let mut detached = self.read_detached();
        let changed = change(&mut detached.sessions);
        if !changed {
            return Ok(());
        }
        let oldest = crate::services::home::now()
            .as_millis()
            .saturating_sub(DETACHED_KEPT_MS);
        detached.sessions.retain(|_, at| *at >= oldest);
        let text = serde_json::to_vec(&detached).context("cannot encode the detached sessions")?;
        self.write_atomically(&self.detached_path(), &text)
    }

    /// Forgets the agent's binding (its provisional conversation ended with the server).
    pub fn remove(&self, agent: ProcessId) -> anyhow::Result<()> {
        let _lock = self.lock()?;
        self.remove_file(agent)
    }

    fn remove_file(&self, agent: ProcessId) -> anyhow::Result<()> {
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
        let text = serde_json::to_vec(binding).context("cannot encode the binding")?;
        self.write_atomically(&self.path(agent), &text)
    }

    fn write_atomically(&self, path: &Path, text: &[u8]) -> anyhow::Result<()> {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        file.write_all(text)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
    }

    /// The binding files of this home, with the agent each is keyed by.
    fn binding_files(&self) -> Vec<(ProcessId, PathBuf)> {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name();
                let stem = name.to_str()?.strip_suffix(".json")?;
                let (pid, start) = stem.split_once('-')?;
                let agent = ProcessId {
                    pid: pid.parse().ok()?,
                    start_time: start.parse().ok()?,
                };
                Some((agent, entry.path()))
            })
            .collect()
    }

    /// Removes the bindings of other agents that no longer run (called with the lock held):
    /// their conversations, which they left without a session end, are detached.
    fn prune_dead(&self, keep: ProcessId) {
        let mut left = Vec::new();
        for (agent, path) in self.binding_files() {
            if agent == keep || hermes_registry::procs::is_alive(agent) {
                continue;
            }
            if let Some(binding) = self.read(agent) {
                left.extend(binding.conversations.iter().flat_map(Conv::sessions));
            }
            let _ = fs::remove_file(path);
        }
        if left.is_empty() {
            return;
        }
        let at = crate::services::home::now().as_millis();
        let recorded = self.update_detached(|d| {
            for s in &left {
                d.entry(s.to_string()).or_insert(at);
            }
            true
        });
        if let Err(e) = recorded {
            tracing::warn!(error = %format!("{e:#}"), "cannot record detached conversations");
        }
    }
}

/// Records that a hook named `id` in `binding`; returns its conversation.
fn bind_in(binding: &mut Binding, id: &str, naming: Naming) -> Conv {
    if let Some(conv) = binding.conversations.iter_mut().find(|c| c.names(id)) {
        if conv.session != id {
            // The other id of a double start: it becomes the current one.
            let old = std::mem::replace(&mut conv.session, id.to_owned());
            conv.merged.retain(|m| m != id);
            conv.merged.insert(0, old);
        }
        if naming == Naming::Hook {
            conv.started_only = false;
        }
        return conv.clone();
    }
    let mut merged: Vec<String> = binding.provisional.take().into_iter().collect();
    if naming == Naming::Start {
        // Conversations that saw nothing but a session start are this one's other start.
        let (twins, rest): (Vec<Conv>, Vec<Conv>) = std::mem::take(&mut binding.conversations)
            .into_iter()
            .partition(|c| c.started_only);
        binding.conversations = rest;
        for twin in twins {
            merged.push(twin.session);
            merged.extend(twin.merged);
        }
    }
    merged.retain(|m| m != id);
    merged.dedup();
    let conv = Conv {
        session: id.to_owned(),
        merged,
        started_only: naming != Naming::Hook,
    };
    binding.conversations.push(conv.clone());
    conv
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(pid: u32) -> ProcessId {
        ProcessId { pid, start_time: 7 }
    }

    fn names(sessions: &[SessionId]) -> Vec<String> {
        sessions.iter().map(|s| s.to_string()).collect()
    }

    fn one(r: Option<Resolved>) -> (Vec<String>, bool) {
        match r {
            Some(Resolved::One { sessions, named }) => (names(&sessions), named),
            other => panic!("not one conversation: {other:?}"),
        }
    }

    #[test]
    fn a_hook_adopts_the_servers_provisional_session() {
        let home = tempfile::tempdir().expect("temp dir");
        let b = Bindings::new(home.path());
        let provisional = one(b
            .resolve(agent(1), None, || "mcp-1".into())
            .expect("resolve"));
        assert_eq!(provisional, (vec!["mcp-1".to_owned()], false));
        let conv = b
            .bind(agent(1), "some-agent", "conv-a", Naming::Hook)
            .expect("bind");
        assert_eq!(names(&conv.sessions()), ["conv-a", "mcp-1"]);
        let seen = one(b
            .resolve(agent(1), None, || unreachable!())
            .expect("resolve"));
        assert_eq!(seen, (vec!["conv-a".to_owned(), "mcp-1".to_owned()], true));
    }

    #[test]
    fn two_starts_of_one_resume_adopt_each_other_in_either_order() {
        for (first, second) in [("random", "orig"), ("orig", "random")] {
            let home = tempfile::tempdir().expect("temp dir");
            let b = Bindings::new(home.path());
            b.bind(agent(2), "some-agent", first, Naming::Start)
                .expect("bind");
            let conv = b
                .bind(agent(2), "some-agent", second, Naming::Start)
                .expect("bind");
            assert_eq!(names(&conv.sessions()), [second, first]);
            // Later hooks may name either id: still the one conversation.
            let later = b
                .bind(agent(2), "some-agent", "orig", Naming::Hook)
                .expect("bind");
            assert_eq!(later.session, "orig");
            assert!(later.names("random"));
            assert_eq!(
                b.read(agent(2)).expect("binding").conversations.len(),
                1,
                "{first} then {second}"
            );
        }
    }

    #[test]
    fn a_second_conversation_of_one_agent_is_kept_apart_and_the_server_must_choose() {
        let home = tempfile::tempdir().expect("temp dir");
        let b = Bindings::new(home.path());
        b.bind(agent(3), "some-agent", "a", Naming::Start)
            .expect("bind");
        b.bind(agent(3), "some-agent", "a", Naming::Hook)
            .expect("bind");
        let second = b
            .bind(agent(3), "some-agent", "b", Naming::Start)
            .expect("bind");
        assert_eq!(
            names(&second.sessions()),
            ["b"],
            "a conversation in use is not adopted"
        );
        assert_eq!(
            b.resolve(agent(3), None, || unreachable!())
                .expect("resolve"),
            Some(Resolved::Several(vec!["a".into(), "b".into()]))
        );
        assert_eq!(
            one(b
                .resolve(agent(3), Some("b"), || unreachable!())
                .expect("resolve"))
            .0,
            ["b"]
        );
        assert_eq!(
            b.resolve(agent(3), Some("zzz"), || unreachable!())
                .expect("resolve"),
            None
        );
        assert_eq!(names(&b.end(agent(3), "a").expect("end")), ["a"]);
        assert_eq!(
            one(b
                .resolve(agent(3), None, || unreachable!())
                .expect("resolve"))
            .0,
            ["b"]
        );
        b.end(agent(3), "b").expect("end");
        assert!(
            b.read(agent(3)).is_none(),
            "the last conversation takes the file with it"
        );
    }

    #[test]
    fn a_cleared_conversation_starts_fresh() {
        let home = tempfile::tempdir().expect("temp dir");
        let b = Bindings::new(home.path());
        b.bind(agent(4), "some-agent", "first", Naming::Start)
            .expect("bind");
        let after_clear = b
            .bind(agent(4), "some-agent", "second", Naming::OtherStart)
            .expect("bind");
        assert_eq!(names(&after_clear.sessions()), ["second"]);
    }

    #[test]
    fn a_detached_conversation_is_shown_until_a_later_process_names_it() {
        let home = tempfile::tempdir().expect("temp dir");
        let b = Bindings::new(home.path());
        let me = hermes_registry::procs::current_process();
        b.bind(me, "some-agent", "kept", Naming::Hook)
            .expect("bind");
        b.bind(me, "some-agent", "cleared", Naming::Hook)
            .expect("bind");
        assert!(b.detached().is_empty(), "a running agent holds both");
        assert_eq!(names(&b.detach(me, "kept").expect("detach")), ["kept"]);
        b.end(me, "cleared").expect("end");
        assert_eq!(b.detached(), BTreeSet::from(["kept".to_owned()]));
        // An agent that exited without a session end: its conversations are detached too.
        b.bind(agent(9), "some-agent", "crashed", Naming::Hook)
            .expect("bind");
        assert!(b.detached().contains("crashed"));
        // The next process of the conversation names it again: attached.
        b.bind(me, "some-agent", "kept", Naming::Start)
            .expect("bind");
        assert_eq!(b.detached(), BTreeSet::from(["crashed".to_owned()]));
    }
}
