//! Spare worktrees: a finished child's worktree is not deleted but cleaned, detached and kept
//! under `$HERMES_HOME/workspaces/spare/`, and the next child of the same repository starts in
//! it, switched to its own new branch. Checking out every file of a large repository is most of
//! what a worktree costs (the kernel writing each file); switching a clean worktree rewrites
//! only the files that differ, so a child pays for its predecessor's changes, not for the whole
//! tree. At most [`SPARES_PER_REPOSITORY`] are kept per repository; `hermes workspace clean`
//! removes them all.
//!
//! A spare holds nothing of its last child: a forced checkout of a detached `HEAD` and
//! `clean -fdx` before it is parked (its child's work is on its branch). Two processes of one home may race
//! for one spare: `git worktree move` lets one have it, and the other makes a fresh worktree.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{WorkspaceError, git, git_mut};

/// Spares kept per repository.
pub const SPARES_PER_REPOSITORY: usize = 2;

/// Git run in a spare never runs the repository's hooks (hermes' housekeeping is not a
/// checkout the person made).
const NO_HOOKS: [&str; 2] = ["-c", "core.hooksPath=/dev/null"];

/// Taking and parking spares in this process, one at a time.
static SPARES: Mutex<()> = Mutex::new(());

/// Where spares live under `root` (`$HERMES_HOME/workspaces`).
pub fn spare_root(root: &Path) -> PathBuf {
    root.join("spare")
}

/// The prefix of the spares of the repository whose common git directory is `common`.
fn prefix(common: &Path) -> String {
    format!(
        "{:016x}-",
        hermes_stdx::fnv1a(common.as_os_str().as_encoded_bytes())
    )
}

/// The repository's common git directory, absolute.
pub(super) fn common_dir(dir: &Path) -> Result<PathBuf, WorkspaceError> {
    let out = git(
        dir,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
    )?;
    Ok(PathBuf::from(out.trim()))
}

/// The spares of the repository at `common`, oldest first.
fn spares_of(root: &Path, common: &Path) -> Vec<PathBuf> {
    let prefix = prefix(common);
    let Ok(entries) = std::fs::read_dir(spare_root(root)) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

/// Moves a spare of `repo` (common git directory `common`) to `path`, on a new `branch` at
/// `base`; `false` when there is none, or none could be used (it is removed then).
pub(super) fn take(
    root: &Path,
    repo: &Path,
    common: &Path,
    path: &Path,
    branch: &str,
    base: &str,
) -> bool {
    let _guard = hermes_stdx::lock(&SPARES);
    let Some(spare) = spares_of(root, common).pop() else {
        return false;
    };
    let (from, to) = (spare.display().to_string(), path.display().to_string());
    if git_mut(repo, &["worktree", "move", from.as_str(), to.as_str()]).is_err() {
        // Taken by another process, or damaged: a fresh worktree it is.
        let _ = discard(repo, &spare);
        return false;
    }
    let switched = git(
        path,
        &[
            NO_HOOKS[0],
            NO_HOOKS[1],
            "switch",
            "--quiet",
            "--create",
            branch,
            base,
        ],
    );
    if switched.is_err() {
        let _ = discard(repo, path);
        return false;
    }
    true
}

/// Parks the worktree at `path` of `repo` (whose common git directory is `common`) as a spare: cleaned, detached and moved under
/// [`spare_root`]; removed instead when the repository has its spares already or it cannot be
/// cleaned.
pub(super) fn park(
    root: &Path,
    repo: &Path,
    common: &Path,
    path: &Path,
) -> Result<(), WorkspaceError> {
    let _guard = hermes_stdx::lock(&SPARES);
    if spares_of(root, common).len() >= SPARES_PER_REPOSITORY {
        return discard(repo, path);
    }
    // Detached where it is, anything left in the index or the files thrown away (`--force`),
    // then everything untracked or ignored removed: the base of the next child's switch.
    let cleaned = git(
        path,
        &[
            NO_HOOKS[0],
            NO_HOOKS[1],
            "checkout",
            "--quiet",
            "--force",
            "--detach",
        ],
    )
    .and_then(|_| git(path, &["clean", "-qfdx"]));
    if cleaned.is_err() {
        return discard(repo, path);
    }
    let dir = spare_root(root);
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
        .create(&dir)
        .map_err(|e| WorkspaceError::Git(format!("cannot create {}: {e}", dir.display())))?;
    let name = format!(
        "{}{:020}",
        prefix(common),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let (from, to) = (
        path.display().to_string(),
        dir.join(name).display().to_string(),
    );
    match git_mut(repo, &["worktree", "move", from.as_str(), to.as_str()]) {
        Ok(_) => Ok(()),
        Err(_) => discard(repo, path),
    }
}

/// Removes the worktree at `path` of `repo` for good.
fn discard(repo: &Path, path: &Path) -> Result<(), WorkspaceError> {
    let shown = path.display().to_string();
    if path.exists() {
        git_mut(repo, &["worktree", "remove", "--force", shown.as_str()])?;
    } else {
        git_mut(repo, &["worktree", "prune"])?;
    }
    Ok(())
}

/// Removes every spare under `root` (`hermes workspace clean`); how many.
pub fn clear(root: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(spare_root(root)) else {
        return 0;
    };
    let mut removed = 0;
    for path in entries.filter_map(Result::ok).map(|e| e.path()) {
        let repo = common_dir(&path)
            .ok()
            .and_then(|c| c.parent().map(Path::to_path_buf));
        let gone = match repo {
            Some(repo) if repo.is_dir() => discard(&repo, &path).is_ok(),
            _ => std::fs::remove_dir_all(&path).is_ok(),
        };
        removed += usize::from(gone);
    }
    removed
}
