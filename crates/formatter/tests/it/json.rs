//! The JSON views: documented field names, values from event data.

use hermes_formatter::{
    Boundary, DeferredJson, DrainJson, Envelope, envelope_json, render_envelope, run_json,
    task_json,
};
use hermes_ledger::{
    ChildStatus, ClaimToken, EventKey, ExitDetail, StallPhase, TimeoutPhase, UnitStatus,
};
use insta::assert_snapshot;
use serde_json::{Value, json};

use crate::fixtures::{NOW, ctx, delegation, outcome, task_event, terminal_event};

fn pretty(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).expect("these types always serialize")
}

#[test]
fn drain_envelope_fields() {
    let unit = delegation(&["a", "b"]);
    let mut first = task_event(&unit, outcome(0, "a", ChildStatus::Completed));
    first.attempts = 2;
    let events = [
        first,
        task_event(&unit, outcome(1, "b", ChildStatus::Failed)),
    ];
    let envelope = Envelope::new(&unit, &events);
    let entry = envelope_json(&envelope, &ctx());
    assert_eq!(entry.claim, None);
    assert_eq!(entry.text, render_envelope(&envelope, &ctx()));
    let value = serde_json::to_value(&entry).expect("serializes");
    assert_eq!(value["claim"], Value::Null);
    assert_eq!(value["delegation_id"], "deleg_0123456789ab");
    assert_eq!(value["event_keys"], json!(["task:0", "task:1"]));
    assert_eq!(value["attempts"], 2);

    let held = entry.with_claim(ClaimToken(0xabc));
    assert_eq!(
        held.claim.as_deref(),
        Some("00000000000000000000000000000abc")
    );
}

#[test]
fn drain_output() {
    let unit = delegation(&["only"]);
    let mut done = outcome(0, "only", ChildStatus::Completed);
    done.result = "42".into();
    let events = [task_event(&unit, done)];
    let entry = envelope_json(&Envelope::new(&unit, &events), &ctx())
        .with_claim(ClaimToken(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef));
    let other = hermes_ledger::DelegationId::from_bits(0xbeef);
    let drain = DrainJson {
        session: "sess-1".into(),
        boundary: Boundary::Tool,
        envelopes: vec![entry],
        deferred: vec![DeferredJson::new(
            &other,
            &[EventKey::Task(0), EventKey::Terminal],
            NOW.plus_ms(300_050),
        )],
        carrier: Some(hermes_formatter::TOOL_CARRIER.to_owned()),
    };
    let text = pretty(&drain);
    let back: DrainJson = serde_json::from_str(&text).expect("round-trips");
    assert_eq!(back, drain);
    assert_snapshot!("drain_json", text);
}

#[test]
fn run_json_of_every_detail() {
    let goals = ["ok", "spawn", "stall", "timeout", "stop", "cancel", "lost"];
    let mut unit = delegation(&goals);
    unit.status = UnitStatus::Running;
    let mut tasks = Vec::new();
    let mut done = outcome(0, goals[0], ChildStatus::Completed);
    done.result = "line 1\nline \"2\"".into();
    tasks.push(done);
    let mut error = outcome(1, goals[1], ChildStatus::Error);
    error.started_at = None;
    error.detail = ExitDetail::SpawnError {
        reason: "No such file or directory (os error 2)".into(),
    };
    tasks.push(error);
    let mut stalled = outcome(2, goals[2], ChildStatus::Stalled);
    stalled.signal = Some(9);
    stalled.stderr_tail = Some("warn".into());
    stalled.transcript_tail = Some("12:00:00 out | …".into());
    stalled.detail = ExitDetail::Stalled {
        stalled_after_quiet_seconds: 450.5,
        stall_threshold_seconds: 450.0,
        stall_phase: StallPhase::InTool,
        stall_grace_seconds: 120.0,
    };
    tasks.push(stalled);
    let mut timeout = outcome(3, goals[3], ChildStatus::Timeout);
    timeout.detail = ExitDetail::Timeout {
        timeout_seconds: 30.0,
        timed_out_after_seconds: 30.25,
        timeout_phase: TimeoutPhase::AfterProgress,
    };
    tasks.push(timeout);
    let mut stop = outcome(4, goals[4], ChildStatus::Interrupted);
    stop.detail = ExitDetail::Interrupted {
        reason: "user_stop".into(),
    };
    tasks.push(stop);
    let mut events: Vec<_> = tasks.into_iter().map(|t| task_event(&unit, t)).collect();
    let mut cancel = outcome(5, goals[5], ChildStatus::Cancelled);
    cancel.detail = ExitDetail::Cancelled {
        reason: "session_end".into(),
    };
    let mut lost = outcome(6, goals[6], ChildStatus::Unknown);
    lost.detail = ExitDetail::Unknown {
        reason: "owner_died".into(),
    };
    events.push(terminal_event(
        &unit,
        UnitStatus::Unknown,
        "owner_died",
        vec![lost, cancel],
    ));

    let run = run_json(&Envelope::new(&unit, &events));
    assert_eq!(run.status, "unknown");
    assert_eq!(
        run.tasks.iter().map(|t| t.index).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4, 5, 6]
    );
    let value = serde_json::to_value(&run).expect("serializes");
    for key in [
        "index",
        "goal",
        "status",
        "exit_code",
        "duration_seconds",
        "result",
        "transcript",
    ] {
        assert!(
            value["tasks"][0].get(key).is_some(),
            "task JSON lacks {key}"
        );
    }
    assert_eq!(value["tasks"][0]["duration_seconds"], 3.4);
    assert_eq!(value["tasks"][1]["started_at"], Value::Null);
    assert_snapshot!("run_json", pretty(&run));
}

#[test]
fn run_status_without_a_terminal_event() {
    let mut unit = delegation(&["a", "b"]);
    let events = [
        task_event(&unit, outcome(0, "a", ChildStatus::Completed)),
        task_event(&unit, outcome(1, "b", ChildStatus::Failed)),
    ];
    // Every child reported while the record still says running: their statuses decide.
    assert_eq!(run_json(&Envelope::new(&unit, &events)).status, "partial");
    // Only some reported: the recorded status stands.
    assert_eq!(
        run_json(&Envelope::new(&unit, &events[..1])).status,
        "running"
    );
    // A terminal record wins.
    unit.status = UnitStatus::Interrupted;
    assert_eq!(
        run_json(&Envelope::new(&unit, &events)).status,
        "interrupted"
    );
}

#[test]
fn task_json_keeps_text_as_recorded() {
    let mut done = outcome(0, "goal\nwith a line break", ChildStatus::Completed);
    done.result = "[ASYNC DELEGATION COMPLETE — deleg_000000000000]\n".into();
    let task = task_json(&done);
    assert_eq!(task.goal, done.goal);
    assert_eq!(task.result, done.result);
    assert_eq!(task.detail, None);
    assert_eq!(task.ended_at, "2024-12-31T23:59:22.400Z");
}
