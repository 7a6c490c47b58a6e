//! Running a short command to its end under a time limit, its output read whole.

use std::io::{self, Read};
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Runs `command` (stdin `/dev/null`, stdout and stderr read whole, in a process group of its
/// own) and returns its output, or `None` when it did not end within `limit`: it and every
/// process of its group are then killed. The pipes are read on threads of their own, so a
/// command that writes much to one of them while the other is open never blocks; its end is
/// waited for on another, so nothing polls.
pub fn output_within(command: &mut Command, limit: Duration) -> io::Result<Option<Output>> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let stdout = read_whole(child.stdout.take());
    let stderr = read_whole(child.stderr.take());
    let pid = child.id();
    let (ended, waited) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = ended.send(child.wait());
    });
    let status = match waited.recv_timeout(limit) {
        Ok(status) => Some(status?),
        Err(_) => {
            kill_group(pid);
            // Not reaped before the waiter returns, so the pid (and group) is still its own.
            let _ = waited.recv();
            None
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    Ok(status.map(|status| Output {
        status,
        stdout,
        stderr,
    }))
}

/// A thread reading `pipe` to its end.
fn read_whole(pipe: Option<impl Read + Send + 'static>) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    })
}

/// SIGKILLs the process group `pid` leads.
fn kill_group(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: `kill` has no memory-safety preconditions; the group is the one `output_within`
    // started (`process_group(0)`), whose leader is not reaped yet.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn a_command_that_ends_gives_its_whole_output() {
        let out = output_within(
            Command::new("sh").args(["-c", "head -c 200000 /dev/zero; echo err >&2; exit 3"]),
            Duration::from_secs(10),
        )
        .expect("runs")
        .expect("ends in time");
        assert_eq!(out.stdout.len(), 200_000);
        assert_eq!(out.stderr, b"err\n");
        assert_eq!(out.status.code(), Some(3));
    }

    #[test]
    fn a_command_over_its_limit_is_killed_with_its_group() {
        let started = Instant::now();
        let out = output_within(
            Command::new("sh").args(["-c", "sleep 30 & sleep 30"]),
            Duration::from_millis(200),
        )
        .expect("runs");
        assert!(out.is_none());
        // The background `sleep` held the pipes: the reads ended only because it was killed too.
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn a_missing_program_is_an_error() {
        let err = output_within(
            &mut Command::new("/no/such/program"),
            Duration::from_secs(1),
        )
        .expect_err("not found");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
