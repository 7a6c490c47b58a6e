//! Two `drain` processes racing on one session: every event is delivered exactly once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::Hermes;

#[test]
fn two_racing_drains_deliver_each_of_200_events_exactly_once() {
    let h = Arc::new(Hermes::new());
    let tasks: Vec<String> = (0..50)
        .map(|i| format!(r#"{{"goal":"t{i}","command":["sh","-c","echo r{i}"]}}"#))
        .collect();
    let file = h.write(
        "tasks.json",
        &format!(r#"{{"tasks":[{}]}}"#, tasks.join(",")),
    );
    for _ in 0..4 {
        let run = h.run_env(
            &[
                "delegate",
                "--session",
                "R",
                "--tasks",
                file.to_str().expect("path"),
            ],
            &[("HERMES_DELEGATION_MAX_CONCURRENT_CHILDREN", "8")],
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    let seen: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let deadline = Instant::now() + Duration::from_secs(120);
    let workers: Vec<_> = (0..2)
        .map(|w| {
            let (h, seen) = (h.clone(), seen.clone());
            std::thread::spawn(move || {
                let consumer = format!("racer-{w}");
                while Instant::now() < deadline && seen.lock().map(|s| s.len()).unwrap_or(0) < 200 {
                    let d = h.json(&["drain", "--session", "R", "--json", "--consumer", &consumer]);
                    for env in d["envelopes"].as_array().expect("envelopes") {
                        let id = env["delegation_id"].as_str().expect("id");
                        for key in env["event_keys"].as_array().expect("keys") {
                            let key = format!("{id}/{}", key.as_str().expect("key"));
                            *seen.lock().expect("lock").entry(key).or_default() += 1;
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a drain worker panicked");
    }
    let seen = seen.lock().expect("lock");
    assert_eq!(seen.len(), 200, "every event delivered");
    assert!(seen.values().all(|n| *n == 1), "delivered twice: {seen:?}");
}
