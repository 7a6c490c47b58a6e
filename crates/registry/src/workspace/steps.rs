//! The async steps around a child of a `--workspace worktree` unit: its worktree made before it
//! starts (git runs off the async threads), finished when it ends.

use std::path::PathBuf;

use super::{WorkspaceError, Worktree, create, finish};

/// Where a child gets its own worktree.
pub(crate) struct WorkspacePlan {
    /// `$HERMES_HOME/workspaces`.
    pub(crate) root: PathBuf,
    /// The dispatch's working directory, in the repository.
    pub(crate) cwd: PathBuf,
    /// What hermes' commit of what it left says.
    pub(crate) note: String,
}

/// What hermes' commit of what child `index` of `unit` left says about it.
pub(crate) fn commit_note(unit: &hermes_ledger::UnitRecord, index: u32) -> String {
    format!(
        "Delegation: {}\nTask: {index}\nGoal: {}",
        unit.id,
        hermes_stdx::one_line(unit.goal_of(index))
    )
}

/// Makes a child's worktree (git runs off the async threads) and points its plan at it; the
/// outcome of a child that cannot have one.
pub(crate) async fn enter_worktree(
    ws: &WorkspacePlan,
    id: &hermes_ledger::DelegationId,
    plan: &mut crate::child::ChildPlan,
    live: &crate::child::LiveChild,
    host: &crate::host::Publisher,
) -> Result<Worktree, hermes_ledger::ChildOutcome> {
    let (root, cwd, unit, index) = (ws.root.clone(), ws.cwd.clone(), id.clone(), plan.index);
    let made = tokio::task::spawn_blocking(move || create(&root, &cwd, &unit, index))
        .await
        .unwrap_or_else(|e| Err(WorkspaceError::Git(e.to_string())));
    match made {
        Ok(tree) => {
            plan.spawn.cwd = Some(tree.cwd());
            plan.log.note(
                host.context().clock.now(),
                &format!(
                    "hermes: working in {} on branch {}",
                    tree.path.display(),
                    tree.branch
                ),
            );
            Ok(tree)
        }
        Err(e) => {
            let reason = format!("cannot create its worktree: {e}");
            Err(crate::child::could_not_start(
                plan,
                live,
                host.context().clock.now(),
                reason,
            ))
        }
    }
}

/// Commits what a child left in its worktree, measures its branch and removes the worktree.
pub(crate) async fn leave_worktree(tree: Worktree, note: String) -> hermes_ledger::Changes {
    let shown = (tree.branch.clone(), tree.base.clone());
    tokio::task::spawn_blocking(move || finish(&tree, &note))
        .await
        .unwrap_or_else(|e| hermes_ledger::Changes {
            branch: shown.0,
            base: shown.1,
            error: Some(e.to_string()),
            ..hermes_ledger::Changes::default()
        })
}
