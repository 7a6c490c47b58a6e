//! A child's own git worktree (`--workspace worktree`): made before it starts, on a new branch
//! `hermes/<delegation>-<task>` from `HEAD`, in a directory of hermes' home (never inside the
//! person's tree); when it ends, what it left uncommitted is committed on its branch by hermes,
//! what it changed measured ([`Changes`]), and the worktree removed. A child that changed
//! nothing leaves no branch.
//!
//! Everything goes through the `git` command itself, the one people have and whose feature
//! worktrees are, with a deadline on each call. Mutations of one repository are serialized in
//! this process (git's own lock files refuse concurrent ref and worktree updates).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use hermes_ledger::{Changes, DelegationId};

mod branches;
mod release;
mod spare;
mod steps;

pub(crate) use branches::record;
pub use branches::{BranchRecord, BranchState, delete, records, records_dir, state};
pub use release::{release_settled, remove_worktree};
pub use spare::{SPARES_PER_REPOSITORY, clear as clear_spares, spare_root};
pub(crate) use steps::commit_note;
pub(crate) use steps::{WorkspacePlan, enter_worktree, leave_worktree};

/// How long one git command may take before it is killed.
pub const GIT_DEADLINE: Duration = Duration::from_secs(60);

/// The prefix of every branch hermes makes.
pub const BRANCH_PREFIX: &str = "hermes/";

/// Why a workspace could not be made or finished.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkspaceError {
    /// `git` could not be run.
    #[error("git is not installed (or not on PATH): --workspace worktree needs it")]
    GitMissing,
    /// The directory is not inside a git repository.
    #[error("{0} is not inside a git repository: --workspace worktree needs one")]
    NotARepository(String),
    /// The repository has no commit to branch from.
    #[error("the repository at {0} has no commit yet: --workspace worktree branches from HEAD")]
    NoHead(String),
    /// A merge, rebase, cherry-pick or revert is in progress.
    #[error("the repository at {repo} is in the middle of a {what}: finish or abort it first")]
    InProgress {
        /// The repository.
        repo: String,
        /// What is in progress.
        what: &'static str,
    },
    /// The branch already exists.
    #[error("branch {0} already exists: hermes will not reuse it")]
    BranchTaken(String),
    /// git failed.
    #[error("git {0}")]
    Git(String),
}

/// The repository that holds a dispatch's working directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repository {
    /// Its top-level directory.
    pub root: PathBuf,
    /// The working directory relative to `root` (empty at the top).
    pub relative: PathBuf,
}

/// A child's worktree, made and not yet finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Worktree {
    /// The repository it belongs to.
    pub repository: Repository,
    /// Its branch.
    pub branch: String,
    /// The commit it started from.
    pub base: String,
    /// Its directory.
    pub path: PathBuf,
}

impl Worktree {
    /// Where the child starts: its working directory's place in the worktree.
    pub fn cwd(&self) -> PathBuf {
        self.path.join(&self.repository.relative)
    }
}

/// The branch of child `index` of `unit`.
pub fn branch_name(unit: &DelegationId, index: u32) -> String {
    format!("{BRANCH_PREFIX}{unit}-{index}")
}

/// Where child `index` of `unit` gets its worktree, under `root` (`$HERMES_HOME/workspaces`).
pub fn worktree_dir(root: &Path, unit: &DelegationId, index: u32) -> PathBuf {
    root.join(format!("{unit}-{index}"))
}

/// Runs `git args` in `dir` with a deadline; its stdout, or why it failed.
pub fn git(dir: &Path, args: &[&str]) -> Result<String, WorkspaceError> {
    let mut command = Command::new("git");
    command
        .current_dir(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C");
    // A hermes run from a git hook must not act on the hook's repository instead.
    for var in [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_COMMON_DIR",
    ] {
        command.env_remove(var);
    }
    let output = match hermes_stdx::output_within(&mut command, GIT_DEADLINE) {
        Ok(Some(output)) => output,
        Ok(None) => {
            return Err(WorkspaceError::Git(format!(
                "{}: no answer within {}s",
                args.join(" "),
                GIT_DEADLINE.as_secs()
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(WorkspaceError::GitMissing);
        }
        Err(e) => return Err(WorkspaceError::Git(format!("{}: {e}", args.join(" ")))),
    };
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(WorkspaceError::Git(format!(
            "{} failed: {}",
            args.first().copied().unwrap_or_default(),
            hermes_stdx::one_line(stderr.trim())
        )))
    }
}

/// The repository holding `cwd`, checked fit to branch from: git runs, `cwd` is in a work
/// tree, `HEAD` is a commit and no merge, rebase, cherry-pick or revert is in progress.
pub fn locate(cwd: &Path) -> Result<Repository, WorkspaceError> {
    let shown = cwd.display().to_string();
    let top = match git(cwd, &["rev-parse", "--show-toplevel"]) {
        Ok(top) => top.trim().to_owned(),
        Err(WorkspaceError::GitMissing) => return Err(WorkspaceError::GitMissing),
        Err(_) => return Err(WorkspaceError::NotARepository(shown)),
    };
    if top.is_empty() {
        return Err(WorkspaceError::NotARepository(shown));
    }
    let root = PathBuf::from(&top);
    let real_cwd = cwd.canonicalize().unwrap_or_else(|_| cwd.to_owned());
    let real_root = root.canonicalize().unwrap_or_else(|_| root.clone());
    let relative = real_cwd
        .strip_prefix(&real_root)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    if git(
        &root,
        &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
    )
    .is_err()
    {
        return Err(WorkspaceError::NoHead(top));
    }
    // One git for every marker: `--git-path` answers each in order, one line each.
    const MARKERS: [(&str, &str); 5] = [
        ("MERGE_HEAD", "merge"),
        ("rebase-merge", "rebase"),
        ("rebase-apply", "rebase"),
        ("CHERRY_PICK_HEAD", "cherry-pick"),
        ("REVERT_HEAD", "revert"),
    ];
    let mut args = vec!["rev-parse"];
    for (marker, _) in MARKERS {
        args.extend(["--git-path", marker]);
    }
    let paths = git(&root, &args)?;
    for ((_, what), path) in MARKERS.iter().zip(paths.lines()) {
        if root.join(path.trim()).exists() {
            return Err(WorkspaceError::InProgress { repo: top, what });
        }
    }
    Ok(Repository { root, relative })
}

/// Whether `branch` exists in `repository`.
pub fn branch_exists(repository: &Path, branch: &str) -> Result<bool, WorkspaceError> {
    let reference = format!("refs/heads/{branch}");
    match git(
        repository,
        &["show-ref", "--verify", "--quiet", reference.as_str()],
    ) {
        Ok(_) => Ok(true),
        Err(WorkspaceError::Git(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Checks, before anything starts, that each of `count` children of `unit` can have its own
/// worktree of the repository holding `cwd`.
pub fn check(cwd: &Path, unit: &DelegationId, count: u32) -> Result<Repository, WorkspaceError> {
    let repository = locate(cwd)?;
    for index in 0..count {
        let branch = branch_name(unit, index);
        if branch_exists(&repository.root, &branch)? {
            return Err(WorkspaceError::BranchTaken(branch));
        }
    }
    Ok(repository)
}

/// One repository's git mutations at a time in this process.
static MUTATING: Mutex<()> = Mutex::new(());

/// Runs a mutating git command, once more if another one held git's lock.
pub(crate) fn git_mut(dir: &Path, args: &[&str]) -> Result<String, WorkspaceError> {
    let _guard = hermes_stdx::lock(&MUTATING);
    match git(dir, args) {
        Err(WorkspaceError::Git(reason)) if reason.contains(".lock") => {
            std::thread::sleep(Duration::from_millis(50));
            git(dir, args)
        }
        other => other,
    }
}

/// Makes child `index` of `unit` its worktree under `root` (`$HERMES_HOME/workspaces`), of the
/// repository holding `cwd`, on a new branch from `HEAD`.
pub fn create(
    root: &Path,
    cwd: &Path,
    unit: &DelegationId,
    index: u32,
) -> Result<Worktree, WorkspaceError> {
    let repository = locate(cwd)?;
    let branch = branch_name(unit, index);
    let path = worktree_dir(root, unit, index);
    // Private, as every directory hermes makes.
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
        .create(root)
        .map_err(|e| WorkspaceError::Git(format!("cannot create {}: {e}", root.display())))?;
    let base = git(&repository.root, &["rev-parse", "HEAD"])?
        .trim()
        .to_owned();
    let shown = path.display().to_string();
    let common = spare::common_dir(&repository.root)?;
    if !spare::take(root, &repository.root, &common, &path, &branch, &base) {
        git_mut(
            &repository.root,
            &[
                // Files checked out by as many workers as there are cores: about half the time
                // of one on a 2-core machine (`bench_workspace`).
                "-c",
                "checkout.workers=0",
                "worktree",
                "add",
                "--quiet",
                "-b",
                branch.as_str(),
                shown.as_str(),
                base.as_str(),
            ],
        )?;
    }
    let tree = Worktree {
        repository,
        branch,
        base,
        path,
    };
    remember_base(&tree)?;
    Ok(tree)
}

/// Finishes a child's worktree: commits what it left (as hermes, saying so) and measures what
/// its branch holds over its base. A worktree with nothing in it goes at once, with its branch;
/// one with changes stays until its result is delivered or dropped ([`release_settled`]), and
/// its branch is recorded for `hermes workspace`. Never fails: what went wrong is in
/// [`Changes::error`].
pub fn finish(tree: &Worktree, what: &str) -> Changes {
    let mut changes = Changes {
        branch: tree.branch.clone(),
        base: tree.base.clone(),
        head: tree.base.clone(),
        path: tree.path.display().to_string(),
        repository: tree.repository.root.display().to_string(),
        ..Changes::default()
    };
    if tree.path.exists()
        && let Err(e) = commit_left(&tree.path, what)
    {
        changes.error = Some(e.to_string());
    }
    if let Err(e) = measure(tree, &mut changes) {
        changes.error.get_or_insert(e.to_string());
    }
    if changes.is_empty()
        && changes.error.is_none()
        && let Err(e) = remove(tree, true)
    {
        changes.error.get_or_insert(e.to_string());
    }
    if !changes.is_empty()
        && let Some(root) = tree.path.parent()
        && let Err(e) = record(root, &changes)
    {
        tracing::warn!(branch = %changes.branch, error = %e, "cannot record a branch hermes made");
    }
    changes
}

/// Commits everything left uncommitted in `path` as hermes, if anything is.
fn commit_left(path: &Path, what: &str) -> Result<(), WorkspaceError> {
    git(path, &["add", "--all"])?;
    if git(path, &["diff", "--cached", "--quiet"]).is_ok() {
        return Ok(());
    }
    let message = format!(
        "hermes: commit what the child left uncommitted\n\n{what}\n\nCommitted by hermes on the child's behalf when it ended."
    );
    git(
        path,
        &[
            "-c",
            "user.name=hermes",
            "-c",
            "user.email=hermes@localhost",
            "-c",
            "commit.gpgsign=false",
            "commit",
            "--quiet",
            "--no-verify",
            "--author",
            "hermes <hermes@localhost>",
            "-m",
            message.as_str(),
        ],
    )?;
    Ok(())
}

/// Fills in the branch's head, commits and diffstat over its base.
fn measure(tree: &Worktree, changes: &mut Changes) -> Result<(), WorkspaceError> {
    let repo = &tree.repository.root;
    let reference = format!("refs/heads/{}", tree.branch);
    changes.head = git(repo, &["rev-parse", reference.as_str()])?
        .trim()
        .to_owned();
    let range = format!("{}..{}", tree.base, changes.head);
    changes.commits = git(
        repo,
        &["log", "--reverse", "--format=%h %s", range.as_str()],
    )?
    .lines()
    .map(str::to_owned)
    .collect();
    let stat = git(
        repo,
        &[
            "diff",
            "--shortstat",
            tree.base.as_str(),
            changes.head.as_str(),
        ],
    )?;
    let (files, insertions, deletions) = parse_shortstat(&stat);
    changes.files_changed = files;
    changes.insertions = insertions;
    changes.deletions = deletions;
    Ok(())
}

/// Removes the worktree, kept as a spare where it can be (and its branch, when
/// `drop_branch`).
fn remove(tree: &Worktree, drop_branch: bool) -> Result<(), WorkspaceError> {
    let repo = &tree.repository.root;
    if tree.path.exists()
        && let Some(root) = tree.path.parent()
    {
        let common = spare::common_dir(&tree.path)?;
        spare::park(root, repo, &common, &tree.path)?;
    } else {
        git_mut(repo, &["worktree", "prune"])?;
    }
    if drop_branch {
        git_mut(repo, &["branch", "-D", "--quiet", tree.branch.as_str()])?;
    }
    Ok(())
}

/// The numbers of `git diff --shortstat` ("3 files changed, 10 insertions(+), 2 deletions(-)").
pub fn parse_shortstat(text: &str) -> (u64, u64, u64) {
    let (mut files, mut insertions, mut deletions) = (0, 0, 0);
    for part in text.trim().split(',') {
        let mut words = part.split_whitespace();
        let Some(n) = words.next().and_then(|n| n.parse::<u64>().ok()) else {
            continue;
        };
        match words.next().unwrap_or_default() {
            w if w.starts_with("file") => files = n,
            w if w.starts_with("insertion") => insertions = n,
            w if w.starts_with("deletion") => deletions = n,
            _ => {}
        }
    }
    (files, insertions, deletions)
}

/// The worktree git knows for `branch` in the repository holding `cwd`, if it still has one
/// (recovery: the dead host's child's worktree is on disk).
pub fn find(cwd: &Path, unit: &DelegationId, index: u32) -> Option<Worktree> {
    let top = git(cwd, &["rev-parse", "--show-toplevel"]).ok()?;
    let root = PathBuf::from(top.trim());
    let repository = Repository {
        relative: PathBuf::new(),
        root,
    };
    let branch = branch_name(unit, index);
    let listing = git(&repository.root, &["worktree", "list", "--porcelain"]).ok()?;
    let wanted = format!("branch refs/heads/{branch}");
    let path = listing.split("\n\n").find_map(|entry| {
        let mut lines = entry.lines();
        let path = lines.next()?.strip_prefix("worktree ")?;
        lines.any(|l| l == wanted).then(|| PathBuf::from(path))
    })?;
    let base = std::fs::read_to_string(base_file(&path))
        .ok()
        .map(|b| b.trim().to_owned())
        .filter(|b| !b.is_empty())?;
    Some(Worktree {
        repository,
        branch,
        base,
        path,
    })
}

/// Where a worktree's base commit is kept for recovery: in its git directory's private area,
/// which git never shows as a change.
fn base_file(path: &Path) -> PathBuf {
    git(path, &["rev-parse", "--git-dir"])
        .map(|d| path.join(d.trim()).join("hermes-base"))
        .unwrap_or_else(|_| path.join(".git-hermes-base"))
}

/// Records `tree`'s base commit beside it, for [`find`].
pub fn remember_base(tree: &Worktree) -> Result<(), WorkspaceError> {
    std::fs::write(base_file(&tree.path), &tree.base)
        .map_err(|e| WorkspaceError::Git(format!("cannot record the base commit: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .current_dir(dir)
            .args(args)
            .env("GIT_AUTHOR_NAME", "p")
            .env("GIT_AUTHOR_EMAIL", "p@example.com")
            .env("GIT_COMMITTER_NAME", "p")
            .env("GIT_COMMITTER_EMAIL", "p@example.com")
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn repository() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        run(dir.path(), &["init", "--quiet", "-b", "main"]);
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        std::fs::write(dir.path().join("sub/notes.txt"), "one\n").expect("write");
        run(dir.path(), &["add", "."]);
        run(dir.path(), &["commit", "--quiet", "-m", "start"]);
        dir
    }

    fn id() -> DelegationId {
        DelegationId::new("deleg_0123456789ab").expect("id")
    }

    #[test]
    fn shortstat_is_parsed() {
        assert_eq!(
            parse_shortstat(" 3 files changed, 10 insertions(+), 2 deletions(-)\n"),
            (3, 10, 2)
        );
        assert_eq!(parse_shortstat(" 1 file changed, 1 deletion(-)"), (1, 0, 1));
        assert_eq!(parse_shortstat(""), (0, 0, 0));
    }

    #[test]
    fn what_a_child_leaves_is_committed_on_its_branch_and_the_worktree_goes() {
        let repo = repository();
        let home = tempfile::tempdir().expect("home");
        let root = home.path().join("workspaces");
        let tree = create(&root, &repo.path().join("sub"), &id(), 0).expect("created");
        assert_eq!(tree.branch, "hermes/deleg_0123456789ab-0");
        assert_eq!(tree.cwd(), root.join("deleg_0123456789ab-0/sub"));
        std::fs::write(tree.cwd().join("notes.txt"), "one\ntwo\n").expect("write");
        std::fs::write(tree.cwd().join("new.txt"), "x\n").expect("write");
        let changes = finish(&tree, "Goal: g");
        assert_eq!(changes.error, None);
        assert_eq!(changes.commits.len(), 1);
        assert!(changes.commits[0].ends_with("hermes: commit what the child left uncommitted"));
        assert_eq!(
            (changes.files_changed, changes.insertions, changes.deletions),
            (2, 2, 0)
        );
        // The worktree stays until the result is settled; the branch stays after it.
        assert!(tree.path.exists());
        remove_worktree(&tree.path).expect("removed");
        assert!(!tree.path.exists());
        assert!(branch_exists(repo.path(), &tree.branch).expect("asks"));
        let author = run(repo.path(), &["log", "-1", "--format=%an", &tree.branch]);
        assert_eq!(author.trim(), "hermes");
        // The person's checkout did not change.
        assert_eq!(run(repo.path(), &["status", "--porcelain"]), "");
    }

    #[test]
    fn a_child_that_changes_nothing_leaves_no_branch() {
        let repo = repository();
        let home = tempfile::tempdir().expect("home");
        let tree = create(home.path(), repo.path(), &id(), 1).expect("created");
        let changes = finish(&tree, "Goal: g");
        assert!(changes.is_empty() && changes.error.is_none());
        assert_eq!(changes.head, changes.base);
        assert!(
            !tree.path.exists(),
            "a worktree with nothing in it goes at once"
        );
        assert!(!branch_exists(repo.path(), &tree.branch).expect("asks"));
    }

    #[test]
    fn a_finished_worktree_is_reused_clean_by_the_next_child() {
        let repo = repository();
        let home = tempfile::tempdir().expect("home");
        let root = home.path().join("workspaces");
        let first = create(&root, repo.path(), &id(), 0).expect("created");
        std::fs::write(first.path.join("sub/notes.txt"), "changed\n").expect("write");
        std::fs::write(first.path.join("ignored.o"), "build output\n").expect("write");
        std::fs::write(first.path.join(".gitignore"), "*.o\n").expect("write");
        assert_eq!(finish(&first, "Goal: g").commits.len(), 1);
        remove_worktree(&first.path).expect("parked");
        assert!(!first.path.exists());
        let spares: Vec<_> = std::fs::read_dir(spare_root(&root))
            .expect("spares")
            .collect();
        assert_eq!(spares.len(), 1);
        let worktrees = |repo: &Path| run(repo, &["worktree", "list"]).lines().count();
        assert_eq!(worktrees(repo.path()), 2, "the spare, detached");

        let other = DelegationId::new("deleg_00000000000b").expect("id");
        let second = create(&root, repo.path(), &other, 0).expect("created from the spare");
        assert_eq!(worktrees(repo.path()), 2, "no worktree was added");
        assert_eq!(
            std::fs::read_dir(spare_root(&root))
                .expect("spares")
                .count(),
            0
        );
        // Nothing of the first child is left: the base's files, nothing ignored or untracked.
        assert_eq!(
            run(&second.path, &["status", "--porcelain", "--ignored"]),
            ""
        );
        assert_eq!(
            std::fs::read_to_string(second.path.join("sub/notes.txt")).expect("read"),
            "one\n"
        );
        assert_eq!(
            run(&second.path, &["branch", "--show-current"]).trim(),
            "hermes/deleg_00000000000b-0"
        );
        // Its own work is its own: the first branch is untouched.
        std::fs::write(second.path.join("sub/notes.txt"), "second\n").expect("write");
        let changes = finish(&second, "Goal: g2");
        assert_eq!(changes.commits.len(), 1);
        assert_eq!(changes.base, first.base);
        assert!(branch_exists(repo.path(), &first.branch).expect("asks"));
        let first_text = run(
            repo.path(),
            &["show", &format!("{}:sub/notes.txt", first.branch)],
        );
        assert_eq!(first_text, "changed\n");
        // At most SPARES_PER_REPOSITORY are kept; clearing removes them from git too.
        let mut trees = vec![second];
        for n in 0..SPARES_PER_REPOSITORY {
            let id = DelegationId::new(format!("deleg_1000000000{n:02}")).expect("id");
            trees.push(create(&root, repo.path(), &id, 0).expect("created"));
        }
        for tree in &trees {
            remove_worktree(&tree.path).expect("parked or removed");
        }
        assert_eq!(
            std::fs::read_dir(spare_root(&root))
                .expect("spares")
                .count(),
            SPARES_PER_REPOSITORY
        );
        assert_eq!(clear_spares(&root), SPARES_PER_REPOSITORY);
        assert_eq!(worktrees(repo.path()), 1);
        assert_eq!(run(repo.path(), &["status", "--porcelain"]), "");
    }

    #[test]
    fn recovery_finds_a_worktree_left_behind() {
        let repo = repository();
        let home = tempfile::tempdir().expect("home");
        let tree = create(home.path(), repo.path(), &id(), 2).expect("created");
        std::fs::write(tree.path.join("left.txt"), "x\n").expect("write");
        let found = find(&repo.path().join("sub"), &id(), 2).expect("found");
        assert_eq!(
            (found.branch.as_str(), found.base.as_str()),
            (tree.branch.as_str(), tree.base.as_str())
        );
        let changes = finish(&found, "Goal: g");
        assert_eq!(changes.commits.len(), 1);
        remove_worktree(&found.path).expect("removed");
        assert!(find(repo.path(), &id(), 2).is_none());
    }

    #[test]
    fn bad_repositories_are_refused_with_a_reason() {
        let plain = tempfile::tempdir().expect("dir");
        assert!(matches!(
            locate(plain.path()),
            Err(WorkspaceError::NotARepository(_))
        ));
        let repo = repository();
        run(repo.path(), &["branch", "hermes/deleg_0123456789ab-1"]);
        assert_eq!(
            check(repo.path(), &id(), 3),
            Err(WorkspaceError::BranchTaken(
                "hermes/deleg_0123456789ab-1".into()
            ))
        );
        let head = run(repo.path(), &["rev-parse", "HEAD"]);
        std::fs::write(repo.path().join(".git/MERGE_HEAD"), head).expect("write");
        assert!(matches!(
            locate(repo.path()),
            Err(WorkspaceError::InProgress { what: "merge", .. })
        ));
    }
}
