//! What `hermes top` and the metrics show, computed from one ledger read: a header per machine and per pool,
//! and one row per unit with its quiet-time bar and delivery state. Pure: the time, the
//! thresholds and the liveness of hosts are arguments, so a fixed ledger and clock give a
//! fixed model (and so a fixed frame).

use std::collections::BTreeMap;

use hermes_ledger::{
    Child, DelegationId, Event, EventState, ExitDetail, HostRecord, Overview, Stalling, Timestamp,
    UnitRecord, UnitStatus, UnitView,
};

/// The thresholds the view measures against (this machine's settings; a stalling child's own
/// recorded threshold wins once it is stalling).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// `delegation.stall_idle_seconds`, in ms.
    pub stall_idle_ms: u64,
    /// `delegation.stall_in_tool_seconds`, in ms.
    pub stall_in_tool_ms: u64,
    /// `delegation.stall_grace_seconds`, in ms.
    pub stall_grace_ms: u64,
    /// `delegation.max_concurrent_children`: a machine's session slots.
    pub slots_per_machine: u32,
    /// `host.heartbeat_seconds`, in ms: a lease not renewed for two of them is late.
    pub heartbeat_ms: u64,
}

impl Limits {
    pub fn from_settings(settings: &hermes_settings::Settings) -> Limits {
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Limits {
            stall_idle_ms: ms(settings.delegation.stall_idle),
            stall_in_tool_ms: ms(settings.delegation.stall_in_tool),
            stall_grace_ms: ms(settings.delegation.stall_grace),
            slots_per_machine: settings.delegation.max_concurrent_children,
            heartbeat_ms: ms(settings.host.heartbeat),
        }
    }
}

/// How a machine's (or pool's) host leases are doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseHealth {
    /// Every lease renewed on time; the one that runs out first has this many ms left.
    Ok { left_ms: u64 },
    /// A lease was not renewed for more than two heartbeats (ms since its last renewal).
    Late { since_ms: u64 },
    /// No live host.
    None,
}

/// One machine: its live hosts and its session slots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineLine {
    pub name: String,
    /// Live hosts by kind (interactive, headless, worker, inline).
    pub hosts: BTreeMap<&'static str, usize>,
    /// Session units running on it, and its slots.
    pub used: usize,
    pub capacity: u32,
    /// Session units queued on it.
    pub queued: usize,
    pub lease: LeaseHealth,
}

/// One worker pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolLine {
    pub name: String,
    pub workers: usize,
    pub used: usize,
    pub capacity: u32,
    pub queued: usize,
    pub lease: LeaseHealth,
}

/// Where a unit's quiet time stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quiet {
    /// Counting toward the threshold that applies now.
    Counting {
        quiet_ms: u64,
        threshold_ms: u64,
        in_tool: bool,
    },
    /// Found stalling: SIGTERM was sent, SIGKILL when the grace runs out.
    Grace { left_ms: u64, grace_ms: u64 },
}

/// One child, for the status pane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildLine {
    pub index: u32,
    pub goal: String,
    pub status: String,
    pub pid: Option<u32>,
    pub api_calls: u64,
    pub tool: Option<String>,
    pub quiet: Option<Quiet>,
    pub transcript: Option<String>,
    pub delivery: String,
    /// A worktree child's branch (`hermes/…`, "no changes" once it ended with none).
    pub branch: Option<String>,
    /// A confined child's sandbox in words (`workspace-write, network off`, and how many tool
    /// calls its agent refused); `None` when it runs unconfined with nothing refused.
    pub sandbox: Option<String>,
}

/// One unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub id: DelegationId,
    pub session: String,
    pub goal: String,
    pub status: String,
    pub finished: bool,
    pub machine: String,
    pub pool: Option<String>,
    /// Running: since it started; queued: since it was dispatched; finished: how long it ran.
    pub elapsed_ms: Option<u64>,
    pub api_calls: u64,
    pub tool: Option<String>,
    pub quiet: Option<Quiet>,
    pub delivery: DeliveryState,
    pub attempts: u32,
    pub tasks: u32,
    pub children: Vec<ChildLine>,
}

/// A unit's delivery state (its events taken together).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeliveryState {
    /// Nothing published yet.
    Nothing,
    Pending,
    Claimed {
        by: String,
        left_ms: u64,
    },
    Delivered,
    Dropped(String),
}

/// Everything one frame shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Model {
    pub machines: Vec<MachineLine>,
    pub pools: Vec<PoolLine>,
    /// Running, then queued, then finished units.
    pub rows: Vec<Row>,
    pub running: usize,
    pub queued: usize,
    pub finished: usize,
}

/// The model of `overview` at `now`. `dead` says whether a host record is dead (the registry's
/// answer: lease, and pid where it can be judged).
pub fn build(
    overview: &Overview,
    now: Timestamp,
    limits: &Limits,
    dead: &dyn Fn(&HostRecord) -> bool,
) -> Model {
    let live: Vec<&HostRecord> = overview.hosts.iter().filter(|h| !dead(h)).collect();
    let all_hosts = &overview.hosts;
    let row = |v: &UnitView| unit_row(v, all_hosts, now, limits);
    let mut rows: Vec<Row> = overview.running.iter().map(row).collect();
    rows.extend(overview.queued.iter().map(row));
    rows.extend(overview.recent.iter().map(row));
    Model {
        machines: machines(
            &live,
            &overview.running,
            &overview.queued,
            all_hosts,
            now,
            limits,
        ),
        pools: pools(&live, &overview.running, &overview.queued, now, limits),
        running: overview.running.len(),
        queued: overview.queued.len(),
        finished: overview.recent.len(),
        rows,
    }
}

/// The machine a unit runs on: a child's recorded machine, else its host's.
fn machine_of(view: &UnitView, hosts: &[HostRecord]) -> Option<String> {
    view.children
        .iter()
        .find_map(|c| c.machine.clone())
        .or_else(|| host_of(&view.unit, hosts).map(|h| h.locality.hostname.clone()))
}

fn host_of<'a>(unit: &UnitRecord, hosts: &'a [HostRecord]) -> Option<&'a HostRecord> {
    unit.host
        .and_then(|p| hosts.iter().find(|h| h.process == p))
}

/// The lease health of the hosts of `live` that `serves` picks.
fn lease_health(
    live: &[&HostRecord],
    serves: impl Fn(&HostRecord) -> bool,
    now: Timestamp,
    limits: &Limits,
) -> LeaseHealth {
    let (mut late, mut left): (Option<u64>, Option<u64>) = (None, None);
    for host in live.iter().copied().filter(|h| serves(h)) {
        let since = now.ms_since(host.heartbeat_at);
        if since > 2 * limits.heartbeat_ms {
            late = Some(late.map_or(since, |l| l.max(since)));
        }
        let remaining = host.lease_expires_at.ms_since(now);
        left = Some(left.map_or(remaining, |l| l.min(remaining)));
    }
    match (late, left) {
        (Some(since_ms), _) => LeaseHealth::Late { since_ms },
        (None, Some(left_ms)) => LeaseHealth::Ok { left_ms },
        (None, None) => LeaseHealth::None,
    }
}

/// How many units of `running` and of `queued` each line has, by the name `line_of` gives a
/// unit's line (a unit it gives none is on no line).
fn unit_counts(
    running: &[UnitView],
    queued: &[UnitView],
    line_of: impl Fn(&UnitView) -> Option<String>,
) -> BTreeMap<String, (usize, usize)> {
    let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for view in running {
        if let Some(name) = line_of(view) {
            counts.entry(name).or_default().0 += 1;
        }
    }
    for view in queued {
        if let Some(name) = line_of(view) {
            counts.entry(name).or_default().1 += 1;
        }
    }
    counts
}

fn machines(
    live: &[&HostRecord],
    running: &[UnitView],
    queued: &[UnitView],
    hosts: &[HostRecord],
    now: Timestamp,
    limits: &Limits,
) -> Vec<MachineLine> {
    let mut out: BTreeMap<String, MachineLine> = BTreeMap::new();
    let line = |name: &str| MachineLine {
        name: name.to_owned(),
        hosts: BTreeMap::new(),
        used: 0,
        capacity: limits.slots_per_machine,
        queued: 0,
        lease: LeaseHealth::None,
    };
    for host in live {
        let name = &host.locality.hostname;
        let entry = out.entry(name.clone()).or_insert_with(|| line(name));
        *entry.hosts.entry(host.kind.as_str()).or_default() += 1;
    }
    // Session units of background hosts take a machine's slots; pool and inline ones do not.
    let takes_slot = |v: &UnitView| {
        v.unit.pool().is_none() && v.unit.channel == hermes_ledger::Channel::Background
    };
    let slot_of = |v: &UnitView| takes_slot(v).then(|| machine_of(v, hosts)).flatten();
    for (name, counts) in unit_counts(running, queued, slot_of) {
        let entry = out.entry(name.clone()).or_insert_with(|| line(&name));
        (entry.used, entry.queued) = counts;
    }
    for entry in out.values_mut() {
        entry.lease = lease_health(live, |h| h.locality.hostname == entry.name, now, limits);
    }
    out.into_values().collect()
}

fn pools(
    live: &[&HostRecord],
    running: &[UnitView],
    queued: &[UnitView],
    now: Timestamp,
    limits: &Limits,
) -> Vec<PoolLine> {
    let mut out: BTreeMap<String, PoolLine> = BTreeMap::new();
    let line = |name: &str| PoolLine {
        name: name.to_owned(),
        workers: 0,
        used: 0,
        capacity: 0,
        queued: 0,
        lease: LeaseHealth::None,
    };
    for host in live {
        if let Some(worker) = &host.worker {
            let entry = out
                .entry(worker.pool.clone())
                .or_insert_with(|| line(&worker.pool));
            entry.workers += 1;
            entry.capacity += worker.capacity;
        }
    }
    let pool_of = |v: &UnitView| v.unit.pool().map(str::to_owned);
    for (pool, counts) in unit_counts(running, queued, pool_of) {
        let entry = out.entry(pool.clone()).or_insert_with(|| line(&pool));
        (entry.used, entry.queued) = counts;
    }
    for entry in out.values_mut() {
        let serves = |h: &HostRecord| h.worker.as_ref().is_some_and(|w| w.pool == entry.name);
        entry.lease = lease_health(live, serves, now, limits);
    }
    out.into_values().collect()
}

fn unit_row(view: &UnitView, hosts: &[HostRecord], now: Timestamp, limits: &Limits) -> Row {
    let unit = &view.unit;
    let finished = unit.status.is_terminal();
    let children: Vec<ChildLine> = view
        .children
        .iter()
        .map(|c| child_line(unit, c, &view.stalls, &view.events, now, limits))
        .collect();
    let stalling = !finished
        && children
            .iter()
            .any(|c| matches!(c.quiet, Some(Quiet::Grace { .. })));
    let status = if stalling {
        "stalling".to_owned()
    } else {
        unit.status.as_str().to_owned()
    };
    let elapsed_ms = match (unit.status, unit.started_at, unit.ended_at) {
        (UnitStatus::Queued, _, _) => Some(now.ms_since(unit.dispatched_at)),
        (_, Some(start), Some(end)) => Some(end.ms_since(start)),
        (_, Some(start), None) => Some(now.ms_since(start)),
        _ => None,
    };
    Row {
        id: unit.id.clone(),
        session: unit
            .session
            .as_ref()
            .map_or_else(|| "(inline)".to_owned(), ToString::to_string),
        goal: unit.spec.goal.clone(),
        status,
        finished,
        machine: machine_of(view, hosts).unwrap_or_default(),
        pool: unit.pool().map(str::to_owned),
        elapsed_ms,
        api_calls: view.children.iter().map(|c| c.progress.api_calls).sum(),
        tool: view
            .children
            .iter()
            .filter(|c| !c.status.is_terminal())
            .find_map(|c| c.progress.current_tool.clone()),
        quiet: worst_quiet(&children),
        delivery: delivery(&view.events, now),
        attempts: view.events.iter().map(|e| e.attempts).max().unwrap_or(0),
        tasks: unit.task_count(),
        children,
    }
}

/// The child closest to being stopped: one in its grace period first (least left), else the
/// one that has used most of its threshold.
fn worst_quiet(children: &[ChildLine]) -> Option<Quiet> {
    let key = |q: &Quiet| match *q {
        Quiet::Grace { left_ms, .. } => (1, u64::MAX - left_ms),
        Quiet::Counting {
            quiet_ms,
            threshold_ms,
            ..
        } => (0, quiet_ms.saturating_mul(1000) / threshold_ms.max(1)),
    };
    children.iter().filter_map(|c| c.quiet).max_by_key(key)
}

fn child_line(
    unit: &UnitRecord,
    child: &Child,
    stalls: &[Stalling],
    events: &[Event],
    now: Timestamp,
    limits: &Limits,
) -> ChildLine {
    let running = child.status == hermes_ledger::ChildStatus::Running;
    let stalling = stalls.iter().find(|s| s.index == child.index);
    let quiet = match (running, stalling) {
        (false, _) => None,
        (true, Some(s)) => {
            let grace_ms = match &s.detail {
                ExitDetail::Stalled {
                    stall_grace_seconds,
                    ..
                } => (stall_grace_seconds.max(0.0) * 1000.0) as u64,
                _ => limits.stall_grace_ms,
            };
            Some(Quiet::Grace {
                left_ms: grace_ms.saturating_sub(now.ms_since(s.since)),
                grace_ms,
            })
        }
        (true, None) => {
            let last = child.progress.last_activity_at.or(child.started_at);
            let in_tool = child.progress.current_tool.is_some();
            last.map(|l| Quiet::Counting {
                quiet_ms: now.ms_since(l),
                threshold_ms: if in_tool {
                    limits.stall_in_tool_ms
                } else {
                    limits.stall_idle_ms
                },
                in_tool,
            })
        }
    };
    let own: Vec<Event> = events
        .iter()
        .filter(|e| {
            e.key == hermes_ledger::EventKey::Task(child.index)
                || (e.key == hermes_ledger::EventKey::Terminal
                    && e.payload.outcomes().iter().any(|o| o.index == child.index))
        })
        .cloned()
        .collect();
    ChildLine {
        index: child.index,
        goal: unit.goal_of(child.index).to_owned(),
        status: if running && stalling.is_some() {
            "stalling".to_owned()
        } else {
            child.status.as_str().to_owned()
        },
        pid: child.process.map(|p| p.pid),
        api_calls: child.progress.api_calls,
        tool: child.progress.current_tool.clone(),
        quiet,
        transcript: child.transcript.clone(),
        delivery: delivery_words(&delivery(&own, now), own.iter().map(|e| e.attempts).max()),
        branch: branch_of(unit, child.index, &own),
        sandbox: sandbox_of(unit, child.index, &own),
    }
}

/// A child's sandbox in words, with the calls its agent refused once it ended.
fn sandbox_of(unit: &UnitRecord, index: u32, own: &[Event]) -> Option<String> {
    let agent = unit
        .spec
        .tasks
        .get(index as usize)
        .is_some_and(|t| t.agent.is_some());
    let sandbox = unit.spec.sandbox;
    let denied = own
        .iter()
        .flat_map(|e| e.payload.outcomes())
        .find(|o| o.index == index)
        .map_or(0, |o| o.denied().len());
    let mut words = Vec::new();
    if sandbox.confines(agent) {
        let network = if sandbox.network(agent) { "on" } else { "off" };
        words.push(format!("{}, network {network}", sandbox.mode));
    }
    if denied > 0 {
        words.push(format!("{denied} denied"));
    }
    (!words.is_empty()).then(|| words.join(" · "))
}

/// A worktree child's branch: what its outcome says once it ended, else the one it works on.
fn branch_of(unit: &UnitRecord, index: u32, own: &[Event]) -> Option<String> {
    if unit.spec.workspace != hermes_ledger::Workspace::Worktree {
        return None;
    }
    let ended = own
        .iter()
        .flat_map(|e| e.payload.outcomes())
        .find(|o| o.index == index)
        .and_then(|o| o.changes.as_deref());
    Some(match ended {
        Some(changes) if changes.is_empty() => "no changes".to_owned(),
        Some(changes) => format!(
            "{} (+{} −{})",
            changes.branch, changes.insertions, changes.deletions
        ),
        None => hermes_registry::workspace::branch_name(&unit.id, index),
    })
}

/// The state of a set of events taken together: a live claim first, then anything pending,
/// then dropped, then delivered.
fn delivery(events: &[Event], now: Timestamp) -> DeliveryState {
    if let Some(lease) = events
        .iter()
        .filter(|e| e.state == EventState::Claimed)
        .find_map(|e| e.lease.as_ref())
    {
        return DeliveryState::Claimed {
            by: lease.consumer.clone(),
            left_ms: lease.expires_at.ms_since(now),
        };
    }
    if events.iter().any(|e| e.state == EventState::Pending) {
        return DeliveryState::Pending;
    }
    if let Some(e) = events.iter().find(|e| e.state == EventState::Dropped) {
        return DeliveryState::Dropped(
            e.drop_reason
                .as_ref()
                .map_or_else(|| "dropped".to_owned(), |r| r.as_str().to_owned()),
        );
    }
    if events.is_empty() {
        DeliveryState::Nothing
    } else {
        DeliveryState::Delivered
    }
}

/// A delivery state in words, with its attempts (`×2`).
pub fn delivery_words(d: &DeliveryState, attempts: Option<u32>) -> String {
    let text = match d {
        DeliveryState::Nothing => "—".to_owned(),
        DeliveryState::Pending => "pending".to_owned(),
        DeliveryState::Claimed { by, left_ms } => {
            format!("claimed by {by} {}s", left_ms.div_ceil(1000))
        }
        DeliveryState::Delivered => "delivered".to_owned(),
        DeliveryState::Dropped(reason) => format!("dropped: {reason}"),
    };
    match attempts {
        Some(n) if n > 0 => format!("{text} ×{n}"),
        _ => text,
    }
}
