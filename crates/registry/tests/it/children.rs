//! Children driven end to end through a real host and ledger: stalls, timeouts, interrupts,
//! spawn errors, the progress protocol, batches and exactly-once finalization.

use std::time::Duration;

use crate::common::*;
use hermes_ledger::{ChildStatus, EventKey, ExitDetail, StallPhase, TimeoutPhase, UnitStatus};

fn stall_fields(detail: &ExitDetail) -> (f64, f64, StallPhase, f64) {
    match detail {
        ExitDetail::Stalled {
            stalled_after_quiet_seconds,
            stall_threshold_seconds,
            stall_phase,
            stall_grace_seconds,
        } => (
            *stalled_after_quiet_seconds,
            *stall_threshold_seconds,
            *stall_phase,
            *stall_grace_seconds,
        ),
        other => panic!("expected stall fields, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_child_is_stopped_with_its_stall_fields_and_its_whole_group_dies() {
    let f = inline_fixture(|c| c.host.sweep_interval = Duration::from_secs(1)).await;
    let sweep = f.host.config().host.sweep_interval.as_secs_f64();
    let report = f
        .host
        .run_inline(spec(&[&sh("sleep 1000 & sleep 1000")]), None)
        .await
        .expect("runs");
    assert_eq!(report.status, UnitStatus::Stalled);
    let child = &report.outcomes[0];
    assert_eq!(child.status, ChildStatus::Stalled);
    let (quiet, threshold, phase, grace) = stall_fields(&child.detail);
    assert_eq!((threshold, phase, grace), (1.0, StallPhase::Idle, 1.0));
    assert!(
        quiet >= 1.0 && quiet <= 1.0 + sweep,
        "SIGTERM {quiet} s after the start, threshold 1 s"
    );
    // The shell died of our SIGTERM, within the grace period.
    assert_eq!(child.signal, Some(15), "{child:?}");
    assert!(child.duration_seconds() < 1.0 + sweep + 1.0);
    let children = f.ledger.children(&report.delegation_id).expect("children");
    let leader = children[0]
        .process
        .expect("the child's process was recorded");
    assert!(
        eventually(Duration::from_secs(5), || !group_alive(leader)).await,
        "no process of the group is left"
    );
    let events = f.ledger.events(&report.delegation_id).expect("events");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].key, EventKey::Task(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_keeps_printing_is_never_stalled() {
    let f = inline_fixture(|_| {}).await;
    let script = "i=0; while [ $i -lt 15 ]; do i=$((i+1)); echo line $i; sleep 0.2; done";
    let report = f
        .host
        .run_inline(spec(&[&sh(script)]), None)
        .await
        .expect("runs");
    let child = &report.outcomes[0];
    assert_eq!(child.status, ChildStatus::Completed, "{child:?}");
    assert_eq!(child.detail, ExitDetail::None);
    assert!(child.duration_seconds() >= 2.5);
    assert!(
        child.result.contains("line 1\n") && child.result.ends_with("line 15\n"),
        "{}",
        child.result
    );
    assert_eq!(report.status, UnitStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_a_tool_the_in_tool_threshold_applies() {
    let f = inline_fixture(|_| {}).await;
    let script = r#"echo '{"tool":"x"}' >&$HERMES_PROGRESS_FD; sleep 1000"#;
    let report = f
        .host
        .run_inline(spec(&[&sh(script)]), None)
        .await
        .expect("runs");
    let child = &report.outcomes[0];
    assert_eq!(child.status, ChildStatus::Stalled);
    let (quiet, threshold, phase, _) = stall_fields(&child.detail);
    assert_eq!((threshold, phase), (3.0, StallPhase::InTool));
    assert!(
        quiet >= 3.0,
        "stalled after {quiet} s, before the in-tool threshold"
    );
    assert!(child.duration_seconds() >= 3.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_ignoring_sigterm_is_killed_after_the_grace_period() {
    let f = inline_fixture(|_| {}).await;
    let script = "trap '' TERM; while :; do sleep 0.05; done";
    let report = f
        .host
        .run_inline(spec(&[&sh(script)]), None)
        .await
        .expect("runs");
    let child = &report.outcomes[0];
    assert_eq!(child.status, ChildStatus::Stalled);
    assert_eq!(child.signal, Some(9), "{child:?}");
    let d = child.duration_seconds();
    assert!(
        (2.0..4.0).contains(&d),
        "killed {d} s after the start (idle 1 s + grace 1 s)"
    );
    let leader = f.ledger.children(&report.delegation_id).expect("children")[0]
        .process
        .expect("process");
    assert!(eventually(Duration::from_secs(5), || !group_alive(leader)).await);
    // It exited after it was force-finalized: still exactly one event.
    let transcript = child.transcript.clone();
    assert!(
        eventually(Duration::from_secs(5), || std::fs::read_to_string(
            &transcript
        )
        .is_ok_and(|t| t.contains("exited after it was finalized")))
        .await
    );
    assert_eq!(
        f.ledger
            .events(&report.delegation_id)
            .expect("events")
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_exiting_after_the_unit_was_force_finalized_publishes_nothing() {
    let f = inline_fixture(|_| {}).await;
    let dispatched = f
        .host
        .dispatch(hermes_registry::DispatchRequest::inline(
            spec(&[&sh("sleep 0.8; echo late")]),
            None,
        ))
        .await
        .expect("dispatches");
    let id = dispatched.delegation.id.clone();
    let ledger = f.ledger.clone();
    assert!(
        eventually(Duration::from_secs(5), || ledger
            .children(&id)
            .is_ok_and(|c| c[0].status == ChildStatus::Running))
        .await
    );
    let now = hermes_registry::Clock::now(&hermes_registry::SystemClock);
    let forced = f
        .ledger
        .finish_unit(f.host.host_id(), &id, vec![], "test_forced", now)
        .expect("forced");
    assert_eq!(forced, Some(UnitStatus::Unknown));
    let report = f.host.wait(&id).await.expect("report");
    assert_eq!(
        report.outcomes[0].status,
        ChildStatus::Completed,
        "the child itself still ran to its end"
    );
    assert_eq!(
        report.status,
        UnitStatus::Unknown,
        "the unit keeps the status it was finalized with"
    );
    let events = f.ledger.events(&id).expect("events");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].key, EventKey::Terminal);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_children_publish_the_moment_each_ends() {
    let f = inline_fixture(|c| c.delegation.stall_idle = Duration::from_secs(30)).await;
    let report = f
        .host
        .run_inline(
            spec(&[
                &sh("sleep 2.4; echo c"),
                &sh("sleep 0.2; echo a"),
                &sh("sleep 1.2; echo b"),
            ]),
            None,
        )
        .await
        .expect("runs");
    assert_eq!(report.status, UnitStatus::Completed);
    let events = f.ledger.events(&report.delegation_id).expect("events");
    assert_eq!(events.len(), 3);
    for event in &events {
        let EventKey::Task(i) = event.key else {
            panic!("unexpected {:?}", event.key)
        };
        let outcome = &report.outcomes[i as usize];
        let lag = event.published_at.ms_since(outcome.ended_at);
        assert!(lag < 500, "task {i} published {lag} ms after it ended");
    }
    let published = |i: u32| {
        events
            .iter()
            .find(|e| e.key == EventKey::Task(i))
            .expect("event")
            .published_at
    };
    assert!(published(1) < published(2) && published(2) < published(0));
    assert!(
        published(0).ms_since(published(1)) >= 1500,
        "siblings never wait for each other"
    );
    assert_eq!(report.outcomes[1].result, "a\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_parallelism_is_bounded_by_max_concurrent_children() {
    let f = inline_fixture(|c| c.delegation.max_concurrent_children = 2).await;
    let report = f
        .host
        .run_inline(
            spec(&[&sh("sleep 0.6"), &sh("sleep 0.6"), &sh("sleep 0.6")]),
            None,
        )
        .await
        .expect("runs");
    let o = &report.outcomes;
    let third = o[2].started_at.expect("started");
    assert!(
        third >= o[0].ended_at.min(o[1].ended_at),
        "the third child waited for a free slot"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_command_is_an_error_with_the_os_reason() {
    let f = inline_fixture(|_| {}).await;
    let report = f
        .host
        .run_inline(spec(&[&["/no/such/program", "x"]]), None)
        .await
        .expect("runs");
    let child = &report.outcomes[0];
    assert_eq!(child.status, ChildStatus::Error);
    match &child.detail {
        ExitDetail::SpawnError { reason } => {
            assert!(reason.contains("No such file or directory"), "{reason}")
        }
        other => panic!("expected a spawn error, got {other:?}"),
    }
    // The reader of the result sees what the transcript says, not "nothing recorded".
    let tail = child
        .transcript_tail
        .as_deref()
        .expect("the transcript's tail travels with a spawn error");
    assert!(tail.contains("hermes: cannot start"), "{tail}");
    assert_eq!(report.status, UnitStatus::Failed);
    assert_eq!(
        f.ledger
            .events(&report.delegation_id)
            .expect("events")
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_names_its_phase() {
    let f = inline_fixture(|c| {
        c.delegation.child_timeout = Some(Duration::from_millis(700));
        c.delegation.stall_idle = Duration::from_secs(60);
    })
    .await;
    let report = f
        .host
        .run_inline(
            spec(&[&["sleep", "1000"], &sh("echo started; sleep 1000")]),
            None,
        )
        .await
        .expect("runs");
    assert_eq!(report.status, UnitStatus::Timeout);
    for (outcome, phase) in report.outcomes.iter().zip([
        TimeoutPhase::BeforeFirstProgress,
        TimeoutPhase::AfterProgress,
    ]) {
        assert_eq!(outcome.status, ChildStatus::Timeout);
        match outcome.detail {
            ExitDetail::Timeout {
                timeout_seconds,
                timed_out_after_seconds,
                timeout_phase,
            } => {
                assert_eq!(timeout_seconds, 0.7);
                assert!(
                    (0.7..1.5).contains(&timed_out_after_seconds),
                    "{timed_out_after_seconds}"
                );
                assert_eq!(timeout_phase, phase);
            }
            ref other => panic!("expected timeout fields, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupts_stop_the_whole_group_and_say_why() {
    let f = fixture_with(hermes_ledger::HostKind::Headless, Some("s1"), |c| {
        c.delegation.stall_idle = Duration::from_secs(60)
    })
    .await;
    let session = hermes_ledger::SessionId::new("s1").expect("session");
    let d = f
        .host
        .dispatch(hermes_registry::DispatchRequest::background(
            session.clone(),
            spec(&[&sh("sleep 1000 & sleep 1000"), &["sleep", "1000"]]),
        ))
        .await
        .expect("dispatches");
    let id = d.delegation.id.clone();
    let ledger = f.ledger.clone();
    assert!(
        eventually(Duration::from_secs(5), || ledger
            .children(&id)
            .is_ok_and(|c| c.iter().all(|c| c.status == ChildStatus::Running)))
        .await
    );
    let leaders: Vec<_> = f
        .ledger
        .children(&id)
        .expect("children")
        .iter()
        .filter_map(|c| c.process)
        .collect();
    f.host
        .interrupt(
            hermes_ledger::InterruptTarget::Session(session),
            "user_stop",
        )
        .await
        .expect("interrupts");
    let report = f.host.wait(&id).await.expect("report");
    assert_eq!(report.status, UnitStatus::Interrupted);
    for outcome in &report.outcomes {
        assert_eq!(outcome.status, ChildStatus::Interrupted);
        assert_eq!(
            outcome.detail,
            ExitDetail::Interrupted {
                reason: "user_stop".into()
            }
        );
        assert!(outcome.duration_seconds() < 1.5);
    }
    for leader in leaders {
        assert!(eventually(Duration::from_secs(5), || !group_alive(leader)).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hurry_kills_the_children_being_stopped_at_once_and_no_other() {
    // A grace period far beyond the test's deadlines: only `hurry` can end it.
    let f = fixture_with(hermes_ledger::HostKind::Headless, Some("s1"), |c| {
        c.delegation.stall_idle = Duration::from_secs(60);
        c.delegation.kill_grace = Duration::from_secs(300);
    })
    .await;
    let session = hermes_ledger::SessionId::new("s1").expect("session");
    let dispatch = |script: &'static str| {
        let host = &f.host;
        let session = session.clone();
        async move {
            host.dispatch(hermes_registry::DispatchRequest::background(
                session,
                spec(&[&sh(script)]),
            ))
            .await
            .expect("dispatches")
            .delegation
            .id
        }
    };
    let stubborn = dispatch("trap '' TERM; while :; do sleep 0.1; done").await;
    let bystander = dispatch("sleep 1000").await;
    let ledger = f.ledger.clone();
    let running = |id: &hermes_ledger::DelegationId| {
        ledger
            .children(id)
            .is_ok_and(|c| c.iter().all(|c| c.status == ChildStatus::Running))
    };
    assert!(
        eventually(Duration::from_secs(5), || running(&stubborn)
            && running(&bystander))
        .await
    );
    let leader = f.ledger.children(&stubborn).expect("children")[0]
        .process
        .expect("pid");
    // Whatever happens, the child that ignores SIGTERM does not outlive the test.
    struct KillGroup(i32);
    impl Drop for KillGroup {
        fn drop(&mut self) {
            // SAFETY: a plain kill(2) of the process group this test started.
            unsafe { libc::kill(-self.0, libc::SIGKILL) };
        }
    }
    let _cleanup = KillGroup(leader.pid as i32);
    f.host
        .interrupt(
            hermes_ledger::InterruptTarget::Delegation(stubborn.clone()),
            "user_stop",
        )
        .await
        .expect("interrupts");
    // SIGTERM is ignored: the child runs on into its grace period.
    let waiting = tokio::time::timeout(Duration::from_millis(500), f.host.wait(&stubborn)).await;
    assert!(waiting.is_err(), "finished within its grace period");
    assert!(group_alive(leader));
    f.host.hurry();
    let report = tokio::time::timeout(Duration::from_secs(10), f.host.wait(&stubborn))
        .await
        .expect("finalized at once")
        .expect("report");
    assert_eq!(report.status, UnitStatus::Interrupted);
    assert_eq!(report.outcomes[0].status, ChildStatus::Interrupted);
    assert_eq!(report.outcomes[0].signal, Some(9));
    assert!(eventually(Duration::from_secs(5), || !group_alive(leader)).await);
    // Nobody asked the other unit to stop: it runs on.
    assert!(running(&bystander));
    f.host.shutdown("test_over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_asked_for_by_another_process_is_acted_on_within_a_sweep() {
    let f = fixture_with(hermes_ledger::HostKind::Headless, Some("s2"), |c| {
        c.delegation.stall_idle = Duration::from_secs(60)
    })
    .await;
    let session = hermes_ledger::SessionId::new("s2").expect("session");
    let d = f
        .host
        .dispatch(hermes_registry::DispatchRequest::background(
            session,
            spec(&[&["sleep", "1000"]]),
        ))
        .await
        .expect("dispatches");
    let id = d.delegation.id.clone();
    let ledger = f.ledger.clone();
    assert!(
        eventually(Duration::from_secs(5), || ledger
            .children(&id)
            .is_ok_and(|c| c[0].process.is_some()))
        .await
    );
    // Another process only writes the request into the ledger.
    let now = hermes_registry::Clock::now(&hermes_registry::SystemClock);
    f.ledger
        .request_interrupt(
            &hermes_ledger::InterruptTarget::Delegation(id.clone()),
            "session_end",
            now,
        )
        .expect("flagged");
    let report = f.host.wait(&id).await.expect("report");
    assert_eq!(
        report.outcomes[0].detail,
        ExitDetail::Interrupted {
            reason: "session_end".into()
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_progress_protocol_moves_the_token_and_the_result_message_wins() {
    let f = inline_fixture(|_| {}).await;
    let script = r#"
        echo '{"api_calls": 3}' >&$HERMES_PROGRESS_FD
        echo 'not json' >&$HERMES_PROGRESS_FD
        echo '{"note": "halfway"}' >&$HERMES_PROGRESS_FD
        echo some stdout
        echo some stderr >&2
        echo '{"result": "my summary"}' >&$HERMES_PROGRESS_FD
        echo "id=$HERMES_DELEGATION_ID index=$HERMES_TASK_INDEX parent=${HERMES_PARENT_SESSION_ID-none} session=${HERMES_SESSION_ID-none}"
    "#;
    let report = f
        .host
        .run_inline(spec(&[&sh(script)]), None)
        .await
        .expect("runs");
    let child = &report.outcomes[0];
    assert_eq!(child.status, ChildStatus::Completed);
    assert_eq!(child.api_calls, 3);
    assert_eq!(child.result, "my summary");
    let log = std::fs::read_to_string(&child.transcript).expect("transcript");
    for needle in [
        " prg | not json\n",
        " prg | {\"note\": \"halfway\"}\n",
        " out | some stdout\n",
        " err | some stderr\n",
    ] {
        assert!(log.contains(needle), "{needle:?} missing from\n{log}");
    }
    let env_line = format!(
        " out | id={} index=0 parent=none session=none\n",
        report.delegation_id
    );
    assert!(log.contains(&env_line), "{env_line:?} missing from\n{log}");
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(report.transcript_dir.join("manifest.json")).expect("manifest"),
    )
    .expect("json");
    assert_eq!(manifest["tasks"][0]["status"], "completed");
    assert_eq!(manifest["tasks"][0]["exit_reason"], "exit 0");
    assert!(manifest["completed"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_carry_the_stderr_tail_and_the_parent_session_is_passed_on() {
    let f = inline_fixture(|_| {}).await;
    let script = "echo parent=$HERMES_PARENT_SESSION_ID; echo broken >&2; exit 3";
    let parent = hermes_ledger::SessionId::new("parent-1").expect("session");
    let report = f
        .host
        .run_inline(spec(&[&sh(script)]), Some(parent))
        .await
        .expect("runs");
    let child = &report.outcomes[0];
    assert_eq!(
        (child.status, child.exit_code),
        (ChildStatus::Failed, Some(3))
    );
    // Both streams are in the result, stderr's lines marked; its tail is not repeated beside.
    assert!(
        child.result.contains("parent=parent-1\n"),
        "{}",
        child.result
    );
    assert!(
        child.result.contains("[stderr] broken\n"),
        "{}",
        child.result
    );
    assert_eq!(
        child.result.len(),
        "parent=parent-1\n[stderr] broken\n".len()
    );
    assert_eq!(child.stderr_tail, None);
    assert!(
        child
            .transcript_tail
            .as_deref()
            .is_some_and(|t| t.contains("broken"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_progress_reaches_the_ledger_and_the_watch_channel() {
    let f = inline_fixture(|_| {}).await;
    let script = r#"echo '{"api_calls": 2}' >&$HERMES_PROGRESS_FD; echo '{"tool": "grep"}' >&$HERMES_PROGRESS_FD; echo hello; sleep 3"#;
    let d = f
        .host
        .dispatch(hermes_registry::DispatchRequest::inline(
            spec(&[&sh(script)]),
            None,
        ))
        .await
        .expect("dispatches");
    let id = d.delegation.id.clone();
    let mut progress = d.progress.expect("runs here");
    let seen = tokio::time::timeout(
        Duration::from_secs(5),
        progress.wait_for(|p| p.children[0].progress.current_tool.as_deref() == Some("grep")),
    )
    .await;
    assert!(
        seen.is_ok_and(|r| r.is_ok()),
        "the watch channel shows the tool"
    );
    let ledger = f.ledger.clone();
    let persisted = eventually(Duration::from_secs(5), || {
        ledger.children(&id).is_ok_and(|c| {
            let p = &c[0].progress;
            p.api_calls == 2 && p.current_tool.as_deref() == Some("grep") && p.output_bytes == 6
        })
    })
    .await;
    assert!(persisted, "another process can read the live progress");
    f.host
        .interrupt(
            hermes_ledger::InterruptTarget::Delegation(id.clone()),
            "done_watching",
        )
        .await
        .expect("stops");
    f.host.wait(&id).await.expect("report");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_grandchild_left_behind_is_stopped_when_the_child_exits() {
    let f = inline_fixture(|c| c.delegation.stall_idle = Duration::from_secs(60)).await;
    let started = std::time::Instant::now();
    let report = f
        .host
        .run_inline(spec(&[&sh("sleep 1000 & echo hi")]), None)
        .await
        .expect("runs");
    let child = &report.outcomes[0];
    assert_eq!(child.status, ChildStatus::Completed);
    assert_eq!(child.result, "hi\n");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the held pipe did not hang the unit"
    );
    let leader = f.ledger.children(&report.delegation_id).expect("children")[0]
        .process
        .expect("process");
    assert!(eventually(Duration::from_secs(5), || !group_alive(leader)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_final_progress_token_is_persisted_with_the_outcome() {
    // After the first change, live persistence does not come around again during this child's
    // life: whatever the ledger shows afterwards was written with the finalization.
    let f = inline_fixture(|c| c.progress_interval = Duration::from_secs(3600)).await;
    let before = hermes_registry::Clock::now(&hermes_registry::SystemClock);
    let report = f
        .host
        .run_inline(spec(&[&sh("echo early; sleep 0.3; echo done")]), None)
        .await
        .expect("runs");
    assert_eq!(report.status, UnitStatus::Completed);
    let children = f.ledger.children(&report.delegation_id).expect("children");
    let progress = &children[0].progress;
    assert_eq!(progress.output_bytes, 11, "{progress:?}");
    let last = progress.last_activity_at.expect("activity recorded");
    let started = children[0].started_at.expect("started");
    assert!(
        last.ms_since(started) >= 300 && last >= before,
        "the last activity is the second write: {last:?}, started {started:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatch_leaves_old_transcripts_to_the_scheduled_prune() {
    let f = inline_fixture(|c| c.delegation.transcript_retention = Duration::from_secs(3600)).await;
    let root = f.host.config().transcript_root.clone();
    // A prune ran moments ago (the host's own sweeps prune at most hourly): nothing may prune
    // during this test but the explicit call below.
    std::fs::create_dir_all(&root).expect("transcript root");
    std::fs::write(root.join(".last-prune"), "").expect("prune stamp");
    let old = root.join("deleg_00000000beef");
    std::fs::create_dir_all(&old).expect("old unit dir");
    std::fs::write(old.join("task-0.log"), "old\n").expect("old log");
    let long_ago = std::time::SystemTime::now() - Duration::from_secs(7200);
    for path in [old.join("task-0.log"), old.clone()] {
        std::fs::File::open(&path)
            .and_then(|f| f.set_modified(long_ago))
            .expect("backdated");
    }
    let report = f
        .host
        .run_inline(spec(&[&["true"]]), None)
        .await
        .expect("runs");
    assert_eq!(report.status, UnitStatus::Completed);
    assert!(old.exists(), "dispatch does not scan old transcripts");
    // Pretend the hour has passed.
    let _ = std::fs::remove_file(root.join(".last-prune"));
    let now = std::time::SystemTime::now();
    assert_eq!(
        hermes_registry::housekeeping::prune_if_due(f.host.config(), now),
        Some(1),
        "the scheduled prune removes the old directory"
    );
    assert!(!old.exists());
    assert!(report.transcript_dir.exists(), "recent transcripts stay");
    assert_eq!(
        hermes_registry::housekeeping::prune_if_due(f.host.config(), now),
        None,
        "and does not run again within the hour"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalling_child_is_recorded_in_the_ledger_when_it_gets_sigterm() {
    let f = inline_fixture(|c| c.delegation.stall_grace = Duration::from_secs(5)).await;
    // The whole group ignores SIGTERM: it lives through the grace period.
    let request =
        hermes_registry::DispatchRequest::inline(spec(&[&sh("trap '' TERM; sleep 1000")]), None);
    let dispatched = f.host.dispatch(request).await.expect("dispatched");
    let id = dispatched.delegation.id;
    let ledger = f.ledger.clone();
    let seen = eventually(Duration::from_secs(20), || {
        let stalls = ledger.stalls(&id).expect("stalls");
        let children = ledger.children(&id).expect("children");
        stalls.len() == 1 && children[0].status == ChildStatus::Running
    })
    .await;
    assert!(
        seen,
        "the stall is in the ledger while the child still runs"
    );
    let stalling = &ledger.stalls(&id).expect("stalls")[0];
    let (quiet, threshold, phase, grace) = stall_fields(&stalling.detail);
    assert_eq!((threshold, phase, grace), (1.0, StallPhase::Idle, 5.0));
    assert!(quiet >= 1.0, "{quiet}");
    let report = f.host.wait(&id).await.expect("report");
    assert_eq!(report.status, UnitStatus::Stalled);
    assert_eq!(report.outcomes[0].signal, Some(9));
}

/// A one-shot run's host (`Host::start_dispatching`) leaves in the commit of the finish that
/// ends its unit: its record is gone and the unit's events are delivered by then, and its lease
/// loop — renewing every few milliseconds here, so that renewals land around that commit —
/// never reads the missing record as a lost lease and fences.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_host_leaves_with_its_units_last_finish_and_never_fences() {
    use hermes_ledger::{Channel, EventState, HostKind};
    use hermes_registry::{DispatchRequest, Host, HostOptions, SystemClock};
    for round in 0..12 {
        let home = tempfile::tempdir().expect("tempdir");
        let ledger = open_ledger(home.path());
        let mut config = quick_config(home.path());
        config.host.sweep_interval = Duration::from_millis(2);
        config.host.heartbeat = Duration::from_millis(1);
        let options = HostOptions {
            kind: HostKind::Inline,
            session: None,
            worker: None,
        };
        let request = DispatchRequest::inline(spec(&[&["true"], &sh("exit 3")]), None);
        assert_eq!(request.channel, Channel::Inline);
        let (host, dispatched) = Host::start_dispatching(
            ledger.clone(),
            config,
            std::sync::Arc::new(SystemClock),
            options,
            request,
        )
        .await
        .expect("dispatched");
        let id = dispatched.delegation.id;
        let report = host.wait(&id).await.expect("a report");
        assert_eq!(report.status, UnitStatus::Partial, "round {round}");
        assert!(
            host.left(),
            "round {round}: the host left with the last finish"
        );
        assert!(
            !host.is_fenced(),
            "round {round}: a renewal fenced the host"
        );
        assert_eq!(ledger.host(host.process()).expect("read"), None);
        let events = ledger.events(&id).expect("events");
        assert_eq!(events.len(), 2, "round {round}");
        assert!(
            events.iter().all(|e| e.state == EventState::Delivered),
            "round {round}: {events:?}"
        );
        host.stop("done").await;
        assert!(!host.is_fenced(), "round {round}: fenced while stopping");
        assert_eq!(ledger.host(host.process()).expect("read"), None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_short_tool_call_reaches_the_ledger_while_it_lasts() {
    // The default persistence, not the quick one: each tool call lasts 600 ms, less than the
    // two seconds progress once waited for, so only a host that writes changes as they come
    // shows each of them to another reader.
    let default = hermes_registry::Config::new(std::path::Path::new("/")).progress_interval;
    let f = inline_fixture(|c| c.progress_interval = default).await;
    let script = r#"for t in alpha beta gamma delta; do
        echo "{\"tool\": \"$t\"}" >&$HERMES_PROGRESS_FD; sleep 0.6
        echo '{"tool": null}' >&$HERMES_PROGRESS_FD; sleep 0.6
    done"#;
    let d = f
        .host
        .dispatch(hermes_registry::DispatchRequest::inline(
            spec(&[&sh(script)]),
            None,
        ))
        .await
        .expect("dispatches");
    let id = d.delegation.id.clone();
    let ledger = f.ledger.clone();
    let mut seen: Vec<String> = Vec::new();
    let ended = eventually(Duration::from_secs(30), || {
        let Ok(children) = ledger.children(&id) else {
            return false;
        };
        if let Some(tool) = &children[0].progress.current_tool
            && !seen.contains(tool)
        {
            seen.push(tool.clone());
        }
        children[0].status.is_terminal()
    })
    .await;
    assert!(ended, "the child ends");
    assert_eq!(seen, ["alpha", "beta", "gamma", "delta"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_of_many_busy_children_goes_out_in_few_writes() {
    let f = inline_fixture(|c| {
        c.delegation.max_concurrent_children = 8;
        c.progress_interval = Duration::from_millis(100);
    })
    .await;
    // Eight children, each moving its token about fifty times a second for two seconds.
    let script = r#"i=0; while [ $i -lt 100 ]; do
        echo "{\"api_calls\": $i}" >&$HERMES_PROGRESS_FD; echo out $i; i=$((i+1)); sleep 0.02
    done"#;
    let busy = sh(script);
    let commands: Vec<&[&str]> = (0..8).map(|_| busy.as_slice()).collect();
    let before = f.ledger.commits();
    let report = f
        .host
        .run_inline(spec(&commands), None)
        .await
        .expect("runs");
    let commits = f.ledger.commits() - before;
    assert_eq!(report.status, UnitStatus::Completed);
    let children = f.ledger.children(&report.delegation_id).expect("children");
    assert!(children.iter().all(|c| c.progress.api_calls == 99));
    // 800 progress messages and 800 lines: one write per change would be thousands; one per
    // interval for the whole host is about twenty over the unit's life, plus the children's
    // starts and finishes.
    assert!(commits < 200, "{commits} commits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successful_child_s_stderr_is_in_its_result_marked() {
    let f = inline_fixture(|_| {}).await;
    let report = f
        .host
        .run_inline(spec(&[&sh("echo Compiling >&2; echo Finished >&2")]), None)
        .await
        .expect("runs");
    let child = &report.outcomes[0];
    assert_eq!(child.status, ChildStatus::Completed);
    assert_eq!(child.result, "[stderr] Compiling\n[stderr] Finished\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_result_does_not_send_the_reader_to_a_transcript_that_was_cut_too() {
    let f = inline_fixture(|c| {
        c.delegation.result_max_bytes = 1024;
        c.delegation.transcript_max_bytes = 8192;
    })
    .await;
    let report = f
        .host
        .run_inline(spec(&[&sh("seq 1 20000")]), None)
        .await
        .expect("runs");
    let child = &report.outcomes[0];
    assert_eq!(child.status, ChildStatus::Completed);
    assert!(child.result.len() <= 1024);
    assert!(
        !child.result.contains("full output is in"),
        "{}",
        child.result
    );
    assert!(
        child.result.contains(&format!(
            "{} was cut too, at its cap of 8192 bytes",
            child.transcript
        )),
        "{}",
        child.result
    );
    // The transcript's own note counts the child's bytes: `seq 1 20000` writes 108,894.
    let text = std::fs::read_to_string(&child.transcript).expect("transcript");
    let kept: u64 = text
        .lines()
        .filter_map(|l| l.split_once(" out | ").map(|(_, t)| t.len() as u64 + 1))
        .sum();
    let marker = text
        .lines()
        .find(|l| l.contains("transcript cap of 8192 bytes reached;"))
        .expect("a cap note");
    let skipped: u64 = marker
        .split_once("reached; ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("a byte count");
    assert_eq!(kept + skipped, 108_894, "{marker}");
}
