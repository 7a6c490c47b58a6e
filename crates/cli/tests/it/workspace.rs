//! `--workspace worktree`: each child in its own git worktree and branch, its changes committed
//! there and reported with its result; the person's checkout never touched; refusals before
//! anything starts; recovery of a dead host's worktree. Against the real `git`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::{Hermes, Run, wait_for};

/// Runs git in `dir` as a person would, and returns its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "person")
        .env("GIT_AUTHOR_EMAIL", "person@example.com")
        .env("GIT_COMMITTER_NAME", "person")
        .env("GIT_COMMITTER_EMAIL", "person@example.com")
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository with one commit: `notes.txt` and `src/lib.txt`, and an uncommitted edit of
/// the person's own in `notes.txt` (the children must never see or touch it).
fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("repo dir");
    git(dir.path(), &["init", "--quiet", "-b", "main"]);
    std::fs::write(dir.path().join("notes.txt"), "start\n").expect("write");
    std::fs::create_dir(dir.path().join("src")).expect("mkdir");
    std::fs::write(dir.path().join("src/lib.txt"), "lib\n").expect("write");
    git(dir.path(), &["add", "."]);
    git(dir.path(), &["commit", "--quiet", "-m", "start"]);
    std::fs::write(dir.path().join("notes.txt"), "start\nmine, uncommitted\n").expect("write");
    dir
}

/// The bytes of the person's checkout that must not change: their files and their index.
fn checkout(repo: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    ["notes.txt", "src/lib.txt", ".git/index", ".git/HEAD"]
        .iter()
        .map(|p| (PathBuf::from(p), std::fs::read(repo.join(p)).expect("read")))
        .collect()
}

fn hermes_branches(repo: &Path) -> Vec<String> {
    git(
        repo,
        &["branch", "--list", "hermes/*", "--format=%(refname:short)"],
    )
    .lines()
    .map(str::to_owned)
    .collect()
}

fn run_in(h: &Hermes, dir: &Path, args: &[&str]) -> Run {
    let mut c = h.command(args);
    c.current_dir(dir);
    Run::from(c.output().expect("hermes runs"))
}

#[test]
fn three_children_at_once_each_get_their_own_branch_and_the_checkout_is_untouched() {
    let h = Hermes::new();
    let repo = repository();
    let before = checkout(repo.path());
    let status_before = git(repo.path(), &["status", "--porcelain"]);
    let task = |n: u32| {
        format!(
            r#"{{"goal":"append {n}","command":["sh","-c","echo child-{n} >> ../notes.txt; test \"$(basename \"$PWD\")\" = src"]}}"#
        )
    };
    let tasks = h.write(
        "tasks.json",
        &format!(
            r#"{{"workspace":"worktree","tasks":[{},{},{}]}}"#,
            task(0),
            task(1),
            task(2)
        ),
    );
    let run = h.run(&[
        "delegate",
        "--session",
        "W",
        "--json",
        "--cwd",
        repo.path().join("src").to_str().expect("path"),
        "--tasks",
        tasks.to_str().expect("path"),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = run.json()["delegation_id"].as_str().expect("id").to_owned();
    let status = wait_for(Duration::from_secs(60), "the batch to end", || {
        let s = h.json(&["delegation", "status", &id, "--json"]);
        (s["status"] == "completed").then_some(s)
    });
    for (n, task) in status["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .enumerate()
    {
        let ws = &task["workspace"];
        let branch = format!("hermes/{id}-{n}");
        assert_eq!(ws["branch"], branch.as_str(), "{task}");
        assert_eq!(ws["commits"].as_array().map(Vec::len), Some(1), "{ws}");
        assert_eq!(
            (&ws["files_changed"], &ws["insertions"], &ws["deletions"]),
            (&Value::from(1), &Value::from(1), &Value::from(0)),
            "{ws}"
        );
        let base = ws["base"].as_str().expect("base");
        assert_eq!(base, git(repo.path(), &["rev-parse", "HEAD"]).trim());
        // Its branch holds its own line and nobody else's (nor the person's uncommitted one).
        let notes = git(repo.path(), &["show", &format!("{branch}:notes.txt")]);
        assert_eq!(notes, format!("start\nchild-{n}\n"));
        let path = ws["path"].as_str().expect("path");
        assert!(path.starts_with(h.path().to_str().expect("home")), "{path}");
        // Until its result is delivered, its worktree is there to look at.
        assert!(Path::new(path).join("notes.txt").is_file(), "{path}");
        let author = git(repo.path(), &["log", "-1", "--format=%an", &branch]);
        assert_eq!(author.trim(), "hermes");
    }
    assert_eq!(hermes_branches(repo.path()).len(), 3);
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(h.path().join("workspaces"))
            .expect("workspaces")
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o700);
    assert_eq!(checkout(repo.path()), before);
    assert_eq!(git(repo.path(), &["status", "--porcelain"]), status_before);
    let drained = h.run(&["drain", "--session", "W"]);
    assert_eq!(
        drained.stdout.matches("--- CHANGES ---").count(),
        3,
        "{}",
        drained.stdout
    );
    assert!(
        drained.stdout.contains(&format!("Branch: hermes/{id}-2")),
        "{}",
        drained.stdout
    );
    // Delivered: a sweep removes the worktrees; the branches stay.
    let paths: Vec<String> = status["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| t["workspace"]["path"].as_str().expect("path").to_owned())
        .collect();
    wait_for(Duration::from_secs(30), "the worktrees to go", || {
        h.run(&["delegation", "list"]);
        paths.iter().all(|p| !Path::new(p).exists()).then_some(())
    });
    assert_eq!(hermes_branches(repo.path()).len(), 3);
    // What git still lists besides the checkout are hermes' spares, detached and in its home,
    // kept for the next child; `workspace clean` removes them.
    let listed = git(repo.path(), &["worktree", "list", "--porcelain"]);
    let spares: Vec<&str> = listed
        .split("\n\n")
        .skip(1)
        .filter(|entry| !entry.trim().is_empty())
        .collect();
    assert_eq!(spares.len(), 2, "{listed}");
    let spare_root = h.path().join("workspaces/spare");
    for entry in &spares {
        assert!(entry.contains("\ndetached"), "{entry}");
        let path = entry
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("worktree "))
            .expect("a path");
        assert!(Path::new(path).starts_with(&spare_root), "{entry}");
    }
    let cleaned = h.json(&["workspace", "clean", "--merged", "--json"]);
    assert_eq!(cleaned["spares_removed"], 2, "{cleaned}");
    assert_eq!(git(repo.path(), &["worktree", "list"]).lines().count(), 1);
}

#[test]
fn a_child_that_commits_and_one_that_does_not_both_come_back_as_commits() {
    let h = Hermes::new();
    let repo = repository();
    let tasks = h.write(
        "tasks.json",
        r#"{"tasks":[
            {"goal":"commit","command":["sh","-c","echo a > a.txt && git add a.txt && git -c user.name=child -c user.email=c@example.com commit -qm 'child: add a'"]},
            {"goal":"leave","command":["sh","-c","echo b > b.txt; echo more >> notes.txt"]}
        ]}"#,
    );
    let run = run_in(
        &h,
        repo.path(),
        &[
            "-z",
            "--json",
            "--workspace",
            "worktree",
            "--tasks",
            tasks.to_str().expect("path"),
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let json = run.json();
    let first = &json["tasks"][0]["workspace"];
    let commits = first["commits"].as_array().expect("commits");
    assert_eq!(commits.len(), 1, "{first}");
    assert!(
        commits[0].as_str().expect("line").ends_with("child: add a"),
        "{first}"
    );
    let second = &json["tasks"][1]["workspace"];
    assert_eq!(
        second["commits"].as_array().map(Vec::len),
        Some(1),
        "{second}"
    );
    assert_eq!(second["files_changed"], 2, "{second}");
    assert!(
        second["commits"][0]
            .as_str()
            .expect("line")
            .contains("hermes: commit what the child left"),
        "{second}"
    );
    assert_eq!(
        git(repo.path(), &["status", "--porcelain"]),
        " M notes.txt\n"
    );
    // A -z run's results are delivered as it ends: its worktrees are gone, its branches kept.
    for task in json["tasks"].as_array().expect("tasks") {
        let path = task["workspace"]["path"].as_str().expect("path");
        assert!(!Path::new(path).exists(), "{path}");
    }
    assert_eq!(hermes_branches(repo.path()).len(), 2);
    // `cron run` takes it too.
    let run = run_in(
        &h,
        repo.path(),
        &[
            "cron",
            "run",
            "--workspace",
            "worktree",
            "--",
            "sh",
            "-c",
            "echo c > c.txt",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("--- CHANGES ---\nBranch: hermes/"),
        "{}",
        run.stdout
    );
    assert_eq!(hermes_branches(repo.path()).len(), 3);
}

#[test]
fn a_child_that_changes_nothing_leaves_no_branch_and_says_no_changes() {
    let h = Hermes::new();
    let repo = repository();
    let run = run_in(
        &h,
        repo.path(),
        &["-z", "--workspace", "worktree", "--", "true"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("--- CHANGES ---"), "{}", run.stdout);
    assert!(run.stdout.contains("No changes"), "{}", run.stdout);
    assert!(hermes_branches(repo.path()).is_empty());
    // The default comes from the configuration too.
    let run = Run::from(
        h.command(&["-z", "--json", "--", "true"])
            .current_dir(repo.path())
            .env("HERMES_DELEGATION_WORKSPACE", "worktree")
            .output()
            .expect("runs"),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.json()["tasks"][0]["workspace"]["commits"],
        Value::Array(Vec::new())
    );
}

#[test]
fn bad_repositories_are_refused_before_anything_starts() {
    let h = Hermes::new();
    let plain = tempfile::tempdir().expect("dir");
    let run = run_in(
        &h,
        plain.path(),
        &["-z", "--workspace", "worktree", "--", "true"],
    );
    run.assert_one_error_line(2);
    assert!(
        run.stderr.contains("not inside a git repository"),
        "{}",
        run.stderr
    );

    let repo = repository();
    let head = git(repo.path(), &["rev-parse", "HEAD"]);
    std::fs::write(repo.path().join(".git/MERGE_HEAD"), &head).expect("write");
    let run = run_in(
        &h,
        repo.path(),
        &[
            "delegate",
            "--session",
            "E",
            "--workspace",
            "worktree",
            "--",
            "true",
        ],
    );
    run.assert_one_error_line(2);
    assert!(run.stderr.contains("middle of a merge"), "{}", run.stderr);
    std::fs::remove_file(repo.path().join(".git/MERGE_HEAD")).expect("rm");

    git(repo.path(), &["branch", "hermes/deleg_0123456789ab-0"]);
    let run = run_in(
        &h,
        repo.path(),
        &[
            "delegate",
            "--session",
            "E",
            "--id",
            "deleg_0123456789ab",
            "--workspace",
            "worktree",
            "--",
            "true",
        ],
    );
    run.assert_one_error_line(2);
    assert!(run.stderr.contains("already exists"), "{}", run.stderr);

    let run = Run::from(
        h.command(&["-z", "--workspace", "worktree", "--", "/bin/true"])
            .current_dir(repo.path())
            .env("PATH", plain.path())
            .output()
            .expect("runs"),
    );
    run.assert_one_error_line(2);
    assert!(
        run.stderr.contains("git is not installed"),
        "{}",
        run.stderr
    );
    // Nothing was started for any of them.
    let listing = h.json(&["delegation", "list", "--json"]);
    for kind in ["running", "queued", "recent"] {
        assert_eq!(listing[kind], Value::Array(Vec::new()), "{listing}");
    }
    assert_eq!(
        hermes_branches(repo.path()),
        vec!["hermes/deleg_0123456789ab-0"]
    );
}

#[test]
fn a_dead_hosts_child_still_gets_its_changes_committed_and_reported() {
    let h = Hermes::new();
    let repo = repository();
    let run = run_in(
        &h,
        repo.path(),
        &[
            "delegate",
            "--session",
            "K",
            "--json",
            "--workspace",
            "worktree",
            "--",
            "sh",
            "-c",
            "echo left > left.txt; exec sleep 60",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = run.json()["delegation_id"].as_str().expect("id").to_owned();
    let left = h
        .path()
        .join("workspaces")
        .join(format!("{id}-0"))
        .join("left.txt");
    wait_for(Duration::from_secs(30), "the child to write", || {
        left.exists().then_some(())
    });
    let host = h.host_pids();
    assert_eq!(host.len(), 1);
    let killed = Command::new("kill")
        .args(["-9", &host[0].to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = wait_for(Duration::from_secs(30), "recovery", || {
        let s = h.json(&["delegation", "status", &id, "--json"]);
        (s["status"] == "unknown").then_some(s)
    });
    let ws = &status["tasks"][0]["workspace"];
    assert_eq!(ws["commits"].as_array().map(Vec::len), Some(1), "{status}");
    let branch = format!("hermes/{id}-0");
    assert_eq!(
        git(repo.path(), &["show", &format!("{branch}:left.txt")]),
        "left\n"
    );
    let drained = h.run(&["drain", "--session", "K"]);
    assert!(
        drained.stdout.contains(&format!("Branch: {branch}")),
        "{}",
        drained.stdout
    );
    wait_for(
        Duration::from_secs(30),
        "the worktree to go once delivered",
        || {
            h.run(&["delegation", "list"]);
            (!left.exists()).then_some(())
        },
    );
}

#[test]
fn workspace_clean_merged_removes_only_merged_hermes_branches() {
    let h = Hermes::new();
    let repo = repository();
    // The person's own branches, one of them named like hermes' and merged: never touched.
    git(repo.path(), &["branch", "mine"]);
    git(repo.path(), &["branch", "hermes/not-recorded"]);
    for (n, file) in ["merged.txt", "open.txt"].iter().enumerate() {
        let run = run_in(
            &h,
            repo.path(),
            &[
                "-z",
                "--json",
                "--workspace",
                "worktree",
                "--goal",
                &format!("g{n}"),
                "--",
                "sh",
                "-c",
                &format!("echo x > {file}"),
            ],
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    let listed = h.json(&["workspace", "list", "--json"]);
    let branches: Vec<&str> = listed["branches"]
        .as_array()
        .expect("branches")
        .iter()
        .filter_map(|b| b["branch"].as_str())
        .collect();
    assert_eq!(branches.len(), 2, "{listed}");
    // Merge the first child's branch into the person's HEAD (a fast-forward of a clean tree).
    git(repo.path(), &["stash", "--quiet"]);
    let merged = listed["branches"]
        .as_array()
        .expect("branches")
        .iter()
        .find(|b| {
            let name = b["branch"].as_str().unwrap_or_default();
            git(repo.path(), &["show", "--name-only", "--format=", name]).contains("merged.txt")
        })
        .and_then(|b| b["branch"].as_str())
        .expect("the merged.txt branch")
        .to_owned();
    git(repo.path(), &["merge", "--quiet", "--ff-only", &merged]);
    git(repo.path(), &["stash", "pop", "--quiet"]);
    let listed = h.json(&["workspace", "list", "--json"]);
    let merged_flags: Vec<bool> = listed["branches"]
        .as_array()
        .expect("branches")
        .iter()
        .map(|b| b["merged"].as_bool().expect("merged"))
        .collect();
    assert_eq!(merged_flags.iter().filter(|m| **m).count(), 1, "{listed}");
    let cleaned = h.json(&["workspace", "clean", "--merged", "--json"]);
    assert_eq!(cleaned["removed"], serde_json::json!([merged]), "{cleaned}");
    let mut left = hermes_branches(repo.path());
    left.sort();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.contains(&"hermes/not-recorded".to_owned()));
    assert!(!left.contains(&merged));
    assert!(git(repo.path(), &["branch", "--list", "mine"]).contains("mine"));
    // Without filters, every recorded branch goes, and still only those.
    let cleaned = h.json(&["workspace", "clean", "--json"]);
    assert_eq!(
        cleaned["removed"].as_array().map(Vec::len),
        Some(1),
        "{cleaned}"
    );
    assert_eq!(hermes_branches(repo.path()), vec!["hermes/not-recorded"]);
    let run = h.run(&["workspace", "clean", "--older-than", "soon"]);
    run.assert_one_error_line(2);
}

#[test]
fn a_worktree_that_cannot_be_made_at_run_time_fails_its_child_visibly() {
    let h = Hermes::new();
    let repo = repository();
    // Where the worktrees go is taken by a file: git cannot make one there (as on a full disk).
    std::fs::write(h.path().join("workspaces"), "in the way").expect("write");
    let run = run_in(
        &h,
        repo.path(),
        &["-z", "--workspace", "worktree", "--", "true"],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stdout.contains("status: error") || run.stdout.contains("Status: error"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("cannot create its worktree"),
        "{}",
        run.stdout
    );
    assert!(hermes_branches(repo.path()).is_empty());
}

#[test]
fn a_pool_units_children_get_their_worktrees_from_the_worker() {
    let h = Hermes::new();
    let repo = repository();
    let mut worker = h
        .command(&["worker", "--pool", "wt", "--capacity", "2"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("worker starts");
    let run = run_in(
        &h,
        repo.path(),
        &[
            "delegate",
            "--session",
            "P",
            "--json",
            "--pool",
            "wt",
            "--workspace",
            "worktree",
            "--",
            "sh",
            "-c",
            "echo pooled > pooled.txt",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = run.json()["delegation_id"].as_str().expect("id").to_owned();
    let status = wait_for(Duration::from_secs(60), "the pool unit to end", || {
        let s = h.json(&["delegation", "status", &id, "--json"]);
        (s["status"] == "completed").then_some(s)
    });
    let _ = worker.kill();
    let _ = worker.wait();
    let ws = &status["tasks"][0]["workspace"];
    assert_eq!(ws["commits"].as_array().map(Vec::len), Some(1), "{status}");
    let branch = format!("hermes/{id}-0");
    assert_eq!(
        git(repo.path(), &["show", &format!("{branch}:pooled.txt")]),
        "pooled\n"
    );
    assert!(!repo.path().join("pooled.txt").exists());
}
