//! Starting one child: argv exactly as given, its own process group, stdin `/dev/null`, stdout
//! and stderr piped, and the write end of a progress pipe on file descriptor 3
//! (`HERMES_PROGRESS_FD=3`, so `echo '{…}' >&$HERMES_PROGRESS_FD` works in any shell), and
//! its sandbox entered last, just before `exec` (`crate::sandbox`).

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use hermes_ledger::ProcessId;
use nix::fcntl::OFlag;
use nix::unistd::pipe2;
use tokio::net::unix::pipe;
use tokio::process::{Child, ChildStderr, ChildStdout, Command};

/// The descriptor number children find their progress pipe on.
pub const PROGRESS_FD: RawFd = 3;

/// The environment variable naming the progress descriptor.
pub const PROGRESS_FD_VAR: &str = "HERMES_PROGRESS_FD";

/// What to start.
#[derive(Clone, Debug)]
pub struct SpawnRequest {
    /// The argv; the first element is the program, looked up in `PATH` as usual.
    pub argv: Vec<String>,
    /// The working directory (`None` = inherited).
    pub cwd: Option<PathBuf>,
    /// Variables added to the inherited environment.
    pub env: Vec<(String, String)>,
    /// Inherited variables the child must not see.
    pub env_remove: Vec<String>,
    /// The file-mode creation mask the child starts with (`None`: this process's own).
    pub umask: Option<u32>,
    /// What the kernel lets it do (`None`: whatever this process may).
    pub sandbox: Option<crate::sandbox::Policy>,
}

/// A started child and the read ends of its pipes.
#[derive(Debug)]
pub struct Spawned {
    /// The child (the leader of its own process group).
    pub child: Child,
    /// Its identity: pid and start time.
    pub process: ProcessId,
    /// Its stdout.
    pub stdout: ChildStdout,
    /// Its stderr.
    pub stderr: ChildStderr,
    /// The progress pipe.
    pub progress: pipe::Receiver,
}

/// Keeps descriptor 3 of this process open (on `/dev/null`, close-on-exec) so that no pipe the
/// standard library makes while spawning can land on it: the child side's `dup2` onto 3 then
/// never clobbers a descriptor that spawning itself needs (such as the pipe that reports an exec
/// failure). Checked at every spawn, since whoever held 3 may have closed it since.
fn reserve_progress_fd() {
    // SAFETY: F_GETFD on any number is harmless; it only reports whether it is open.
    if unsafe { libc::fcntl(PROGRESS_FD, libc::F_GETFD) } != -1 {
        return;
    }
    let Ok(null) = std::fs::File::open("/dev/null") else {
        return;
    };
    // F_DUPFD_CLOEXEC takes the lowest free number from 3 up, so it never replaces a descriptor
    // another thread opened meanwhile; a copy that did not land on 3 is not needed.
    // SAFETY: duplicating a descriptor we own; the result is ours to keep or close.
    let fd = unsafe { libc::fcntl(null.as_raw_fd(), libc::F_DUPFD_CLOEXEC, PROGRESS_FD) };
    if fd > PROGRESS_FD {
        // SAFETY: `fd` was just created here and is not used elsewhere.
        unsafe { libc::close(fd) };
    }
}

/// The file [`spawn`] would run for `program`, or `None` when it would fail to find one: a
/// program naming a path (it holds a `/`) is that file, relative to `cwd`, the child's working
/// directory (`None`: this process's); any other is the first executable file of that name in
/// `path`, the child's `PATH`, whose relative entries are relative to `cwd` too (the child
/// changes directory before it looks).
pub fn resolve_program(program: &str, path: Option<&OsStr>, cwd: Option<&Path>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        let p = match cwd {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p.to_path_buf(),
        };
        std::fs::metadata(&p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.is_empty() {
        return None;
    }
    if program.contains('/') {
        let p = PathBuf::from(program);
        return runnable(&p).then_some(p);
    }
    std::env::split_paths(path?)
        .map(|dir| dir.join(program))
        .find(|p| runnable(p))
}

/// Starts a child. Fails with the operating system's reason when it cannot start.
pub fn spawn(request: &SpawnRequest) -> Result<Spawned, String> {
    let (program, args) = request
        .argv
        .split_first()
        .ok_or_else(|| "empty command".to_owned())?;
    reserve_progress_fd();
    let (read_end, write_end): (OwnedFd, OwnedFd) =
        pipe2(OFlag::O_CLOEXEC).map_err(|e| format!("cannot create the progress pipe: {e}"))?;
    let write_fd = write_end.as_raw_fd();

    let mut confinement = match &request.sandbox {
        Some(policy) => {
            let cwd = match &request.cwd {
                Some(cwd) => cwd.clone(),
                None => {
                    std::env::current_dir().map_err(|e| format!("no working directory: {e}"))?
                }
            };
            crate::sandbox::prepare(policy, &cwd).map_err(|e| e.to_string())?
        }
        None => None,
    };
    let confined = confinement.is_some();
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .env(PROGRESS_FD_VAR, PROGRESS_FD.to_string());
    if let Some(cwd) = &request.cwd {
        command.current_dir(cwd);
    }
    for key in &request.env_remove {
        command.env_remove(key);
    }
    for (key, value) in &request.env {
        command.env(key, value);
    }
    let umask = request.umask.map(|mask| mask as libc::mode_t);
    // SAFETY: runs in the forked child before exec; `dup2`, `fcntl` and `umask` are
    // async-signal-safe and touch only the child's own descriptors and mask, and entering the
    // confinement is system calls only (`Confinement::enter`).
    unsafe {
        command.pre_exec(move || {
            if let Some(mask) = umask {
                libc::umask(mask);
            }
            if write_fd == PROGRESS_FD {
                if libc::fcntl(write_fd, libc::F_SETFD, 0) == -1 {
                    return Err(io::Error::last_os_error());
                }
            } else if libc::dup2(write_fd, PROGRESS_FD) == -1 {
                return Err(io::Error::last_os_error());
            }
            match confinement.as_mut() {
                Some(confinement) => confinement.enter(),
                None => Ok(()),
            }
        });
    }
    let in_sandbox = if confined { " in its sandbox" } else { "" };
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start {program:?}{in_sandbox}: {e}"))?;
    // The parent's copy of the write end goes, so the pipe ends when the child's family ends.
    drop(write_end);
    let pid = child
        .id()
        .ok_or_else(|| format!("{program:?} exited before it could be watched"))?;
    let start_time = crate::procs::process_start_time(pid).unwrap_or(0);
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err("the child's output pipes were not set up".to_owned());
    };
    let progress = pipe::Receiver::from_owned_fd(read_end)
        .map_err(|e| format!("cannot watch the progress pipe: {e}"))?;
    Ok(Spawned {
        child,
        process: ProcessId { pid, start_time },
        stdout,
        stderr,
        progress,
    })
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    fn request(argv: &[&str]) -> SpawnRequest {
        SpawnRequest {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            cwd: None,
            env: vec![],
            env_remove: vec![],
            umask: None,
            sandbox: None,
        }
    }

    #[test]
    fn programs_are_resolved_as_the_child_will_find_them() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).expect("bin");
        let tool = bin.join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").expect("tool");
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::write(bin.join("data"), "").expect("data");
        let path = std::env::join_paths([Path::new("/nonexistent"), &bin]).expect("path");
        let cwd = Some(dir.path());
        assert_eq!(
            resolve_program("tool", Some(&path), None),
            Some(tool.clone())
        );
        assert_eq!(resolve_program("missing", Some(&path), None), None);
        // Not executable, no PATH, empty.
        assert_eq!(resolve_program("data", Some(&path), None), None);
        assert_eq!(resolve_program("tool", None, None), None);
        assert_eq!(resolve_program("", Some(&path), None), None);
        // A path is the child's: relative to its working directory, as is a relative PATH entry.
        assert!(resolve_program("bin/tool", None, cwd).is_some());
        assert!(resolve_program("./bin/tool", None, Some(&bin)).is_none());
        assert!(resolve_program("tool", Some(OsStr::new("bin")), cwd).is_some());
        assert!(resolve_program(tool.to_str().expect("utf-8"), None, Some(&bin)).is_some());
    }

    #[tokio::test]
    async fn the_child_gets_its_own_group_null_stdin_and_the_progress_fd() {
        let mut req = request(&[
            "sh",
            "-c",
            r#"echo "pgid=$(cut -d' ' -f5 /proc/$$/stat) pid=$$ fd=$HERMES_PROGRESS_FD x=$X"; cat; echo '{"note":"hi"}' >&$HERMES_PROGRESS_FD"#,
        ]);
        req.env.push(("X".into(), "y".into()));
        let mut s = spawn(&req).expect("spawns");
        assert!(s.process.start_time > 0);
        let mut out = String::new();
        s.stdout.read_to_string(&mut out).await.expect("stdout");
        let mut prg = String::new();
        s.progress.read_to_string(&mut prg).await.expect("progress");
        let status = s.child.wait().await.expect("waits");
        assert!(status.success());
        let pid = s.process.pid;
        assert_eq!(out.trim(), format!("pgid={pid} pid={pid} fd=3 x=y"));
        assert_eq!(prg, "{\"note\":\"hi\"}\n");
    }

    #[tokio::test]
    async fn a_missing_command_gives_the_os_reason() {
        let err = spawn(&request(&["/definitely/not/here"])).expect_err("fails");
        assert!(err.contains("No such file or directory"), "{err}");
        assert!(spawn(&request(&[])).is_err());
    }
}
