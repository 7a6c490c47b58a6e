//! Worktrees removed once their child's result is settled: every sweep (and the end of a `-z`
//! run) looks at `$HERMES_HOME/workspaces/<delegation>-<task>` and removes each whose child's
//! event was delivered or dropped, or whose unit is gone. The branch stays.

use std::path::Path;

use hermes_ledger::{DelegationId, EventKey, Ledger};

use super::WorkspaceError;

/// Removes the worktree at `path` (its repository found from it), kept as a spare for the
/// repository's next child where it can be; a directory git no longer knows as a worktree is
/// removed as a plain directory.
pub fn remove_worktree(path: &Path) -> Result<(), WorkspaceError> {
    let common = super::spare::common_dir(path).ok();
    let repo = common.as_deref().and_then(Path::parent);
    let shown = path.display().to_string();
    match (&common, repo, path.parent()) {
        (Some(common), Some(repo), Some(root)) if repo.is_dir() => {
            super::spare::park(root, repo, common, path)
        }
        _ => std::fs::remove_dir_all(path)
            .map_err(|e| WorkspaceError::Git(format!("cannot remove {shown}: {e}"))),
    }
}

/// The unit and task of a worktree directory's name (`deleg_…-N`).
fn parse_name(name: &str) -> Option<(DelegationId, u32)> {
    let (id, index) = name.rsplit_once('-')?;
    Some((DelegationId::new(id).ok()?, index.parse().ok()?))
}

/// Whether child `index` of `id` has its result settled (delivered or dropped), or its unit is
/// gone from the ledger.
fn settled(ledger: &Ledger, id: &DelegationId, index: u32) -> hermes_ledger::Result<bool> {
    if ledger.delegation(id)?.is_none() {
        return Ok(true);
    }
    Ok(ledger.events(id)?.iter().any(|e| {
        e.state.is_terminal()
            && match e.key {
                EventKey::Task(i) => i == index,
                EventKey::Terminal => e.payload.outcomes().iter().any(|o| o.index == index),
            }
    }))
}

/// Removes the worktrees under `root` whose child's result is settled; how many it removed.
/// Errors are logged and skipped: this is housekeeping.
pub fn release_settled(ledger: &Ledger, root: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(root) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some((id, index)) = name.to_str().and_then(parse_name) else {
            continue;
        };
        match settled(ledger, &id, index) {
            Ok(true) => match remove_worktree(&entry.path()) {
                Ok(()) => removed += 1,
                Err(e) => {
                    tracing::warn!(delegation = %id, index, error = %e, "cannot remove a settled worktree");
                }
            },
            Ok(false) => {}
            Err(e) => tracing::warn!(delegation = %id, error = %e, "cannot read a worktree's unit"),
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read() {
        let (id, index) = parse_name("deleg_0123456789ab-12").expect("parses");
        assert_eq!((id.as_str(), index), ("deleg_0123456789ab", 12));
        assert!(parse_name("branches").is_none());
        assert!(parse_name("deleg_0123456789ab-x").is_none());
    }
}
