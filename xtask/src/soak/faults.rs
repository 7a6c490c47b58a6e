//! The soak's faults, drawn from its seed: backends of the soak's database ended from an
//! admin connection (one at a time, or all at once), the hermes processes' traffic
//! black-holed for a few seconds (through the fault proxy every hermes process reaches the
//! server by; lifted with the connections it swallowed bytes of dropped), every proxied
//! connection dropped, and server restarts (fast, or stopped — fast or as a crash — for a few
//! seconds and started again).

use std::process::Command;
use std::time::{Duration, Instant};

use hermes_pgcluster::{Cluster, FaultProxy, StopMode};

use super::procs::{Phase, Shared, nap, run_limited};

/// How long one admin statement may take (a server being restarted answers nothing).
const ADMIN_LIMIT: Duration = Duration::from_secs(10);

/// The admin side: `psql` as the cluster's superuser, straight to the server (not through the
/// proxy), on the `postgres` database.
pub(super) struct Admin {
    pub(super) psql: std::path::PathBuf,
    pub(super) url: String,
}

impl Admin {
    /// Runs `sql`, returning what it printed (unaligned, tuples only), or why it failed.
    pub(super) fn query(&self, shared: &Shared, sql: &str) -> Result<String, String> {
        let mut command = Command::new(&self.psql);
        command
            .args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .arg(format!("{}?connect_timeout=5", self.url))
            .env_remove("PGPASSWORD")
            .env_remove("PGSERVICE");
        let ran = run_limited(shared, "", command, ADMIN_LIMIT);
        match ran.code {
            Some(0) => Ok(ran.stdout.trim().to_owned()),
            _ => Err(ran.stderr.trim().to_owned()),
        }
    }

    /// Ends hermes' backends of `database` (one chosen at random, or all), returning how many.
    fn terminate(&self, shared: &Shared, database: &str, all: bool) -> Result<u64, String> {
        let limit = if all { "" } else { "ORDER BY random() LIMIT 1" };
        let sql = format!(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) AS ended \
             FROM pg_stat_activity WHERE datname = '{database}' \
             AND application_name = 'hermes' AND backend_type = 'client backend' \
             AND pid <> pg_backend_pid() {limit}) k WHERE ended"
        );
        let out = self.query(shared, &sql)?;
        out.parse().map_err(|_| format!("psql printed {out:?}"))
    }
}

/// How often each kind comes, and how long a black hole or an outage lasts.
#[derive(Clone, Copy, Debug)]
pub(super) struct Schedule {
    /// Between two fault steps (a kill is a step).
    pub(super) step_ms: (u64, u64),
    /// Between two black holes.
    pub(super) black_hole_every_ms: (u64, u64),
    pub(super) black_hole_ms: (u64, u64),
    /// Between two server restarts or outages.
    pub(super) restart_every_ms: (u64, u64),
    /// How long a stopped server stays down.
    pub(super) outage_ms: (u64, u64),
}

impl Schedule {
    pub(super) const DEFAULT: Schedule = Schedule {
        step_ms: (10, 110),
        black_hole_every_ms: (8_000, 20_000),
        black_hole_ms: (1_000, 6_000),
        restart_every_ms: (25_000, 50_000),
        outage_ms: (2_000, 12_000),
    };
    /// The short mode's: the same kinds, more often, so a 30 s run sees each.
    pub(super) const SHORT: Schedule = Schedule {
        step_ms: (10, 110),
        black_hole_every_ms: (4_000, 8_000),
        black_hole_ms: (1_000, 4_000),
        restart_every_ms: (9_000, 14_000),
        outage_ms: (2_000, 6_000),
    };
}

/// Injects faults until the run leaves [`Phase::Faults`], then lifts any black hole and makes
/// sure the server runs.
pub(super) fn inject(
    shared: &Shared,
    cluster: &Cluster,
    proxy: &FaultProxy,
    admin: &Admin,
    database: &str,
    schedule: Schedule,
    seed: u64,
) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut draw = |(low, high): (u64, u64)| Duration::from_millis(rng.u64(low..=high));
    let mut next_restart = Instant::now() + draw(schedule.restart_every_ms);
    let mut next_black_hole = Instant::now() + draw(schedule.black_hole_every_ms);
    let mut black_hole_until: Option<Instant> = None;
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed);
    while shared.phase() == Phase::Faults {
        let now = Instant::now();
        if black_hole_until.is_some_and(|until| now >= until) {
            lift(shared, proxy);
            black_hole_until = None;
        }
        if black_hole_until.is_none() && now >= next_restart {
            outage(shared, cluster, &mut rng, schedule);
            next_restart = Instant::now() + draw(schedule.restart_every_ms);
        } else if black_hole_until.is_none() && now >= next_black_hole {
            proxy.black_hole();
            shared.count_fault("black_hole");
            black_hole_until = Some(now + draw(schedule.black_hole_ms));
            next_black_hole = now + draw(schedule.black_hole_every_ms);
        } else if rng.u8(..100) < 5 {
            let before = proxy.faults();
            proxy.drop_all();
            if proxy.faults() > before {
                shared.count_fault("proxy_drop_all");
                shared.journal().last_fault_end_ms = Some(shared.now_ms());
            }
        } else {
            let all = rng.u8(..100) < 15;
            if let Ok(ended) = admin.terminate(shared, database, all)
                && ended > 0
            {
                shared.count_fault(if all {
                    "kill_all_backends"
                } else {
                    "kill_backend"
                });
                let mut journal = shared.journal();
                journal.backends_terminated += ended;
                journal.last_fault_end_ms = Some(shared.now_ms());
            }
        }
        nap(
            shared,
            draw(schedule.step_ms).as_millis() as u64,
            Phase::Quiet,
        );
    }
    if black_hole_until.is_some() {
        lift(shared, proxy);
    }
    if !cluster.is_running() {
        // An outage's start failed: the quiet period needs the server.
        let _ = cluster.start_again();
    }
}

/// Ends a black hole: traffic passes again, and the connections whose bytes it swallowed are
/// dropped (a message the server never got would leave its client waiting forever on a peer
/// that keeps acknowledging TCP; a real partition loses no bytes, so nothing models it better).
fn lift(shared: &Shared, proxy: &FaultProxy) {
    proxy.pass();
    proxy.drop_all();
    shared.journal().last_fault_end_ms = Some(shared.now_ms());
}

/// A server restart (fast), or a stop (fast, or immediate: a crash) for a few seconds and a
/// start.
fn outage(shared: &Shared, cluster: &Cluster, rng: &mut fastrand::Rng, schedule: Schedule) {
    let result = match rng.u8(..3) {
        0 => cluster.restart(StopMode::Fast).map(|()| "server_restart"),
        kind => {
            let mode = if kind == 1 {
                StopMode::Fast
            } else {
                StopMode::Immediate
            };
            let down = rng.u64(schedule.outage_ms.0..=schedule.outage_ms.1);
            cluster
                .stop_server(mode)
                .and_then(|()| {
                    std::thread::sleep(Duration::from_millis(down));
                    cluster.start_again()
                })
                .map(|()| {
                    if kind == 1 {
                        "server_stop_start"
                    } else {
                        "server_crash_start"
                    }
                })
        }
    };
    match result {
        Ok(kind) => shared.count_fault(kind),
        Err(err) => {
            eprintln!("xtask: soak: a server outage failed: {err}");
            shared.count_fault("server_outage_failed");
            if !cluster.is_running() {
                let _ = cluster.start_again();
            }
        }
    }
    shared.journal().last_fault_end_ms = Some(shared.now_ms());
}
