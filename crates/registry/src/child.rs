//! One child: what is known about it while it runs ([`LiveChild`], shared by its readers, its
//! monitor and the host) and how it starts. Its pipes are read by `reader.rs`; its monitor and
//! finalization are `supervise.rs`.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use hermes_ledger::{ChildOutcome, ChildStatus, ExitDetail, ProcessId, Progress, Timestamp};

use crate::agent::{Adapter, AgentStream, Report};
use crate::capture::{Capture, Interleaved, Pointer, STDERR_TAIL_BYTES, TailBuffer};
use crate::config::Config;
use crate::progress::{Malformed, Message, Token};
use crate::reader::{Pipe, read_pipe};
use crate::spawn::{SpawnRequest, spawn};
use crate::stall::SampleFailed;
use crate::transcript::{Stream, TaskLog};
use hermes_stdx::Clock;
use tokio::sync::watch;

pub(crate) use crate::supervise::{RunningChild, exit_reason, next_sweep};

/// The longest line of an agent's stream that is parsed (longer ones are output as is).
const AGENT_LINE_MAX: usize = 16 << 20;

/// A child's live progress, as the CLI's progress bars and `delegation status` show it.
#[derive(Clone, Debug, PartialEq)]
pub struct ChildProgress {
    /// Its index in the unit.
    pub index: u32,
    /// Its goal.
    pub goal: String,
    /// Its status.
    pub status: ChildStatus,
    /// Its process while it runs.
    pub process: Option<ProcessId>,
    /// When it started.
    pub started_at: Option<Timestamp>,
    /// When it ended, once it did.
    pub ended_at: Option<Timestamp>,
    /// Its progress token and when it last changed.
    pub progress: Progress,
    /// Its transcript.
    pub transcript: String,
}

/// What is known about a child while it runs, shared by its readers, its monitor and the host.
#[derive(Debug)]
pub(crate) struct LiveChild {
    index: u32,
    goal: String,
    transcript: String,
    state: Mutex<LiveState>,
    /// Told whenever the progress token moves: the host's progress flusher waits on it.
    changed: Arc<Notify>,
}

#[derive(Debug)]
struct LiveState {
    status: ChildStatus,
    process: Option<ProcessId>,
    started_at: Option<Timestamp>,
    ended_at: Option<Timestamp>,
    /// Whether the ledger has its start (its progress is persisted only from then on).
    start_recorded: bool,
    token: Token,
    changed_at: Option<Timestamp>,
    result_message: Option<String>,
    /// stdout and stderr together, for the result.
    output: Interleaved,
    /// The last of stderr, for a failure whose result does not hold it.
    stderr: TailBuffer,
    /// What an agent child's stream said, and its adapter's name.
    agent: Option<(&'static str, Report)>,
}

/// What the monitor needs of a child's output to finalize it.
pub(crate) struct Finals {
    pub(crate) token: Token,
    pub(crate) result: String,
    pub(crate) stderr_tail: Option<String>,
    /// The agent's own failure: its adapter's name and the message.
    pub(crate) agent_error: Option<(&'static str, String)>,
    pub(crate) model: Option<String>,
    pub(crate) usage: Option<Box<hermes_ledger::Usage>>,
    /// The tool calls an agent's own permission system refused.
    pub(crate) denials: Vec<String>,
}

impl LiveChild {
    pub(crate) fn new(
        index: u32,
        goal: String,
        transcript: String,
        result_max: usize,
        changed: Arc<Notify>,
    ) -> LiveChild {
        LiveChild {
            index,
            goal,
            transcript,
            changed,
            state: Mutex::new(LiveState {
                status: ChildStatus::Pending,
                process: None,
                started_at: None,
                ended_at: None,
                start_recorded: false,
                token: Token::default(),
                changed_at: None,
                result_message: None,
                output: Interleaved::new(result_max),
                stderr: TailBuffer::new(STDERR_TAIL_BYTES),
                agent: None,
            }),
        }
    }

    /// Its process, once started.
    pub(crate) fn process(&self) -> Option<ProcessId> {
        self.lock().process
    }

    /// Where its transcript is.
    pub(crate) fn transcript_path(&self) -> &str {
        &self.transcript
    }

    fn lock(&self) -> MutexGuard<'_, LiveState> {
        // A panic while holding the lock leaves plain data behind; keep going with it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    pub(crate) fn set_status(&self, status: ChildStatus) {
        self.lock().status = status;
    }

    /// The ledger has its start now: its live progress may be persisted (an inline child
    /// that ends within its first second has its start and progress go with its outcome).
    pub(crate) fn start_recorded(&self) {
        self.lock().start_recorded = true;
        self.changed.notify_one();
    }

    /// Whether the ledger has its start.
    pub(crate) fn is_start_recorded(&self) -> bool {
        self.lock().start_recorded
    }

    /// It ended with `status` at `at`.
    pub(crate) fn ended(&self, status: ChildStatus, at: Timestamp) {
        let mut s = self.lock();
        s.status = status;
        s.ended_at = Some(at);
    }

    pub(crate) fn started(&self, process: ProcessId, at: Timestamp) {
        let mut s = self.lock();
        s.status = ChildStatus::Running;
        s.process = Some(process);
        s.started_at = Some(at);
    }

    /// A snapshot for progress reporting.
    pub(crate) fn snapshot(&self) -> ChildProgress {
        let s = self.lock();
        ChildProgress {
            index: self.index,
            goal: self.goal.clone(),
            status: s.status,
            process: s.process,
            started_at: s.started_at,
            ended_at: s.ended_at,
            progress: Progress {
                api_calls: s.token.api_calls,
                current_tool: s.token.current_tool.clone(),
                output_bytes: s.token.output_bytes,
                progress_seq: s.token.progress_seq,
                last_activity_at: s.changed_at,
            },
            transcript: self.transcript.clone(),
        }
    }

    /// The monitor's look at the token. A poisoned lock is a failed look, not progress.
    pub(crate) fn sample(&self) -> Result<(Token, Option<Timestamp>), SampleFailed> {
        let s = self.state.lock().map_err(|_| SampleFailed)?;
        Ok((s.token.clone(), s.changed_at))
    }

    pub(crate) fn record_output(&self, stream: Stream, bytes: &[u8], at: Timestamp) {
        let mut s = self.lock();
        s.token.output_bytes += bytes.len() as u64;
        s.changed_at = Some(at);
        s.output.push(stream, bytes);
        if stream == Stream::Err {
            s.stderr.push(bytes);
        }
        drop(s);
        self.changed.notify_one();
    }

    /// What an agent's adapter has read so far: its calls and tool move the token.
    pub(crate) fn record_agent(&self, name: &'static str, report: &Report, at: Timestamp) {
        let mut s = self.lock();
        if s.token.api_calls != report.api_calls || s.token.current_tool != report.current_tool {
            s.token.api_calls = report.api_calls;
            s.token.current_tool.clone_from(&report.current_tool);
            s.changed_at = Some(at);
            self.changed.notify_one();
        }
        if s.agent.as_ref().is_none_or(|(_, r)| r != report) {
            s.agent = Some((name, report.clone()));
        }
    }

    /// The result and the rest of what finalizing needs, `pointer` named in a truncated
    /// result's marker. The `{"result"}` message wins, then an agent's answer, then what the
    /// child wrote (stdout and stderr, stderr lines marked). The stderr tail goes with it when
    /// the result does not already hold all of stderr.
    pub(crate) fn finals(&self, result_max: usize, pointer: &Pointer<'_>) -> Finals {
        let s = self.lock();
        let report = s.agent.as_ref().map(|(_, r)| r);
        let chosen = s
            .result_message
            .as_ref()
            .or_else(|| report.and_then(|r| r.answer.as_ref()));
        let agent_error = s
            .agent
            .as_ref()
            .and_then(|(name, r)| r.error.clone().map(|e| (*name, e)));
        let (result, holds_stderr) = match (chosen, &agent_error) {
            (Some(text), _) => (bounded(text, result_max, pointer), false),
            (None, Some((name, error))) => (
                bounded(
                    &format!("{name} reported an error: {error}"),
                    result_max,
                    pointer,
                ),
                false,
            ),
            (None, None) => (s.output.render(pointer), s.output.is_whole()),
        };
        Finals {
            token: s.token.clone(),
            result,
            stderr_tail: (!s.stderr.is_empty() && !holds_stderr).then(|| s.stderr.text()),
            agent_error,
            model: report.and_then(|r| r.model.clone()),
            usage: report.and_then(|r| r.usage.clone()).map(Box::new),
            denials: report.map(|r| r.denials.clone()).unwrap_or_default(),
        }
    }

    pub(crate) fn record_progress(&self, line: Result<Message, Malformed>, at: Timestamp) {
        let mut s = self.lock();
        s.token.apply(&line);
        s.changed_at = Some(at);
        if let Ok(Message {
            result: Some(result),
            ..
        }) = line
        {
            s.result_message = Some(result);
        }
        drop(s);
        self.changed.notify_one();
    }
}

/// Everything the runner needs besides the child itself.
#[derive(Clone, Debug)]
pub(crate) struct Context {
    pub(crate) config: Arc<Config>,
    pub(crate) clock: Arc<dyn Clock>,
    /// Becomes `true` when the host's children being stopped are to be killed at once, their
    /// grace period cut short ([`crate::Host::hurry`]).
    pub(crate) hurry: watch::Receiver<bool>,
}

/// One child to run.
#[derive(Debug)]
pub(crate) struct ChildPlan {
    pub(crate) index: u32,
    pub(crate) goal: String,
    pub(crate) spawn: SpawnRequest,
    pub(crate) timeout_ms: Option<u64>,
    pub(crate) log: Arc<TaskLog>,
    /// The adapter that reads an agent child's stdout (`None`: shown as is).
    pub(crate) adapter: Option<Adapter>,
    /// Where an adapted child's raw stream goes (`task-N.jsonl`).
    pub(crate) raw_log: Option<Arc<TaskLog>>,
    /// A sandboxed child's own temporary directory, removed with the plan once it is done.
    pub(crate) _temp: Option<crate::sandbox::child::ChildTemp>,
}

/// What [`start`] did.
#[derive(Debug)]
pub(crate) enum Started {
    /// The child runs.
    Running(Box<RunningChild>),
    /// It could not start; this is its outcome (status `error`).
    Failed(Box<ChildOutcome>),
}

/// The outcome of a child that could not start, for `reason` (status `error`), noted in its
/// transcript too.
pub(crate) fn could_not_start(
    plan: &ChildPlan,
    live: &LiveChild,
    now: Timestamp,
    reason: String,
) -> ChildOutcome {
    plan.log.note(now, &format!("hermes: {reason}"));
    live.set_status(ChildStatus::Error);
    let transcript = plan.log.path().display().to_string();
    ChildOutcome {
        // The transcript holds the reason now: the reader of the result sees it too.
        transcript_tail: crate::reaper::read_tail(&transcript),
        transcript,
        detail: ExitDetail::SpawnError { reason },
        ..ChildOutcome::new(plan.index, plan.goal.clone(), ChildStatus::Error, now)
    }
}

/// Starts a child and the readers of its three streams.
pub(crate) fn start(plan: ChildPlan, live: Arc<LiveChild>, ctx: &Context) -> Started {
    let spawned = spawn(&plan.spawn);
    let now = ctx.clock.now();
    let spawned = match spawned {
        Ok(spawned) => spawned,
        Err(reason) => {
            return Started::Failed(Box::new(could_not_start(&plan, &live, now, reason)));
        }
    };
    live.started(spawned.process, now);
    plan.log
        .note(now, &format!("hermes: started pid {}", spawned.process.pid));
    // Lines of the progress pipe and of an agent's stream are parsed whole, up to this size.
    let line_max = (4 * ctx.config.result_max_bytes()).max(1 << 20);
    let stdout = match (plan.adapter, &plan.raw_log) {
        (Some(cli), Some(raw)) => {
            plan.log.note(
                now,
                &format!(
                    "hermes: stdout read by the {} stream adapter; the raw stream is in {}",
                    cli.name,
                    raw.path().display()
                ),
            );
            Pipe::Agent {
                // An agent's line can carry a whole file a tool read: allow more, since a line
                // cut short loses its event (a tool's end among them).
                stream: Box::new(AgentStream::new(cli, line_max.max(AGENT_LINE_MAX))),
                raw: raw.clone(),
            }
        }
        _ => Pipe::Output(Stream::Out),
    };
    let readers = vec![
        tokio::spawn(read_pipe(
            spawned.stdout,
            stdout,
            live.clone(),
            plan.log.clone(),
            ctx.clock.clone(),
        )),
        tokio::spawn(read_pipe(
            spawned.stderr,
            Pipe::Output(Stream::Err),
            live.clone(),
            plan.log.clone(),
            ctx.clock.clone(),
        )),
        tokio::spawn(read_pipe(
            spawned.progress,
            Pipe::Progress { line_max },
            live.clone(),
            plan.log.clone(),
            ctx.clock.clone(),
        )),
    ];
    Started::Running(Box::new(RunningChild {
        plan,
        live,
        ctx: ctx.clone(),
        child: spawned.child,
        process: spawned.process,
        started_at: now,
        readers,
    }))
}

/// `text` kept to `max` bytes (head and tail around a marker naming `pointer`).
fn bounded(text: &str, max: usize, pointer: &Pointer<'_>) -> String {
    let mut capture = Capture::new(max);
    capture.push(text.as_bytes());
    capture.render(pointer)
}
