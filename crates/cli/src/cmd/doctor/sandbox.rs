//! The kernel's sandbox support, as `hermes doctor` reports it: Landlock (its ABI version,
//! asked of `landlock_create_ruleset` with `LANDLOCK_CREATE_RULESET_VERSION`), unprivileged
//! user namespaces (the sysctls that forbid them, then a child that tries `unshare`), and
//! seccomp filters. Each probe changes nothing in this process; a missing feature is a
//! warning, not a failure: hermes runs without a sandbox where none was asked for.

use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};

use super::{Check, Status};

/// `LANDLOCK_CREATE_RULESET_VERSION`: `landlock_create_ruleset(NULL, 0, this)` returns the ABI.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
/// `SECCOMP_SET_MODE_FILTER`.
const SECCOMP_SET_MODE_FILTER: libc::c_uint = 1;

/// The three sandbox lines.
pub fn checks() -> Vec<Check> {
    vec![landlock(), user_namespaces(), seccomp()]
}

fn landlock() -> Check {
    // SAFETY: with a null attribute pointer and size 0, the version flag only asks the ABI.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if abi > 0 {
        return Check::new(
            Status::Ok,
            "sandbox landlock",
            format!("ABI version {abi}: filesystem sandboxing is available"),
        );
    }
    let why = match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ENOSYS) => "not built into this kernel",
        Some(libc::EOPNOTSUPP) => "built in but disabled (add landlock to the lsm= boot option)",
        _ => "unavailable",
    };
    Check::new(
        Status::Warn,
        "sandbox landlock",
        format!("{why}: a read-only or workspace-write sandbox cannot be enforced here"),
    )
}

/// A sysctl as a number, if the kernel has it.
fn sysctl(path: &str) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn user_namespaces() -> Check {
    let name = "sandbox userns";
    if sysctl("/proc/sys/kernel/unprivileged_userns_clone") == Some(0) {
        return Check::new(
            Status::Warn,
            name,
            "unprivileged user namespaces are off (kernel.unprivileged_userns_clone = 0)",
        );
    }
    if sysctl("/proc/sys/user/max_user_namespaces") == Some(0) {
        return Check::new(
            Status::Warn,
            name,
            "user namespaces are off (user.max_user_namespaces = 0)",
        );
    }
    match try_unshare() {
        Ok(()) => Check::new(
            Status::Ok,
            name,
            "an unprivileged process can create user and network namespaces",
        ),
        Err(e) => Check::new(
            Status::Warn,
            name,
            format!(
                "cannot create a user and network namespace ({e}): a network sandbox needs seccomp instead"
            ),
        ),
    }
}

/// Starts a child of this binary that first enters new user and network namespaces (`hermes
/// --version`, so nothing runs in them); this process stays as it is.
fn try_unshare() -> std::io::Result<()> {
    let exe = std::env::current_exe()?;
    let mut command = Command::new(exe);
    command
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: runs in the forked child before exec; `unshare` is a plain system call.
    unsafe {
        command.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    command.status().map(drop)
}

fn seccomp() -> Check {
    // A null filter program: a kernel with seccomp filters copies it first and fails with
    // EFAULT; one without answers EINVAL. Nothing is installed either way.
    // SAFETY: the null pointer is never dereferenced in this process; the kernel checks it.
    let answer = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_SET_MODE_FILTER,
            0 as libc::c_uint,
            std::ptr::null::<libc::c_void>(),
        )
    };
    let errno = std::io::Error::last_os_error().raw_os_error();
    if answer == -1 && errno == Some(libc::EFAULT) {
        Check::new(
            Status::Ok,
            "sandbox seccomp",
            "seccomp filters are available",
        )
    } else {
        Check::new(
            Status::Warn,
            "sandbox seccomp",
            "seccomp filters are unavailable: a network sandbox needs user namespaces instead",
        )
    }
}
