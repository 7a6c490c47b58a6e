//! `hermes top` and the metrics, measured on a ledger of 10,000 units of which 500
//! are running. Prints one JSON object on stdout. Run with
//! `cargo run --release -p hermes-cli --example bench_top` (what `cargo xtask bench` does).
//!
//! - `top_refresh_ms_p99_10k`: one refresh of the view — the one ledger read
//!   (`Ledger::overview`), the model and a 200x60 frame drawn on ratatui's test backend —
//!   p99 of 200 (p50 beside it).
//! - `metrics_render_ms_10k`: one answer of a long-lived `/metrics` endpoint — its census
//!   (`Ledger::census`, which skips the units the endpoint holds: every unit here was
//!   dispatched within the base's margin, so none is in the ledger's base yet) and the
//!   exposition text — median of 20, after a first scrape.
//! - `metrics_render_cold_ms_10k`: the first answer, holding nothing (every unit read and
//!   decoded): what `hermes metrics` pays on a ledger whose units are all that recent.
//! - `worker_metrics_cpu_percent`: the CPU (user + system) of a release `hermes worker
//!   --metrics-listen` on that ledger, scraped every second for 30 s, as a percentage of one
//!   core over the window.
//!
//! The view and the renderer are the library's own modules, compiled in here from their files
//! (they are pure: ledger data in, a frame or text out).

mod support;

// Not every item of the library's modules is used by a benchmark.
#[allow(dead_code)]
#[path = "../src/services/metrics/exposition.rs"]
mod exposition;
#[allow(dead_code)]
#[path = "../src/services/overview.rs"]
mod model;
#[allow(dead_code)]
#[path = "../src/services/metrics/render.rs"]
mod render;
#[allow(dead_code)]
#[path = "../src/top/ui.rs"]
mod ui;
#[allow(dead_code)]
#[path = "../src/top/view.rs"]
mod view;
/// `render.rs` and `view.rs` find the model where the library keeps it.
mod services {
    pub(crate) use crate::model as overview;
}

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use hermes_ledger::{
    Capacity, Channel, ChildOutcome, ChildStatus, DispatchSpec, HostId, Ledger, LedgerConfig,
    NewDelegation, ProcessId, TaskSpec, Timestamp,
};
use serde_json::{Value, json};

const TOTAL: usize = 10_000;
const LIVE: usize = 500;
const SEEDERS: usize = 8;
const CPU_WINDOW: Duration = Duration::from_secs(30);

fn now() -> Timestamp {
    Timestamp(
        u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis()),
        )
        .unwrap_or(0),
    )
}

fn main() -> Result<()> {
    let home = support::private_home()?;
    let path = home.path().join("ledger.redb");
    seed(&path)?;
    let ledger = Ledger::open(&path, LedgerConfig::default())?;
    let limits = model::Limits::from_settings(&hermes_settings::Settings::default());
    let mut figures = serde_json::Map::new();

    let mut refreshes = Vec::new();
    let ui = ui::Ui::default();
    let mut terminal =
        ratatui::Terminal::new(ratatui::backend::TestBackend::new(200, 60)).context("backend")?;
    for _ in 0..200 {
        let started = Instant::now();
        let overview = ledger.overview(20)?;
        let at = now();
        let model = model::build(&overview, at, &limits, &|_| false);
        let screen = view::Screen {
            model: &model,
            ui: &ui,
            now: at,
            ledger: "bench",
            log: None,
        };
        terminal.draw(|f| view::draw(f, &screen))?;
        refreshes.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    figures.insert(
        "top_refresh_ms_p99_10k".into(),
        json!(quantile(&mut refreshes, 0.99)),
    );
    figures.insert(
        "top_refresh_ms_p50_10k".into(),
        json!(quantile(&mut refreshes, 0.5)),
    );

    let mut renders = Vec::new();
    let process = render::ProcessCounts::default();
    let mut held = hermes_ledger::Held::default();
    let scrape = |held: &mut hermes_ledger::Held| -> Result<f64> {
        let started = Instant::now();
        let census = ledger.census(now(), held)?;
        let text = render::render(&census, now(), &limits, &|_| false, &process)
            .encode(exposition::Format::Prometheus);
        std::hint::black_box(text);
        Ok(started.elapsed().as_secs_f64() * 1000.0)
    };
    figures.insert(
        "metrics_render_cold_ms_10k".into(),
        json!((scrape(&mut held)? * 100.0).round() / 100.0),
    );
    for _ in 0..20 {
        renders.push(scrape(&mut held)?);
    }
    figures.insert(
        "metrics_render_ms_10k".into(),
        json!(quantile(&mut renders, 0.5)),
    );
    drop(ledger);

    figures.insert(
        "worker_metrics_cpu_percent".into(),
        json!(worker_cpu(home.path())?),
    );
    println!("{}", Value::Object(figures));
    Ok(())
}

fn quantile(samples: &mut [f64], q: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let at = ((samples.len() as f64 - 1.0) * q).round() as usize;
    (samples.get(at).copied().unwrap_or(0.0) * 100.0).round() / 100.0
}

/// 9,500 finished (and delivered) inline units and 500 running ones with a started child, by `SEEDERS`
/// threads (their writes share group commits).
fn seed(path: &Path) -> Result<()> {
    let ledger = std::sync::Arc::new(Ledger::open(path, LedgerConfig::default())?);
    let roomy = Capacity {
        max_running: 100_000,
        max_queued: 100_000,
    };
    let threads: Vec<_> = (0..SEEDERS)
        .map(|t| {
            let ledger = std::sync::Arc::clone(&ledger);
            std::thread::spawn(move || -> Result<()> {
                for i in (t..TOTAL).step_by(SEEDERS) {
                    let goal = format!("seeded unit {i}");
                    let task = TaskSpec::new(goal.clone(), vec!["true".into()]);
                    let at = now();
                    let unit = ledger
                        .dispatch(
                            NewDelegation {
                                id: None,
                                session: None,
                                channel: Channel::Inline,
                                spec: DispatchSpec::new(goal.clone(), vec![task]),
                                host: None,
                                transcript_root: None,
                            },
                            roomy,
                            at,
                        )?
                        .delegation;
                    if i < LIVE {
                        let process = ProcessId {
                            pid: 100_000 + u32::try_from(i)?,
                            start_time: 1,
                        };
                        ledger.child_started(HostId(0), &unit.id, 0, process, at)?;
                    } else {
                        let outcome = ChildOutcome {
                            exit_code: Some(0),
                            started_at: Some(at),
                            result: "ok\n".into(),
                            ..ChildOutcome::new(0, goal, ChildStatus::Completed, at)
                        };
                        ledger.finish_child(HostId(0), &unit.id, outcome, at)?;
                        // As `hermes -z` does once it has printed the result.
                        ledger.settle_inline(&unit.id, at)?;
                    }
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread
            .join()
            .map_err(|_| anyhow::anyhow!("a seeder panicked"))??;
    }
    Ok(())
}

/// CPU of a worker serving `/metrics`, scraped every second.
fn worker_cpu(home: &Path) -> Result<f64> {
    let exe = support::release_binary()?;
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut worker = Command::new(exe)
        .args(["worker", "--pool", "bench", "--metrics-listen"])
        .arg(format!("127.0.0.1:{port}"))
        .env("HERMES_HOME", home)
        .env_remove("HERMES_LEDGER_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let pid = worker.id();
    let result = (|| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while scrape(port).is_err() {
            if Instant::now() > deadline {
                bail!("the worker's /metrics did not answer");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let (cpu0, wall0) = (cpu_ticks(pid)?, Instant::now());
        while wall0.elapsed() < CPU_WINDOW {
            scrape(port)?;
            std::thread::sleep(Duration::from_secs(1));
        }
        let ticks = cpu_ticks(pid)? - cpu0;
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        Ok((ticks as f64 / hz) / wall0.elapsed().as_secs_f64() * 100.0)
    })();
    let _ = worker.kill();
    let _ = worker.wait();
    result.map(|p| (p * 100.0).round() / 100.0)
}

fn scrape(port: u16) -> Result<()> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    if !text.starts_with("HTTP/1.1 200") {
        bail!("the scrape failed: {}", text.lines().next().unwrap_or(""));
    }
    Ok(())
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = stat.rsplit_once(')').context("stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| -> Result<u64> { Ok(fields.get(i).context("stat field")?.parse()?) };
    // After the command: state is field 0, utime 11, stime 12.
    Ok(field(11)? + field(12)?)
}
