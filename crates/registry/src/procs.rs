//! The operating system's process table, as hermes sees it: process identity (pid + start time),
//! the locality a process lives in (boot, pid namespace, host name), and the one rule for
//! signalling a process hermes no longer holds a handle to — only what is provably ours.
//!
//! A child is spawned with [`CHILD_MARKER_VAR`] in its environment. Recovery signals a dead
//! host's child only if it is the recorded child (same pid *and* start time) or a process that
//! carries that child's marker, and only from the same locality. It never signals "whatever now
//! has that process-group id": once a pid is reused, that group is somebody else's.

use std::fs;

use hermes_ledger::{Locality, ProcessId};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// The environment variable that marks a child and every descendant that keeps its environment.
pub const CHILD_MARKER_VAR: &str = "HERMES_CHILD_MARKER";

/// The marker of child `index` of `delegation`.
pub fn child_marker(delegation: &hermes_ledger::DelegationId, index: u32) -> String {
    format!("{delegation}/{index}")
}

/// One process as the kill rule sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Who it is.
    pub process: ProcessId,
    /// Its process group.
    pub pgrp: u32,
    /// Its [`CHILD_MARKER_VAR`], if it carries one.
    pub marker: Option<String>,
}

/// A process table: the real `/proc` ([`OsProcesses`]) or a fake one in tests.
pub trait ProcessTable {
    /// The live processes (zombies excluded) visible in this locality.
    fn processes(&self) -> Vec<ProcessInfo>;
    /// Sends `signal` to `process` if it is still that process (pid and start time); whether it
    /// was sent.
    fn signal(&self, process: ProcessId, signal: Signal) -> bool;
}

/// Signals what is provably a dead host's child `child` (marked `marker`): the recorded process
/// itself if it still runs, and every live process carrying the marker (its descendants, even
/// after the leader died or moved to another group; the child itself when its pid was never
/// recorded). A process that merely sits in the old process group, or reuses the recorded pid,
/// is left alone. Returns how many were signalled.
///
/// The caller checks that the child ran in its own locality: in another pid namespace or on
/// another machine the numbers mean nothing here.
pub fn signal_orphan(
    table: &dyn ProcessTable,
    child: Option<ProcessId>,
    marker: &str,
    signal: Signal,
) -> usize {
    table
        .processes()
        .into_iter()
        .filter(|p| Some(p.process) == child || p.marker.as_deref() == Some(marker))
        .filter(|p| table.signal(p.process, signal))
        .count()
}

/// The real process table of this machine's (and this pid namespace's) `/proc`.
#[derive(Clone, Copy, Debug, Default)]
pub struct OsProcesses;

impl ProcessTable for OsProcesses {
    fn processes(&self) -> Vec<ProcessInfo> {
        live_processes()
            .map(|(process, pgrp)| ProcessInfo {
                process,
                pgrp,
                marker: marker_of(process.pid),
            })
            .collect()
    }

    fn signal(&self, process: ProcessId, signal: Signal) -> bool {
        signal_verified(process, signal)
    }
}

/// Every live process (zombies excluded) of this `/proc`, with its process group.
fn live_processes() -> impl Iterator<Item = (ProcessId, u32)> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let s = stat(pid)?;
            (s.state != 'Z').then_some((
                ProcessId {
                    pid,
                    start_time: s.start_time,
                },
                s.pgrp,
            ))
        })
}

/// One parsed `/proc/<pid>/stat`.
struct Stat {
    state: char,
    pgrp: u32,
    start_time: u64,
}

fn stat(pid: u32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may itself contain spaces and parentheses.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `fields[0]` is field 3 (state); field N is `fields[N - 3]`.
    Some(Stat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// The environment `process` was started with (`/proc/PID/environ`: what it was executed with,
/// whatever it exported since), if it is still that process and the kernel lets this one read
/// it (a process of the same user). Values are secrets as often as not: callers pass them on,
/// never print or store them.
pub fn environment(process: ProcessId) -> Option<Vec<(std::ffi::OsString, std::ffi::OsString)>> {
    use std::os::unix::ffi::OsStrExt as _;
    if process_start_time(process.pid)? != process.start_time {
        return None;
    }
    let raw = fs::read(format!("/proc/{}/environ", process.pid)).ok()?;
    // Read after the check: a pid reused meanwhile shows another start time now.
    if process_start_time(process.pid)? != process.start_time {
        return None;
    }
    Some(
        raw.split(|b| *b == 0)
            .filter_map(|entry| {
                let at = entry.iter().position(|b| *b == b'=')?;
                let (name, value) = (&entry[..at], &entry[at + 1..]);
                (!name.is_empty()).then(|| {
                    (
                        std::ffi::OsStr::from_bytes(name).to_owned(),
                        std::ffi::OsStr::from_bytes(value).to_owned(),
                    )
                })
            })
            .collect(),
    )
}

/// The value of [`CHILD_MARKER_VAR`] in `pid`'s environment, if readable and set.
fn marker_of(pid: u32) -> Option<String> {
    let environ = fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{CHILD_MARKER_VAR}=");
    environ
        .split(|b| *b == 0)
        .find_map(|entry| entry.strip_prefix(prefix.as_bytes()))
        .map(|value| String::from_utf8_lossy(value).into_owned())
}

/// Signals `process` only if it is still that process: through a pidfd where the kernel has
/// them (the descriptor pins the process, so the start-time check cannot race with pid reuse),
/// else by pid right after the check.
fn signal_verified(process: ProcessId, signal: Signal) -> bool {
    let Ok(pid) = i32::try_from(process.pid) else {
        return false;
    };
    if pid <= 1 {
        return false;
    }
    // SAFETY: `pidfd_open` takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return is_alive(process) && nix::sys::signal::kill(Pid::from_raw(pid), signal).is_ok();
    }
    let Ok(fd) = std::os::fd::RawFd::try_from(fd) else {
        return false;
    };
    // SAFETY: `fd` was just returned by `pidfd_open` and nothing else owns it.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    if !is_alive(process) {
        return false;
    }
    use std::os::fd::AsRawFd as _;
    // SAFETY: sends a signal through a descriptor we own; the null siginfo means "as kill(2)".
    let sent = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            signal as libc::c_int,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    sent == 0
}

/// Asks the host `host` to stop (SIGTERM: it interrupts and finalizes its children, then
/// unregisters) if it runs in this process's locality and is still that process, pid and start
/// time. Whether the signal was sent; a host elsewhere is never signalled.
pub fn stop_host(host: &hermes_ledger::HostRecord) -> bool {
    host.locality == current_locality() && signal_verified(host.process, Signal::SIGTERM)
}

/// The start time of `pid` in clock ticks since boot, if it exists.
pub fn process_start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|s| s.start_time)
}

/// This process's identity.
pub fn current_process() -> ProcessId {
    let pid = std::process::id();
    ProcessId {
        pid,
        start_time: process_start_time(pid).unwrap_or(0),
    }
}

/// This process's identity as a host: [`current_process`] with this locality's tag
/// ([`ProcessId::as_host_in`]), so that it is no other process table's host. Every host of
/// this process registers, claims its session and names its consumers under it.
pub fn current_host() -> ProcessId {
    current_process().as_host_in(&current_locality())
}

/// Whether `process` (a plain identity or a host's, [`ProcessId::names`]) is still running
/// here: same pid, same start time, not a zombie.
pub fn is_alive(process: ProcessId) -> bool {
    stat(process.pid).is_some_and(|s| process.names(process.pid, s.start_time) && s.state != 'Z')
}

/// Where this process lives: the boot, the pid namespace and the host name. Two processes with
/// the same locality see the same process table.
pub fn current_locality() -> Locality {
    let read = |path: &str| fs::read_to_string(path).map(|s| s.trim().to_owned());
    Locality {
        boot_id: read("/proc/sys/kernel/random/boot_id").unwrap_or_default(),
        pid_namespace: fs::read_link("/proc/self/ns/pid")
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        hostname: read("/proc/sys/kernel/hostname").unwrap_or_default(),
    }
}

/// Sends `signal` to the process group of a child this process started and still holds
/// (`leader`, verified by start time). If the leader has gone but members of its group survive,
/// each member that started no earlier than the leader is signalled on its own. Returns how
/// many targets were signalled.
pub fn signal_group(leader: ProcessId, signal: Signal) -> usize {
    let Ok(pid) = i32::try_from(leader.pid) else {
        return 0;
    };
    if pid <= 1 {
        return 0;
    }
    if stat(leader.pid).is_some_and(|s| s.start_time == leader.start_time) {
        return usize::from(killpg(Pid::from_raw(pid), signal).is_ok());
    }
    group_members(leader)
        .into_iter()
        .filter(|member| signal_verified(*member, signal))
        .count()
}

/// Whether any process of `leader`'s group is still running (zombies excluded).
pub fn group_alive(leader: ProcessId) -> bool {
    !group_members(leader).is_empty()
}

/// Live members of the group `leader` led that started no earlier than the leader (read from
/// `stat` alone: no environment is read for this).
fn group_members(leader: ProcessId) -> Vec<ProcessId> {
    live_processes()
        .filter(|(p, pgrp)| *pgrp == leader.pid && p.start_time >= leader.start_time)
        .map(|(p, _)| p)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    /// A process table with a fixed set of processes that records what it was asked to signal.
    struct FakeTable {
        processes: Vec<ProcessInfo>,
        signalled: RefCell<Vec<ProcessId>>,
    }

    impl ProcessTable for FakeTable {
        fn processes(&self) -> Vec<ProcessInfo> {
            self.processes.clone()
        }
        fn signal(&self, process: ProcessId, _: Signal) -> bool {
            let exists = self.processes.iter().any(|p| p.process == process);
            if exists {
                self.signalled.borrow_mut().push(process);
            }
            exists
        }
    }

    fn proc(pid: u32, start_time: u64, pgrp: u32, marker: Option<&str>) -> ProcessInfo {
        ProcessInfo {
            process: ProcessId { pid, start_time },
            pgrp,
            marker: marker.map(str::to_owned),
        }
    }

    const CHILD: ProcessId = ProcessId {
        pid: 500,
        start_time: 1_000,
    };
    const MARK: &str = "deleg_0123456789ab/0";

    fn signalled(processes: Vec<ProcessInfo>) -> Vec<ProcessId> {
        let table = FakeTable {
            processes,
            signalled: RefCell::new(Vec::new()),
        };
        signal_orphan(&table, Some(CHILD), MARK, Signal::SIGKILL);
        table.signalled.into_inner()
    }

    #[test]
    fn the_recorded_child_and_its_marked_descendants_are_signalled() {
        let got = signalled(vec![
            proc(500, 1_000, 500, Some(MARK)),
            proc(501, 1_010, 500, Some(MARK)),
            proc(900, 50, 900, None),
        ]);
        assert_eq!(
            got,
            [
                CHILD,
                ProcessId {
                    pid: 501,
                    start_time: 1_010
                }
            ]
        );
    }

    #[test]
    fn a_reused_pid_is_left_alone() {
        // Pid 500 now belongs to a later, unrelated process with no marker.
        let got = signalled(vec![proc(500, 9_999, 500, None)]);
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn a_dead_leaders_live_grandchildren_are_found_by_their_marker() {
        // The leader is gone; a grandchild moved to its own group, another stayed.
        let got = signalled(vec![
            proc(600, 1_200, 600, Some(MARK)),
            proc(601, 1_300, 500, Some(MARK)),
        ]);
        assert_eq!(got.len(), 2, "{got:?}");
    }

    #[test]
    fn a_foreign_process_in_a_reused_group_is_left_alone() {
        // Pid 500 was reused as a shell's job leader; its group 500 holds a user's job.
        let got = signalled(vec![
            proc(500, 5_000, 500, None),
            proc(700, 5_100, 500, None),
            proc(701, 5_200, 500, Some("deleg_ffffffffffff/0")),
        ]);
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn the_locality_names_this_boot_and_pid_namespace() {
        let here = current_locality();
        assert!(!here.boot_id.is_empty());
        assert!(here.pid_namespace.starts_with("pid:["), "{here:?}");
        assert_eq!(here, current_locality());
    }

    #[test]
    fn identifies_this_process_and_rejects_a_wrong_start_time() {
        let me = current_process();
        assert!(me.start_time > 0);
        assert!(is_alive(me));
        assert!(!is_alive(ProcessId {
            pid: me.pid,
            start_time: me.start_time + 1
        }));
        // As a host, it is told from other process tables, and still alive here.
        let host = current_host();
        assert_ne!(host, me);
        assert!(is_alive(host));
        let other = Locality {
            pid_namespace: "pid:[4026532999]".into(),
            ..current_locality()
        };
        assert_ne!(me.as_host_in(&other), host);
    }

    #[test]
    fn a_real_marked_grandchild_is_killed_after_its_leader_died() {
        use std::os::unix::process::CommandExt;
        // Unique per run: a grandchild left behind by an interrupted earlier run is not ours.
        let marker = format!("test-marker-kill-{}/0", std::process::id());
        // The leader starts a marked grandchild in its own group, then exits.
        let leader = std::process::Command::new("sh")
            .args(["-c", "setsid sleep 1000 >/dev/null 2>&1 & echo $!"])
            .env(CHILD_MARKER_VAR, &marker)
            .process_group(0)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sh starts");
        let recorded = ProcessId {
            pid: leader.id(),
            start_time: process_start_time(leader.id()).unwrap_or(0),
        };
        let out = leader.wait_with_output().expect("leader exits");
        let grandchild: u32 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("grandchild pid");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let alive = |pid: u32| stat(pid).is_some_and(|s| s.state != 'Z');
        // Until it is `sleep`: while `sh` and then `setsid` exec, its environment can read as
        // missing for a moment, and the table below would not see its marker.
        let is_sleep = |pid: u32| {
            fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
        };
        while !(is_sleep(grandchild) && marker_of(grandchild).is_some())
            && std::time::Instant::now() < deadline
        {
            std::thread::yield_now();
        }
        assert_eq!(marker_of(grandchild).as_deref(), Some(marker.as_str()));
        let n = signal_orphan(&OsProcesses, Some(recorded), &marker, Signal::SIGKILL);
        assert_eq!(n, 1, "only the marked grandchild");
        while alive(grandchild) && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(!alive(grandchild), "the grandchild is gone");
    }
}
