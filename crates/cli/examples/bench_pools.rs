//! Worker pools on PostgreSQL, measured with the release `hermes` binary. Prints one
//! JSON object on stdout. Run with `cargo run --release -p hermes-cli --example bench_pools` with
//! `HERMES_BENCH_PG_URL` set to the admin URL of a throwaway server (what `cargo xtask bench`
//! does); each measurement gets a fresh database on it.
//!
//! Every worker runs in a pid namespace of its own (`unshare --pid --fork --mount-proc`), as on
//! a machine of its own; a session on another home dispatches and drains.
//!
//! - `pool_units_per_s_1_worker`, `pool_units_per_s_3_workers`: a burst of `UNITS` pool units
//!   whose child is `true`, dispatched by `DISPATCHERS` concurrent `hermes delegate` loops while
//!   one `drain --wait` loop takes the results; units per second from the first dispatch to the
//!   last result drained (each delivered exactly once, or the run fails). Every worker has
//!   `CAPACITY` slots. `pool_dispatch_only_units_per_s` is the same dispatch with no worker
//!   running (what the dispatching side alone allows), and `pool_backlog_units_per_s_*` the
//!   workers' rate on a backlog already queued (workers started → last result drained).
//!   `pool_scaling_3_vs_1_worker` is the ratio of the two bursts. On stderr: the CPU each
//!   burst cost per unit (hermes commands, workers, PostgreSQL) and how busy the machine was.
//! - `pool_sleep_units_per_s_1_worker`, `pool_sleep_units_per_s_3_workers` (and their
//!   `pool_sleep_scaling_3_vs_1_worker`): the same bursts with `sleep 0.5` as the child, so the
//!   workers' slots are what limits rather than CPU.
//! - `pool_burst_36x05_seconds`: `BURST_UNITS` (36) units of `sleep 0.5` dispatched the same
//!   way to three workers of `CAPACITY` (4) slots, each in its own pid namespace: seconds from
//!   the first dispatch until the last of them was delivered (three waves of 12: 1.5 s of
//!   children at best).
//! - `pool_pickup_ms_p50/p99`: an idle worker; from starting `hermes delegate` to its child
//!   (`date +%s%N`) running, `PICKUP_SAMPLES` samples one after another.
//!   `pool_dispatch_cmd_ms_p50` is the `hermes delegate` command's own wall time; stderr also
//!   shows the pickup counted from the command's exit.

mod support;

use support::release_binary;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};

/// The variable naming the throwaway server's admin URL (`cargo xtask bench` sets it).
const PG_URL_VAR: &str = "HERMES_BENCH_PG_URL";
const POOL: &str = "bench";
/// Under the default queue limit (100 units waiting), which a backlog must not hit.
const UNITS: usize = 90;
const CAPACITY: u32 = 4;
const DISPATCHERS: usize = 4;
const PICKUP_SAMPLES: usize = 40;
/// The child of the `pool_sleep_*` figures.
const SLOW_CHILD: &[&str] = &["sleep", "0.5"];
/// The units of `pool_burst_36x05_seconds`: three waves on three workers of `CAPACITY` slots.
const BURST_UNITS: usize = 36;
const LIMIT: Duration = Duration::from_secs(300);

fn main() -> Result<()> {
    let admin = std::env::var(PG_URL_VAR).ok().filter(|u| !u.is_empty());
    let Some(admin) = admin else {
        bail!(
            "{PG_URL_VAR} is unset: this benchmark runs on PostgreSQL. Run it through `cargo \
             xtask bench`, or start a throwaway server with `eval \"$(cargo xtask pg start)\"` \
             and set {PG_URL_VAR}=$HERMES_TEST_PG_URL"
        );
    };
    let exe = release_binary()?;
    let mut figures = serde_json::Map::new();

    let dispatch_only = Bench::new(&exe, &admin)?.burst(0)?;
    figures.insert(
        "pool_dispatch_only_units_per_s".into(),
        json!(round(dispatch_only)),
    );
    let mut by_workers = BTreeMap::new();
    for workers in [1usize, 3] {
        let rate = Bench::new(&exe, &admin)?.burst(workers)?;
        by_workers.insert(workers, rate);
        figures.insert(
            format!(
                "pool_units_per_s_{workers}_worker{}",
                if workers == 1 { "" } else { "s" }
            ),
            json!(round(rate)),
        );
        let backlog = Bench::new(&exe, &admin)?.backlog(workers)?;
        figures.insert(
            format!(
                "pool_backlog_units_per_s_{workers}_worker{}",
                if workers == 1 { "" } else { "s" }
            ),
            json!(round(backlog)),
        );
    }
    figures.insert(
        "pool_scaling_3_vs_1_worker".into(),
        json!(round(by_workers[&3] / by_workers[&1])),
    );
    // The same bursts with children that take a while: the workers' slots, not the CPU the
    // dispatch, the server and the workers share, are what limits.
    let slow_one = Bench::new(&exe, &admin)?.burst_of(1, SLOW_CHILD)?;
    let slow_three = Bench::new(&exe, &admin)?.burst_of(3, SLOW_CHILD)?;
    figures.insert(
        "pool_sleep_units_per_s_1_worker".into(),
        json!(round(slow_one)),
    );
    figures.insert(
        "pool_sleep_units_per_s_3_workers".into(),
        json!(round(slow_three)),
    );
    figures.insert(
        "pool_sleep_scaling_3_vs_1_worker".into(),
        json!(round(slow_three / slow_one)),
    );
    let burst = Bench::new(&exe, &admin)?.timed_burst(3, SLOW_CHILD, BURST_UNITS)?;
    figures.insert(
        "pool_burst_36x05_seconds".into(),
        json!(round(burst.as_secs_f64())),
    );
    let (p50, p99, command) = Bench::new(&exe, &admin)?.pickup()?;
    figures.insert("pool_pickup_ms_p50".into(), json!(p50));
    figures.insert("pool_pickup_ms_p99".into(), json!(p99));
    figures.insert("pool_dispatch_cmd_ms_p50".into(), json!(command));
    println!("{}", Value::Object(figures));
    Ok(())
}

/// One measurement: a fresh database, a dispatching home, and the workers it starts.
struct Bench {
    exe: PathBuf,
    url: String,
    dispatcher: tempfile::TempDir,
    workers: Vec<Worker>,
}

impl Bench {
    fn new(exe: &Path, admin: &str) -> Result<Bench> {
        Ok(Bench {
            exe: exe.to_owned(),
            url: hermes_testkit::fresh_database(admin),
            dispatcher: support::private_home()?,
            workers: Vec::new(),
        })
    }

    fn command(&self, home: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(&self.exe);
        c.args(args)
            .env("HERMES_HOME", home)
            .env("HERMES_LEDGER_URL", &self.url)
            .env_remove("HERMES_SESSION_ID")
            .env_remove("HERMES_SESSION_KEY")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        c
    }

    /// Runs a command of the dispatching home; its JSON output.
    fn run(&self, args: &[&str]) -> Result<Value> {
        let out = self
            .command(self.dispatcher.path(), args)
            .output()
            .context("hermes runs")?;
        if !out.status.success() {
            bail!("{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        serde_json::from_slice(&out.stdout).with_context(|| format!("{args:?} printed no JSON"))
    }

    /// Starts `n` workers, each in a pid namespace of its own, one after another (each is pid
    /// 2 of its namespace: two must not start in the same clock tick), and waits until the
    /// dispatching home sees them all.
    fn start_workers(&mut self, n: usize) -> Result<()> {
        self.spawn_workers(n, true)
    }

    /// Starts `n` workers; `settle`: wait for each to register before the next starts,
    /// otherwise only 20 ms apart (enough for distinct start ticks).
    fn spawn_workers(&mut self, n: usize, settle: bool) -> Result<()> {
        for _ in 0..n {
            let home = support::private_home()?;
            let capacity = CAPACITY.to_string();
            let mut c = Command::new("unshare");
            c.args(["--pid", "--fork", "--mount-proc", "--kill-child"])
                .arg(&self.exe)
                .args(["worker", "--pool", POOL, "--capacity", &capacity])
                .env("HERMES_HOME", home.path())
                .env("HERMES_LEDGER_URL", &self.url)
                .env_remove("HERMES_SESSION_ID")
                .env_remove("HERMES_SESSION_KEY")
                .env_remove("RUST_LOG")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let process = c
                .spawn()
                .context("unshare starts (it needs util-linux and root)")?;
            self.workers.push(Worker {
                process,
                _home: home,
            });
            if !settle {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            let live = self.workers.len();
            wait(Duration::from_secs(30), "the workers to register", || {
                let listed = self.run(&["worker", "list", "--pool", POOL, "--json"])?;
                Ok(listed["workers"].as_array().map_or(0, Vec::len) == live)
            })?;
        }
        Ok(())
    }

    /// Dispatches `UNITS` units of `true` from `DISPATCHERS` concurrent loops while one loop
    /// drains; units per second from the first dispatch to the last result drained. With no
    /// workers: the dispatch alone (first dispatch to last dispatch returned).
    fn burst(self, workers: usize) -> Result<f64> {
        self.burst_of(workers, &["true"])
    }

    /// `burst` with `child` as every unit's command.
    fn burst_of(self, workers: usize, child: &[&str]) -> Result<f64> {
        let elapsed = self.timed_burst(workers, child, UNITS)?;
        Ok(UNITS as f64 / elapsed.as_secs_f64())
    }

    /// A burst of `units` units of `child`: the time from the first dispatch to the last
    /// result drained (to the last dispatch returned, with no workers).
    fn timed_burst(mut self, workers: usize, child: &[&str], units: usize) -> Result<Duration> {
        self.start_workers(workers)?;
        let next = AtomicUsize::new(0);
        let before = Cpu::now(&self)?;
        let started = Instant::now();
        let (dispatched, drained) = std::thread::scope(|s| {
            let dispatchers: Vec<_> = (0..DISPATCHERS)
                .map(|_| {
                    s.spawn(|| -> Result<Vec<String>> {
                        let mut ids = Vec::new();
                        while next.fetch_add(1, Ordering::Relaxed) < units {
                            ids.push(self.dispatch(child)?);
                        }
                        Ok(ids)
                    })
                })
                .collect();
            let drainer = (workers > 0).then(|| s.spawn(|| self.drain(units)));
            let mut ids = Vec::new();
            for d in dispatchers {
                ids.extend(
                    d.join()
                        .map_err(|_| anyhow::anyhow!("a dispatcher panicked"))??,
                );
            }
            let dispatched = started.elapsed();
            let drained = match drainer {
                Some(d) => Some(
                    d.join()
                        .map_err(|_| anyhow::anyhow!("the drain panicked"))??,
                ),
                None => None,
            };
            anyhow::Ok((dispatched, drained))
        })?;
        Ok(match drained {
            None => {
                Cpu::now(&self)?.report_since(&before, workers, units, dispatched);
                dispatched
            }
            Some(delivered) => {
                let elapsed = started.elapsed();
                Cpu::now(&self)?.report_since(&before, workers, units, elapsed);
                eprintln!(
                    "bench_pools: {units} units of {child:?} on {workers} worker(s) x \
                     {CAPACITY}: dispatched in {:.2}s, all drained after {:.2}s ({} drain calls)",
                    dispatched.as_secs_f64(),
                    elapsed.as_secs_f64(),
                    delivered
                );
                elapsed
            }
        })
    }

    /// `UNITS` units queued with no worker running; then the workers start, and the rate is
    /// from the first worker's start to the last result drained.
    fn backlog(mut self, workers: usize) -> Result<f64> {
        for _ in 0..UNITS {
            self.dispatch(&["true"])?;
        }
        let started = Instant::now();
        self.spawn_workers(workers, false)?;
        self.drain(UNITS)?;
        Ok(UNITS as f64 / started.elapsed().as_secs_f64())
    }

    /// Dispatches `command` into session `S` on the pool; its delegation id.
    fn dispatch(&self, command: &[&str]) -> Result<String> {
        let mut args = vec!["delegate", "--session", "S", "--pool", POOL, "--json", "--"];
        args.extend_from_slice(command);
        let handle = self.run(&args)?;
        Ok(handle["delegation_id"]
            .as_str()
            .context("dispatch printed no delegation id")?
            .to_owned())
    }

    /// Drains session `S` until `n` results arrived, each once; returns the drain calls made.
    fn drain(&self, n: usize) -> Result<usize> {
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        let deadline = Instant::now() + LIMIT;
        let mut calls = 0;
        while seen.len() < n {
            if Instant::now() > deadline {
                bail!("only {} of {n} results arrived", seen.len());
            }
            calls += 1;
            let drained = self.run(&["drain", "--session", "S", "--json", "--wait", "10"])?;
            for envelope in drained["envelopes"].as_array().context("envelopes")? {
                let id = envelope["delegation_id"].as_str().context("id")?.to_owned();
                let text = envelope["text"].as_str().unwrap_or_default().to_owned();
                if seen.insert(id.clone(), text).is_some() {
                    bail!("{id} was delivered twice");
                }
            }
        }
        if let Some((id, text)) = seen.iter().find(|(_, t)| !t.contains("Status: completed")) {
            bail!("{id} did not complete: {text}");
        }
        Ok(calls)
    }

    /// One idle worker; from starting `hermes delegate` to the child running: (p50, p99) and
    /// the dispatch command's own p50, in milliseconds.
    fn pickup(mut self) -> Result<(f64, f64, f64)> {
        self.start_workers(1)?;
        // A first unit, not counted: the worker's first pickup.
        self.dispatch(&["true"])?;
        self.drain(1)?;
        let (mut pickups, mut commands, mut after) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..PICKUP_SAMPLES {
            let before = epoch_ns();
            self.dispatch(&["date", "+%s%N"])?;
            let returned = epoch_ns();
            commands.push(returned.saturating_sub(before) as f64 / 1e6);
            let drained = self.run(&["drain", "--session", "S", "--json", "--wait", "30"])?;
            let envelopes = drained["envelopes"].as_array().context("envelopes")?;
            let [envelope] = envelopes.as_slice() else {
                bail!("expected one result, got {}", envelopes.len());
            };
            let text = envelope["text"].as_str().unwrap_or_default();
            let child: u128 = text
                .split_whitespace()
                .find(|w| w.len() >= 19 && w.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|w| w.parse().ok())
                .with_context(|| format!("no timestamp in the result: {text}"))?;
            pickups.push(child.saturating_sub(before) as f64 / 1e6);
            // Negative when the child started before the dispatch command had exited.
            after.push((child as f64 - returned as f64) / 1e6);
        }
        eprintln!(
            "bench_pools: pickup after the dispatch command exited: p50 {:.2} ms, p99 {:.2} ms",
            percentile(&after, 0.5),
            percentile(&after, 0.99)
        );
        eprintln!(
            "bench_pools: pickup samples (ms): {:?}",
            pickups.iter().map(|ms| round(*ms)).collect::<Vec<_>>()
        );
        Ok((
            round(percentile(&pickups, 0.5)),
            round(percentile(&pickups, 0.99)),
            round(percentile(&commands, 0.5)),
        ))
    }
}

/// CPU time, in clock ticks: what the machine's cores did in all (busy and total, every
/// process of every user), the PostgreSQL server (its processes, ended backends included),
/// the workers (their children included), and this process's ended children (the dispatch
/// and drain commands).
struct Cpu {
    machine_busy: u64,
    machine_total: u64,
    server: u64,
    workers: u64,
    commands: u64,
}

impl Cpu {
    fn now(bench: &Bench) -> Result<Cpu> {
        let stat = std::fs::read_to_string("/proc/stat")?;
        let fields: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .filter_map(|f| f.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal
        let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
        let total: u64 = fields.iter().take(8).sum();
        let port = bench
            .url
            .rsplit_once(':')
            .and_then(|(_, rest)| rest.split('/').next())
            .unwrap_or_default()
            .to_owned();
        let mut server = 0;
        let mut postmaster = None;
        for (pid, cmdline) in processes() {
            if cmdline.contains("postgres") && cmdline.ends_with(&format!("-p {port}")) {
                postmaster = Some(pid);
                server += ticks(pid, true);
            }
        }
        if let Some(postmaster) = postmaster {
            for (pid, _) in processes() {
                if parent(pid) == Some(postmaster) {
                    server += ticks(pid, false);
                }
            }
        }
        let mut workers = 0;
        for w in &bench.workers {
            let unshare = w.process.id();
            let children =
                std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children"))
                    .unwrap_or_default();
            for pid in children.split_whitespace().filter_map(|p| p.parse().ok()) {
                workers += ticks(pid, true);
            }
        }
        // SAFETY: getrusage(2) fills the struct it is given.
        let commands = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
            let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
            (us(usage.ru_utime) + us(usage.ru_stime)) / 10_000
        };
        Ok(Cpu {
            machine_busy: total - idle,
            machine_total: total,
            server,
            workers,
            commands,
        })
    }

    /// Prints where the CPU time of a burst of `units` went, per unit, and how busy the
    /// machine was.
    fn report_since(&self, before: &Cpu, workers: usize, units: usize, elapsed: Duration) {
        let ms = |ticks: u64| ticks as f64 * 10.0 / units as f64;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let busy = (self.machine_busy - before.machine_busy) as f64;
        let total = (self.machine_total - before.machine_total) as f64;
        eprintln!(
            "bench_pools: {workers} worker(s), {:.2}s: CPU per unit: hermes commands {:.1} ms, \
             workers {:.1} ms, PostgreSQL {:.1} ms; the machine's {cores} cores {:.0}% busy \
             (every process of every user; {:.1} core-seconds)",
            elapsed.as_secs_f64(),
            ms(self.commands - before.commands),
            ms(self.workers - before.workers),
            ms(self.server - before.server),
            100.0 * busy / total.max(1.0),
            busy / 100.0,
        );
    }
}

/// Every process: pid and command line (arguments joined by spaces).
fn processes() -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        Some((pid, cmdline.trim_end().to_owned()))
    })
    .collect()
}

/// The fields of `/proc/PID/stat` after the command name.
fn stat_fields(pid: u32) -> Vec<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.to_owned()))
        .map(|rest| {
            rest.split_whitespace()
                .map(|f| f.parse().unwrap_or(0))
                .collect()
        })
        .unwrap_or_default()
}

fn parent(pid: u32) -> Option<u32> {
    stat_fields(pid).get(1).map(|p| *p as u32)
}

/// A process's CPU ticks (utime + stime), with its reaped children's when `children`.
fn ticks(pid: u32, children: bool) -> u64 {
    let f = stat_fields(pid);
    // After the name: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14).
    let own = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    let reaped = f.get(13).copied().unwrap_or(0) + f.get(14).copied().unwrap_or(0);
    own + if children { reaped } else { 0 }
}

/// A worker in its own pid namespace, killed (with its namespace) when dropped.
struct Worker {
    process: Child,
    _home: tempfile::TempDir,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // SIGTERM to `unshare` ends its child (`--kill-child`), the namespace's pid 1.
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

fn epoch_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn wait(limit: Duration, what: &str, mut done: impl FnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + limit;
    while !done()? {
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn percentile(samples: &[f64], q: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
    sorted.get(at).copied().unwrap_or(f64::NAN)
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
