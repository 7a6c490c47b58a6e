//! The namespace half of a sandbox: a user namespace that maps only the user hermes runs as,
//! and inside it a network namespace (no network) and a mount namespace in which `.git` and
//! the other read-only holes are bound read-only onto themselves.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::SandboxError;

/// Whether this system lets a process make user namespaces: `Err` says why not.
pub fn user_namespaces() -> Result<(), String> {
    let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .map_err(|e| format!("cannot read /proc/sys/user/max_user_namespaces: {e}"))?;
    if max.trim() == "0" {
        return Err("user.max_user_namespaces is 0".to_owned());
    }
    // Debian and Ubuntu kernels have their own switch.
    match std::fs::read_to_string("/proc/sys/kernel/unprivileged_userns_clone") {
        Ok(v) if v.trim() == "0" && !is_root() => {
            Err("kernel.unprivileged_userns_clone is 0".to_owned())
        }
        _ => Ok(()),
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// One directory to bind read-only onto itself, with the flags its mount already has (a
/// remount in a user namespace must keep them).
#[derive(Debug)]
struct Hole {
    path: CString,
    flags: libc::c_ulong,
}

/// The namespaces a child enters, prepared before the fork.
#[derive(Debug)]
pub(super) struct Namespaces {
    flags: libc::c_int,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    holes: Vec<Hole>,
    /// The working directory, entered again once the holes are bound (the child's `chdir`
    /// happened before, through the writable mount).
    cwd: CString,
}

impl Namespaces {
    /// The namespaces for a child working in `cwd` that is cut off from the network if
    /// `no_network`, with `read_only` bound read-only; `None` if it needs none.
    pub(super) fn prepare(
        no_network: bool,
        read_only: Vec<PathBuf>,
        cwd: &Path,
    ) -> Result<Option<Namespaces>, SandboxError> {
        if !no_network && read_only.is_empty() {
            return Ok(None);
        }
        let what = if no_network {
            "turn a child's network off"
        } else {
            "keep .git read-only in a child's workspace"
        };
        user_namespaces().map_err(|reason| SandboxError::NoUserNamespaces { what, reason })?;
        let mut flags = libc::CLONE_NEWUSER;
        if no_network {
            flags |= libc::CLONE_NEWNET;
        }
        if !read_only.is_empty() {
            flags |= libc::CLONE_NEWNS;
        }
        // SAFETY: getuid and getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Ok(Some(Namespaces {
            flags,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            holes: read_only.iter().filter_map(|p| hole(p)).collect(),
            cwd: c_path(cwd).unwrap_or_else(|| c".".to_owned()),
        }))
    }

    /// Enters the namespaces (in the forked child): system calls only.
    pub(super) fn enter(&self) -> io::Result<()> {
        // SAFETY: every call below is a plain system call on memory prepared before the fork
        // and owned by `self`; none allocates or takes a lock.
        unsafe {
            check(libc::unshare(self.flags))?;
            write_file(c"/proc/self/setgroups", b"deny")?;
            write_file(c"/proc/self/uid_map", &self.uid_map)?;
            write_file(c"/proc/self/gid_map", &self.gid_map)?;
            if self.flags & libc::CLONE_NEWNS == 0 {
                return Ok(());
            }
            // Nothing mounted here may reach the host's mount namespace.
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            for hole in &self.holes {
                check(libc::mount(
                    hole.path.as_ptr(),
                    hole.path.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ))?;
                check(libc::mount(
                    std::ptr::null(),
                    hole.path.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | hole.flags,
                    std::ptr::null(),
                ))?;
            }
            check(libc::chdir(self.cwd.as_ptr()))
        }
    }
}

/// The hole for `path`: its C path and the mount flags to keep.
fn hole(path: &Path) -> Option<Hole> {
    let path = c_path(path)?;
    // SAFETY: statvfs fills the zeroed struct it is given for a valid C path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let kept = [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ];
    let flags = kept
        .iter()
        .filter(|(st_flag, _)| st.f_flag & st_flag != 0)
        .fold(0, |acc, (_, ms)| acc | ms);
    Some(Hole { path, flags })
}

fn c_path(path: &Path) -> Option<CString> {
    CString::new(path.as_os_str().as_bytes()).ok()
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Writes `bytes` to the file at `path` in one `write`.
///
/// # Safety
/// Async-signal-safe: `open`, `write` and `close` only.
unsafe fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: a valid C path; the descriptor is closed on every way out.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let error = io::Error::last_os_error();
        libc::close(fd);
        if written != bytes.len() as isize {
            return Err(error);
        }
        Ok(())
    }
}
