//! The soak's hermes processes: every command run under a deadline with its exit counted, the
//! three kinds of loops (dispatchers, racing drains, kept-alive workers) and the journal they
//! write what they saw into.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

use super::account::{Dispatch, Seen};

/// The pool the soak's pool units go to and its workers serve.
pub(super) const POOL: &str = "soak";
/// How long one `delegate` may take before the soak kills it and sends it again (same id).
const DELEGATE_LIMIT: Duration = Duration::from_secs(45);
/// How long one `drain` may take (its own `--wait` is at most a few seconds).
const DRAIN_LIMIT: Duration = Duration::from_secs(60);
/// How long a worker has to leave after SIGTERM before it is killed.
const WORKER_STOP_LIMIT: Duration = Duration::from_secs(20);

/// Where the run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(super) enum Phase {
    /// Faults are injected; dispatchers draw new units.
    Faults = 0,
    /// No more faults nor new units; everything else runs until all is settled.
    Quiet = 1,
    /// Dispatchers and drains end.
    Stop = 2,
    /// Workers end too.
    Done = 3,
}

/// What the soak's threads write down.
#[derive(Default)]
pub(super) struct Journal {
    pub(super) dispatches: Vec<Dispatch>,
    pub(super) seen: Vec<Seen>,
    /// Exits of the processes the soak ran: command → exit ("0", "6", "killed: timeout",
    /// "signal 9", …) → count.
    pub(super) exits: BTreeMap<String, BTreeMap<String, u64>>,
    /// Injected faults by kind.
    pub(super) faults: BTreeMap<String, u64>,
    /// Server backends ended by the kills.
    pub(super) backends_terminated: u64,
    /// When the last fault ended (a black hole lifted, the server back), ms since the start.
    pub(super) last_fault_end_ms: Option<u64>,
    /// Workers the soak started again after they exited.
    pub(super) worker_restarts: u64,
    /// Drain outputs that were not the JSON `drain --json` prints.
    pub(super) unreadable_outputs: u64,
    /// Why commands failed: command → its error line (numbers and ids elided) → count.
    pub(super) errors: BTreeMap<String, BTreeMap<String, u64>>,
}

/// State every thread shares.
pub(super) struct Shared {
    phase: AtomicU8,
    start: Instant,
    journal: Mutex<Journal>,
}

impl Shared {
    pub(super) fn new() -> Shared {
        Shared {
            phase: AtomicU8::new(Phase::Faults as u8),
            start: Instant::now(),
            journal: Mutex::new(Journal::default()),
        }
    }

    pub(super) fn phase(&self) -> Phase {
        match self.phase.load(Ordering::SeqCst) {
            0 => Phase::Faults,
            1 => Phase::Quiet,
            2 => Phase::Stop,
            _ => Phase::Done,
        }
    }

    pub(super) fn enter(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::SeqCst);
    }

    pub(super) fn journal(&self) -> MutexGuard<'_, Journal> {
        self.journal
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Milliseconds since the soak started.
    pub(super) fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn count_exit(&self, command: &str, exit: String) {
        *self
            .journal()
            .exits
            .entry(command.to_owned())
            .or_default()
            .entry(exit)
            .or_default() += 1;
    }

    pub(super) fn count_fault(&self, kind: &str) {
        *self.journal().faults.entry(kind.to_owned()).or_default() += 1;
    }
}

/// What a command did.
pub(super) struct Ran {
    /// Its exit code; `None` when a signal (or the soak, at its deadline) ended it.
    pub(super) code: Option<i32>,
    pub(super) stdout: String,
    pub(super) stderr: String,
}

/// Runs `command` to its end or until `limit`, when it is killed; its exit is counted under
/// `name` unless `name` is empty.
pub(super) fn run_limited(
    shared: &Shared,
    name: &str,
    mut command: Command,
    limit: Duration,
) -> Ran {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            if !name.is_empty() {
                shared.count_exit(name, "could not start".into());
            }
            return Ran {
                code: None,
                stdout: String::new(),
                stderr: err.to_string(),
            };
        }
    };
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let (output, timed_out) = match rx.recv_timeout(limit) {
        Ok(output) => (output, false),
        Err(_) => {
            signal(pid, Signal::SIGKILL);
            (
                rx.recv().unwrap_or_else(|e| Err(std::io::Error::other(e))),
                true,
            )
        }
    };
    let (code, exit, stdout, stderr) = match output {
        Ok(out) => {
            let exit = match (timed_out, out.status.code()) {
                (true, _) => "killed at its deadline".to_owned(),
                (false, Some(code)) => code.to_string(),
                (false, None) => format!(
                    "signal {:?}",
                    std::os::unix::process::ExitStatusExt::signal(&out.status)
                ),
            };
            (
                out.status.code().filter(|_| !timed_out),
                exit,
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
        Err(err) => (None, "lost".to_owned(), String::new(), err.to_string()),
    };
    if !name.is_empty() {
        if code != Some(0) {
            let line = stderr
                .lines()
                .rev()
                .find(|l| l.starts_with("hermes:"))
                .or_else(|| stderr.lines().rev().find(|l| !l.trim().is_empty()))
                .unwrap_or(if timed_out {
                    "(killed at its deadline)"
                } else {
                    "(nothing on stderr)"
                });
            *shared
                .journal()
                .errors
                .entry(name.to_owned())
                .or_default()
                .entry(elide(line))
                .or_default() += 1;
        }
        shared.count_exit(name, exit);
    }
    Ran {
        code,
        stdout,
        stderr,
    }
}

/// An error line with its delegation ids, numbers and quoted details elided, so that lines
/// saying the same thing count together; at most 200 characters.
pub(super) fn elide(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.trim().chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            while chars
                .peek()
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '.')
            {
                chars.next();
            }
            out.push('N');
        } else {
            out.push(c);
        }
    }
    let out = out.replace("deleg_N", "deleg_…");
    match out.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &out[..at]),
        None => out,
    }
}

/// Sends `signal` to `pid`, ignoring a process that is gone.
pub(super) fn signal(pid: u32, signal: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = kill(Pid::from_raw(pid), signal);
    }
}

/// How every hermes process of the soak is started: the release binary, the soak's home and
/// ledger URL (through the fault proxy) and its timings.
pub(super) struct Hermes {
    pub(super) binary: PathBuf,
    pub(super) home: PathBuf,
    pub(super) vars: Vec<(String, String)>,
}

impl Hermes {
    pub(super) fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.binary);
        command.args(args).current_dir(&self.home);
        // Nothing of the caller's own hermes or libpq setup leaks in.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy().into_owned();
            if name.starts_with("HERMES_") || name.starts_with("PG") || name == "RUST_LOG" {
                command.env_remove(name);
            }
        }
        command.env("HERMES_HOME", &self.home);
        for (name, value) in &self.vars {
            command.env(name, value);
        }
        command
    }

    /// A log file in the home's `soak/` folder, appended to.
    pub(super) fn log(&self, name: &str) -> Option<File> {
        let dir = self.home.join("soak-logs");
        std::fs::create_dir_all(&dir).ok()?;
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(name))
            .ok()
    }
}

/// Sleeps `ms`, in short steps, returning early once the run reaches `until`.
pub(super) fn nap(shared: &Shared, ms: u64, until: Phase) {
    let end = Instant::now() + Duration::from_millis(ms);
    while shared.phase() < until {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// One session's dispatcher: draws an id, a marker and a kind (background unit for the
/// session's host, or pool unit) for each unit and sends it with `delegate --id`, sending the
/// same dispatch again while the outcome is unknown (exit 6, or no answer by the deadline).
/// New units only while faults run; an unknown outcome is resolved in the quiet period too.
pub(super) fn dispatcher(hermes: &Hermes, shared: &Shared, session: &str, seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut n = 0u32;
    while shared.phase() == Phase::Faults {
        n += 1;
        let id = format!("deleg_{:012x}", rng.u64(..) & 0xffff_ffff_ffff);
        let marker = format!("soak-marker-{session}-{n}-{:08x}", rng.u32(..));
        let pool = rng.bool();
        let script = format!("sleep 0.{:03}; echo {marker}", rng.u32(20..700));
        let mut args = vec![
            "delegate",
            "--session",
            session,
            "--json",
            "--id",
            &id,
            "--goal",
            "soak",
        ];
        if pool {
            args.extend(["--pool", POOL]);
        }
        args.extend(["--", "sh", "-c", &script]);
        let index = {
            let mut journal = shared.journal();
            journal.dispatches.push(Dispatch {
                id: id.clone(),
                session: session.to_owned(),
                marker: marker.clone(),
                pool,
                tries: 0,
            });
            journal.dispatches.len() - 1
        };
        let mut tries = 0u32;
        loop {
            tries += 1;
            let ran = run_limited(shared, "delegate", hermes.command(&args), DELEGATE_LIMIT);
            if !matches!(ran.code, Some(6) | None) || shared.phase() >= Phase::Stop {
                if !matches!(ran.code, Some(0 | 6) | None)
                    && let Some(mut log) = hermes.log("delegate.log")
                {
                    use std::io::Write as _;
                    let _ = writeln!(log, "{id}: exit {:?}: {}", ran.code, ran.stderr.trim());
                }
                break;
            }
            nap(shared, 100 + 100 * u64::from(tries.min(10)), Phase::Stop);
        }
        shared.journal().dispatches[index].tries = tries;
        nap(shared, rng.u64(150..900), Phase::Quiet);
    }
}

/// One of a session's racing drains: `drain --session S --json`, with or without `--wait`,
/// over and over, every event of every envelope it printed written down (whatever its exit:
/// a drain that printed and then failed to ack still printed).
pub(super) fn drainer(hermes: &Hermes, shared: &Shared, session: &str, seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    while shared.phase() < Phase::Stop {
        let wait = rng.bool().then(|| rng.u32(1..4).to_string());
        let mut args = vec!["drain", "--session", session, "--json"];
        if let Some(wait) = &wait {
            args.extend(["--wait", wait]);
        }
        let name = if wait.is_some() {
            "drain --wait"
        } else {
            "drain"
        };
        let ran = run_limited(shared, name, hermes.command(&args), DRAIN_LIMIT);
        let at_ms = shared.now_ms();
        record_drained(shared, &ran.stdout, at_ms);
        if wait.is_none() {
            nap(shared, rng.u64(50..400), Phase::Stop);
        }
    }
}

/// Writes down every event of every envelope in a drain's output.
fn record_drained(shared: &Shared, stdout: &str, at_ms: u64) {
    for line in stdout.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(value) = serde_json::from_str::<Value>(line) else {
            shared.journal().unreadable_outputs += 1;
            continue;
        };
        let mut journal = shared.journal();
        for envelope in value["envelopes"].as_array().into_iter().flatten() {
            let unit = envelope["delegation_id"].as_str().unwrap_or("?").to_owned();
            let text = envelope["text"].as_str().unwrap_or_default().to_owned();
            for key in envelope["event_keys"].as_array().into_iter().flatten() {
                journal.seen.push(Seen {
                    unit: unit.clone(),
                    key: key.as_str().unwrap_or("?").to_owned(),
                    text: text.clone(),
                    at_ms,
                });
            }
        }
    }
}

/// One kept-alive worker of the pool: started again whenever it exits, until the run is done
/// (then SIGTERM, and SIGKILL if it will not leave).
pub(super) fn worker(hermes: &Hermes, shared: &Shared, index: usize, pid: &AtomicU32) {
    let mut first = true;
    while shared.phase() < Phase::Done {
        if !first {
            shared.journal().worker_restarts += 1;
            nap(shared, 200, Phase::Done);
        }
        first = false;
        let mut command = hermes.command(&["worker", "--pool", POOL]);
        command.stdin(Stdio::null()).stdout(Stdio::null());
        match hermes.log(&format!("worker-{index}.log")) {
            Some(log) => command.stderr(log),
            None => command.stderr(Stdio::null()),
        };
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(_) => {
                shared.count_exit("worker", "could not start".into());
                continue;
            }
        };
        pid.store(child.id(), Ordering::SeqCst);
        let exit = watch(shared, &mut child);
        pid.store(0, Ordering::SeqCst);
        shared.count_exit("worker", exit);
    }
}

/// Waits for a worker to exit, stopping it once the run is done; says how it ended.
fn watch(shared: &Shared, child: &mut Child) -> String {
    let mut stop_sent: Option<Instant> = None;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                return match status.code() {
                    Some(code) => code.to_string(),
                    None => format!(
                        "signal {:?}",
                        std::os::unix::process::ExitStatusExt::signal(&status)
                    ),
                };
            }
            Ok(None) => {}
            Err(err) => return format!("lost: {err}"),
        }
        if shared.phase() >= Phase::Done {
            match stop_sent {
                None => {
                    signal(child.id(), Signal::SIGTERM);
                    stop_sent = Some(Instant::now());
                }
                Some(at) if at.elapsed() > WORKER_STOP_LIMIT => {
                    let _ = child.kill();
                }
                Some(_) => {}
            }
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Every process whose environment names `home` as its `HERMES_HOME`: the soak's hermes
/// processes, the headless hosts `delegate` started and their children.
pub(super) fn processes_of(home: &Path) -> Vec<u32> {
    let needle = format!("HERMES_HOME={}\0", home.display());
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            let mut environ = Vec::new();
            File::open(format!("/proc/{pid}/environ"))
                .and_then(|mut f| f.read_to_end(&mut environ))
                .is_ok()
                && environ
                    .windows(needle.len())
                    .any(|w| w == needle.as_bytes())
        })
        .collect()
}

/// What the hosts' and workers' logs in `home` say happened to them, counted by the lines'
/// words (a count is 0 if the words change): starts, fences, re-registrations, and retries of
/// recording a finished child's outcome.
pub(super) fn log_counts(home: &Path) -> BTreeMap<&'static str, u64> {
    const PATTERNS: [(&str, &str, &str); 6] = [
        ("host_starts", "host-", "headless host started"),
        ("host_fences", "host-", "host fenced: stopping its children"),
        (
            "host_rehosted",
            "host-",
            "host re-registered with a fresh epoch",
        ),
        (
            "outcome_record_retries",
            "host-",
            "cannot record a finished child's outcome",
        ),
        (
            "worker_fences",
            "worker-",
            "lost its lease and stopped its children",
        ),
        (
            "worker_reregistered",
            "worker-",
            "re-registered with a fresh epoch",
        ),
    ];
    let mut texts: Vec<(String, String)> = Vec::new();
    for dir in [home.join("cache"), home.join("soak-logs")] {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".log")
                && let Ok(text) = std::fs::read_to_string(entry.path())
            {
                texts.push((name, text));
            }
        }
    }
    PATTERNS
        .iter()
        .map(|(key, file, words)| {
            let count = texts
                .iter()
                .filter(|(name, _)| name.starts_with(file))
                .flat_map(|(_, text)| text.lines())
                .filter(|line| line.contains(words))
                .count();
            (*key, count as u64)
        })
        .collect()
}

/// Stops every process of `home`: SIGTERM, then SIGKILL for what is left after `limit`.
pub(super) fn stop_all(home: &Path, limit: Duration) -> usize {
    let pids = processes_of(home);
    for pid in &pids {
        signal(*pid, Signal::SIGTERM);
    }
    let end = Instant::now() + limit;
    while Instant::now() < end && !processes_of(home).is_empty() {
        thread::sleep(Duration::from_millis(100));
    }
    for pid in processes_of(home) {
        signal(pid, Signal::SIGKILL);
    }
    pids.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_lines_that_differ_only_in_ids_and_numbers_count_together() {
        let a = elide(
            "hermes: cannot reach the PostgreSQL server at 127.0.0.1:41437: refused; delegation deleg_3f2a9c0d1b7e may or may not have been recorded",
        );
        let b = elide(
            "hermes: cannot reach the PostgreSQL server at 127.0.0.1:3301: refused; delegation deleg_000000000001 may or may not have been recorded",
        );
        assert_eq!(a, b);
        assert!(a.contains("deleg_…"), "{a}");
        assert_eq!(elide(&"x".repeat(300)).chars().count(), 201);
    }
}
