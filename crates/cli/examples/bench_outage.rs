//! What a PostgreSQL outage costs the long-lived processes (issue 42): an idle worker, a
//! headless host running a child and a waiting `drain --wait`, all of the release `hermes`
//! binary at the default settings, on a throwaway server of this harness's own (the run's
//! server stays up for the other harnesses), each reaching it through a proxy of its own that
//! counts its connection attempts. The server is stopped under them (`pg_ctl stop -m fast`),
//! and once each has failed to reconnect, [`WINDOW`] is measured; then the server starts
//! again and each is checked to carry on (the host and the drain deliver a unit dispatched
//! after the outage; the worker runs one). Prints one JSON object on stdout:
//!
//! - `outage_cpu_percent_worker`, `outage_cpu_percent_host`, `outage_cpu_percent_drain`: CPU
//!   time (user + system, `/proc/PID/stat`) over the window, in percent of one core;
//! - `outage_connect_attempts_worker`, `…_host`, `…_drain`: connections each opened in the
//!   window (one per pause of its backoff: 100 ms doubling to 2 s, so at most 8 in 10 s);
//! - `idle_cpu_percent_worker`, `…_host`, `…_drain`: the same processes over as long a window
//!   before the outage, with the server up, to compare with.
//!
//! Run with `cargo run --release -p hermes-cli --example bench_outage` (what `cargo xtask bench`
//! does); it needs Debian's PostgreSQL server binaries, as the tests do.

mod support;

use std::path::{Path, PathBuf};

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use hermes_pgcluster::{Cluster, FaultProxy, StopMode};
use serde_json::{Map, Value, json};

/// How long each process is measured, with the server up and during the outage.
const WINDOW: Duration = Duration::from_secs(10);
/// Deadline for what the harness waits on.
const LIMIT: Duration = Duration::from_secs(60);

/// One measured process: its home, the proxy it reaches the server through, the process.
struct Measured {
    name: &'static str,
    home: tempfile::TempDir,
    proxy: FaultProxy,
    via: String,
    process: Option<Child>,
    pid: u32,
}

impl Drop for Measured {
    fn drop(&mut self) {
        if let Some(child) = self.process.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // A host `delegate` started is no child of ours.
        if self.process.is_none() && self.pid != 0 {
            let _ = Command::new("kill").arg(self.pid.to_string()).status();
        }
    }
}

fn main() -> Result<()> {
    let exe = support::release_binary()?;
    let cluster = Cluster::start().context("a throwaway server for the outage")?;
    let direct = Direct {
        exe: exe.clone(),
        url: cluster.url(),
        home: support::private_home()?,
    };
    let mut measured = vec![
        worker(&exe, &direct)?,
        host(&exe, &direct)?,
        drain(&exe, &direct)?,
    ];
    let mut figures = Map::new();
    let idle = window(&measured)?;
    let attempts: Vec<u64> = measured.iter().map(|m| m.proxy.accepted()).collect();
    cluster.stop_server(StopMode::Fast)?;
    for (m, before) in measured.iter().zip(attempts) {
        wait(&format!("the {} to try to reconnect", m.name), || {
            Ok(m.proxy.accepted() > before)
        })?;
    }
    let attempts: Vec<u64> = measured.iter().map(|m| m.proxy.accepted()).collect();
    let outage = window(&measured)?;
    for ((m, before), (idle, outage)) in measured.iter().zip(attempts).zip(idle.iter().zip(outage))
    {
        figures.insert(format!("idle_cpu_percent_{}", m.name), json!(idle));
        figures.insert(format!("outage_cpu_percent_{}", m.name), json!(outage));
        figures.insert(
            format!("outage_connect_attempts_{}", m.name),
            json!(m.proxy.accepted() - before),
        );
    }
    cluster.start_again()?;
    carried_on(&direct, &mut measured)?;
    drop(measured);
    drop(direct);
    println!("{}", Value::Object(figures));
    Ok(())
}

/// Each process's CPU over [`WINDOW`], in percent of one core (one decimal).
fn window(measured: &[Measured]) -> Result<Vec<f64>> {
    let before: Vec<Duration> = measured
        .iter()
        .map(|m| cpu_time(m.pid))
        .collect::<Result<_>>()?;
    let end = Instant::now() + WINDOW;
    while Instant::now() < end {
        for m in measured {
            cpu_time(m.pid).with_context(|| format!("the {} ended", m.name))?;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    measured
        .iter()
        .zip(before)
        .map(|(m, before)| {
            let used = cpu_time(m.pid)? - before;
            Ok((used.as_secs_f64() / WINDOW.as_secs_f64() * 1000.0).round() / 10.0)
        })
        .collect()
}

/// The CPU time process `pid` used so far, user and system.
fn cpu_time(pid: u32) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("process {pid}"))?;
    let fields: Vec<u64> = stat
        .rsplit_once(')')
        .context("a stat line")?
        .1
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // After the command's name: state (3), …, utime (14), stime (15).
    let ticks = fields.get(11).zip(fields.get(12)).map(|(u, s)| u + s);
    // SAFETY: sysconf has no preconditions.
    let per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })?;
    Ok(Duration::from_millis(
        ticks.context("utime and stime")? * 1_000 / per_second.max(1),
    ))
}

/// A home reaching `url` through a proxy of its own.
fn measured(name: &'static str, url: &str) -> Result<Measured> {
    let (proxy, via) = FaultProxy::in_front_of(url)?;
    Ok(Measured {
        name,
        home: support::private_home()?,
        proxy,
        via,
        process: None,
        pid: 0,
    })
}

/// `hermes ARGS` in `m`'s home on `m`'s URL.
fn command(exe: &Path, m: &Measured, args: &[&str]) -> Command {
    let mut command = Command::new(exe);
    command
        .args(args)
        .env("HERMES_HOME", m.home.path())
        .env("HERMES_LEDGER_URL", &m.via)
        .env_remove("HERMES_SESSION_ID")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    command
}

/// The home the harness dispatches and looks from, reaching the server directly.
struct Direct {
    exe: PathBuf,
    url: String,
    home: tempfile::TempDir,
}

impl Drop for Direct {
    fn drop(&mut self) {
        // The host a dispatch of this home started.
        if let Ok(sessions) = self.run(&["session", "list", "--json"]) {
            for pid in sessions["sessions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s["host_pid"].as_u64())
            {
                let _ = Command::new("kill").arg(pid.to_string()).status();
            }
        }
    }
}

impl Direct {
    /// `hermes ARGS`; its JSON.
    fn run(&self, args: &[&str]) -> Result<Value> {
        let out = Command::new(&self.exe)
            .args(args)
            .env("HERMES_HOME", self.home.path())
            .env("HERMES_LEDGER_URL", &self.url)
            .env_remove("HERMES_SESSION_ID")
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            bail!("{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(serde_json::from_slice(&out.stdout).unwrap_or(Value::Null))
    }
}

fn worker(exe: &Path, direct: &Direct) -> Result<Measured> {
    let mut m = measured("worker", &direct.url)?;
    let child = command(exe, &m, &["worker", "--pool", "outage"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    m.pid = child.id();
    m.process = Some(child);
    let pid = m.pid;
    wait("the worker to register", || {
        let workers = direct.run(&["worker", "list", "--json"])?;
        Ok(workers["workers"]
            .as_array()
            .is_some_and(|all| all.iter().any(|w| w["pid"] == pid)))
    })?;
    Ok(m)
}

fn host(exe: &Path, direct: &Direct) -> Result<Measured> {
    let mut m = measured("host", &direct.url)?;
    let out = command(exe, &m, &["delegate", "--session", "H", "--json", "--"])
        .args(["sleep", "600"])
        .output()?;
    if !out.status.success() {
        bail!("delegate: {}", String::from_utf8_lossy(&out.stderr));
    }
    let handle: Value = serde_json::from_slice(&out.stdout)?;
    let id = handle["delegation_id"]
        .as_str()
        .context("an id")?
        .to_owned();
    wait("the host's child to start", || {
        let status = direct.run(&["delegation", "status", &id, "--json"])?;
        Ok(status["tasks"][0]["pid"].is_u64())
    })?;
    let sessions = direct.run(&["session", "list", "--json"])?;
    m.pid = sessions["sessions"]
        .as_array()
        .and_then(|all| all.iter().find_map(|s| s["host_pid"].as_u64()))
        .and_then(|pid| u32::try_from(pid).ok())
        .context("the host's pid")?;
    Ok(m)
}

fn drain(exe: &Path, direct: &Direct) -> Result<Measured> {
    let mut m = measured("drain", &direct.url)?;
    let child = command(exe, &m, &["drain", "--session", "D", "--wait", "600"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    m.pid = child.id();
    m.process = Some(child);
    // Waiting: it listens on a connection of its own.
    wait("the drain to connect", || Ok(m.proxy.accepted() > 0))?;
    Ok(m)
}

/// After the outage: the worker runs a unit of its pool, the host a unit of its session, and
/// the drain delivers a unit of its own.
fn carried_on(direct: &Direct, measured: &mut [Measured]) -> Result<()> {
    let pooled = direct.run(&[
        "delegate",
        "--session",
        "W",
        "--pool",
        "outage",
        "--json",
        "--",
        "true",
    ])?;
    let hosted = direct.run(&["delegate", "--session", "H", "--json", "--", "true"])?;
    direct.run(&["delegate", "--session", "D", "--json", "--", "true"])?;
    for handle in [pooled, hosted] {
        let id = handle["delegation_id"]
            .as_str()
            .context("an id")?
            .to_owned();
        wait("a unit dispatched after the outage to complete", || {
            let status = direct.run(&["delegation", "status", &id, "--json"])?;
            Ok(status["status"] == "completed")
        })?;
    }
    let m = measured
        .iter_mut()
        .find(|m| m.name == "drain")
        .context("the drain")?;
    m.pid = 0;
    let drain = m.process.take().context("the drain")?;
    let out = drain.wait_with_output()?;
    if !out.status.success() || !String::from_utf8_lossy(&out.stdout).contains("Status: completed")
    {
        bail!(
            "the drain did not deliver after the outage ({})",
            out.status
        );
    }
    Ok(())
}

/// Polls `f` every 100 ms until it holds, for at most [`LIMIT`].
fn wait(what: &str, mut f: impl FnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + LIMIT;
    while !f()? {
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}
