//! The checks of a `--workspace worktree` dispatch, made before anything is recorded or started:
//! git runs, the working directory is in a repository with a commit and no merge, rebase,
//! cherry-pick or revert in progress, and no child's branch is taken. Each failure is a usage
//! error (exit 2; a tool error over MCP) of one line.

use std::path::PathBuf;

use hermes_ledger::{DelegationId, DispatchSpec, Workspace};
use hermes_registry::workspace;

use crate::services::exit::{Code, fail};

/// The working directory of a worktree dispatch (`cwd`, else this process's), absolute, checked
/// to be in a repository fit to branch from.
pub fn repository_cwd(cwd: Option<String>) -> anyhow::Result<String> {
    let dir = match cwd {
        Some(dir) => PathBuf::from(dir),
        None => std::env::current_dir().map_err(|e| {
            fail(
                Code::Usage,
                format!("--workspace worktree: no working directory: {e}"),
            )
        })?,
    };
    workspace::locate(&dir).map_err(|e| fail(Code::Usage, e.to_string()))?;
    Ok(dir.display().to_string())
}

/// Checks, once the unit's id is known, that none of its children's branches is taken.
pub fn check_branches(spec: &DispatchSpec, id: &DelegationId) -> anyhow::Result<()> {
    if spec.workspace != Workspace::Worktree {
        return Ok(());
    }
    let Some(cwd) = &spec.cwd else {
        return Ok(());
    };
    workspace::check(std::path::Path::new(cwd), id, spec.tasks.len() as u32)
        .map(|_| ())
        .map_err(|e| fail(Code::Usage, e.to_string()))
}
