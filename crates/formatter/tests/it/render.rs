//! Snapshots of every block shape and every body.

use hermes_formatter::{Boundary, Envelope, RenderContext, render_boundary, render_envelope};
use hermes_ledger::{
    ChildOutcome, ChildStatus, Event, ExitDetail, Role, StallPhase, TimeoutPhase, UnitRecord,
    UnitStatus,
};
use insta::assert_snapshot;

use crate::fixtures::{NOW, ctx, delegation, outcome, task_event, terminal_event};

const GOAL: &str = "Find why the nightly build of the parser fails on ARM";

/// The single-child block of a one-task unit whose child ended as `outcome`.
fn single(outcome: ChildOutcome) -> String {
    let unit = delegation(&[GOAL]);
    let events = [task_event(&unit, outcome)];
    render_envelope(&Envelope::new(&unit, &events), &ctx())
}

fn render(unit: &UnitRecord, events: &[Event]) -> String {
    render_envelope(&Envelope::new(unit, events), &ctx())
}

#[test]
fn single_completed_minimal() {
    let mut done = outcome(0, GOAL, ChildStatus::Completed);
    done.result = "The linker flag -march=native is set by build.rs; ARM runners reject it.\n\
                   Fix: gate it on target_arch.\n"
        .to_owned();
    let text = single(done);
    assert!(!text.contains("Context you provided:"));
    assert!(!text.contains("Toolsets:"));
    assert!(text.contains("Model: ?"));
    assert_snapshot!("single_completed_minimal", text);
}

#[test]
fn single_agent_child_shows_its_streams_model_and_usage() {
    let mut unit = delegation(&[GOAL]);
    unit.spec.tasks[0].agent = Some("claude".into());
    unit.spec.tasks[0].model = Some("sonnet".into());
    let mut done = outcome(0, GOAL, ChildStatus::Completed);
    done.api_calls = 3;
    done.model = Some("claude-sonnet-4-5-20250929".into());
    done.usage = Some(Box::new(hermes_ledger::Usage {
        input_tokens: 4135,
        output_tokens: 310,
        cached_input_tokens: 3000,
        cost_usd: Some(0.0213),
    }));
    done.result = "All 12 tests pass. I ran cargo test; nothing was left undone.".into();
    let events = [task_event(&unit, done)];
    let text = render(&unit, &events);
    assert!(text.contains("Model: claude-sonnet-4-5-20250929"), "{text}");
    assert!(
        text.contains("Usage: 4135 input tokens (3000 cached), 310 output, $0.0213\n"),
        "{text}"
    );
    assert_snapshot!("single_agent_child", text);
}

fn changes(index: u32, commits: &[&str]) -> Option<Box<hermes_ledger::Changes>> {
    Some(Box::new(hermes_ledger::Changes {
        branch: format!("hermes/deleg_0123456789ab-{index}"),
        base: "1a2b3c4d5e6f7a8b9c0d1a2b3c4d5e6f7a8b9c0d".into(),
        head: if commits.is_empty() {
            "1a2b3c4d5e6f7a8b9c0d1a2b3c4d5e6f7a8b9c0d".into()
        } else {
            "9f8e7d6c5b4a39281706f5e4d3c2b1a098765432".into()
        },
        commits: commits.iter().map(|c| (*c).to_owned()).collect(),
        files_changed: if commits.is_empty() { 0 } else { 2 },
        insertions: if commits.is_empty() { 0 } else { 14 },
        deletions: if commits.is_empty() { 0 } else { 3 },
        path: format!("/home/u/.hermes/workspaces/deleg_0123456789ab-{index}"),
        repository: "/home/u/src/parser".into(),
        error: None,
    }))
}

#[test]
fn single_worktree_child_shows_its_changes_before_its_result() {
    let unit = delegation(&[GOAL]);
    let mut done = outcome(0, GOAL, ChildStatus::Completed);
    done.result = "Fixed the ARM build.".into();
    done.changes = changes(
        0,
        &[
            "4f5e6d7 parser: align the lexer table",
            "9f8e7d6 hermes: commit what the child left uncommitted",
        ],
    );
    let text = render(&unit, &[task_event(&unit, done)]);
    let changes_at = text.find("--- CHANGES ---").expect("a CHANGES section");
    assert!(changes_at < text.find("--- RESULT ---").expect("a result"));
    assert!(text.contains("Branch: hermes/deleg_0123456789ab-0   Base: 1a2b3c4   Head: 9f8e7d6"));
    assert_snapshot!("single_worktree_changes", text);
}

#[test]
fn batch_worktree_children_one_without_changes() {
    let unit = delegation(&["add a test", "read the docs"]);
    let mut first = outcome(0, "add a test", ChildStatus::Completed);
    first.changes = changes(0, &["4f5e6d7 tests: cover ARM"]);
    let mut second = outcome(1, "read the docs", ChildStatus::Completed);
    second.changes = changes(1, &[]);
    let events = [task_event(&unit, first), task_event(&unit, second)];
    let text = render(&unit, &events);
    assert!(
        text.contains("No changes: the child left nothing in its worktree"),
        "{text}"
    );
    assert_snapshot!("batch_worktree_changes", text);
}

#[test]
fn single_completed_with_context_toolsets_and_model() {
    let mut unit = delegation(&[GOAL]);
    unit.spec.context = Some("CI logs are in ci/nightly.log.\n\nDo not touch Cargo.lock.".into());
    unit.spec.toolsets = vec!["web".into(), "files".into()];
    unit.spec.tasks[0].role = Role::Orchestrator;
    unit.spec.tasks[0].model = Some("sonnet-4".into());
    let mut done = outcome(0, GOAL, ChildStatus::Completed);
    done.result = "Found it.".into();
    done.api_calls = 1;
    let events = [task_event(&unit, done)];
    assert_snapshot!("single_completed_full", render(&unit, &events));
}

#[test]
fn single_task_settings_fall_back_to_the_unit() {
    let mut unit = delegation(&[GOAL]);
    unit.spec.model = Some("unit-model".into());
    unit.spec.toolsets = vec!["unit-tools".into()];
    unit.spec.tasks[0].context = Some("the task's own context".into());
    let events = [task_event(&unit, outcome(0, GOAL, ChildStatus::Completed))];
    let text = render(&unit, &events);
    assert!(text.contains("Model: unit-model"));
    assert!(text.contains("Toolsets: unit-tools"));
    assert!(text.contains("  │ the task's own context"));
}

#[test]
fn single_completed_without_output() {
    assert_snapshot!(
        "single_completed_empty",
        single(outcome(0, GOAL, ChildStatus::Completed))
    );
}

#[test]
fn a_sandboxed_agent_childs_denials_are_counted_and_named() {
    let mut unit = delegation(&[GOAL]);
    unit.spec.tasks[0].agent = Some("claude".into());
    unit.spec.sandbox = hermes_ledger::Sandbox {
        mode: hermes_ledger::SandboxMode::ReadOnly,
        commands_network: false,
        agents_network: true,
    };
    let mut done = outcome(0, GOAL, ChildStatus::Completed);
    done.denials = Some(Box::new(hermes_ledger::Denials {
        calls: vec!["Bash: touch made-by-child.txt".into()],
    }));
    let text = render(&unit, &[task_event(&unit, done.clone())]);
    assert!(text.contains("Sandbox: read-only, network on\n"), "{text}");
    assert!(
        text.contains("Denied: 1 (Bash: touch made-by-child.txt)\n"),
        "{text}"
    );
    // A batch names them per task too; an unconfined child says nothing of a sandbox.
    let mut batch = delegation(&[GOAL, "second"]);
    batch.spec.sandbox = unit.spec.sandbox;
    batch.spec.tasks[0].agent = Some("claude".into());
    let second = outcome(1, "second", ChildStatus::Completed);
    let text = render(
        &batch,
        &[task_event(&batch, done), task_event(&batch, second)],
    );
    assert!(
        text.contains("Denied: 1 (Bash: touch made-by-child.txt)"),
        "{text}"
    );
    assert!(text.contains("Sandbox: read-only, network off"), "{text}");
    assert!(!single(outcome(0, GOAL, ChildStatus::Completed)).contains("Sandbox:"));
}

#[test]
fn a_command_the_sandbox_refused_says_so_in_its_status_line() {
    let mut unit = delegation(&[GOAL]);
    unit.spec.sandbox.mode = hermes_ledger::SandboxMode::WorkspaceWrite;
    let mut failed = outcome(0, GOAL, ChildStatus::Failed);
    failed.exit_code = Some(1);
    failed.stderr_tail = Some("sh: 1: cannot create /home/u/x: Read-only file system\n".into());
    let text = render(&unit, &[task_event(&unit, failed.clone())]);
    assert!(
        text.contains("Status: failed (sandbox: Read-only file system)"),
        "{text}"
    );
    // Unconfined, the same failure is only a failure.
    assert!(!single(failed).contains("(sandbox:"));
}

#[test]
fn single_failed_with_stderr() {
    let mut failed = outcome(0, GOAL, ChildStatus::Failed);
    failed.exit_code = Some(101);
    failed.result = "running 3 tests\n".into();
    failed.stderr_tail = Some("thread 'main' panicked at src/lib.rs:10:5:\nboom\n".into());
    assert_snapshot!("single_failed", single(failed));
}

#[test]
fn single_failed_by_signal() {
    let mut failed = outcome(0, GOAL, ChildStatus::Failed);
    failed.exit_code = None;
    failed.signal = Some(11);
    assert_snapshot!("single_failed_signal", single(failed));
}

#[test]
fn single_error_could_not_start() {
    let mut error = outcome(0, GOAL, ChildStatus::Error);
    error.started_at = None;
    error.api_calls = 0;
    error.detail = ExitDetail::SpawnError {
        reason: "No such file or directory (os error 2)".into(),
    };
    assert_snapshot!("single_error", single(error));
}

#[test]
fn single_stalled_idle() {
    let mut stalled = outcome(0, GOAL, ChildStatus::Stalled);
    stalled.started_at = Some(NOW.minus_ms(600_000));
    stalled.ended_at = NOW.minus_ms(1_500);
    stalled.detail = ExitDetail::Stalled {
        stalled_after_quiet_seconds: 451.2,
        stall_threshold_seconds: 450.0,
        stall_phase: StallPhase::Idle,
        stall_grace_seconds: 120.0,
    };
    stalled.result = "partial notes".into();
    stalled.transcript_tail =
        Some("12:00:01 out | fetching crates\n12:00:02 err | waiting for lock".into());
    assert_snapshot!("single_stalled", single(stalled));
}

#[test]
fn single_stalled_in_tool() {
    let mut stalled = outcome(0, GOAL, ChildStatus::Stalled);
    stalled.detail = ExitDetail::Stalled {
        stalled_after_quiet_seconds: 1_200.0,
        stall_threshold_seconds: 1_200.0,
        stall_phase: StallPhase::InTool,
        stall_grace_seconds: 120.0,
    };
    stalled.transcript_tail = Some("12:00:01 prg | {\"tool\": \"browser\"}".into());
    assert_snapshot!("single_stalled_in_tool", single(stalled));
}

#[test]
fn single_timeout_before_first_progress() {
    let mut timeout = outcome(0, GOAL, ChildStatus::Timeout);
    timeout.api_calls = 0;
    timeout.ended_at = NOW.minus_ms(41_000).plus_ms(300_400);
    timeout.detail = ExitDetail::Timeout {
        timeout_seconds: 300.0,
        timed_out_after_seconds: 300.4,
        timeout_phase: TimeoutPhase::BeforeFirstProgress,
    };
    assert_snapshot!("single_timeout_before_progress", single(timeout));
}

#[test]
fn single_timeout_after_progress() {
    let mut timeout = outcome(0, GOAL, ChildStatus::Timeout);
    timeout.ended_at = NOW.minus_ms(41_000).plus_ms(60_000);
    timeout.detail = ExitDetail::Timeout {
        timeout_seconds: 60.0,
        timed_out_after_seconds: 60.0,
        timeout_phase: TimeoutPhase::AfterProgress,
    };
    timeout.result = "step 1 done\nstep 2 done".into();
    timeout.transcript_tail = Some("12:00:59 out | step 3…".into());
    assert_snapshot!("single_timeout_after_progress", single(timeout));
}

#[test]
fn single_interrupted() {
    let mut interrupted = outcome(0, GOAL, ChildStatus::Interrupted);
    interrupted.signal = Some(15);
    interrupted.detail = ExitDetail::Interrupted {
        reason: "user_stop".into(),
    };
    interrupted.transcript_tail = Some("12:00:01 out | halfway".into());
    assert_snapshot!("single_interrupted", single(interrupted));
}

#[test]
fn single_cancelled_while_queued() {
    let unit = delegation(&[GOAL]);
    let mut cancelled = outcome(0, GOAL, ChildStatus::Cancelled);
    cancelled.started_at = None;
    cancelled.api_calls = 0;
    cancelled.transcript = String::new();
    cancelled.detail = ExitDetail::Cancelled {
        reason: "session_end".into(),
    };
    let events = [terminal_event(
        &unit,
        UnitStatus::Cancelled,
        "session_end",
        vec![cancelled],
    )];
    assert_snapshot!("single_cancelled", render(&unit, &events));
}

#[test]
fn single_unknown_owner_died() {
    let unit = delegation(&[GOAL]);
    let mut unknown = outcome(0, GOAL, ChildStatus::Unknown);
    unknown.detail = ExitDetail::Unknown {
        reason: "owner_died".into(),
    };
    unknown.transcript_tail = Some("12:00:01 out | compiling\n12:00:09 out | linking".into());
    let events = [terminal_event(
        &unit,
        UnitStatus::Unknown,
        "owner_died",
        vec![unknown],
    )];
    assert_snapshot!("single_unknown", render(&unit, &events));
}

#[test]
fn single_unknown_with_nothing_recorded() {
    let mut unknown = outcome(0, GOAL, ChildStatus::Unknown);
    unknown.started_at = None;
    unknown.api_calls = 0;
    unknown.detail = ExitDetail::Unknown {
        reason: String::new(),
    };
    assert_snapshot!("single_unknown_nothing", single(unknown));
}

#[test]
fn single_status_without_its_details() {
    // A record whose detail does not match its status still renders, saying what is missing.
    let stalled = outcome(0, GOAL, ChildStatus::Stalled);
    let timeout = outcome(0, GOAL, ChildStatus::Timeout);
    let running = outcome(0, GOAL, ChildStatus::Running);
    let text = [single(stalled), single(timeout), single(running)].join("\n");
    assert_snapshot!("single_mismatched_details", text);
}

#[test]
fn ages_and_long_durations() {
    let mut unit = delegation(&[GOAL]);
    unit.dispatched_at = NOW.minus_ms(2 * 3_600_000 + 5 * 60_000);
    let mut done = outcome(0, GOAL, ChildStatus::Completed);
    done.started_at = Some(NOW.minus_ms(2 * 3_600_000));
    done.ended_at = NOW.minus_ms(2 * 3_600_000).plus_ms(754_200);
    let events = [task_event(&unit, done)];
    let text = render(&unit, &events);
    assert!(text.contains("(2h ago)"), "{text}");
    assert!(text.contains("Duration: 754.2s (12m 34s)\n"), "{text}");
    assert_snapshot!("single_long_duration", text);

    unit.dispatched_at = NOW.minus_ms(3 * 86_400_000);
    assert!(render(&unit, &events).contains("(3d ago)"));
    unit.dispatched_at = NOW.minus_ms(3 * 60_000);
    assert!(render(&unit, &events).contains("(3m ago)"));
    // A dispatch time after "now" (clocks of two machines) is not a negative age.
    unit.dispatched_at = NOW.plus_ms(5_000);
    assert!(render(&unit, &events).contains("(0s ago)"));
}

#[test]
fn local_time_follows_the_offset() {
    let unit = delegation(&[GOAL]);
    let events = [task_event(&unit, outcome(0, GOAL, ChildStatus::Completed))];
    let envelope = Envelope::new(&unit, &events);
    let west = RenderContext {
        now: NOW,
        utc_offset_seconds: -5 * 3_600,
    };
    assert!(render_envelope(&envelope, &west).contains("Dispatched: 2024-12-31 18:59:18 -05:00"));
    let utc = RenderContext::utc(NOW);
    assert!(render_envelope(&envelope, &utc).contains("Dispatched: 2024-12-31 23:59:18 +00:00"));
}

const GOALS: [&str; 3] = [
    "Read the parser's ARM CI logs",
    "Bisect the nightly regression between v1.2 and v1.3",
    "Check whether the linker flag is set anywhere else",
];

#[test]
fn batch_all_completed() {
    let unit = delegation(&GOALS);
    let events: Vec<Event> = (0..3)
        .map(|i| {
            let mut done = outcome(i, GOALS[i as usize], ChildStatus::Completed);
            done.result = format!("finding {}", i + 1);
            task_event(&unit, done)
        })
        .collect();
    assert_snapshot!("batch_all_completed", render(&unit, &events));
}

#[test]
fn batch_some_of_the_tasks_with_a_failure() {
    let mut unit = delegation(&GOALS);
    unit.spec.context = Some("Nightly run #412.".into());
    unit.spec.toolsets = vec!["shell".into()];
    unit.spec.model = Some("haiku".into());
    let mut failed = outcome(2, GOALS[2], ChildStatus::Failed);
    failed.exit_code = Some(2);
    failed.stderr_tail = Some("grep: build.rs: No such file or directory".into());
    let mut done = outcome(0, GOALS[0], ChildStatus::Completed);
    done.result = "The logs show an illegal instruction in the build script.".into();
    // Events arrive in any order; tasks are shown by index.
    let events = vec![task_event(&unit, failed), task_event(&unit, done)];
    let text = render(&unit, &events);
    assert!(text.starts_with("[ASYNC DELEGATION RESULTS — deleg_0123456789ab — 2 of 3 tasks]\n"));
    assert_snapshot!("batch_two_of_three", text);
}

#[test]
fn batch_finished_partial() {
    let mut unit = delegation(&GOALS[..2]);
    unit.status = UnitStatus::Partial;
    let done = outcome(0, GOALS[0], ChildStatus::Completed);
    let mut failed = outcome(1, GOALS[1], ChildStatus::Failed);
    failed.exit_code = Some(1);
    let events = vec![task_event(&unit, done), task_event(&unit, failed)];
    let text = render(&unit, &events);
    assert!(text.contains("Status: partial   In this envelope: 1 of 2 completed\n"));
    assert_snapshot!("batch_partial", text);
}

#[test]
fn batch_terminal_event_carries_missing_children() {
    let unit = delegation(&GOALS);
    let mut done = outcome(0, GOALS[0], ChildStatus::Completed);
    done.result = "ok".into();
    let missing: Vec<ChildOutcome> = (1..3)
        .map(|i| {
            let mut unknown = outcome(i, GOALS[i as usize], ChildStatus::Unknown);
            unknown.detail = ExitDetail::Unknown {
                reason: "owner_died".into(),
            };
            unknown.transcript_tail = Some(format!("12:00:0{i} out | still working on {i}"));
            unknown
        })
        .collect();
    let events = vec![
        task_event(&unit, done),
        terminal_event(&unit, UnitStatus::Unknown, "owner_died", missing),
    ];
    let text = render(&unit, &events);
    assert!(text.starts_with("[ASYNC DELEGATION RESULTS — deleg_0123456789ab — 3 of 3 tasks]\n"));
    assert_snapshot!("batch_terminal_unknown", text);
}

#[test]
fn batch_cancelled_while_queued() {
    let unit = delegation(&GOALS[..2]);
    let cancelled: Vec<ChildOutcome> = (0..2)
        .map(|i| {
            let mut c = outcome(i, GOALS[i as usize], ChildStatus::Cancelled);
            c.started_at = None;
            c.api_calls = 0;
            c.transcript = String::new();
            c.detail = ExitDetail::Cancelled {
                reason: "user_stop".into(),
            };
            c
        })
        .collect();
    let events = [terminal_event(
        &unit,
        UnitStatus::Cancelled,
        "user_stop",
        cancelled,
    )];
    assert_snapshot!("batch_cancelled", render(&unit, &events));
}

#[test]
fn batch_of_every_child_status() {
    let goals = ["error", "stalled", "timeout", "interrupted"];
    let unit = delegation(&goals);
    let mut error = outcome(0, goals[0], ChildStatus::Error);
    error.detail = ExitDetail::SpawnError {
        reason: "Permission denied (os error 13)".into(),
    };
    let mut stalled = outcome(1, goals[1], ChildStatus::Stalled);
    stalled.detail = ExitDetail::Stalled {
        stalled_after_quiet_seconds: 2.0,
        stall_threshold_seconds: 2.0,
        stall_phase: StallPhase::Idle,
        stall_grace_seconds: 1.5,
    };
    let mut timeout = outcome(2, goals[2], ChildStatus::Timeout);
    timeout.detail = ExitDetail::Timeout {
        timeout_seconds: 1.0,
        timed_out_after_seconds: 1.0,
        timeout_phase: TimeoutPhase::BeforeFirstProgress,
    };
    let mut interrupted = outcome(3, goals[3], ChildStatus::Interrupted);
    interrupted.detail = ExitDetail::Interrupted {
        reason: "host_shutdown".into(),
    };
    let events: Vec<Event> = [error, stalled, timeout, interrupted]
        .into_iter()
        .map(|o| task_event(&unit, o))
        .collect();
    assert_snapshot!("batch_every_status", render(&unit, &events));
}

#[test]
fn batch_goal_comes_from_the_dispatch_when_the_outcome_has_none() {
    let unit = delegation(&GOALS[..2]);
    let events = [task_event(&unit, outcome(1, "", ChildStatus::Completed))];
    assert!(render(&unit, &events).contains(&format!("--- ✓ TASK 2/2: {} (", GOALS[1])));
}

#[test]
fn envelope_without_outcomes() {
    let unit = delegation(&GOALS[..2]);
    assert_snapshot!("batch_empty", render(&unit, &[]));
}

#[test]
fn one_task_unit_with_a_missing_task_list() {
    // A record with no tasks listed still renders its one outcome as a single-child block.
    let mut unit = delegation(&[GOAL]);
    unit.spec.tasks.clear();
    let events = [task_event(&unit, outcome(0, GOAL, ChildStatus::Completed))];
    assert!(
        render(&unit, &events).starts_with("[ASYNC DELEGATION COMPLETE — deleg_0123456789ab]\n")
    );
}

/// Two envelopes: a one-task unit and two tasks of a batch.
fn two_units() -> (UnitRecord, Vec<Event>, UnitRecord, Vec<Event>) {
    let first = delegation(&[GOAL]);
    let mut done = outcome(0, GOAL, ChildStatus::Completed);
    done.result = "first result".into();
    let first_events = vec![task_event(&first, done)];
    let mut second = delegation(&GOALS[..2]);
    second.id = hermes_ledger::DelegationId::from_bits(0xfeed_0000_beef);
    let second_events = (0..2)
        .map(|i| {
            let mut done = outcome(i, GOALS[i as usize], ChildStatus::Completed);
            done.result = format!("batch result {i}");
            task_event(&second, done)
        })
        .collect();
    (first, first_events, second, second_events)
}

#[test]
fn boundaries() {
    let (first, first_events, second, second_events) = two_units();
    let one = [Envelope::new(&first, &first_events)];
    let two = [
        Envelope::new(&first, &first_events),
        Envelope::new(&second, &second_events),
    ];
    assert_eq!(render_boundary(&[], Boundary::Turn, &ctx()), "");
    assert_eq!(render_boundary(&[], Boundary::Tool, &ctx()), "");
    assert_eq!(
        render_boundary(&one, Boundary::Turn, &ctx()),
        render_envelope(&one[0], &ctx())
    );
    assert_snapshot!(
        "boundary_turn_several",
        render_boundary(&two, Boundary::Turn, &ctx())
    );
    assert_snapshot!(
        "boundary_tool_single",
        render_boundary(&one, Boundary::Tool, &ctx())
    );
    assert_snapshot!(
        "boundary_tool_several",
        render_boundary(&two, Boundary::Tool, &ctx())
    );
}

#[test]
fn boundary_to_a_byte_sink() {
    let (first, first_events, ..) = two_units();
    let one = [Envelope::new(&first, &first_events)];
    let mut bytes = Vec::new();
    hermes_formatter::write_boundary_io(&mut bytes, &one, Boundary::Tool, &ctx())
        .expect("writing to a Vec cannot fail");
    assert_eq!(
        bytes,
        render_boundary(&one, Boundary::Tool, &ctx()).into_bytes()
    );
}

#[test]
fn inline_runs_are_not_called_background_work() {
    let mut unit = delegation(&[GOAL]);
    unit.channel = hermes_ledger::Channel::Inline;
    let events = [task_event(&unit, outcome(0, GOAL, ChildStatus::Completed))];
    let text = render(&unit, &events);
    assert!(
        text.contains("The task you ran inline has finished."),
        "{text}"
    );
    assert!(!text.contains("background"), "{text}");

    let mut batch = delegation(&["a", "b"]);
    batch.channel = hermes_ledger::Channel::Inline;
    let events = [
        task_event(&batch, outcome(0, "a", ChildStatus::Completed)),
        task_event(&batch, outcome(1, "b", ChildStatus::Completed)),
    ];
    let text = render(&batch, &events);
    assert!(
        text.contains("Tasks of a batch you ran inline have finished."),
        "{text}"
    );
    assert!(!text.contains("background"), "{text}");
}
