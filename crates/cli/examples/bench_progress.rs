//! Live progress across processes, measured. Prints one JSON object on stdout. Run with
//! `cargo run --release -p hermes-cli --example bench_progress` (what `cargo xtask bench` does).
//!
//! - `progress_visible_ms_p50/p99`: from a child sending a progress message (`{"tool": …}` on
//!   its progress pipe, stamped by the child just before it writes) to the change being
//!   readable in the ledger by another process — this one, reading the child's record every
//!   millisecond. The child runs under a release headless host (`hermes delegate`); 80
//!   messages, 130 ms apart, so they fall at every phase of the host's 100 ms interval.
//! - `progress_visible_ms_p99_100_children`: the same, for a probe child running beside 100
//!   busy children on one host (below).
//! - `progress_writes_per_second_per_host_100_children`: ledger commits per second of one host
//!   (this process's, counted by its own ledger handle) running 100 busy children, each
//!   writing an output line and an `{"api_calls": n}` message every 50 ms (4,000 changes a
//!   second in all), over 10 s: every commit of the host, lease renewals included.

mod support;

use support::release_binary;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, bail};
use hermes_ledger::{
    DelegationId, DispatchSpec, HostKind, Ledger, LedgerConfig, SessionId, TaskSpec,
};
use hermes_registry::{DispatchRequest, Host, HostOptions, SystemClock};
use serde_json::{Value, json};

/// Progress messages the probe child sends, and the pause before each.
const PROBES: u32 = 80;
const PROBE_GAP: &str = "0.13";
/// Busy children beside the probe, and how long their host's commits are counted.
const BUSY: usize = 100;
const WINDOW: Duration = Duration::from_secs(10);

fn main() -> Result<()> {
    let mut figures = serde_json::Map::new();
    let exe = release_binary()?;
    let (p50, p99) = visible_across_processes(&exe)?;
    figures.insert("progress_visible_ms_p50".into(), json!(p50));
    figures.insert("progress_visible_ms_p99".into(), json!(p99));
    let (writes, loaded_p99) = busy_host()?;
    figures.insert(
        "progress_writes_per_second_per_host_100_children".into(),
        json!(writes),
    );
    figures.insert(
        "progress_visible_ms_p99_100_children".into(),
        json!(loaded_p99),
    );
    println!("{}", Value::Object(figures));
    Ok(())
}

/// The probe: `PROBES` tool messages, each stamped (`index nanoseconds`) in `marks` first.
fn probe_script(marks: &Path) -> String {
    format!(
        r#"i=1; while [ $i -le {PROBES} ]; do sleep {PROBE_GAP}
            echo "$i $(date +%s%N)" >> {marks}; echo "{{\"tool\": \"t$i\"}}" >&$HERMES_PROGRESS_FD
            i=$((i+1)); done"#,
        marks = marks.display()
    )
}

/// A busy child: an output line and a progress message every 50 ms, forever.
const BUSY_SCRIPT: &str = r#"$|=1; open(my $p, ">&=", 3) or die; $p->autoflush(1); my $i=0;
    while (1) { print "line $i\n"; print $p "{\"api_calls\": $i}\n"; $i++;
    select(undef, undef, undef, 0.05); }"#;

/// (p50, p99) of the probe's delays, its child running under a release `hermes delegate` host.
fn visible_across_processes(exe: &Path) -> Result<(f64, f64)> {
    let home = support::private_home()?;
    let marks = home.path().join("marks");
    let out = Command::new(exe)
        .args(["delegate", "--session", "bench", "--json", "--", "sh", "-c"])
        .arg(probe_script(&marks))
        .env("HERMES_HOME", home.path())
        .env_remove("HERMES_SESSION_ID")
        .stdin(Stdio::null())
        .output()
        .context("hermes delegate runs")?;
    if !out.status.success() {
        bail!("delegate: {}", String::from_utf8_lossy(&out.stderr));
    }
    let handle: Value = serde_json::from_slice(&out.stdout)?;
    let id = DelegationId::new(handle["delegation_id"].as_str().unwrap_or_default())?;
    let ledger = Ledger::open(&home.path().join("ledger.redb"), LedgerConfig::default())?;
    let seen = watch_tools(&ledger, &id, 0, None)?;
    let delays = delays(&marks, &seen)?;
    Ok((percentile(&delays, 0.5), percentile(&delays, 0.99)))
}

/// Polls child `index` of `id` every millisecond until it ends (or `stop` is set and the last
/// probe was seen), noting when each tool `tN` was first seen (nanoseconds since the epoch).
fn watch_tools(
    ledger: &Ledger,
    id: &DelegationId,
    index: usize,
    stop: Option<&AtomicBool>,
) -> Result<Vec<Option<u128>>> {
    let mut seen: Vec<Option<u128>> = vec![None; PROBES as usize + 1];
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let children = ledger.children(id)?;
        let child = children.get(index).context("the probe child")?;
        if let Some(n) = child
            .progress
            .current_tool
            .as_deref()
            .and_then(|t| t.strip_prefix('t'))
            .and_then(|n| n.parse::<usize>().ok())
            && n < seen.len()
            && seen[n].is_none()
        {
            seen[n] = Some(now_ns());
        }
        let done = child.status.is_terminal() || seen[PROBES as usize].is_some();
        if done || stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
            return Ok(seen);
        }
        if Instant::now() > deadline {
            bail!("the probe did not finish in time");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Milliseconds from each stamped message to its first sighting; a message that was never
/// seen (replaced before it was read) is left out.
fn delays(marks: &Path, seen: &[Option<u128>]) -> Result<Vec<f64>> {
    let text = std::fs::read_to_string(marks).context("the probe's marks")?;
    let mut delays = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(i), Some(sent)) = (words.next(), words.next()) else {
            continue;
        };
        let (i, sent): (usize, u128) = (i.parse()?, sent.parse()?);
        if let Some(Some(at)) = seen.get(i) {
            delays.push(at.saturating_sub(sent) as f64 / 1e6);
        }
    }
    if delays.len() < PROBES as usize * 9 / 10 {
        bail!("only {} of {PROBES} probes were seen", delays.len());
    }
    Ok(delays)
}

/// One host in this process running 100 busy children and the probe: (commits per second,
/// p99 of the probe's delays).
fn busy_host() -> Result<(f64, f64)> {
    let home = support::private_home()?;
    let marks = home.path().join("marks");
    let ledger = Arc::new(Ledger::open(
        &home.path().join("ledger.redb"),
        LedgerConfig::default(),
    )?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut config = hermes_registry::Config::new(home.path());
    config.delegation.max_concurrent_children = BUSY as u32 + 1;
    let session = SessionId::new("busy")?;
    let probe = probe_script(&marks);
    let mut tasks = vec![TaskSpec::new(
        "probe",
        vec!["sh".into(), "-c".into(), probe],
    )];
    for i in 0..BUSY {
        let argv = vec!["perl".into(), "-e".into(), BUSY_SCRIPT.into()];
        tasks.push(TaskSpec::new(format!("busy {i}"), argv));
    }
    runtime.block_on(async {
        let host = Host::start(
            ledger.clone(),
            config,
            Arc::new(SystemClock),
            HostOptions {
                kind: HostKind::Headless,
                session: Some(session.clone()),
                worker: None,
            },
        )
        .await?;
        let dispatched = host
            .dispatch(DispatchRequest::background(
                session,
                DispatchSpec::new("busy", tasks),
            ))
            .await?;
        let id = dispatched.delegation.id.clone();
        let (reader, id2) = (ledger.clone(), id.clone());
        let watcher = std::thread::spawn(move || watch_tools(&reader, &id2, 0, None));
        // Past the starts, into the steady state.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let before = ledger.commits();
        tokio::time::sleep(WINDOW).await;
        let commits = ledger.commits() - before;
        let seen = tokio::task::spawn_blocking(move || watcher.join())
            .await?
            .map_err(|_| anyhow::anyhow!("the watcher panicked"))??;
        host.shutdown("bench").await;
        let delays = delays(&marks, &seen)?;
        Ok((
            round(commits as f64 / WINDOW.as_secs_f64()),
            percentile(&delays, 0.99),
        ))
    })
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn percentile(samples: &[f64], q: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    round(sorted[at])
}

fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}
