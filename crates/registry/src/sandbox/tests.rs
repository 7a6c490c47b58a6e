//! The kernel's enforcement, tried for real: a shell confined as a child would be tries to
//! write where it may and where it may not, and to reach a listener of this process.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use super::*;

/// A workspace holding a git directory, a sibling directory outside it and a temporary
/// directory of its own.
struct Scene {
    _root: tempfile::TempDir,
    work: PathBuf,
    outside: PathBuf,
    tmp: PathBuf,
}

fn scene() -> Scene {
    let root = tempfile::tempdir().expect("tempdir");
    let work = root.path().join("work");
    let outside = root.path().join("outside");
    let tmp = root.path().join("tmp");
    for dir in [&work.join(".git"), &outside, &tmp] {
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    std::fs::write(work.join(".git/config"), "[core]\n").expect("config");
    Scene {
        _root: root,
        work,
        outside,
        tmp,
    }
}

fn policy(mode: SandboxMode, network: bool, s: &Scene) -> Policy {
    Policy {
        mode,
        network,
        writable: vec![s.tmp.clone()],
        read_only: Vec::new(),
    }
}

/// Runs `script` in `sh` under `policy` in `cwd`: its exit status and output.
fn run(policy: &Policy, cwd: &Path, script: &str) -> (bool, String) {
    let mut confinement = prepare(policy, cwd).expect("prepares");
    let mut command = Command::new("sh");
    command.args(["-c", script]).current_dir(cwd);
    // SAFETY: entering a confinement is system calls only.
    unsafe {
        command.pre_exec(move || match confinement.as_mut() {
            Some(c) => c.enter(),
            None => Ok(()),
        });
    }
    let out = command.output().expect("runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// A script that tries each write and prints `name=ok` or `name=no`.
fn tries(writes: &[(&str, String)]) -> String {
    writes
        .iter()
        .map(|(name, cmd)| {
            format!("if {cmd} 2>/dev/null; then echo {name}=ok; else echo {name}=no; fi\n")
        })
        .collect()
}

fn has(out: &str, line: &str) -> bool {
    out.lines().any(|l| l == line)
}

#[test]
fn workspace_write_writes_its_workspace_and_temp_dir_and_nothing_else() {
    let s = scene();
    let outside = s.outside.display();
    let script = tries(&[
        ("work", "echo x > made.txt".into()),
        ("tmp", format!("echo x > {}/t", s.tmp.display())),
        ("outside", format!("echo x > {outside}/f")),
        ("git", "echo x >> .git/config".into()),
        ("gitnew", "echo x > .git/new".into()),
        ("dotdot", "echo x > ../outside/g".into()),
        ("link", format!("ln -s {outside} esc && echo x > esc/h")),
        ("proc", format!("echo x > /proc/self/root{outside}/i")),
        ("setsid", format!("setsid sh -c 'echo x > {outside}/j'")),
        ("reexec", format!("sh -c 'sh -c \"echo x > {outside}/k\"'")),
        (
            "truncate",
            format!("truncate -s 0 {}/.git/config", s.work.display()),
        ),
        ("devnull", "echo x > /dev/null".into()),
    ]);
    let (_, out) = run(
        &policy(SandboxMode::WorkspaceWrite, true, &s),
        &s.work,
        &script,
    );
    for allowed in ["work", "tmp", "devnull"] {
        assert!(has(&out, &format!("{allowed}=ok")), "{allowed}: {out}");
    }
    for refused in [
        "outside", "git", "gitnew", "dotdot", "link", "proc", "setsid", "reexec", "truncate",
    ] {
        assert!(has(&out, &format!("{refused}=no")), "{refused}: {out}");
    }
    assert!(s.work.join("made.txt").exists());
    assert_eq!(
        std::fs::read_dir(&s.outside).expect("outside").count(),
        0,
        "nothing was written outside"
    );
    assert_eq!(
        std::fs::read_to_string(s.work.join(".git/config")).expect("config"),
        "[core]\n"
    );
}

#[test]
fn read_only_writes_only_its_temp_dir_and_full_writes_anywhere() {
    let s = scene();
    let script = tries(&[
        ("work", "echo x > made.txt".into()),
        ("tmp", format!("echo x > {}/t", s.tmp.display())),
        ("outside", format!("echo x > {}/f", s.outside.display())),
    ]);
    let (_, out) = run(&policy(SandboxMode::ReadOnly, true, &s), &s.work, &script);
    assert!(has(&out, "work=no") && has(&out, "outside=no"), "{out}");
    assert!(has(&out, "tmp=ok"), "{out}");
    let (_, out) = run(&policy(SandboxMode::Full, true, &s), &s.work, &script);
    for name in ["work", "tmp", "outside"] {
        assert!(has(&out, &format!("{name}=ok")), "{name}: {out}");
    }
}

#[test]
fn a_worktree_gitdir_beneath_a_writable_root_stays_read_only() {
    let s = scene();
    // A worktree whose `.git` file names a git directory inside the writable temp dir.
    let gitdir = s.tmp.join("gitdir");
    std::fs::create_dir(&gitdir).expect("gitdir");
    let tree = s.outside.join("tree");
    std::fs::create_dir(&tree).expect("tree");
    std::fs::write(tree.join(".git"), format!("gitdir: {}\n", gitdir.display())).expect(".git");
    let script = tries(&[
        ("tree", "echo x > f".into()),
        ("gitdir", format!("echo x > {}/HEAD", gitdir.display())),
        ("tmp", format!("echo x > {}/t", s.tmp.display())),
    ]);
    let (_, out) = run(
        &policy(SandboxMode::WorkspaceWrite, true, &s),
        &tree,
        &script,
    );
    assert!(has(&out, "tree=ok") && has(&out, "tmp=ok"), "{out}");
    assert!(has(&out, "gitdir=no"), "{out}");
}

#[test]
fn read_only_holes_keep_a_ledger_home_inside_a_workspace_read_only() {
    let s = scene();
    let home = s.work.join("home");
    std::fs::create_dir(&home).expect("home");
    let p = Policy {
        read_only: vec![home.clone()],
        ..policy(SandboxMode::WorkspaceWrite, true, &s)
    };
    let script = tries(&[
        ("home", "echo x > home/ledger.redb".into()),
        ("work", "echo x > w".into()),
    ]);
    let (_, out) = run(&p, &s.work, &script);
    assert!(has(&out, "home=no") && has(&out, "work=ok"), "{out}");
}

#[test]
fn without_network_not_even_this_hosts_loopback_listener_is_reachable() {
    let s = scene();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let port = listener.local_addr().expect("addr").port();
    // bash's /dev/tcp connects without any other tool.
    let script = format!(
        "if bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>/dev/null; then echo net=ok; else echo net=no; fi"
    );
    let (_, out) = run(&policy(SandboxMode::Full, true, &s), &s.work, &script);
    assert!(
        has(&out, "net=ok"),
        "the listener is reachable unconfined: {out}"
    );
    for mode in SandboxMode::ALL {
        let (_, out) = run(&policy(mode, false, &s), &s.work, &script);
        assert!(has(&out, "net=no"), "{mode}: {out}");
    }
}

#[test]
fn the_child_cannot_undo_its_mounts_or_its_privileges() {
    let s = scene();
    let script = tries(&[
        ("umount", "umount .git".into()),
        ("git", "echo x >> .git/config".into()),
    ]) + "grep NoNewPrivs /proc/self/status\n";
    let (_, out) = run(
        &policy(SandboxMode::WorkspaceWrite, false, &s),
        &s.work,
        &script,
    );
    assert!(has(&out, "umount=no") && has(&out, "git=no"), "{out}");
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
}

#[test]
fn full_with_the_network_on_confines_nothing() {
    let s = scene();
    assert!(
        prepare(&policy(SandboxMode::Full, true, &s), &s.work)
            .expect("prepares")
            .is_none()
    );
    assert!(!policy(SandboxMode::Full, true, &s).confines());
    assert!(policy(SandboxMode::Full, false, &s).confines());
}

#[test]
fn holes_are_found_beneath_writable_roots_only() {
    let s = scene();
    let roots = vec![s.work.canonicalize().expect("canonical")];
    let holes = read_only_holes(&roots, &[s.outside.clone(), s.work.join("missing")]);
    assert_eq!(holes, vec![roots[0].join(".git")]);
}
