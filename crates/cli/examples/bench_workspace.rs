//! `--workspace worktree`, measured: what one child's own worktree adds, in a repository of
//! 10,000 files. Prints one JSON object on stdout. Run with
//! `cargo run --release -p hermes-cli --example bench_workspace` (what `cargo xtask bench` does).
//!
//! Each sample is what a child's run adds around the child: its worktree made (a new branch from
//! `HEAD`: the first child checks every file out, each later one takes the spare its
//! predecessor left and switches it, rewriting only what differs), then — after a "child" that
//! edits one file and adds one — what it left committed and measured, and the worktree put away
//! (the branch stays). The figures are the whole of that (`workspace_added_ms_*`, target
//! ≤ 300 ms at p50; `workspace_first_child_ms` is the first sample alone, with no spare) and
//! each step, and, as the floor, plain `git worktree add` + `git worktree remove` of the same
//! repository interleaved with them (`git_worktree_add_remove_ms_p50`): what checking every
//! file out costs on this disk.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use hermes_ledger::DelegationId;
use hermes_registry::workspace;
use serde_json::json;

const FILES: usize = 10_000;
const SAMPLES: usize = 15;

fn main() -> Result<()> {
    let repo = tempfile::tempdir()?;
    let home = tempfile::tempdir()?;
    make_repository(repo.path())?;
    let root = home.path().join("workspaces");
    let (mut create, mut finish, mut remove, mut total) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut floor = Vec::new();
    for n in 0..SAMPLES {
        let id = DelegationId::new(format!("deleg_{n:012x}")).context("id")?;
        let start = Instant::now();
        let tree = workspace::create(&root, repo.path(), &id, 0)?;
        let made = start.elapsed();
        // The child: one file edited, one added (not counted).
        std::fs::write(tree.path.join("d00/f0000.txt"), "edited\n")?;
        std::fs::write(tree.path.join("new.txt"), "new\n")?;
        let at = Instant::now();
        let changes = workspace::finish(&tree, "Goal: bench");
        let finished = at.elapsed();
        if changes.commits.len() != 1 || changes.error.is_some() {
            bail!("unexpected changes: {changes:?}");
        }
        let at = Instant::now();
        workspace::remove_worktree(&tree.path)?;
        let removed = at.elapsed();
        create.push(ms(made));
        finish.push(ms(finished));
        remove.push(ms(removed));
        total.push(ms(made + finished + removed));
        let plain = home.path().join(format!("plain-{n}"));
        let shown = plain.display().to_string();
        let at = Instant::now();
        git(
            repo.path(),
            &["worktree", "add", "--quiet", "--detach", &shown, "HEAD"],
        )?;
        git(repo.path(), &["worktree", "remove", "--force", &shown])?;
        floor.push(ms(at.elapsed()));
    }
    let first = total[0];
    let figures = json!({
        "workspace_files": FILES,
        "workspace_first_child_ms": (first * 10.0).round() / 10.0,
        "workspace_added_ms_p50": percentile(&mut total, 50),
        "workspace_added_ms_p90": percentile(&mut total, 90),
        "workspace_create_ms_p50": percentile(&mut create, 50),
        "workspace_finish_ms_p50": percentile(&mut finish, 50),
        "workspace_remove_ms_p50": percentile(&mut remove, 50),
        "git_worktree_add_remove_ms_p50": percentile(&mut floor, 50),
    });
    println!("{figures}");
    Ok(())
}

/// A repository of `FILES` small files in 100 directories, one commit.
fn make_repository(dir: &Path) -> Result<()> {
    for d in 0..100 {
        let sub = dir.join(format!("d{d:02}"));
        std::fs::create_dir_all(&sub)?;
        for f in 0..FILES / 100 {
            std::fs::write(
                sub.join(format!("f{:04}.txt", d * 100 + f)),
                format!("file {d} {f}\n"),
            )?;
        }
    }
    git(dir, &["init", "--quiet", "-b", "main"])?;
    git(dir, &["add", "."])?;
    git(
        dir,
        &[
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@localhost",
            "commit",
            "--quiet",
            "-m",
            "10,000 files",
        ],
    )
}

fn git(dir: &Path, args: &[&str]) -> Result<()> {
    let status = Command::new("git").current_dir(dir).args(args).status()?;
    if !status.success() {
        bail!("git {args:?} failed");
    }
    Ok(())
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn percentile(values: &mut [f64], p: usize) -> f64 {
    values.sort_by(f64::total_cmp);
    let i = (values.len() * p / 100).min(values.len() - 1);
    (values[i] * 10.0).round() / 10.0
}
