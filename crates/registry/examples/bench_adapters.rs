//! Measures the agent stream adapters and prints one JSON object:
//!
//! - `adapter_lines_per_s`: lines of a documented Claude Code stream (`system`, `assistant`
//!   text and tool calls, `user` tool results, `result`) read per second by one adapter on one
//!   core, every readable transcript line formatted as the transcript writes it; the Codex and
//!   Gemini figures likewise (`adapter_codex_lines_per_s`, `adapter_gemini_lines_per_s`).
//! - `host_cpu_pct_100_idle_adapted_children` / `host_rss_mb_100_idle_adapted_children`: this
//!   process's own CPU (% of one core) and resident set over 10 s with 100 background units,
//!   each an agent child (the claude adapter) that printed its init event and went quiet.
//!
//! Run with `cargo run --release -p hermes-registry --example bench_adapters`. `BENCH_QUICK=1`
//! shortens the runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_ledger::{
    DispatchSpec, HostKind, InterruptTarget, Ledger, LedgerConfig, SessionId, TaskSpec,
};
use hermes_registry::agent::{AgentStream, Sink, adapter_by_name};
use hermes_registry::{Config, DispatchRequest, Host, HostOptions, SystemClock};

/// Formats lines as the transcript does, into a buffer reused per chunk.
struct Lines {
    out: Vec<u8>,
    raw: usize,
}

impl Sink for Lines {
    fn line(&mut self, tag: &'static str, text: &str) {
        self.out.extend_from_slice(b"12:01:03 ");
        self.out.extend_from_slice(tag.as_bytes());
        self.out.extend_from_slice(b" | ");
        self.out.extend_from_slice(text.as_bytes());
        self.out.push(b'\n');
    }
    fn raw(&mut self, bytes: &[u8]) {
        self.raw += bytes.len();
    }
}

fn stream_of(fixture: &str, lines: usize) -> (Vec<u8>, usize) {
    let sent: Vec<&str> = fixture.lines().filter(|l| !l.starts_with('#')).collect();
    let mut bytes = Vec::new();
    let mut n = 0;
    while n < lines {
        for line in &sent {
            bytes.extend_from_slice(line.as_bytes());
            bytes.push(b'\n');
            n += 1;
        }
    }
    (bytes, n)
}

/// Lines per second of `adapter` reading `fixture` repeated, fed in 64 KiB reads.
fn lines_per_s(adapter: &str, fixture: &str, lines: usize) -> f64 {
    let cli = adapter_by_name(adapter)
        .expect("known")
        .expect("an adapter");
    let (bytes, n) = stream_of(fixture, lines);
    let mut best = 0.0f64;
    for _ in 0..3 {
        let mut stream = AgentStream::new(cli, 1 << 20);
        let mut sink = Lines {
            out: Vec::with_capacity(1 << 20),
            raw: 0,
        };
        let t0 = Instant::now();
        for chunk in bytes.chunks(64 * 1024) {
            sink.out.clear();
            stream.feed(chunk, &mut sink);
        }
        stream.finish(&mut sink);
        let rate = n as f64 / t0.elapsed().as_secs_f64();
        assert!(stream.report().api_calls > 0 && sink.raw == bytes.len());
        best = best.max(rate);
    }
    best
}

fn cpu_ticks() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0;
    };
    let Some(close) = stat.rfind(')') else {
        return 0;
    };
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let field = |n: usize| {
        fields
            .get(n - 3)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(14) + field(15)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

async fn idle_adapted_children(children: usize, window: Duration) -> (f64, f64) {
    let home = tempfile::tempdir().expect("tempdir");
    let ledger = Arc::new(
        Ledger::open(&home.path().join("ledger.redb"), LedgerConfig::default()).expect("ledger"),
    );
    let mut config = Config::new(home.path());
    config.delegation.max_concurrent_children = children as u32;
    config.delegation.stall_idle = Duration::from_secs(3600);
    let session = SessionId::new("bench").expect("session");
    let options = HostOptions {
        kind: HostKind::Headless,
        session: Some(session.clone()),
        worker: None,
    };
    let host = Host::start(ledger, config, Arc::new(SystemClock), options)
        .await
        .expect("host starts");
    let init = r#"{"type":"system","subtype":"init","model":"claude-sonnet-4-5-20250929"}"#;
    let script = format!("echo '{init}'; exec sleep 1000");
    let mut ids = Vec::new();
    for i in 0..children {
        let task = TaskSpec {
            agent: Some("claude".into()),
            adapter: Some("claude".into()),
            ..TaskSpec::new(
                format!("agent {i}"),
                vec!["sh".into(), "-c".into(), script.clone()],
            )
        };
        let d = host
            .dispatch(DispatchRequest::background(
                session.clone(),
                DispatchSpec::new("bench", vec![task]),
            ))
            .await
            .expect("dispatches");
        ids.push(d.delegation.id);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (t0, c0) = (Instant::now(), cpu_ticks());
    tokio::time::sleep(window).await;
    let (t1, c1) = (Instant::now(), cpu_ticks());
    let rss_mb = rss_kib() as f64 / 1024.0;
    let cpu_pct = (c1 - c0) as f64 / 100.0 / (t1 - t0).as_secs_f64() * 100.0;
    let _ = host
        .interrupt(InterruptTarget::Session(session), "bench_done")
        .await;
    for id in &ids {
        host.wait(id).await;
    }
    host.shutdown("bench_done").await;
    (cpu_pct, rss_mb)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::var_os("BENCH_QUICK").is_some();
    let (lines, window) = if quick {
        (20_000, Duration::from_secs(2))
    } else {
        (400_000, Duration::from_secs(10))
    };
    let claude = include_str!("../tests/it/fixtures/agents/claude.jsonl");
    let codex = include_str!("../tests/it/fixtures/agents/codex.jsonl");
    let gemini = include_str!("../tests/it/fixtures/agents/gemini.jsonl");
    let rate = lines_per_s("claude", claude, lines);
    let codex_rate = lines_per_s("codex", codex, lines);
    let gemini_rate = lines_per_s("gemini", gemini, lines);
    let (cpu_pct, rss_mb) = idle_adapted_children(100, window).await;
    let round = |x: f64| (x * 10.0).round() / 10.0;
    let out = serde_json::json!({
        "adapter_lines_per_s": rate.round(),
        "adapter_codex_lines_per_s": codex_rate.round(),
        "adapter_gemini_lines_per_s": gemini_rate.round(),
        "host_cpu_pct_100_idle_adapted_children": round(cpu_pct),
        "host_rss_mb_100_idle_adapted_children": round(rss_mb),
    });
    println!("{out}");
}
