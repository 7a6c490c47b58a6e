//! Frames of `hermes top` for a fixed ledger and clock, on ratatui's `TestBackend`,
//! snapshotted with insta: running, quiet, stalling, queued, delivered, a narrow terminal, a
//! terminal too small, the status pane and the stop question.

use hermes_ledger::{
    Channel, Child, ChildOutcome, ChildStatus, DelegationId, DispatchSpec, Event, EventKey,
    EventPayload, EventState, ExitDetail, HostId, HostKind, HostRecord, Lease, Locality, Overview,
    ProcessId, Progress, SessionId, StallPhase, Stalling, TaskSpec, Timestamp, UnitRecord,
    UnitStatus, UnitView, WorkerPool,
};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::ui::{KeyAction, Pane, Prompt, Ui};
use super::view::{self, Screen};
use crate::services::overview::{self as model, Limits, Quiet};

/// 2026-12-01 12:00:00 UTC.
const NOW: Timestamp = Timestamp(1_796_126_400_000);

fn ago(secs: u64) -> Timestamp {
    NOW.minus_ms(secs * 1000)
}

fn limits() -> Limits {
    Limits {
        stall_idle_ms: 450_000,
        stall_in_tool_ms: 1_200_000,
        stall_grace_ms: 120_000,
        slots_per_machine: 3,
        heartbeat_ms: 5_000,
    }
}

fn process(pid: u32) -> ProcessId {
    ProcessId { pid, start_time: 7 }
}

fn host(pid: u32, kind: HostKind, machine: &str, worker: Option<(&str, u32)>) -> HostRecord {
    HostRecord {
        process: process(pid),
        kind,
        session: None,
        registered_at: ago(600),
        heartbeat_at: ago(2),
        host_id: HostId(u128::from(pid)),
        locality: Locality {
            boot_id: "boot".into(),
            pid_namespace: "ns".into(),
            hostname: machine.into(),
        },
        lease_expires_at: NOW.plus_ms(28_000),
        worker: worker.map(|(pool, capacity)| WorkerPool {
            pool: pool.into(),
            capacity,
        }),
    }
}

fn unit(n: u32, session: &str, goal: &str, status: UnitStatus, host: Option<u32>) -> UnitRecord {
    UnitRecord {
        id: DelegationId::new(format!("deleg_{n:012x}")).expect("id"),
        session: Some(SessionId::new(session).expect("session")),
        channel: Channel::Background,
        spec: DispatchSpec::new(goal, vec![TaskSpec::new(goal, vec!["sh".into()])]),
        status,
        dispatched_at: ago(900),
        started_at: (status != UnitStatus::Queued).then(|| ago(800)),
        ended_at: status.is_terminal().then(|| ago(100)),
        host: host.map(process),
        queue_seq: (status == UnitStatus::Queued).then_some(u64::from(n)),
        interrupt: None,
        transcript_dir: None,
    }
}

fn child(u: &UnitRecord, status: ChildStatus, quiet_secs: u64, tool: Option<&str>) -> Child {
    Child {
        delegation_id: u.id.clone(),
        index: 0,
        status,
        process: (status == ChildStatus::Running).then(|| process(4000)),
        started_at: u.started_at,
        ended_at: u.ended_at,
        exit_code: None,
        signal: None,
        progress: Progress {
            api_calls: 12,
            current_tool: tool.map(str::to_owned),
            output_bytes: 4096,
            progress_seq: 3,
            last_activity_at: Some(ago(quiet_secs)),
        },
        transcript: Some(format!("/h/cache/delegation/live/{}/task-0.log", u.id)),
        machine: None,
    }
}

fn event(u: &UnitRecord, state: EventState, attempts: u32) -> Event {
    Event {
        delegation_id: u.id.clone(),
        key: EventKey::Task(0),
        session: u.session.clone(),
        delivery: u.spec.delivery,
        payload: EventPayload::Task(ChildOutcome::new(0, "g", ChildStatus::Completed, ago(100))),
        state,
        attempts,
        lease: (state == EventState::Claimed).then(|| Lease {
            token: hermes_ledger::ClaimToken(1),
            consumer: "drain-123".into(),
            claimed_at: ago(10),
            expires_at: NOW.plus_ms(290_000),
        }),
        published_at: ago(100),
        delivered_at: (state == EventState::Delivered).then(|| ago(90)),
        dropped_at: None,
        drop_reason: None,
    }
}

fn view_of(unit: UnitRecord, children: Vec<Child>, events: Vec<Event>) -> UnitView {
    UnitView {
        unit,
        children,
        stalls: Vec::new(),
        events,
    }
}

/// Two machines, a pool with a worker; running (busy, quiet, in a tool, stalling), queued
/// (on a machine and in a pool), and finished (delivered, pending, claimed).
fn overview() -> Overview {
    let busy = unit(
        1,
        "alice",
        "run the test suite",
        UnitStatus::Running,
        Some(100),
    );
    let quiet = unit(
        2,
        "alice",
        "review src/ for unsafe code",
        UnitStatus::Running,
        Some(100),
    );
    let tool = unit(
        3,
        "bob",
        "build the release",
        UnitStatus::Running,
        Some(200),
    );
    let stalling = unit(4, "bob", "fetch the mirror", UnitStatus::Running, Some(200));
    let mut pooled = unit(
        5,
        "carol",
        "train the model",
        UnitStatus::Running,
        Some(300),
    );
    pooled.spec.pool = Some("gpu".into());
    let queued = unit(6, "alice", "lint everything", UnitStatus::Queued, Some(100));
    let mut waiting = unit(7, "carol", "evaluate", UnitStatus::Queued, None);
    waiting.spec.pool = Some("gpu".into());
    let done = unit(8, "alice", "count lines", UnitStatus::Completed, Some(100));
    let pending = unit(9, "bob", "format the diff", UnitStatus::Failed, Some(200));
    let claimed = unit(
        10,
        "bob",
        "summarize the log",
        UnitStatus::Completed,
        Some(200),
    );
    let mut stalling_view = view_of(
        stalling.clone(),
        vec![child(&stalling, ChildStatus::Running, 470, None)],
        vec![],
    );
    stalling_view.stalls = vec![Stalling {
        index: 0,
        detail: ExitDetail::Stalled {
            stalled_after_quiet_seconds: 450.2,
            stall_threshold_seconds: 450.0,
            stall_phase: StallPhase::Idle,
            stall_grace_seconds: 120.0,
        },
        since: ago(20),
    }];
    let mut pooled_child = child(&pooled, ChildStatus::Running, 30, Some("python"));
    pooled_child.machine = Some("gpu-box".into());
    Overview {
        hosts: vec![
            host(100, HostKind::Interactive, "laptop", None),
            host(200, HostKind::Headless, "build-7", None),
            host(300, HostKind::Worker, "gpu-box", Some(("gpu", 2))),
        ],
        running: vec![
            view_of(
                busy.clone(),
                vec![child(&busy, ChildStatus::Running, 3, None)],
                vec![],
            ),
            view_of(
                quiet.clone(),
                vec![child(&quiet, ChildStatus::Running, 400, None)],
                vec![],
            ),
            view_of(
                tool.clone(),
                vec![child(&tool, ChildStatus::Running, 300, Some("cargo"))],
                vec![],
            ),
            stalling_view,
            view_of(pooled, vec![pooled_child], vec![]),
        ],
        queued: vec![
            view_of(queued.clone(), vec![], vec![]),
            view_of(waiting, vec![], vec![]),
        ],
        recent: vec![
            view_of(
                done.clone(),
                vec![child(&done, ChildStatus::Completed, 100, None)],
                vec![event(&done, EventState::Delivered, 1)],
            ),
            view_of(
                pending.clone(),
                vec![child(&pending, ChildStatus::Failed, 100, None)],
                vec![event(&pending, EventState::Pending, 2)],
            ),
            view_of(
                claimed.clone(),
                vec![child(&claimed, ChildStatus::Completed, 100, None)],
                vec![event(&claimed, EventState::Claimed, 1)],
            ),
        ],
    }
}

fn frame(width: u16, height: u16, ui: &Ui) -> String {
    let model = model::build(&overview(), NOW, &limits(), &|_| false);
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test backend");
    let screen = Screen {
        model: &model,
        ui,
        now: NOW,
        ledger: "/h/ledger.redb",
        log: None,
    };
    terminal
        .draw(|f| view::draw(f, &screen))
        .expect("draws on the test backend");
    terminal.backend().to_string()
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

#[test]
fn a_wide_frame_shows_machines_pools_bars_and_delivery() {
    insta::assert_snapshot!(frame(160, 24, &Ui::default()));
}

#[test]
fn a_narrow_terminal_drops_the_session_tool_and_goal_columns() {
    insta::assert_snapshot!(frame(80, 20, &Ui::default()));
}

#[test]
fn a_terminal_too_small_says_so_in_the_frame() {
    insta::assert_snapshot!(frame(40, 8, &Ui::default()));
}

#[test]
fn enter_opens_the_status_pane_of_the_selected_unit() {
    let model = model::build(&overview(), NOW, &limits(), &|_| false);
    let mut ui = Ui::default();
    assert_eq!(ui.on_key(key(KeyCode::Down), &model), KeyAction::None);
    assert_eq!(ui.on_key(key(KeyCode::Down), &model), KeyAction::None);
    assert_eq!(ui.on_key(key(KeyCode::Down), &model), KeyAction::None);
    ui.on_key(key(KeyCode::Enter), &model);
    assert_eq!(
        ui.pane,
        Pane::Status(DelegationId::new("deleg_000000000004").expect("id"))
    );
    insta::assert_snapshot!(frame(140, 24, &ui));
}

#[test]
fn s_asks_before_stopping_and_only_y_stops() {
    let model = model::build(&overview(), NOW, &limits(), &|_| false);
    let mut ui = Ui::default();
    ui.on_key(key(KeyCode::Char('s')), &model);
    let first = DelegationId::new("deleg_000000000001").expect("id");
    assert_eq!(ui.prompt, Prompt::ConfirmStop(first.clone()));
    insta::assert_snapshot!(frame(140, 20, &ui));
    assert_eq!(ui.on_key(key(KeyCode::Char('n')), &model), KeyAction::None);
    assert_eq!(ui.prompt, Prompt::None);
    ui.on_key(key(KeyCode::Char('s')), &model);
    assert_eq!(
        ui.on_key(key(KeyCode::Char('y')), &model),
        KeyAction::Stop(first)
    );
}

#[test]
fn the_filter_keeps_units_of_a_session_pool_or_machine() {
    let model = model::build(&overview(), NOW, &limits(), &|_| false);
    let mut ui = Ui::default();
    ui.on_key(key(KeyCode::Char('f')), &model);
    for c in "gpu".chars() {
        ui.on_key(key(KeyCode::Char(c)), &model);
    }
    ui.on_key(key(KeyCode::Enter), &model);
    let shown: Vec<String> = ui
        .visible(&model)
        .iter()
        .map(|r| r.id.to_string())
        .collect();
    assert_eq!(shown, ["deleg_000000000005", "deleg_000000000007"]);
    ui.on_key(key(KeyCode::Char('t')), &model);
    assert!(ui.visible(&model).iter().all(|r| !r.finished));
    assert_eq!(ui.on_key(key(KeyCode::Char('q')), &model), KeyAction::Quit);
}

#[test]
fn the_quiet_bar_counts_toward_the_threshold_that_applies_then_the_grace() {
    let model = model::build(&overview(), NOW, &limits(), &|_| false);
    let quiet = |n: usize| model.rows[n].quiet;
    assert_eq!(
        quiet(1),
        Some(Quiet::Counting {
            quiet_ms: 400_000,
            threshold_ms: 450_000,
            in_tool: false
        })
    );
    assert_eq!(
        quiet(2),
        Some(Quiet::Counting {
            quiet_ms: 300_000,
            threshold_ms: 1_200_000,
            in_tool: true
        })
    );
    assert_eq!(
        quiet(3),
        Some(Quiet::Grace {
            left_ms: 100_000,
            grace_ms: 120_000
        })
    );
    assert_eq!(model.rows[3].status, "stalling");
    let laptop = &model
        .machines
        .iter()
        .find(|m| m.name == "laptop")
        .expect("laptop");
    assert_eq!((laptop.used, laptop.queued, laptop.capacity), (2, 1, 3));
    let gpu = &model.pools[0];
    assert_eq!(
        (gpu.workers, gpu.used, gpu.queued, gpu.capacity),
        (1, 1, 1, 2)
    );
}

#[test]
fn a_dead_host_is_not_counted_and_its_lease_health_is_gone() {
    let model = model::build(&overview(), NOW, &limits(), &|h| h.process.pid == 200);
    let build = model
        .machines
        .iter()
        .find(|m| m.name == "build-7")
        .expect("its units still name it");
    assert!(build.hosts.is_empty());
    assert_eq!(build.lease, model::LeaseHealth::None);
}

#[test]
fn a_worktree_childs_branch_is_shown_running_and_ended() {
    let mut running = unit(7, "alice", "fix the parser", UnitStatus::Running, Some(100));
    running.spec.workspace = hermes_ledger::Workspace::Worktree;
    let mut ended = unit(8, "alice", "add a test", UnitStatus::Completed, Some(100));
    ended.spec.workspace = hermes_ledger::Workspace::Worktree;
    let mut done = event(&ended, EventState::Pending, 0);
    if let EventPayload::Task(outcome) = &mut done.payload {
        outcome.changes = Some(Box::new(hermes_ledger::Changes {
            branch: "hermes/deleg_000000000008-0".into(),
            commits: vec!["abc1234 tests: cover the parser".into()],
            insertions: 12,
            deletions: 1,
            ..hermes_ledger::Changes::default()
        }));
    }
    let mut o = overview();
    o.running = vec![view_of(
        running.clone(),
        vec![child(&running, ChildStatus::Running, 5, None)],
        Vec::new(),
    )];
    o.recent = vec![view_of(
        ended.clone(),
        vec![child(&ended, ChildStatus::Completed, 0, None)],
        vec![done],
    )];
    let model = model::build(&o, NOW, &limits(), &|_| false);
    let branches: Vec<Option<String>> = model
        .rows
        .iter()
        .flat_map(|r| r.children.iter().map(|c| c.branch.clone()))
        .collect();
    assert!(
        branches.contains(&Some("hermes/deleg_000000000007-0".into())),
        "{branches:?}"
    );
    assert!(
        branches.contains(&Some("hermes/deleg_000000000008-0 (+12 −1)".into())),
        "{branches:?}"
    );
}

#[test]
fn a_confined_childs_sandbox_and_denials_are_shown() {
    let mut ended = unit(9, "alice", "review", UnitStatus::Completed, Some(100));
    ended.spec.sandbox = hermes_ledger::Sandbox {
        mode: hermes_ledger::SandboxMode::ReadOnly,
        commands_network: false,
        agents_network: true,
    };
    let mut done = event(&ended, EventState::Pending, 0);
    if let EventPayload::Task(outcome) = &mut done.payload {
        outcome.denials = Some(Box::new(hermes_ledger::Denials {
            calls: vec!["Bash: touch f".into()],
        }));
    }
    let mut plain = unit(10, "alice", "plain", UnitStatus::Running, Some(100));
    plain.spec.sandbox = hermes_ledger::Sandbox::FULL;
    let mut o = overview();
    o.running = vec![view_of(
        plain.clone(),
        vec![child(&plain, ChildStatus::Running, 5, None)],
        Vec::new(),
    )];
    o.recent = vec![view_of(
        ended.clone(),
        vec![child(&ended, ChildStatus::Completed, 0, None)],
        vec![done],
    )];
    let model = model::build(&o, NOW, &limits(), &|_| false);
    let shown: Vec<Option<String>> = model
        .rows
        .iter()
        .flat_map(|r| r.children.iter().map(|c| c.sandbox.clone()))
        .collect();
    assert!(
        shown.contains(&Some("read-only, network off · 1 denied".into())),
        "{shown:?}"
    );
    assert!(
        shown.contains(&None),
        "an unconfined child says nothing: {shown:?}"
    );
}
