//! End-to-end tests of the interactive session, driving the real binary through a
//! pseudo-terminal and reading the screen through a terminal emulator.

use std::io::{Read as _, Write as _};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{Hermes, process_alive, wait_for};
use expectrl::Session;
use serde_json::Value;

/// The columns of the pseudo-terminal (ptyprocess's default size, 80x24, as vt100's).
const COLS: u16 = 80;

/// `hermes` on a pseudo-terminal, with everything it wrote.
struct Term {
    session: expectrl::session::OsSession,
    screen: vt100::Parser,
    raw: Vec<u8>,
}

impl Term {
    fn spawn(h: &Hermes, args: &[&str]) -> Term {
        Term::spawn_env(h, args, &[])
    }

    /// [`Term::spawn`] with more of the environment.
    fn spawn_env(h: &Hermes, args: &[&str], env: &[(&str, &str)]) -> Term {
        // Not `Hermes::command`: its null stdin would replace the terminal.
        let mut c = Command::new(env!("CARGO_BIN_EXE_hermes"));
        c.args(args)
            .envs(env.iter().copied())
            .env("HERMES_HOME", h.path())
            .env("HERMES_HOST_SWEEP_INTERVAL_MS", "100")
            .env("HERMES_DELEGATION_KILL_GRACE_SECONDS", "1")
            .env("TERM", "xterm")
            .env_remove("HERMES_SESSION_ID")
            .env_remove("HERMES_SESSION_KEY")
            .env_remove("RUST_LOG");
        h.ledger_env(&mut c);
        let session = Session::spawn(c).expect("hermes starts on a pseudo-terminal");
        Term {
            session,
            screen: vt100::Parser::default(),
            raw: Vec::new(),
        }
    }

    fn pid(&self) -> u32 {
        u32::try_from(self.session.get_process().pid().as_raw()).expect("pid")
    }

    /// Reads what is there to read.
    fn pump(&mut self) {
        let mut buf = [0u8; 4096];
        loop {
            match self.session.try_read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    self.screen.process(&buf[..n]);
                    self.raw.extend_from_slice(&buf[..n]);
                }
                Err(_) => return,
            }
        }
    }

    /// Everything written so far, without escape sequences or carriage returns.
    fn text(&self) -> String {
        plain(&String::from_utf8_lossy(&self.raw))
    }

    /// Waits until the text written so far satisfies `ok`.
    fn wait(&mut self, limit: Duration, what: &str, ok: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + limit;
        loop {
            self.pump();
            if ok(&self.text()) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; the session wrote:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn wait_text(&mut self, limit: Duration, needle: &str) {
        self.wait(limit, needle, |t| t.contains(needle));
    }

    /// Waits until `needle` occurs `n` times.
    fn wait_count(&mut self, limit: Duration, needle: &str, n: usize) {
        self.wait(limit, &format!("{n} × {needle}"), |t| {
            t.matches(needle).count() >= n
        });
    }

    fn send(&mut self, text: &str) {
        self.session
            .write_all(text.as_bytes())
            .and_then(|()| self.session.flush())
            .expect("write to the terminal");
    }

    /// Types a line and presses Enter.
    fn line(&mut self, text: &str) {
        self.send(text);
        self.send("\r");
    }

    /// The screen row the cursor is on.
    fn cursor_row(&self) -> String {
        let screen = self.screen.screen();
        let (row, _) = screen.cursor_position();
        screen
            .rows(0, COLS)
            .nth(usize::from(row))
            .unwrap_or_default()
    }

    /// The session id from the greeting.
    fn session_id(&mut self) -> String {
        self.wait_text(Duration::from_secs(10), "hermes> ");
        let text = self.text();
        let start = text
            .find("session sess_")
            .map(|i| i + "session ".len())
            .expect("greeting names the session");
        text[start..]
            .split_whitespace()
            .next()
            .expect("session id")
            .to_owned()
    }

    /// Waits for the process to end; its exit code (minus the signal that killed it).
    fn wait_exit(&mut self, limit: Duration) -> i32 {
        let deadline = Instant::now() + limit;
        loop {
            self.pump();
            match self.session.get_process().status() {
                Ok(expectrl::process::unix::WaitStatus::Exited(_, code)) => {
                    self.pump();
                    return code;
                }
                Ok(expectrl::process::unix::WaitStatus::Signaled(_, signal, _)) => {
                    self.pump();
                    return -(signal as i32);
                }
                Ok(expectrl::process::unix::WaitStatus::StillAlive) => {}
                other => panic!("hermes ended oddly: {other:?}\n{}", self.text()),
            }
            assert!(
                Instant::now() < deadline,
                "hermes did not exit; it wrote:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `text` without ANSI escape sequences and carriage returns.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => match chars.next() {
                Some('[') => {
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                Some(']') => {
                    for c in chars.by_ref() {
                        if c == '\x07' {
                            break;
                        }
                    }
                }
                _ => {}
            },
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}

const BLOCK: &str = "[ASYNC DELEGATION COMPLETE — ";

fn status(h: &Hermes, id: &str) -> Value {
    h.json(&["delegation", "status", id, "--json"])
}

/// The delegation id in the line that confirmed a dispatch.
fn dispatched_id(text: &str) -> String {
    text.lines()
        .rev()
        .find_map(|l| {
            l.split_whitespace().find(|w| {
                w.starts_with("deleg_") && (l.contains(" running:") || l.contains(" queued"))
            })
        })
        .expect("a dispatch line")
        .to_owned()
}

/// Whether any process is in process group `group`.
fn group_alive(group: u32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.filter_map(Result::ok).any(|entry| {
        std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|stat| {
                let (_, rest) = stat.rsplit_once(')')?;
                let mut fields = rest.split_whitespace();
                let state = fields.next()?;
                let pgrp: u32 = fields.nth(1)?.parse().ok()?;
                Some(pgrp == group && state != "Z")
            })
            .unwrap_or(false)
    })
}

#[test]
fn an_idle_result_prints_above_the_prompt_and_the_typed_line_stays() {
    let h = Hermes::new();
    let mut t = Term::spawn(&h, &[]);
    t.session_id();
    t.line("delegate -- sh -c 'sleep 1; echo done'");
    t.wait_text(Duration::from_secs(10), " running: ");
    let dispatched = Instant::now();
    t.send("abc");
    t.wait(Duration::from_secs(10), "the completion block", |text| {
        text.contains(BLOCK) && text.contains("│ done")
    });
    let took = dispatched.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "the block took {took:?} after a one-second child"
    );
    // The prompt is back below the block with the partly typed line intact.
    let deadline = Instant::now() + Duration::from_secs(5);
    while t.cursor_row().trim_end() != "hermes> abc" {
        assert!(
            Instant::now() < deadline,
            "cursor row is {:?}; screen:\n{}",
            t.cursor_row(),
            t.screen.screen().contents()
        );
        std::thread::sleep(Duration::from_millis(20));
        t.pump();
    }
    // Enter submits exactly what was typed.
    t.send("\r");
    t.wait_text(Duration::from_secs(5), "'abc'");
    assert_eq!(t.text().matches(BLOCK).count(), 1, "{}", t.text());
    t.line("exit");
    assert_eq!(t.wait_exit(Duration::from_secs(20)), 0);
}

#[test]
fn a_result_ready_during_a_foreground_run_follows_the_runs_output() {
    let h = Hermes::new();
    let mut t = Term::spawn(&h, &[]);
    t.session_id();
    t.line("delegate --goal quick -- sh -c 'sleep 0.5; echo quick-$((1+1))'");
    t.wait_text(Duration::from_secs(10), " running: ");
    let id = dispatched_id(&t.text());
    t.line("run -- sh -c 'echo begin-$((1+1)); sleep 2; echo end-$((2+2))'");
    t.wait_text(Duration::from_secs(10), "begin-2");
    // The child finishes while the run is in the foreground.
    wait_for(Duration::from_secs(10), "the child to finish", || {
        (status(&h, &id)["status"] == "completed").then_some(())
    });
    t.wait_text(Duration::from_secs(10), "quick-2");
    let text = t.text();
    let run_ends = text.find("end-4").expect("the run's output");
    let summary = text.find("[run] exit 0").expect("the run's summary");
    let block = text.find(BLOCK).expect("the block");
    assert!(
        text.find("begin-2").expect("begin") < run_ends && run_ends < summary && summary < block,
        "the block must follow the run's output:\n{text}"
    );
    assert_eq!(text.matches(BLOCK).count(), 1, "{text}");
    t.line("exit");
    assert_eq!(t.wait_exit(Duration::from_secs(20)), 0);
}

#[test]
fn a_killed_session_delivers_what_waited_exactly_once_on_resume() {
    let h = Hermes::new();
    let go = h.path().join("go");
    let stop = h.path().join("stop");
    let mut a = Term::spawn(&h, &[]);
    let session = a.session_id();
    a.line(&format!(
        "delegate --goal waiter -- sh -c 'while [ ! -e {} ]; do sleep 0.05; done; echo waited-$((40+2))'",
        go.display()
    ));
    a.wait_text(Duration::from_secs(10), " running: ");
    let id = dispatched_id(&a.text());
    // A foreground run lets the child finish while nothing is delivered, then the process dies.
    a.line(&format!(
        "run -- sh -c 'touch {}; while [ ! -e {} ]; do sleep 0.05; done'",
        go.display(),
        stop.display()
    ));
    wait_for(Duration::from_secs(10), "the child to finish", || {
        let s = status(&h, &id);
        (s["status"] == "completed" && s["tasks"][0]["delivery"]["state"] == "pending")
            .then_some(())
    });
    let killed = Command::new("kill")
        .args(["-9", &a.pid().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    a.wait_exit(Duration::from_secs(10));
    std::fs::write(&stop, "").expect("stop the orphaned run");
    assert_eq!(status(&h, &id)["tasks"][0]["delivery"]["state"], "pending");

    // The first resume shows it once and acks it.
    let mut b = Term::spawn(&h, &["--resume", &session]);
    b.wait_text(Duration::from_secs(10), "waited-42");
    b.wait_text(Duration::from_secs(5), "hermes> ");
    wait_for(Duration::from_secs(10), "the delivery to be acked", || {
        (status(&h, &id)["tasks"][0]["delivery"]["state"] == "delivered").then_some(())
    });
    assert_eq!(b.text().matches(BLOCK).count(), 1, "{}", b.text());
    Command::new("kill")
        .args(["-9", &b.pid().to_string()])
        .status()
        .expect("kill runs");
    b.wait_exit(Duration::from_secs(10));

    // The second resume has nothing new: a turn and an idle second later, still no block.
    let mut c = Term::spawn(&h, &["--resume", &session]);
    c.wait_text(Duration::from_secs(10), "resumed");
    c.line("agents");
    c.wait_text(Duration::from_secs(10), "recent:");
    let quiet_until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < quiet_until {
        c.pump();
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!c.text().contains(BLOCK), "{}", c.text());
    c.line("exit");
    assert_eq!(c.wait_exit(Duration::from_secs(20)), 0);
}

/// Another machine sharing a PostgreSQL ledger takes a lost machine's session over with
/// `--resume`: what finished before the loss and what the loss cut short (`unknown` after the
/// lost host's lease) are shown there once each, and the session goes on there. Needs the
/// throwaway PostgreSQL server whatever the backend under test.
#[test]
fn a_lost_machines_session_resumes_on_another_and_shows_each_result_once() {
    const LEASE: [(&str, &str); 3] = [
        ("HERMES_HOST_RECOVERY_INTERVAL_SECONDS", "0.5"),
        ("HERMES_HOST_LEASE_SECONDS", "3"),
        ("HERMES_HOST_HEARTBEAT_SECONDS", "0.5"),
    ];
    let url = hermes_testkit::fresh_database(&hermes_testkit::pg_admin_url());
    let (a, b) = (Hermes::sharing(&url), Hermes::sharing(&url));
    let (mut machine_a, ids) = crate::common::machine_dispatching(
        &a,
        "M",
        &["echo before-the-loss", "exec sleep 300"],
        &LEASE,
    );
    let (early_id, late_id) = (ids[0].clone(), ids[1].clone());
    wait_for(
        Duration::from_secs(30),
        "A's units to complete and run",
        || {
            (status(&b, &early_id)["status"] == "completed"
                && status(&b, &late_id)["status"] == "running")
                .then_some(())
        },
    );
    machine_a.lose();
    // B's sweeps judge A's host by its lease only (another process table).
    wait_for(
        Duration::from_secs(30),
        "A's running unit to end unknown",
        || {
            let listed = b.run_env(&["delegation", "list", "--json"], &LEASE);
            assert_eq!(listed.code, 0, "{}", listed.stderr);
            (status(&b, &late_id)["status"] == "unknown").then_some(())
        },
    );

    let mut t = Term::spawn_env(&b, &["--resume", "M"], &LEASE);
    t.wait_text(Duration::from_secs(20), "before-the-loss");
    wait_for(
        Duration::from_secs(20),
        "both results to be acked on B",
        || {
            t.pump();
            let acked = |id: &str| status(&b, id)["tasks"][0]["delivery"]["state"] == "delivered";
            (acked(&early_id) && acked(&late_id)).then_some(())
        },
    );
    let text = t.text();
    assert_eq!(text.matches(BLOCK).count(), 2, "{text}");
    assert_eq!(
        text.matches(&format!("{BLOCK}{early_id}")).count(),
        1,
        "{text}"
    );
    assert_eq!(
        text.matches(&format!("{BLOCK}{late_id}")).count(),
        1,
        "{text}"
    );
    // The session goes on here: B's interactive session hosts what it dispatches now.
    t.line("delegate -- sh -c 'echo on-machine-b'");
    t.wait_text(Duration::from_secs(20), "on-machine-b\n");
    t.line("exit");
    assert_eq!(t.wait_exit(Duration::from_secs(20)), 0);
}

#[test]
fn exit_with_a_running_child_asks_then_interrupts_it_for_session_end() {
    let h = Hermes::new();
    let mut t = Term::spawn(&h, &[]);
    let session = t.session_id();
    t.line("delegate -- sh -c 'sleep 60; echo never'");
    t.wait_text(Duration::from_secs(10), " running: ");
    let id = dispatched_id(&t.text());
    let pid = wait_for(Duration::from_secs(10), "the child's pid", || {
        status(&h, &id)["tasks"][0]["pid"].as_u64()
    });
    let pid = u32::try_from(pid).expect("pid");
    assert!(group_alive(pid));
    // Declining keeps the session and the child.
    t.line("exit");
    t.wait_text(Duration::from_secs(10), "[y/N]");
    t.line("n");
    t.wait_text(Duration::from_secs(10), "the session goes on");
    assert!(group_alive(pid));
    t.line("exit");
    t.wait_count(Duration::from_secs(10), "[y/N]", 2);
    t.line("y");
    assert_eq!(t.wait_exit(Duration::from_secs(20)), 0);
    assert!(
        t.text().contains(&format!("session {session} ended")),
        "{}",
        t.text()
    );
    assert!(!group_alive(pid), "the child's process group survived");

    let s = status(&h, &id);
    assert_eq!(s["status"], "interrupted");
    assert_eq!(s["interrupt"], "session_end");
    assert_eq!(s["tasks"][0]["status"], "interrupted");
    let sessions = h.json(&["session", "list", "--json"]);
    let me = sessions["sessions"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["id"] == session.as_str()))
        .expect("the session is listed");
    assert_eq!(me["state"], "ended");
    // The event itself says why.
    let ledger = h.ledger();
    let events = ledger
        .events(&hermes_ledger::DelegationId::new(&id).expect("id"))
        .expect("events");
    let outcome = events
        .iter()
        .flat_map(|e| e.payload.outcomes())
        .find(|o| o.index == 0)
        .expect("the child's outcome");
    assert_eq!(outcome.status, hermes_ledger::ChildStatus::Interrupted);
    assert_eq!(
        outcome.detail,
        hermes_ledger::ExitDetail::Interrupted {
            reason: "session_end".into()
        }
    );
}

#[test]
fn ctrl_c_stops_a_foreground_run_and_not_the_session() {
    let h = Hermes::new();
    let mut t = Term::spawn(&h, &[]);
    t.session_id();
    t.line("run -- sh -c 'echo sleep-$((1+1)); sleep 60'");
    t.wait_text(Duration::from_secs(10), "sleep-2");
    t.send("\x03");
    t.wait_text(Duration::from_secs(10), "[run] interrupted");
    t.line("help");
    t.wait_text(Duration::from_secs(10), "stop ID|all");
    // Ctrl-D at the prompt ends the session like exit.
    t.send("\x04");
    assert_eq!(t.wait_exit(Duration::from_secs(20)), 0);
    assert!(t.text().contains("ended"), "{}", t.text());
}

#[test]
fn delegate_from_another_terminal_runs_in_the_interactive_process() {
    let h = Hermes::new();
    let mut t = Term::spawn(&h, &[]);
    let session = t.session_id();
    let out = h.json(&[
        "delegate",
        "--session",
        &session,
        "--json",
        "--goal",
        "from afar",
        "--",
        "sh",
        "-c",
        "echo from-another-terminal",
    ]);
    assert_eq!(out["host_pid"].as_u64(), Some(u64::from(t.pid())));
    t.wait_text(Duration::from_secs(10), "from-another-terminal");
    let id = out["delegation_id"].as_str().expect("id");
    assert_eq!(
        status(&h, id)["host_pid"].as_u64(),
        Some(u64::from(t.pid()))
    );
    t.line("exit");
    assert_eq!(t.wait_exit(Duration::from_secs(20)), 0);
}

#[test]
fn resuming_a_hosted_an_ended_or_an_unknown_session_is_refused() {
    let h = Hermes::new();
    let mut t = Term::spawn(&h, &[]);
    let session = t.session_id();
    let live = h.run(&["--resume", &session]);
    live.assert_one_error_line(5);
    assert!(
        live.stderr.contains("another live process"),
        "{}",
        live.stderr
    );
    t.line("exit");
    assert_eq!(t.wait_exit(Duration::from_secs(20)), 0);
    let ended = h.run(&["--resume", &session]);
    ended.assert_one_error_line(5);
    assert!(ended.stderr.contains("has ended"), "{}", ended.stderr);
    h.run(&["--resume", "nobody"]).assert_one_error_line(4);
    assert!(!process_alive(u64::from(t.pid())));
}

#[test]
fn history_is_kept_in_the_home() {
    let h = Hermes::new();
    let mut t = Term::spawn(&h, &[]);
    t.session_id();
    t.line("agents");
    t.wait_text(Duration::from_secs(10), "running 0");
    t.line("exit");
    assert_eq!(t.wait_exit(Duration::from_secs(20)), 0);
    let mut history = String::new();
    std::fs::File::open(h.path().join("history"))
        .and_then(|mut f| f.read_to_string(&mut history))
        .expect("history file");
    assert!(history.contains("agents"), "{history}");
}

#[test]
fn inject_results_follow_a_run_with_the_tool_carrier() {
    let h = Hermes::new();
    let mut t = Term::spawn(&h, &[]);
    t.session_id();
    t.line("delegate --delivery inject -- sh -c 'sleep 0.3; echo injected-$((1+1))'");
    t.wait_text(Duration::from_secs(10), " running: ");
    t.line("run -- sleep 1");
    t.wait_text(Duration::from_secs(10), "injected-2");
    let text = t.text();
    let summary = text.find("[run] exit 0").expect("the run's summary");
    let carrier = text
        .find("[DELEGATION RESULT READY — background evidence for the current task")
        .expect("the tool carrier");
    assert!(
        summary < carrier && carrier < text.find(BLOCK).expect("block"),
        "{text}"
    );
    // The goal keeps the quoting it was typed with.
    assert!(
        text.contains("Original goal: sh -c 'sleep 0.3; echo injected-$((1+1))'"),
        "{text}"
    );
    t.line("exit");
    assert_eq!(t.wait_exit(Duration::from_secs(20)), 0);
}

#[test]
fn resume_takes_back_a_claim_its_dead_predecessor_held() {
    let h = Hermes::new();
    // A result claimed by an interactive consumer whose process is gone (pid 4194304 is above
    // the kernel's pid limit), under a lease that would hold it for five minutes.
    let out = h.json(&[
        "delegate",
        "--session",
        "held",
        "--json",
        "--",
        "sh",
        "-c",
        "echo held-$((1+1))",
    ]);
    let id = out["delegation_id"].as_str().expect("id").to_owned();
    wait_for(Duration::from_secs(10), "the child to finish", || {
        (status(&h, &id)["status"] == "completed").then_some(())
    });
    let drained = h.run(&[
        "drain",
        "--session",
        "held",
        "--hold",
        "--lease",
        "300",
        "--consumer",
        "interactive:4194304:1",
    ]);
    assert_eq!(drained.code, 0, "{drained:?}");
    assert_eq!(status(&h, &id)["tasks"][0]["delivery"]["state"], "claimed");
    // The headless host gives the session up once idle.
    wait_for(
        Duration::from_secs(20),
        "the headless host to leave",
        || h.host_pids().is_empty().then_some(()),
    );
    let mut t = Term::spawn(&h, &["--resume", "held"]);
    t.wait_text(Duration::from_secs(10), "held-2");
    wait_for(Duration::from_secs(10), "the delivery to be acked", || {
        (status(&h, &id)["tasks"][0]["delivery"]["state"] == "delivered").then_some(())
    });
    assert_eq!(t.text().matches(BLOCK).count(), 1, "{}", t.text());
    t.line("exit");
    assert_eq!(t.wait_exit(Duration::from_secs(20)), 0);
}

#[test]
fn a_killed_sessions_slot_goes_to_the_other_sessions_queued_unit_with_no_command_run() {
    let h = Hermes::new();
    // One slot, short sweeps, a long lease: what happens within seconds is noticed by pid.
    let env = [
        ("HERMES_DELEGATION_MAX_CONCURRENT_CHILDREN", "1"),
        ("HERMES_HOST_RECOVERY_INTERVAL_SECONDS", "0.5"),
        ("HERMES_HOST_LEASE_SECONDS", "120"),
    ];
    let mut a = Term::spawn_env(&h, &[], &env);
    a.session_id();
    a.line("delegate -- sleep 120");
    a.wait_text(Duration::from_secs(10), " running: ");
    let a_unit = dispatched_id(&a.text());
    let a_child = wait_for(Duration::from_secs(10), "A's child to start", || {
        status(&h, &a_unit)["tasks"][0]["pid"].as_u64()
    });

    let started = h.path().join("b-started");
    let mut b = Term::spawn_env(&h, &[], &env);
    b.session_id();
    b.line(&format!("delegate -- touch {}", started.display()));
    b.wait_text(Duration::from_secs(10), " queued");

    let killed = Command::new("kill")
        .args(["-9", &a.pid().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    a.wait_exit(Duration::from_secs(10));
    // No hermes command from here on: B's session sweeps, frees A's slot, starts its unit.
    wait_for(Duration::from_secs(30), "B's queued unit to start", || {
        started.exists().then_some(())
    });
    wait_for(Duration::from_secs(10), "A's child to be gone", || {
        (!process_alive(a_child)).then_some(())
    });
    assert!(
        !group_alive(u32::try_from(a_child).expect("pid")),
        "A's process group is gone"
    );
    assert_eq!(status(&h, &a_unit)["status"], "unknown");
    b.line("exit");
    b.wait_exit(Duration::from_secs(10));
}

#[test]
fn a_pool_unit_from_the_prompt_waits_for_a_worker_and_its_result_prints_in_the_session() {
    let h = Hermes::new();
    let mut t = Term::spawn(&h, &[]);
    t.session_id();
    t.line("delegate --pool tty --goal 'on a worker' -- sh -c 'echo ran-on-worker-$((40+2))'");
    t.wait_text(
        Duration::from_secs(10),
        "queued in pool tty (position 1, 0 live worker(s))",
    );
    let id = dispatched_id(&t.text());
    t.line("agents");
    t.wait_text(Duration::from_secs(10), "pool tty · waiting for a worker");

    let mut worker = h
        .command(&["worker", "--pool", "tty", "--capacity", "1"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("worker starts");
    // The typed line shows the command, not its output.
    t.wait_text(Duration::from_secs(20), "ran-on-worker-42");
    assert_eq!(t.text().matches(BLOCK).count(), 1, "{}", t.text());
    let _ = worker.kill();
    let _ = worker.wait();
    let s = status(&h, &id);
    assert_eq!(s["status"], "completed", "{s}");
    assert_eq!(s["worker"]["pid"].as_u64(), Some(u64::from(worker.id())));
    assert_ne!(s["host_pid"].as_u64(), Some(u64::from(t.pid())));
    t.line("exit");
    assert_eq!(t.wait_exit(Duration::from_secs(20)), 0);
}

#[test]
fn status_of_a_finished_task_shows_how_long_it_ran_and_no_quiet_time() {
    let h = Hermes::new();
    let mut t = Term::spawn(&h, &[]);
    t.session_id();
    t.line("delegate --goal short -- sh -c 'sleep 1'");
    t.wait_text(Duration::from_secs(10), " running: ");
    let id = dispatched_id(&t.text());
    t.wait_text(Duration::from_secs(10), BLOCK);
    // Let time pass after the end, so a time that kept growing would show it.
    let ended = Instant::now();
    wait_for(Duration::from_secs(10), "two seconds past the end", || {
        (ended.elapsed() >= Duration::from_secs(2)).then_some(())
    });
    t.line(&format!("status {id}"));
    t.wait(Duration::from_secs(10), "the status view", |text| {
        text.lines()
            .any(|l| l.contains("task 1 completed") && l.contains(" · delivery "))
    });
    let text = t.text();
    let line = text
        .lines()
        .find(|l| l.contains("task 1 completed"))
        .unwrap_or_else(|| panic!("a task line in\n{text}"));
    assert!(!line.contains("quiet"), "{line}");
    let ran: u64 = line
        .split(" · ")
        .nth(1)
        .and_then(|w| w.strip_suffix('s'))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a duration in {line:?}"));
    assert!(
        (1..=2).contains(&ran),
        "a one-second child ran {ran}s: {line}"
    );
    t.line("exit");
    assert_eq!(t.wait_exit(Duration::from_secs(20)), 0);
}
