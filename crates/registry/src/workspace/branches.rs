//! The branches hermes made and kept, recorded one private file each under
//! `$HERMES_HOME/workspaces/branches/`, and what `hermes workspace list/clean` ask of git about
//! them. Only a recorded `hermes/…` branch is ever deleted.

use std::path::{Path, PathBuf};

use hermes_ledger::Changes;

use super::{BRANCH_PREFIX, WorkspaceError, branch_exists, git, git_mut};

/// A branch hermes made and kept, as recorded in `$HERMES_HOME/workspaces/branches/`: what
/// `hermes workspace list/clean` manage (no other branch is ever touched).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BranchRecord {
    /// The branch.
    pub branch: String,
    /// The repository's top-level directory.
    pub repository: String,
    /// The commit it started from.
    pub base: String,
    /// Its head when the child ended.
    pub head: String,
    /// Its commits then.
    pub commits: u64,
}

/// Where the records of kept branches live under `root` (`$HERMES_HOME/workspaces`).
pub fn records_dir(root: &Path) -> PathBuf {
    root.join("branches")
}

/// Records a kept branch (a private file of its own, named after the branch).
pub(crate) fn record(root: &Path, changes: &Changes) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = records_dir(root);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    let entry = BranchRecord {
        branch: changes.branch.clone(),
        repository: changes.repository.clone(),
        base: changes.base.clone(),
        head: changes.head.clone(),
        commits: changes.commits.len() as u64,
    };
    let name = changes
        .branch
        .trim_start_matches(BRANCH_PREFIX)
        .replace('/', "_");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(dir.join(format!("{name}.json")))?;
    let text = serde_json::to_vec(&entry).map_err(std::io::Error::other)?;
    std::io::Write::write_all(&mut file, &text)
}

/// The kept branches recorded under `root`, each with its record's file.
pub fn records(root: &Path) -> Vec<(PathBuf, BranchRecord)> {
    let Ok(entries) = std::fs::read_dir(records_dir(root)) else {
        return Vec::new();
    };
    let mut found: Vec<(PathBuf, BranchRecord)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|p| {
            let text = std::fs::read(&p).ok()?;
            let entry: BranchRecord = serde_json::from_slice(&text).ok()?;
            entry
                .branch
                .starts_with(BRANCH_PREFIX)
                .then_some((p, entry))
        })
        .collect();
    found.sort_by(|a, b| a.1.branch.cmp(&b.1.branch));
    found
}

/// What git says now of a recorded branch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BranchState {
    /// Whether it still exists.
    pub exists: bool,
    /// Whether its head is contained in the repository's `HEAD`.
    pub merged: bool,
    /// Its head commit's time, seconds since the epoch.
    pub committed_at: Option<i64>,
}

/// Asks git about `entry`'s branch.
pub fn state(entry: &BranchRecord) -> BranchState {
    let repo = Path::new(&entry.repository);
    let exists = repo.is_dir() && branch_exists(repo, &entry.branch).unwrap_or(false);
    if !exists {
        return BranchState {
            exists,
            merged: false,
            committed_at: None,
        };
    }
    let merged = git(
        repo,
        &["merge-base", "--is-ancestor", entry.branch.as_str(), "HEAD"],
    )
    .is_ok();
    let committed_at = git(repo, &["log", "-1", "--format=%ct", entry.branch.as_str()])
        .ok()
        .and_then(|t| t.trim().parse().ok());
    BranchState {
        exists,
        merged,
        committed_at,
    }
}

/// Deletes a recorded branch (git refuses one checked out anywhere) and forgets it.
pub fn delete(file: &Path, entry: &BranchRecord) -> Result<(), WorkspaceError> {
    if !entry.branch.starts_with(BRANCH_PREFIX) {
        return Err(WorkspaceError::Git(format!(
            "{} is not a branch hermes made",
            entry.branch
        )));
    }
    let repo = Path::new(&entry.repository);
    if repo.is_dir() && branch_exists(repo, &entry.branch)? {
        git_mut(repo, &["branch", "-D", "--quiet", entry.branch.as_str()])?;
    }
    std::fs::remove_file(file)
        .or_else(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Ok(()),
            _ => Err(e),
        })
        .map_err(|e| WorkspaceError::Git(format!("cannot forget {}: {e}", entry.branch)))
}
