//! Process identity and process-group signalling, verified by start time so a reused pid is
//! never mistaken for a process hermes started.

use std::fs;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use crate::model::ProcessId;

/// One parsed `/proc/<pid>/stat`.
struct Stat {
    state: char,
    pgrp: i32,
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

/// Whether `process` is still running: same pid, same start time, not a zombie.
pub fn is_alive(process: ProcessId) -> bool {
    stat(process.pid).is_some_and(|s| s.start_time == process.start_time && s.state != 'Z')
}

/// Sends `signal` to the process group led by `leader`.
///
/// If the leader is still the same process, the whole group is signalled. If the leader has gone
/// but members of its group survive (a grandchild left behind), each member that started no
/// earlier than the leader is signalled on its own, so a reused group id is never hit. Returns
/// how many targets were signalled.
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
        .filter(|member| kill(Pid::from_raw(*member), signal).is_ok())
        .count()
}

/// Whether any process of `leader`'s group is still running (zombies excluded).
pub fn group_alive(leader: ProcessId) -> bool {
    !group_members(leader).is_empty()
}

/// Live members of the group `leader` led that started no earlier than the leader.
fn group_members(leader: ProcessId) -> Vec<i32> {
    let Ok(pgid) = i32::try_from(leader.pid) else {
        return Vec::new();
    };
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let s = stat(pid)?;
            let member = s.pgrp == pgid && s.start_time >= leader.start_time && s.state != 'Z';
            member.then_some(pid as i32)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifies_this_process_and_rejects_a_wrong_start_time() {
        let me = current_process();
        assert!(me.start_time > 0);
        assert!(is_alive(me));
        assert!(!is_alive(ProcessId {
            pid: me.pid,
            start_time: me.start_time + 1
        }));
        assert!(!is_alive(ProcessId {
            pid: u32::MAX - 1,
            start_time: 0
        }));
    }

    #[test]
    fn signals_a_whole_group_and_finds_none_left() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 1000 & sleep 1000"])
            .process_group(0)
            .spawn()
            .expect("sh starts");
        let leader = ProcessId {
            pid: child.id(),
            start_time: process_start_time(child.id()).expect("child has a start time"),
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while group_members(leader).len() < 2 && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(
            group_members(leader).len() >= 2,
            "the grandchild joined the group"
        );
        assert_eq!(signal_group(leader, Signal::SIGKILL), 1);
        child.wait().expect("reaped");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while group_alive(leader) && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(!group_alive(leader), "no member of the group survives");
    }
}
