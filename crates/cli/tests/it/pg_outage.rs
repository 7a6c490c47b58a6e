//! PostgreSQL stopped under long-lived processes (issue 42): an idle worker, a headless host
//! running a child and a waiting `drain` stay nearly idle while the server is down — a small
//! fraction of a core, one connection attempt per pause of their backoff — and carry on when
//! it is back; `drain --wait` waits for a server that is down when it starts; `ledger info
//! --json` answers for an unreachable one. Each test stops a throwaway server of its own,
//! reached through a proxy that counts connection attempts (each one it accepts).

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::common::{Hermes, process_alive, wait_for};
use hermes_pgcluster::{Cluster, FaultProxy, StopMode};
use serde_json::Value;

/// The most of a core an idle process may use while its server is down. A headless host with
/// a running child measured 1.5–1.7 % alone and 3.3 % with the whole suite running beside it
/// (the same work costs more CPU time on a busy machine); a host that spins on a lost server
/// uses a whole core.
const MAX_CPU_SHARE: f64 = 0.05;
/// How long an outage is measured.
const WINDOW: Duration = Duration::from_secs(6);
/// The connection attempts a process makes in [`WINDOW`] from its first failed one, one per
/// pause of its backoff (100 ms doubling to 2 s: 0.1, 0.3, 0.7, 1.5, 3.1 and 5.1 s after it),
/// and one more for an attempt that falls just inside the window's end.
const MAX_ATTEMPTS: u64 = 7;
/// Deadline for what the tests wait on.
const LIMIT: Duration = Duration::from_secs(60);
/// The measured processes run at the default sweep interval (the suite's is ten times
/// shorter), as they run in production.
const DEFAULT_SWEEP: (&str, &str) = ("HERMES_HOST_SWEEP_INTERVAL_MS", "1000");

/// A throwaway server of the test's own, and a proxy in front of it.
struct Server {
    cluster: Cluster,
    proxy: FaultProxy,
    via: String,
}

impl Server {
    fn start() -> Server {
        let cluster = Cluster::start().expect("a throwaway server starts");
        let (proxy, via) = FaultProxy::in_front_of(&cluster.url()).expect("the proxy starts");
        Server {
            cluster,
            proxy,
            via,
        }
    }

    /// A home that reaches the server through the proxy (whose processes are measured).
    fn behind_proxy(&self) -> Hermes {
        Hermes::sharing(&self.via)
    }

    /// A home that reaches the server directly.
    fn direct(&self) -> Hermes {
        Hermes::sharing(&self.cluster.url())
    }

    /// Stops the server as an operator does (`pg_ctl stop -m fast`).
    fn stop(&self) {
        self.cluster
            .stop_server(StopMode::Fast)
            .expect("the server stops");
    }

    fn start_again(&self) {
        self.cluster.start_again().expect("the server starts again");
    }

    /// Waits until a connection attempt through the proxy fails after `before` attempts.
    fn wait_for_an_attempt_after(&self, before: u64, who: &str) {
        wait_for(LIMIT, &format!("{who} to try to reconnect"), || {
            (self.proxy.accepted() > before).then_some(())
        });
    }
}

/// A process the test started, killed when the test ends however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The CPU time process `pid` used so far, user and system (`/proc/PID/stat`).
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the process runs");
    let fields: Vec<u64> = stat
        .rsplit_once(')')
        .expect("a stat line")
        .1
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // After the command's name: state (3), …, utime (14), stime (15).
    let ticks = fields[11] + fields[12];
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let per_second = u64::try_from(per_second).expect("clock ticks per second");
    Duration::from_millis(ticks * 1_000 / per_second)
}

/// Watches `pid` for [`WINDOW`] of an outage it is already in (it failed to reconnect once):
/// asserts that it kept running, used under [`MAX_CPU_SHARE`] of a core and made between one
/// and [`MAX_ATTEMPTS`] connection attempts, one per pause of its backoff.
fn assert_nearly_idle(pid: u32, server: &Server, who: &str) {
    let (cpu, attempts) = (cpu_time(pid), server.proxy.accepted());
    let end = Instant::now() + WINDOW;
    while Instant::now() < end {
        assert!(process_alive(u64::from(pid)), "{who} runs on");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (cpu, attempts) = (cpu_time(pid) - cpu, server.proxy.accepted() - attempts);
    let share = cpu.as_secs_f64() / WINDOW.as_secs_f64();
    eprintln!(
        "{who}: {:.1} % of a core and {attempts} connection attempts in {} s of outage",
        share * 100.0,
        WINDOW.as_secs()
    );
    assert!(
        share < MAX_CPU_SHARE,
        "{who} used {:.1} % of a core while the server was down",
        share * 100.0
    );
    assert!(
        (1..=MAX_ATTEMPTS).contains(&attempts),
        "{who} made {attempts} connection attempts in {} s",
        WINDOW.as_secs()
    );
}

/// Dispatches `command` (`sh -c`) into `session` from `h`, with `extra` arguments first.
fn dispatch(h: &Hermes, session: &str, extra: &[&str], command: &str) -> String {
    let mut args = vec!["delegate", "--session", session, "--json"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", command]);
    let run = h.run_env(&args, &[DEFAULT_SWEEP]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.json()["delegation_id"].as_str().expect("id").to_owned()
}

/// Drains `session` from `h` until its output shows `line` as a result line.
fn drained_until(h: &Hermes, session: &str, line: &str) -> String {
    let mut drained = String::new();
    wait_for(LIMIT, &format!("{line:?} delivered"), || {
        let run = h.run(&["drain", "--session", session, "--wait", "5"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        drained.push_str(&run.stdout);
        drained.contains(&format!("│ {line}")).then_some(())
    });
    drained
}

#[test]
fn an_idle_worker_whose_server_stops_stays_nearly_idle_and_runs_units_once_it_is_back() {
    let server = Server::start();
    let (machine, dispatcher) = (server.behind_proxy(), server.direct());
    let log = machine.path().join("worker.log");
    let mut command = machine.command(&["worker", "--pool", "op2"]);
    command
        .env(DEFAULT_SWEEP.0, DEFAULT_SWEEP.1)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("the worker's log"));
    let worker = Killed(command.spawn().expect("the worker starts"));
    let pid = worker.0.id();
    wait_for(LIMIT, "the worker to register", || {
        dispatcher.json(&["worker", "list", "--json"])["workers"]
            .as_array()
            .is_some_and(|all| all.iter().any(|w| w["pid"] == pid))
            .then_some(())
    });

    let before = server.proxy.accepted();
    server.stop();
    server.wait_for_an_attempt_after(before, "the worker");
    assert_nearly_idle(pid, &server, "an idle worker");

    server.start_again();
    let id = dispatch(
        &dispatcher,
        "W",
        &["--pool", "op2"],
        "echo after the outage",
    );
    drained_until(&dispatcher, "W", "after the outage");
    let done = dispatcher.json(&["delegation", "status", &id, "--json"]);
    assert_eq!(done["worker"]["pid"], pid, "the same worker ran it: {done}");
}

#[test]
fn a_headless_host_whose_server_stops_stays_nearly_idle_and_hosts_on_once_it_is_back() {
    let server = Server::start();
    let (machine, dispatcher) = (server.behind_proxy(), server.direct());
    let running = dispatch(&machine, "H", &[], "sleep 30");
    let status = |id: &str| dispatcher.json(&["delegation", "status", id, "--json"]);
    wait_for(LIMIT, "the host's child to start", || {
        status(&running)["tasks"][0]["pid"].is_u64().then_some(())
    });
    let pid = *machine.host_pids().first().expect("a host hosts H");
    let pid = u32::try_from(pid).expect("a pid");

    let before = server.proxy.accepted();
    server.stop();
    server.wait_for_an_attempt_after(before, "the host");
    assert_nearly_idle(pid, &server, "a headless host running a child");

    server.start_again();
    dispatch(&dispatcher, "H", &[], "echo after the outage");
    drained_until(&dispatcher, "H", "after the outage");
    assert_eq!(status(&running)["status"], "running", "its child runs on");
    assert_eq!(
        machine.host_pids(),
        vec![u64::from(pid)],
        "the same host hosts H"
    );
}

/// A `drain --wait 60 --json` of session `D` from `h`, its stderr lines sent to the receiver
/// (with the router's debug log, which says when it starts waiting).
fn waiting_drain(h: &Hermes) -> (Killed, Receiver<String>) {
    let mut command = h.command(&["drain", "--session", "D", "--wait", "60", "--json"]);
    command
        .env(DEFAULT_SWEEP.0, DEFAULT_SWEEP.1)
        .env("RUST_LOG", "hermes_router=debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut drain = command.spawn().expect("the drain starts");
    let (said, heard) = std::sync::mpsc::channel();
    let stderr = drain.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = said.send(line);
        }
    });
    (Killed(drain), heard)
}

/// Waits until the drain's stderr said `what`.
fn until_said(heard: &Receiver<String>, what: &str) {
    let deadline = Instant::now() + LIMIT;
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.contains(what)) {
        let left = deadline.saturating_duration_since(Instant::now());
        match heard.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("the drain never said {what:?}: {seen:?}"),
        }
    }
}

/// The drain's JSON once it ended; asserts that it delivered `line`.
fn delivered(drain: Killed, line: &str) {
    let mut drain = drain;
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut drain.0.stdout.take().expect("stdout"), &mut stdout)
        .expect("the drain's output");
    let status = drain.0.wait().expect("the drain ends");
    assert!(status.success(), "{status:?}");
    let json: Value = serde_json::from_str(stdout.trim()).expect("drain --json");
    assert!(json["envelopes"].to_string().contains(line), "{json}");
}

#[test]
fn a_waiting_drain_whose_server_stops_stays_nearly_idle_and_delivers_once_it_is_back() {
    let server = Server::start();
    let (machine, dispatcher) = (server.behind_proxy(), server.direct());
    let (drain, heard) = waiting_drain(&machine);
    until_said(&heard, "waiting for results");

    let before = server.proxy.accepted();
    server.stop();
    server.wait_for_an_attempt_after(before, "the drain");
    assert_nearly_idle(drain.0.id(), &server, "a waiting drain");

    server.start_again();
    dispatch(&dispatcher, "D", &[], "echo after-the-outage");
    delivered(drain, "after-the-outage");
}

#[test]
fn a_drain_waiting_for_a_server_that_is_down_when_it_starts_delivers_once_it_is_up() {
    let server = Server::start();
    let (machine, dispatcher) = (server.behind_proxy(), server.direct());
    server.stop();
    let (drain, _heard) = waiting_drain(&machine);
    server.wait_for_an_attempt_after(0, "the drain");
    assert_nearly_idle(drain.0.id(), &server, "a drain started in an outage");

    server.start_again();
    dispatch(&dispatcher, "D", &[], "echo after-the-outage");
    delivered(drain, "after-the-outage");
}

#[test]
fn a_drain_whose_server_stays_down_waits_out_its_time_then_exits_6_saying_so() {
    let server = Server::start();
    let machine = server.behind_proxy();
    server.stop();
    let started = Instant::now();
    let run = machine.run(&["drain", "--session", "D", "--wait", "3"]);
    run.assert_one_error_line(6);
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "it waited its 3 s: {:?}",
        started.elapsed()
    );
    assert!(
        server.proxy.accepted() >= 2,
        "it looked again while it waited"
    );
    assert!(run.stderr.contains("cannot reach"), "{}", run.stderr);
    assert!(
        run.stderr.contains("still so after waiting 3 s"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("shortly"), "{}", run.stderr);
}

#[test]
fn ledger_info_answers_for_an_unreachable_server_and_names_a_missing_password() {
    // Nothing listens on a port just freed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let nowhere = Hermes::sharing(&format!("postgres://hermes:secret@127.0.0.1:{port}/hermes"));
    let run = nowhere.run(&["ledger", "info", "--json"]);
    run.assert_one_error_line(6);
    let json = run.json();
    assert_eq!(json["reachable"], false, "{json}");
    assert_eq!(json["backend"], "postgres", "{json}");
    assert_eq!(json["code"], 6, "{json}");
    let error = json["error"].as_str().expect("the error");
    assert!(
        error.contains(&format!(
            "cannot reach the PostgreSQL server at 127.0.0.1:{port}"
        )),
        "{error}"
    );
    assert!(!error.contains("secret"), "{error}");

    // The server answers, asking for a password the URL does not give.
    let admin = hermes_testkit::pg_admin_url();
    let (head, rest) = admin.split_once('@').expect("user@host");
    let user = head.rsplit_once(':').expect("user:password").0;
    let without = Hermes::sharing(&format!("{user}@{rest}"));
    let missing = std::path::Path::new("/nonexistent/pgpass");
    let mut command = without.command(&["ledger", "info"]);
    command
        .env_remove("PGPASSWORD")
        .env("PGPASSFILE", missing)
        .env("HOME", without.path());
    let run = crate::common::Run::from(command.output().expect("hermes runs"));
    run.assert_one_error_line(6);
    assert!(
        run.stderr
            .contains("asked for a password and none was given"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("PGPASSWORD"), "{}", run.stderr);
    assert!(!run.stderr.contains("cannot reach"), "{}", run.stderr);
}
