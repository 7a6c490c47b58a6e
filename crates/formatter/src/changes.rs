//! The `CHANGES` section of a child that worked in its own git worktree: its branch, base,
//! commits (one line each, at most [`COMMITS_SHOWN`]) and diffstat, or "no changes". It sits
//! before the result, so a block shortened to its budget keeps it (the head is kept).

use std::fmt;

use hermes_ledger::Changes;

use crate::text::{EXCERPT_MAX_CHARS, one_line, write_quoted};

/// The line that opens the section.
pub const CHANGES_RULE: &str = "--- CHANGES ---";

/// Commits listed at most; the rest are counted.
pub const COMMITS_SHOWN: usize = 10;

/// The first 7 digits of a commit.
fn short(commit: &str) -> &str {
    commit.get(..7).unwrap_or(commit)
}

/// Writes the section for `changes`.
pub(crate) fn write_changes<W: fmt::Write + ?Sized>(w: &mut W, changes: &Changes) -> fmt::Result {
    writeln!(w, "{CHANGES_RULE}")?;
    let branch = one_line(&changes.branch, EXCERPT_MAX_CHARS);
    if changes.is_empty() {
        writeln!(
            w,
            "No changes: the child left nothing in its worktree (base {}), so no branch was kept.",
            short(&changes.base)
        )?;
    } else {
        writeln!(
            w,
            "Branch: {branch}   Base: {}   Head: {}",
            short(&changes.base),
            short(&changes.head)
        )?;
        writeln!(
            w,
            "Diffstat: {} changed, {}(+), {}(-)",
            counted(changes.files_changed, "file"),
            counted(changes.insertions, "insertion"),
            counted(changes.deletions, "deletion")
        )?;
        let n = changes.commits.len();
        writeln!(w, "Commits ({n}, oldest first):")?;
        let shown: Vec<String> = changes
            .commits
            .iter()
            .take(COMMITS_SHOWN)
            .map(|c| one_line(c, 100))
            .collect();
        write_quoted(w, &shown.join("\n"))?;
        if n > COMMITS_SHOWN {
            writeln!(
                w,
                "… and {} more: git log {}..{branch}",
                n - COMMITS_SHOWN,
                short(&changes.base)
            )?;
        }
    }
    if let Some(error) = &changes.error {
        writeln!(
            w,
            "Workspace problem: {}",
            one_line(error, EXCERPT_MAX_CHARS)
        )?;
    }
    Ok(())
}

/// `n` and `noun`, plural unless `n` is 1, as git's `--shortstat` writes them.
fn counted(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("{n} {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_commits_are_cut_and_counted() {
        let changes = Changes {
            branch: "hermes/deleg_0123456789ab-0".into(),
            base: "0123456789abcdef".into(),
            head: "fedcba9876543210".into(),
            commits: (0..25).map(|i| format!("abc{i:04} step {i}")).collect(),
            files_changed: 1,
            insertions: 25,
            ..Changes::default()
        };
        let mut text = String::new();
        write_changes(&mut text, &changes).expect("writes");
        assert!(text.contains("Commits (25, oldest first):"));
        assert!(text.contains("step 9") && !text.contains("step 10"));
        assert!(text.contains("… and 15 more: git log 0123456..hermes/deleg_0123456789ab-0"));
        assert!(text.contains("Diffstat: 1 file changed, 25 insertions(+), 0 deletions(-)"));
        assert_eq!(counted(1u32, "insertion"), "1 insertion");
    }

    #[test]
    fn no_change_says_so() {
        let changes = Changes {
            base: "0123456789".into(),
            ..Changes::default()
        };
        let mut text = String::new();
        write_changes(&mut text, &changes).expect("writes");
        assert!(text.contains("No changes"), "{text}");
    }
}
