//! A child printing 1 GiB: the host's memory stays bounded, the result is cut with a marker,
//! and the transcript stays within its cap, keeping its head and latest lines. Alone in its test
//! binary so the resident set measured is this test's own.

use std::io::{BufRead, BufReader};
use std::time::Duration;

use crate::common::*;
use hermes_ledger::ChildStatus;

const GIB: u64 = 1 << 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_printing_a_gibibyte_keeps_the_host_small() {
    let f = inline_fixture(|c| c.delegation.stall_idle = Duration::from_secs(60)).await;
    let max = f.host.config().result_max_bytes();
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

    // The transcript keeps its head and its latest lines within its cap (64 MiB), in lines of
    // at most LINE_MAX bytes of text, and says how much it skipped: every byte of output is
    // either in it or counted.
    let cap = f.host.config().delegation.transcript_max_bytes;
    let len = std::fs::metadata(&child.transcript)
        .expect("transcript")
        .len();
    assert!(len <= cap + (1 << 20), "a transcript of {len} bytes");
    let file = std::fs::File::open(&child.transcript).expect("transcript");
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut line = Vec::new();
    let mut payload = 0u64;
    let mut lines = 0u64;
    let mut skipped_lines = None;
    while reader.read_until(b'\n', &mut line).expect("reads") > 0 {
        if let Some(i) = line.windows(7).position(|w| w == b" out | ") {
            let text = &line[i + 7..line.len() - 1];
            assert!(text.len() <= hermes_registry::transcript::LINE_MAX);
            payload += text.len() as u64;
            lines += 1;
        } else if let Some(counts) = String::from_utf8_lossy(&line).split_once("reached;") {
            let words: Vec<String> = counts.1.split_whitespace().map(String::from).collect();
            skipped_lines = words
                .iter()
                .position(|w| w == "lines")
                .and_then(|i| words[i - 1].parse::<u64>().ok());
        }
        line.clear();
    }
    let skipped_lines = skipped_lines.expect("the transcript says what it skipped");
    let full_lines = GIB.div_ceil(hermes_registry::transcript::LINE_MAX as u64);
    assert_eq!(
        lines + skipped_lines,
        full_lines,
        "every line is kept or counted"
    );
    assert!(payload >= cap / 4, "kept {payload} bytes of output");
    eprintln!(
        "1 GiB through the host in {elapsed:?}, peak RSS {peak_mib} MiB, transcript {len} bytes"
    );
}
