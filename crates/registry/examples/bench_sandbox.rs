//! Measures what a sandbox adds to starting a child and prints one JSON object:
//!
//! - `sandbox_spawn_plain_ms_p50` / `_p90`: `/bin/true` started through the registry's spawn
//!   (its own process group, piped output, the progress descriptor) and waited for, unconfined.
//! - `sandbox_spawn_landlock_ms_p50`: the same under `workspace-write` with the network on and
//!   no `.git`: Landlock alone.
//! - `sandbox_spawn_confined_ms_p50` / `_p90`: under `workspace-write` with the network off in a
//!   directory holding a `.git`: Landlock, a user namespace, a network namespace and a mount
//!   namespace with one read-only bind — the most a sandbox does.
//! - `sandbox_added_ms_p50`: confined minus plain, at the median.
//!
//! The three kinds run interleaved, round after round, so a busy moment of the machine weighs
//! on all alike. Run with `cargo run --release -p hermes-registry --example bench_sandbox`.
//! `BENCH_QUICK=1` shortens the run.

use std::path::Path;
use std::time::Instant;

use hermes_ledger::SandboxMode;
use hermes_registry::sandbox::Policy;
use hermes_registry::spawn::{SpawnRequest, spawn};

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn request(cwd: &Path, sandbox: Option<Policy>) -> SpawnRequest {
    SpawnRequest {
        argv: vec!["/bin/true".into()],
        cwd: Some(cwd.to_path_buf()),
        env: Vec::new(),
        env_remove: Vec::new(),
        umask: None,
        sandbox,
    }
}

/// Milliseconds from asking for the child to its end.
async fn once(request: &SpawnRequest) -> f64 {
    let started = Instant::now();
    let mut spawned = spawn(request).expect("the child starts");
    let status = spawned.child.wait().await.expect("the child is waited for");
    assert!(status.success(), "the child failed: {status}");
    started.elapsed().as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let rounds = if std::env::var_os("BENCH_QUICK").is_some() {
        50
    } else {
        500
    };
    let plain_dir = tempfile::tempdir().expect("tempdir");
    let git_dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(git_dir.path().join(".git")).expect(".git");
    let policy = |network| Policy {
        mode: SandboxMode::WorkspaceWrite,
        network,
        writable: Vec::new(),
        read_only: Vec::new(),
    };
    let kinds = [
        request(plain_dir.path(), None),
        request(plain_dir.path(), Some(policy(true))),
        request(git_dir.path(), Some(policy(false))),
    ];
    let mut times: [Vec<f64>; 3] = Default::default();
    for _ in 0..rounds {
        for (kind, request) in kinds.iter().enumerate() {
            times[kind].push(once(request).await);
        }
    }
    for t in &mut times {
        t.sort_by(f64::total_cmp);
    }
    let [plain, landlock, confined] = &times;
    let round = |ms: f64| (ms * 1000.0).round() / 1000.0;
    println!(
        "{}",
        serde_json::json!({
            "sandbox_spawn_plain_ms_p50": round(percentile(plain, 50.0)),
            "sandbox_spawn_plain_ms_p90": round(percentile(plain, 90.0)),
            "sandbox_spawn_landlock_ms_p50": round(percentile(landlock, 50.0)),
            "sandbox_spawn_confined_ms_p50": round(percentile(confined, 50.0)),
            "sandbox_spawn_confined_ms_p90": round(percentile(confined, 90.0)),
            "sandbox_added_ms_p50": round(percentile(confined, 50.0) - percentile(plain, 50.0)),
        })
    );
}
