//! A child's sandbox, enforced by the kernel between fork and exec.
//!
//! Everything that resolves a path, allocates or can fail for a reason worth a sentence happens
//! in [`prepare`], in hermes' own process before it forks: the Landlock ruleset is built and its
//! rules added (each rule holds an open descriptor of its directory), the identity maps of the
//! user namespace are formatted, the directories to bind read-only are found. What is left for
//! the forked child, [`Confinement::enter`], is a handful of raw system calls, all
//! async-signal-safe: `unshare`, `open`/`write` of its own `/proc/self/*_map`, `mount`,
//! `chdir`, `prctl(PR_SET_NO_NEW_PRIVS)` and `landlock_restrict_self`. Nothing the child runs
//! ever runs unconfined, and whatever it starts inherits the confinement (Landlock domains and
//! namespaces survive `exec`, `fork` and `setsid`; `no_new_privs` cannot be undone).
//!
//! - The filesystem: Landlock. Reading and executing stay allowed everywhere; writing (creating,
//!   removing, renaming, truncating) only beneath the writable roots: the working directory for
//!   `workspace-write`, and for every mode the child's own temporary directory and whatever its
//!   [`Policy`] adds (an agent's state directory, an orchestrator's ledger home).
//! - `.git` inside a writable root: Landlock rights are inherited down a tree, so a read-only
//!   hole needs the mount namespace: the directory is bound onto itself read-only before
//!   Landlock is applied, and Landlock then forbids the child any mount or unmount.
//! - The network: a new network namespace, with nothing in it but a loopback interface that is
//!   down. No address is reachable, not even the host's own 127.0.0.1 listeners (they live in
//!   the host's namespace), nor abstract Unix sockets.
//! - The namespaces are made inside a new user namespace, also as root: that works without
//!   privileges, and a root child gets capabilities only over its own namespaces, so it cannot
//!   `setns` its way back into the host's network.

pub(crate) mod child;
mod landlock_rules;
mod namespaces;

use std::io;
use std::path::{Path, PathBuf};

use hermes_ledger::SandboxMode;

pub use landlock_rules::landlock_abi;
pub use namespaces::user_namespaces;

use namespaces::Namespaces;

/// The oldest Landlock ABI that can enforce a sandbox: ABI 3 is the first that controls
/// truncation, without which a read-only file could still be emptied.
pub const MIN_LANDLOCK_ABI: i32 = 3;

/// What one child may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// How far its writes reach.
    pub mode: SandboxMode,
    /// Whether it reaches the network.
    pub network: bool,
    /// Where it may write besides its working directory (`workspace-write` only): its own
    /// temporary directory, an agent's state directory, an orchestrator's ledger home. Missing
    /// paths are skipped.
    pub writable: Vec<PathBuf>,
    /// Directories that stay read-only even beneath a writable root (besides every `.git`):
    /// a leaf child's ledger home.
    pub read_only: Vec<PathBuf>,
}

impl Policy {
    /// Whether the kernel confines a child under this policy at all.
    pub fn confines(&self) -> bool {
        self.mode != SandboxMode::Full || !self.network
    }
}

/// Why a sandbox cannot be set up on this machine.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The kernel has no Landlock, or one too old to enforce a sandbox.
    #[error(
        "this kernel cannot enforce sandbox {mode}: Landlock {found} (ABI {MIN_LANDLOCK_ABI} or newer needed); use --sandbox full"
    )]
    NoLandlock {
        /// The mode asked for.
        mode: SandboxMode,
        /// What the kernel has.
        found: String,
    },
    /// User namespaces are off, needed for `--network off` and a read-only `.git`.
    #[error("this system cannot {what}: user namespaces are disabled ({reason})")]
    NoUserNamespaces {
        /// What needed them.
        what: &'static str,
        /// Why they are not available.
        reason: String,
    },
    /// Building the Landlock ruleset failed.
    #[error("cannot build the sandbox's Landlock rules: {0}")]
    Landlock(String),
}

/// Whether this machine can enforce `policy` (for a child working in `cwd`), without starting
/// anything: the check a dispatch makes so that it is refused before anything starts.
pub fn check(policy: &Policy, cwd: &Path) -> Result<(), SandboxError> {
    prepare(policy, cwd).map(drop)
}

/// A confinement ready to enter: built before the fork, entered by the child.
#[derive(Debug)]
pub struct Confinement {
    namespaces: Option<Namespaces>,
    ruleset: Option<landlock::RulesetCreated>,
}

/// Builds the confinement of a child working in `cwd` under `policy`; `None` if the policy
/// confines nothing (`full` with the network on).
pub fn prepare(policy: &Policy, cwd: &Path) -> Result<Option<Confinement>, SandboxError> {
    if !policy.confines() {
        return Ok(None);
    }
    let roots = writable_roots(policy, cwd);
    let ruleset = match policy.mode {
        SandboxMode::Full => None,
        mode => Some(landlock_rules::ruleset(mode, &roots)?),
    };
    let read_only = match policy.mode {
        SandboxMode::Full => Vec::new(),
        _ => read_only_holes(&roots, &policy.read_only),
    };
    let namespaces = Namespaces::prepare(!policy.network, read_only, cwd)?;
    Ok(Some(Confinement {
        namespaces,
        ruleset,
    }))
}

impl Confinement {
    /// Confines the calling process for good. Call it only in a forked child before `exec`:
    /// it makes system calls and nothing else (no allocation, no lock).
    pub fn enter(&mut self) -> io::Result<()> {
        if let Some(namespaces) = &self.namespaces {
            namespaces.enter()?;
        }
        // SAFETY: prctl with constant arguments; it only sets a flag of this process.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if let Some(ruleset) = self.ruleset.take() {
            landlock_rules::restrict(ruleset)?;
        }
        Ok(())
    }
}

/// The directories a child may write beneath, canonical (a symbolic link is its target, as the
/// kernel checks it): its working directory under `workspace-write`, and the policy's own.
fn writable_roots(policy: &Policy, cwd: &Path) -> Vec<PathBuf> {
    let workspace = (policy.mode == SandboxMode::WorkspaceWrite).then_some(cwd);
    workspace
        .into_iter()
        .chain(policy.writable.iter().map(PathBuf::as_path))
        .filter_map(|p| p.canonicalize().ok())
        .collect()
}

/// What stays read-only beneath the writable `roots`: each root's `.git` (a directory, or for a
/// worktree the git directory its `.git` file names, when that lies beneath a root too), and
/// each of `extra` that lies beneath a root.
fn read_only_holes(roots: &[PathBuf], extra: &[PathBuf]) -> Vec<PathBuf> {
    let beneath_a_root = |p: &Path| roots.iter().any(|r| p.starts_with(r));
    let mut holes: Vec<PathBuf> = Vec::new();
    for root in roots {
        let dot_git = root.join(".git");
        if dot_git.is_dir() {
            holes.extend(dot_git.canonicalize().ok());
        } else if let Some(gitdir) = worktree_gitdir(&dot_git, root) {
            holes.push(gitdir);
        }
    }
    holes.extend(extra.iter().filter_map(|p| p.canonicalize().ok()));
    holes.retain(|p| beneath_a_root(p));
    holes.sort();
    holes.dedup();
    holes
}

/// The git directory a worktree's `.git` file names (`gitdir: PATH`), canonical.
fn worktree_gitdir(dot_git: &Path, root: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(dot_git).ok()?;
    let named = text.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim();
    root.join(named).canonicalize().ok()
}

#[cfg(test)]
mod tests;
