//! A child printing 1 GiB: the host's memory stays bounded, the result is cut with a marker,
//! and the transcript holds every byte. Alone in its test binary so the resident set measured is
//! this test's own.

mod common;

use std::io::{BufRead, BufReader};
use std::time::Duration;

use common::*;
use ledger::ChildStatus;

const GIB: u64 = 1 << 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_printing_a_gibibyte_keeps_the_host_small() {
    let f = inline_fixture(|c| c.stall_idle = Duration::from_secs(60)).await;
    let max = f.host.config().result_max_bytes;
    let gib = GIB.to_string();
    let started = std::time::Instant::now();
    let report = f
        .host
        .run_inline(spec(&[&["head", "-c", gib.as_str(), "/dev/zero"]]), None)
        .await
        .expect("runs");
    let elapsed = started.elapsed();
    let peak_mib = vm_hwm_kib() / 1024;
    let child = &report.outcomes[0];
    assert_eq!(child.status, ChildStatus::Completed);
    assert!(
        peak_mib < 100,
        "the host's resident set peaked at {peak_mib} MiB"
    );
    assert!(
        child.result.len() <= max,
        "result of {} bytes",
        child.result.len()
    );
    assert!(child.result.contains("bytes omitted"), "marker missing");
    assert!(
        child.result.contains(&child.transcript),
        "marker names the transcript"
    );

    // Every byte is in the transcript, in lines of at most LINE_MAX bytes of text.
    let file = std::fs::File::open(&child.transcript).expect("transcript");
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut line = Vec::new();
    let mut payload = 0u64;
    while reader.read_until(b'\n', &mut line).expect("reads") > 0 {
        if let Some(i) = line.windows(7).position(|w| w == b" out | ") {
            let text = &line[i + 7..line.len() - 1];
            assert!(text.len() <= registry::transcript::LINE_MAX);
            payload += text.len() as u64;
        }
        line.clear();
    }
    assert_eq!(payload, GIB);
    eprintln!("1 GiB through the host in {elapsed:?}, peak RSS {peak_mib} MiB");
}
