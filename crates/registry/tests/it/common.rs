//! Shared helpers for the registry's integration tests: a temp home with its own ledger and
//! host, dispatch specs, and waiting on conditions with deadlines.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_ledger::{DispatchSpec, HostKind, Ledger, LedgerConfig, ProcessId, SessionId, TaskSpec};
use hermes_registry::{Config, Host, HostOptions, SystemClock};

pub struct Fixture {
    /// Holds the home (and the ledger in it) for the test's lifetime.
    pub home: tempfile::TempDir,
    pub ledger: Arc<Ledger>,
    pub host: Host,
}

/// Short thresholds so stalls happen within seconds.
pub fn quick_config(home: &std::path::Path) -> Config {
    let mut c = Config::new(home);
    c.delegation.stall_idle = Duration::from_secs(1);
    c.delegation.stall_in_tool = Duration::from_secs(3);
    c.delegation.stall_grace = Duration::from_secs(1);
    c.delegation.kill_grace = Duration::from_secs(1);
    c.host.sweep_interval = Duration::from_millis(250);
    c.host.heartbeat = Duration::from_millis(500);
    c.progress_interval = Duration::from_millis(500);
    c
}

/// The ledger of `home` on the backend under test (`HERMES_TEST_BACKEND`): its redb file, or
/// the PostgreSQL database made for that home the first time any process asks (its URL is kept
/// in the home, so a second process of the same test opens the same ledger).
pub fn open_ledger(home: &std::path::Path) -> Arc<Ledger> {
    let marker = home.join("test-ledger-url");
    let backend = hermes_testkit::TestBackend::from_env();
    let location = match std::fs::read_to_string(&marker) {
        Ok(url) if !url.is_empty() => {
            hermes_ledger::Location::from_url(Some(&url), &home.join("ledger.redb"), None)
                .expect("the stored URL parses")
        }
        _ => {
            let (location, url) = backend.fresh(home);
            std::fs::write(&marker, url.unwrap_or_default()).expect("remember the ledger");
            location
        }
    };
    Arc::new(Ledger::open_at(&location, LedgerConfig::default()).expect("ledger opens"))
}

pub async fn fixture_with(
    kind: HostKind,
    session: Option<&str>,
    tweak: impl FnOnce(&mut Config),
) -> Fixture {
    let home = tempfile::tempdir().expect("tempdir");
    let ledger = open_ledger(home.path());
    let mut config = quick_config(home.path());
    tweak(&mut config);
    let options = HostOptions {
        kind,
        session: session.map(|s| SessionId::new(s).expect("valid session")),
        worker: None,
    };
    let host = Host::start(ledger.clone(), config, Arc::new(SystemClock), options)
        .await
        .expect("host starts");
    Fixture { home, ledger, host }
}

pub async fn inline_fixture(tweak: impl FnOnce(&mut Config)) -> Fixture {
    fixture_with(HostKind::Inline, None, tweak).await
}

pub fn task(command: &[&str]) -> TaskSpec {
    TaskSpec::new(
        command.join(" "),
        command.iter().map(|s| s.to_string()).collect(),
    )
}

pub fn spec(commands: &[&[&str]]) -> DispatchSpec {
    DispatchSpec::new("test unit", commands.iter().map(|c| task(c)).collect())
}

pub fn sh(script: &str) -> Vec<&str> {
    vec!["sh", "-c", script]
}

/// Polls `cond` until it holds or `limit` passes; returns whether it held.
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether any live process (zombies excluded) is in the group `leader` led.
pub fn group_alive(leader: ProcessId) -> bool {
    hermes_registry::procs::group_alive(leader)
}

/// This process's resident set peak, in KiB.
pub fn vm_hwm_kib() -> u64 {
    status_field("VmHWM:")
}

fn status_field(name: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}
