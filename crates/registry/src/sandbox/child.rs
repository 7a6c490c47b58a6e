//! One child's sandbox policy, from its unit's sandbox and its task: its own temporary
//! directory (made here, removed when the child is done), its agent's state directories, and
//! hermes' home — writable for an `orchestrator`, which reaches its ledger to delegate, and a
//! read-only hole for a `leaf` even when it lies inside the child's workspace.

use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use hermes_ledger::{DelegationId, Role, Sandbox, TaskSpec};

use super::Policy;

/// A child's own temporary directory (its `TMPDIR`), removed with this value.
#[derive(Debug)]
pub(crate) struct ChildTemp {
    dir: tempfile::TempDir,
}

impl ChildTemp {
    /// Makes `hermes-<delegation>-<index>-<random>` (0700, created exclusively) under the
    /// system's temporary directory: a name nobody can take first, and never another run's.
    fn make(id: &DelegationId, index: u32) -> std::io::Result<ChildTemp> {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::Builder::new()
            .prefix(&format!("hermes-{id}-{index}-"))
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()?;
        Ok(ChildTemp { dir })
    }

    /// Its path.
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// The policy of child `index` of unit `id` running `task` under `sandbox`, and its temporary
/// directory (none if it could not be made: the child is confined all the same, with nowhere
/// to write but its workspace); `None` when the sandbox confines it in nothing. `home` is
/// hermes' home.
pub(crate) fn policy(
    sandbox: Sandbox,
    task: &TaskSpec,
    id: &DelegationId,
    index: u32,
    home: Option<&Path>,
) -> Option<(Policy, Option<ChildTemp>)> {
    let agent = task.agent.is_some();
    if !sandbox.confines(agent) {
        return None;
    }
    let temp = ChildTemp::make(id, index)
        .inspect_err(|e| tracing::warn!(error = %e, "cannot make a child's temporary directory"))
        .ok();
    let mut writable: Vec<PathBuf> = temp.iter().map(|t| t.path().to_path_buf()).collect();
    writable.extend(task.agent.as_deref().into_iter().flat_map(state_dirs));
    let mut read_only = Vec::new();
    match (task.role, home) {
        (Role::Orchestrator, Some(home)) => writable.push(home.to_path_buf()),
        (Role::Leaf, Some(home)) => read_only.push(home.to_path_buf()),
        (_, None) => {}
    }
    let policy = Policy {
        mode: sandbox.mode,
        network: sandbox.network(agent),
        writable,
        read_only,
    };
    Some((policy, temp))
}

/// Where agent `name` keeps its state, each made if missing: a directory so the agent can fill
/// it, a file (created, never overwritten) so the agent can write it in place.
fn state_dirs(name: &str) -> Vec<PathBuf> {
    let Some((_, profile)) = hermes_agents::child(name) else {
        return Vec::new();
    };
    let home = std::env::var_os("HOME").map(PathBuf::from);
    profile
        .state
        .iter()
        .filter_map(|dir| {
            let path = dir
                .var
                .and_then(std::env::var_os)
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(dir.home)))?;
            match dir.file {
                None => drop(std::fs::create_dir_all(&path)),
                // Private, as an agent keeps its own (it may hold account details).
                Some(empty) => drop(
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(&path)
                        .and_then(|mut f| std::io::Write::write_all(&mut f, empty.as_bytes())),
                ),
            }
            Some(path)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hermes_ledger::SandboxMode;

    fn id() -> DelegationId {
        DelegationId::new("deleg_0123456789ab").expect("id")
    }

    #[test]
    fn an_orchestrator_writes_the_home_and_a_leaf_never_does() {
        let sandbox = Sandbox {
            mode: SandboxMode::WorkspaceWrite,
            commands_network: false,
            agents_network: true,
        };
        let home = Path::new("/h");
        let leaf = TaskSpec::new("g", vec!["true".into()]);
        let (p, temp) = policy(sandbox, &leaf, &id(), 7, Some(home)).expect("confined");
        let temp = temp.expect("made");
        let name = temp.path().file_name().expect("a name").to_string_lossy();
        assert!(name.starts_with("hermes-deleg_0123456789ab-7-"), "{name}");
        assert!(temp.path().is_dir());
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(temp.path())
                .expect("metadata")
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o700);
        assert_eq!(p.writable, vec![temp.path().to_path_buf()]);
        assert_eq!(p.read_only, vec![home.to_path_buf()]);
        assert!(!p.network);
        let orchestrator = TaskSpec {
            role: Role::Orchestrator,
            ..leaf.clone()
        };
        let (p, _) = policy(sandbox, &orchestrator, &id(), 8, Some(home)).expect("confined");
        assert!(p.writable.contains(&home.to_path_buf()) && p.read_only.is_empty());
        let dir = temp.path().to_path_buf();
        drop(temp);
        assert!(!dir.exists(), "the temporary directory goes with its child");
        // Unconfined: nothing made.
        assert!(policy(Sandbox::FULL, &leaf, &id(), 9, Some(home)).is_none());
    }
}
