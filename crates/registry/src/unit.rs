//! One unit: runs its children with batch parallelism at most `max_concurrent_children`,
//! publishes each child's `task:N` event through the ledger the moment that child ends (siblings
//! never wait for each other), keeps `manifest.json` and the unit's progress channel current.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use hermes_ledger::{
    ChildOutcome, ChildStatus, ExitDetail, SessionId, UnitRecord, UnitStatus, Workspace,
};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::child::{self, ChildPlan, ChildProgress, LiveChild, Started, exit_reason};
use crate::host::Publisher;
use crate::sandbox::{self, Policy, child::ChildTemp};
use crate::spawn::SpawnRequest;
use crate::transcript::{self, Manifest, TaskLog};
use crate::workspace::{WorkspacePlan, commit_note, enter_worktree, leave_worktree};

/// A unit's live progress, for progress bars.
#[derive(Clone, Debug, PartialEq)]
pub struct UnitProgress {
    /// The unit.
    pub delegation_id: hermes_ledger::DelegationId,
    /// Its status (`running` until it ends).
    pub status: UnitStatus,
    /// Each child.
    pub children: Vec<ChildProgress>,
}

/// How a unit ended.
#[derive(Clone, Debug, PartialEq)]
pub struct UnitReport {
    /// The unit.
    pub delegation_id: hermes_ledger::DelegationId,
    /// Its final status.
    pub status: UnitStatus,
    /// Each child's outcome, by index.
    pub outcomes: Vec<ChildOutcome>,
    /// Where its transcripts are.
    pub transcript_dir: PathBuf,
}

/// The parts of a unit the host keeps to watch and steer it.
#[derive(Debug)]
pub(crate) struct UnitParts {
    pub(crate) children: Vec<Arc<LiveChild>>,
    pub(crate) interrupt: watch::Receiver<Option<String>>,
    pub(crate) progress: watch::Sender<UnitProgress>,
    /// How many of its first children its dispatch recorded running, with no pid yet.
    pub(crate) recorded_running: u32,
}

/// The environment variables a unit's children get.
pub(crate) fn child_env(
    unit: &UnitRecord,
    index: u32,
    parent: Option<&SessionId>,
) -> Vec<(String, String)> {
    let mut env = vec![
        ("HERMES_DELEGATION_ID".to_owned(), unit.id.to_string()),
        ("HERMES_TASK_INDEX".to_owned(), index.to_string()),
        (
            crate::procs::CHILD_MARKER_VAR.to_owned(),
            crate::procs::child_marker(&unit.id, index),
        ),
    ];
    if let Some(session) = parent {
        env.push(("HERMES_PARENT_SESSION_ID".to_owned(), session.to_string()));
    }
    // How deep it is in a chain of delegations, and its role (an agent's or a command's), so a
    // hermes inside it knows whether it may delegate. A hermes finds them again from the
    // process tree and the ledger when an agent between them stripped these.
    let depth = unit.spec.depth.max(1);
    env.push((crate::agent::CHILD_DEPTH_VAR.to_owned(), depth.to_string()));
    if let Some(task) = unit.spec.tasks.get(index as usize) {
        env.push((
            crate::agent::CHILD_ROLE_VAR.to_owned(),
            task.role.as_str().to_owned(),
        ));
    }
    env
}

/// Variables a child never inherits from this process (whose variables are `inherited`): they
/// would tie it to a session it does not belong to. Without a parent session (cron, `-z` outside
/// any session) that is every `HERMES_SESSION_*`: a cron child must never reach anyone's session.
pub(crate) fn env_removed(
    parent: Option<&SessionId>,
    inherited: impl IntoIterator<Item = String>,
) -> Vec<String> {
    // The ledger's credentials are never a child's; its URL it gets without them
    // (`ledger_urls_for_children`).
    let mut removed = vec![
        "HERMES_PARENT_SESSION_ID".to_owned(),
        "PGPASSWORD".to_owned(),
    ];
    if parent.is_none() {
        removed.extend(
            inherited
                .into_iter()
                .filter(|name| name.starts_with("HERMES_SESSION_")),
        );
    }
    removed
}

/// The ledger's URLs (`HERMES_LEDGER_URL`, `HERMES_LEDGER_LISTEN_URL`) as children get them,
/// when this process's have a password: without it. A
/// hermes inside the child reaches the same ledger and finds the password in libpq's password
/// file (`PGPASSFILE`, which the command line points at one of its own: `Config::child_env`),
/// never in its environment.
fn ledger_urls_for_children(
    var: impl Fn(&str) -> Option<String>,
) -> impl Iterator<Item = (String, String)> {
    [
        hermes_settings::LEDGER_URL_VAR,
        hermes_settings::LEDGER_LISTEN_URL_VAR,
    ]
    .into_iter()
    .filter_map(move |name| {
        let url = var(name)?;
        let bare = hermes_ledger::url_without_password(&url);
        (bare != url).then(|| (name.to_owned(), bare))
    })
}

/// The names of this process's environment variables.
fn inherited_names() -> impl Iterator<Item = String> {
    std::env::vars_os().filter_map(|(name, _)| name.into_string().ok())
}

/// Runs a unit to its end and reports how it ended.
pub(crate) async fn run_to_end(
    host: Publisher,
    unit: UnitRecord,
    parent: Option<SessionId>,
    parts: UnitParts,
) -> UnitReport {
    let mut run = UnitRun::new(host, unit, parent, parts);
    let sweep = run.host.context().config.host.sweep_interval;
    let first = child::next_sweep(run.now(), crate::config::millis(sweep)).ms_since(run.now());
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + std::time::Duration::from_millis(first),
        sweep,
    );
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut interrupt_open = true;
    loop {
        let interrupted = run.parts.interrupt.borrow().clone();
        match &interrupted {
            // Children that have not started yet never will once the unit is interrupted.
            Some(reason) => run.end_unstarted(reason).await,
            None => run.start_children(),
        }
        send_progress(&run.parts, UnitStatus::Running);
        if run.running.is_empty() && run.next >= run.count {
            break;
        }
        tokio::select! {
            joined = run.running.join_next() => {
                match joined {
                    Some(Ok((outcome, finish))) => run.child_ended(outcome, finish),
                    Some(Err(e)) => {
                        tracing::error!(delegation = %run.unit.id, error = %e, "a child's task failed");
                    }
                    None => {}
                }
            }
            changed = run.parts.interrupt.changed(), if interrupt_open => {
                // Once nobody can interrupt any more, the unit just runs on.
                interrupt_open = changed.is_ok();
            }
            _ = tick.tick() => {}
        }
    }
    run.finish().await
}

/// A child's task: its outcome and what publishing it recorded (`None`: not recorded).
type ChildTask = (ChildOutcome, Option<hermes_ledger::FinishChild>);

/// A unit while it runs: its children started in order, at most `parallelism` at once.
struct UnitRun {
    host: Publisher,
    unit: UnitRecord,
    parent: Option<SessionId>,
    parts: UnitParts,
    /// The unit's transcript directory.
    dir: PathBuf,
    manifest: Manifest,
    count: u32,
    parallelism: usize,
    /// The children's timeout; `None` for none.
    timeout_ms: Option<u64>,
    /// The next child to start.
    next: u32,
    running: JoinSet<ChildTask>,
    outcomes: BTreeMap<u32, ChildOutcome>,
    /// The unit's status, once a published finish ended it.
    unit_status: Option<UnitStatus>,
    /// Outcomes that could not be published on their own (a ledger error).
    unpublished: Vec<ChildOutcome>,
}

impl UnitRun {
    /// Creates the unit's transcript directory and manifest.
    fn new(host: Publisher, unit: UnitRecord, parent: Option<SessionId>, parts: UnitParts) -> Self {
        let config = &host.context().config;
        let root = config.transcript_root.clone();
        let dir = match transcript::create_unit(&root, &unit) {
            Ok(dir) => dir,
            Err(e) => {
                tracing::warn!(delegation = %unit.id, error = %e, "cannot create transcripts");
                transcript::unit_dir(&root, &unit.id)
            }
        };
        let mut manifest = Manifest::for_unit(&dir, &unit);
        let started = unit
            .started_at
            .unwrap_or_else(|| host.context().clock.now());
        manifest.started = Some(transcript::rfc3339(started));
        write_manifest(&manifest, &dir);
        // A zero timeout means none, as `child_timeout_seconds = 0` does.
        let timeout_ms = unit
            .spec
            .timeout_ms
            .or(config.delegation.child_timeout.map(crate::config::millis))
            .filter(|ms| *ms > 0);
        UnitRun {
            count: unit.task_count(),
            parallelism: config.parallelism(),
            timeout_ms,
            host,
            unit,
            parent,
            parts,
            dir,
            manifest,
            next: 0,
            running: JoinSet::new(),
            outcomes: BTreeMap::new(),
            unit_status: None,
            unpublished: Vec::new(),
        }
    }

    fn now(&self) -> hermes_ledger::Timestamp {
        self.host.context().clock.now()
    }

    /// Ends every child not started yet as interrupted, for `reason`.
    async fn end_unstarted(&mut self, reason: &str) {
        while self.next < self.count {
            let outcome = not_started(&self.host, &self.unit, &self.dir, self.next, reason);
            self.parts.children[self.next as usize].set_status(ChildStatus::Interrupted);
            let finish = self
                .host
                .finish_child(&self.unit.id, outcome.clone(), None, None)
                .await;
            self.running.spawn(async move { (outcome, finish) });
            self.next += 1;
        }
    }

    /// Starts children while there is room.
    fn start_children(&mut self) {
        while self.next < self.count && self.running.len() < self.parallelism {
            let index = self.next;
            self.next += 1;
            let plan = self.plan(index);
            self.manifest.tasks[index as usize].status = ChildStatus::Running.as_str();
            let live = self.parts.children[index as usize].clone();
            let started = Starting {
                host: self.host.clone(),
                interrupt: self.parts.interrupt.clone(),
                id: self.unit.id.clone(),
                index,
                // The first children of an inline unit that its dispatch recorded running
                // (`Ledger::register_and_dispatch`; recovery finds them by their marker): a
                // short one's pid goes in with its outcome, a longer one's after
                // `START_RECORD_DELAY`.
                deferred: index < self.parts.recorded_running,
                workspace: self.workspace_plan(index),
            };
            self.running
                .spawn(started.start_supervise_and_publish(plan, live));
            write_manifest(&self.manifest, &self.dir);
        }
    }

    /// Where child `index` gets its own worktree, if its unit asked for one.
    fn workspace_plan(&self, index: u32) -> Option<WorkspacePlan> {
        if self.unit.spec.workspace != Workspace::Worktree {
            return None;
        }
        let cwd = match &self.unit.spec.cwd {
            Some(cwd) => PathBuf::from(cwd),
            None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
        };
        Some(WorkspacePlan {
            root: self.host.context().config.workspace_root.clone(),
            cwd,
            note: commit_note(&self.unit, index),
        })
    }

    /// What child `index` runs, with what, and where its output goes.
    fn plan(&self, index: u32) -> ChildPlan {
        let config = &self.host.context().config;
        let task = &self.unit.spec.tasks[index as usize];
        let log_path = transcript::task_log_path(&self.dir, index);
        let max = config.delegation.transcript_max_bytes;
        let log = TaskLog::open(log_path.clone(), max).unwrap_or_else(|e| {
            tracing::warn!(path = %log_path.display(), error = %e, "cannot open transcript");
            TaskLog::disabled(log_path)
        });
        let adapter = crate::agent::adapter_for(task.adapter.as_deref(), &task.command);
        let raw_log = adapter.map(|_| {
            let path = transcript::task_raw_path(&self.dir, index);
            Arc::new(TaskLog::open(path.clone(), max).unwrap_or_else(|e| {
                tracing::warn!(path = %path.display(), error = %e, "cannot open the raw stream");
                TaskLog::disabled(path)
            }))
        });
        let mut env_remove = env_removed(
            // A worker's own session variables belong to whoever started it, never to the
            // units it runs for other sessions.
            self.parent.as_ref().filter(|_| !self.host.is_worker()),
            inherited_names(),
        );
        // An agent whose home variable is hermes' too keeps its own home: neither hermes' value
        // (inherited, or set for children below) reaches it.
        let own_home = task
            .agent
            .as_deref()
            .and_then(hermes_agents::child)
            .and_then(|(_, child)| child.own_home);
        env_remove.extend(own_home.map(str::to_owned));
        let (sandbox, temp) = self.sandbox(index);
        let tmpdir = temp
            .as_ref()
            .map(|t| ("TMPDIR".to_owned(), t.path().display().to_string()));
        ChildPlan {
            index,
            goal: task.goal.clone(),
            spawn: SpawnRequest {
                argv: task.command.clone(),
                cwd: self.unit.spec.cwd.as_ref().map(PathBuf::from),
                env: child_env(&self.unit, index, self.parent.as_ref())
                    .into_iter()
                    .chain(ledger_urls_for_children(|name| std::env::var(name).ok()))
                    .chain(config.child_env.iter().cloned())
                    .filter(|(name, _)| Some(name.as_str()) != own_home)
                    .chain(tmpdir)
                    .collect(),
                env_remove,
                umask: config.child_umask,
                sandbox,
            },
            timeout_ms: self.timeout_ms,
            log: Arc::new(log),
            adapter,
            raw_log,
            _temp: temp,
        }
    }

    /// Child `index`'s sandbox and its own temporary directory, if its unit confines it.
    fn sandbox(&self, index: u32) -> (Option<Policy>, Option<ChildTemp>) {
        let task = &self.unit.spec.tasks[index as usize];
        let home = self.host.context().config.home.as_deref();
        match sandbox::child::policy(self.unit.spec.sandbox, task, &self.unit.id, index, home) {
            Some((policy, temp)) => (Some(policy), temp),
            None => (None, None),
        }
    }

    /// Records a child's end in the manifest and the unit's tally.
    fn child_ended(&mut self, outcome: ChildOutcome, finish: Option<hermes_ledger::FinishChild>) {
        let entry = &mut self.manifest.tasks[outcome.index as usize];
        entry.status = outcome.status.as_str();
        entry.exit_reason = Some(exit_reason(&outcome));
        write_manifest(&self.manifest, &self.dir);
        match finish {
            Some(finish) => self.unit_status = self.unit_status.or(finish.unit_status),
            None => self.unpublished.push(outcome.clone()),
        }
        self.outcomes.insert(outcome.index, outcome);
    }

    /// Settles the unit (what could not be published on its own is finalized with it) and
    /// reports how it ended.
    async fn finish(mut self) -> UnitReport {
        let status = match self.unit_status {
            Some(status) => status,
            None => {
                let unpublished = std::mem::take(&mut self.unpublished);
                self.host
                    .settle_unit(&self.unit, unpublished, &self.outcomes)
                    .await
            }
        };
        self.manifest.completed = Some(transcript::rfc3339(self.now()));
        self.manifest.status = Some(status.as_str());
        write_manifest(&self.manifest, &self.dir);
        send_progress(&self.parts, status);
        UnitReport {
            delegation_id: self.unit.id.clone(),
            status,
            outcomes: self.outcomes.into_values().collect(),
            transcript_dir: self.dir,
        }
    }
}

/// What a child's task needs besides its plan: where it reports, and how.
struct Starting {
    host: Publisher,
    interrupt: watch::Receiver<Option<String>>,
    id: hermes_ledger::DelegationId,
    index: u32,
    /// Whether its start is recorded late (see [`START_RECORD_DELAY`]).
    deferred: bool,
    /// Its own worktree, if its unit asked for one.
    workspace: Option<WorkspacePlan>,
}

impl Starting {
    /// Starts the child, records its start, supervises it to its end and publishes its
    /// outcome.
    async fn start_supervise_and_publish(
        self,
        mut plan: ChildPlan,
        live: Arc<LiveChild>,
    ) -> ChildTask {
        let mut tree = None;
        if let Some(ws) = &self.workspace {
            match enter_worktree(ws, &self.id, &mut plan, &live, &self.host).await {
                Ok(made) => tree = Some(made),
                Err(outcome) => return self.publish(outcome, &live, None).await,
            }
        }
        let note = self.workspace.as_ref().map(|w| w.note.clone());
        let (mut outcome, started) = self.run(plan, &live).await;
        if let (Some(tree), Some(note)) = (tree, note) {
            outcome.changes = Some(Box::new(leave_worktree(tree, note).await));
        }
        self.publish(outcome, &live, started).await
    }

    /// Publishes a child's outcome, with the final token (the periodic snapshot may be older).
    async fn publish(
        &self,
        outcome: ChildOutcome,
        live: &LiveChild,
        started: Option<hermes_ledger::ProcessId>,
    ) -> ChildTask {
        let progress = Some(live.snapshot().progress);
        let finish = self
            .host
            .finish_child(&self.id, outcome.clone(), progress, started)
            .await;
        (outcome, finish)
    }

    /// Starts the child, records its start and supervises it to its end: its outcome, and its
    /// process if its start is still to be recorded.
    async fn run(
        &self,
        plan: ChildPlan,
        live: &Arc<LiveChild>,
    ) -> (ChildOutcome, Option<hermes_ledger::ProcessId>) {
        let (host, id, index) = (&self.host, &self.id, self.index);
        let interrupt = self.interrupt.clone();
        let mut started = None;
        let outcome = match child::start(plan, live.clone(), host.context()) {
            Started::Failed(outcome) => *outcome,
            Started::Running(child) => {
                let (process, at) = (child.process(), child.started_at());
                if self.deferred {
                    started = Some(process);
                } else {
                    host.child_started(id, index, process, at).await;
                    live.start_recorded();
                }
                // Recorded at once (one short write), so status views show the stall fields
                // during the grace period, not only after SIGKILL.
                let (stall_host, stall_id) = (host.clone(), id.clone());
                let on_stalling = move |detail, since| {
                    let stalling = hermes_ledger::Stalling {
                        index,
                        detail,
                        since,
                    };
                    tokio::spawn(async move {
                        stall_host.child_stalling(&stall_id, stalling).await;
                    });
                };
                let supervised = child.supervise(interrupt, on_stalling);
                tokio::pin!(supervised);
                match started {
                    Some(process) => tokio::select! {
                        outcome = &mut supervised => outcome,
                        () = tokio::time::sleep(START_RECORD_DELAY) => {
                            host.child_started(id, index, process, at).await;
                            live.start_recorded();
                            started = None;
                            supervised.await
                        }
                    },
                    None => supervised.await,
                }
            }
        };
        (outcome, started)
    }
}

/// How long an inline child that its dispatch recorded running runs before its pid is
/// recorded on its own; one that ends sooner has it recorded with its outcome, in one commit.
/// Recovery does not wait for it: it finds such a child by its marker.
const START_RECORD_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// The outcome of a child that never started because its unit was interrupted first.
fn not_started(
    host: &Publisher,
    unit: &UnitRecord,
    dir: &std::path::Path,
    index: u32,
    reason: &str,
) -> ChildOutcome {
    let goal = unit
        .spec
        .tasks
        .get(index as usize)
        .map(|t| t.goal.clone())
        .unwrap_or_default();
    ChildOutcome {
        transcript: transcript::task_log_path(dir, index).display().to_string(),
        detail: ExitDetail::Interrupted {
            reason: reason.to_owned(),
        },
        ..ChildOutcome::new(
            index,
            goal,
            ChildStatus::Interrupted,
            host.context().clock.now(),
        )
    }
}

fn send_progress(parts: &UnitParts, status: UnitStatus) {
    let children = parts.children.iter().map(|c| c.snapshot()).collect();
    parts.progress.send_modify(|p| {
        p.status = status;
        p.children = children;
    });
}

fn write_manifest(manifest: &Manifest, dir: &std::path::Path) {
    if let Err(e) = manifest.write(dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot write manifest.json");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_learn_their_unit_and_only_a_real_parent_session() {
        let mut unit = crate::transcript::tests_support::unit(2);
        unit.id = hermes_ledger::DelegationId::from_bits(0x1234);
        let parent = SessionId::new("s-1").expect("session");
        let env = child_env(&unit, 1, Some(&parent));
        assert_eq!(
            env,
            [
                (
                    "HERMES_DELEGATION_ID".to_owned(),
                    "deleg_000000001234".to_owned()
                ),
                ("HERMES_TASK_INDEX".to_owned(), "1".to_owned()),
                (
                    "HERMES_CHILD_MARKER".to_owned(),
                    "deleg_000000001234/1".to_owned()
                ),
                ("HERMES_PARENT_SESSION_ID".to_owned(), "s-1".to_owned()),
                ("HERMES_CHILD_DEPTH".to_owned(), "1".to_owned()),
                ("HERMES_CHILD_ROLE".to_owned(), "leaf".to_owned()),
            ]
        );
        // An agent child learns its role too.
        let mut agent = unit.clone();
        agent.spec.depth = 2;
        agent.spec.tasks[0].agent = Some("some-agent".into());
        agent.spec.tasks[0].role = hermes_ledger::Role::Orchestrator;
        let env = child_env(&agent, 0, None);
        assert!(env.contains(&("HERMES_CHILD_DEPTH".to_owned(), "2".to_owned())));
        assert!(env.contains(&("HERMES_CHILD_ROLE".to_owned(), "orchestrator".to_owned())));
        let inherited = || {
            [
                "HERMES_SESSION_ID",
                "HERMES_SESSION_TOKEN",
                "HERMES_HOME",
                "PATH",
            ]
            .map(String::from)
        };
        assert_eq!(
            env_removed(Some(&parent), inherited()),
            ["HERMES_PARENT_SESSION_ID", "PGPASSWORD"]
        );
        // Cron (no parent): nothing ties the child to a session, inherited or not.
        assert_eq!(child_env(&unit, 0, None).len(), 5);
        assert_eq!(
            env_removed(None, inherited()),
            [
                "HERMES_PARENT_SESSION_ID",
                "PGPASSWORD",
                "HERMES_SESSION_ID",
                "HERMES_SESSION_TOKEN"
            ]
        );
    }

    #[test]
    fn children_get_the_ledgers_urls_without_their_passwords() {
        let vars = |url: &'static str, listen: Option<&'static str>| {
            move |name: &str| match name {
                "HERMES_LEDGER_URL" => Some(url.to_owned()),
                "HERMES_LEDGER_LISTEN_URL" => listen.map(str::to_owned),
                _ => None,
            }
        };
        let got: Vec<_> = ledger_urls_for_children(vars(
            "postgres://h:secret@bouncer/x?sslmode=require",
            Some("postgres://h:other@db/x"),
        ))
        .collect();
        assert_eq!(
            got,
            [
                (
                    "HERMES_LEDGER_URL".to_owned(),
                    "postgres://h@bouncer/x?sslmode=require".to_owned()
                ),
                (
                    "HERMES_LEDGER_LISTEN_URL".to_owned(),
                    "postgres://h@db/x".to_owned()
                )
            ]
        );
        // Nothing to take out: the inherited variables stand.
        assert_eq!(
            ledger_urls_for_children(vars("postgres://h@db/x", None)).count(),
            0
        );
        assert_eq!(ledger_urls_for_children(|_| None).count(), 0);
    }
}
