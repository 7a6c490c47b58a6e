//! A running child's monitor: the loop that acts on stalls, timeouts and interrupts (SIGTERM to
//! the process group, SIGKILL after the grace period), and its finalization.
//!
//! [`RunningChild::supervise`] returns the child's outcome the moment it is final: when the
//! child exited and its output was drained, or when it was force-finalized after SIGKILL. In the
//! second case a detached task still reaps it and finishes its transcript, and publishes nothing.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use hermes_ledger::{ChildOutcome, ChildStatus, ExitDetail, ProcessId, TimeoutPhase, Timestamp};
use nix::sys::signal::Signal;
use tokio::process::Child;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::capture::Pointer;
use crate::child::{ChildPlan, Context, LiveChild};
use crate::config::{Config, millis, seconds};
use crate::procs::signal_group;
use crate::stall::{StallTracker, StallVerdict, Thresholds};

/// How long the rest of a child's output may take to arrive once it exited, before whatever of
/// its process group still holds the pipes is stopped.
const DRAIN_WAIT: Duration = Duration::from_millis(300);

/// Why the monitor is stopping a child.
#[derive(Clone, Debug)]
struct Ending {
    status: ChildStatus,
    detail: ExitDetail,
    kill_at: Timestamp,
}

/// A child that runs, as `child::start` made it.
#[derive(Debug)]
pub(crate) struct RunningChild {
    /// What it runs and where its transcript goes.
    pub(crate) plan: ChildPlan,
    /// What is known about it while it runs, shared with its readers and the host.
    pub(crate) live: Arc<LiveChild>,
    pub(crate) ctx: Context,
    pub(crate) child: Child,
    pub(crate) process: ProcessId,
    pub(crate) started_at: Timestamp,
    /// The tasks reading its stdout, stderr and progress pipe.
    pub(crate) readers: Vec<JoinHandle<()>>,
}

impl RunningChild {
    pub(crate) fn process(&self) -> ProcessId {
        self.process
    }

    pub(crate) fn started_at(&self) -> Timestamp {
        self.started_at
    }

    /// Watches the child until it is final and returns its outcome. `interrupt` carries the
    /// reason once someone wants the child stopped. `on_stalling` is told the stall fields the
    /// moment the child is found stalling and gets SIGTERM (before its grace period).
    pub(crate) async fn supervise(
        mut self,
        mut interrupt: watch::Receiver<Option<String>>,
        on_stalling: impl FnOnce(ExitDetail, Timestamp),
    ) -> ChildOutcome {
        let mut on_stalling = Some(on_stalling);
        let config = self.ctx.config.clone();
        let thresholds = Thresholds {
            idle_ms: millis(config.delegation.stall_idle),
            in_tool_ms: millis(config.delegation.stall_in_tool),
            grace_ms: millis(config.delegation.stall_grace),
        };
        let mut tracker = StallTracker::new(thresholds, self.started_at);
        let timeout_at = self.plan.timeout_ms.map(|ms| self.started_at.plus_ms(ms));
        let sweep_ms = millis(config.host.sweep_interval).max(1);
        let mut ending: Option<Ending> = None;
        let mut interrupt_open = true;
        let mut hurry = self.ctx.hurry.clone();
        let mut hurry_open = true;
        loop {
            let now = self.ctx.clock.now();
            let mut wake = next_sweep(now, sweep_ms);
            if ending.is_none() {
                let (found, next) = self.check(&mut tracker, timeout_at, &interrupt, now);
                wake = wake.min(next);
                if let Some(found) = found {
                    signal_group(self.process, Signal::SIGTERM);
                    self.plan.log.note(
                        now,
                        &format!(
                            "hermes: {}; SIGTERM sent to the process group",
                            describe(&found.detail)
                        ),
                    );
                    if found.status == ChildStatus::Stalled
                        && let Some(tell) = on_stalling.take()
                    {
                        tell(found.detail.clone(), now);
                    }
                    ending = Some(found);
                }
            }
            if let Some(found) = &ending {
                let hurried = *hurry.borrow_and_update();
                if now >= found.kill_at || hurried {
                    return self.force_finalize(found.clone(), now, hurried);
                }
                wake = wake.min(found.kill_at);
            }
            let sleep = Duration::from_millis(wake.ms_since(now).max(1));
            tokio::select! {
                status = self.child.wait() => return self.exited(status, ending).await,
                () = tokio::time::sleep(sleep) => {}
                changed = interrupt.changed(), if interrupt_open && ending.is_none() => {
                    interrupt_open = changed.is_ok();
                }
                changed = hurry.changed(), if hurry_open && ending.is_some() => {
                    hurry_open = changed.is_ok();
                }
            }
        }
    }

    /// Looks for a reason to stop the child; returns it, and when to look again at the latest.
    fn check(
        &self,
        tracker: &mut StallTracker,
        timeout_at: Option<Timestamp>,
        interrupt: &watch::Receiver<Option<String>>,
        now: Timestamp,
    ) -> (Option<Ending>, Timestamp) {
        let kill_grace = millis(self.ctx.config.delegation.kill_grace);
        if let Some(reason) = interrupt.borrow().clone() {
            let ending = Ending {
                status: ChildStatus::Interrupted,
                detail: ExitDetail::Interrupted { reason },
                kill_at: now.plus_ms(kill_grace),
            };
            return (Some(ending), now);
        }
        let sample = self.live.sample();
        if let (Some(at), Some(limit)) = (timeout_at, self.plan.timeout_ms)
            && now >= at
        {
            let progressed = sample.as_ref().is_ok_and(|(token, _)| !token.is_initial());
            let ending = Ending {
                status: ChildStatus::Timeout,
                detail: ExitDetail::Timeout {
                    timeout_seconds: seconds(limit),
                    timed_out_after_seconds: seconds(now.ms_since(self.started_at)),
                    timeout_phase: if progressed {
                        TimeoutPhase::AfterProgress
                    } else {
                        TimeoutPhase::BeforeFirstProgress
                    },
                },
                kill_at: now.plus_ms(kill_grace),
            };
            return (Some(ending), now);
        }
        tracker.observe(
            sample
                .as_ref()
                .map(|(token, at)| (token, *at))
                .map_err(|e| *e),
            now,
        );
        let grace = millis(self.ctx.config.delegation.stall_grace);
        match tracker.decide(now) {
            StallVerdict::Ok { check_at } => {
                (None, timeout_at.map_or(check_at, |t| t.min(check_at)))
            }
            StallVerdict::Stalling { info, kill_at } => {
                let ending = Ending {
                    status: ChildStatus::Stalled,
                    detail: info.detail(grace),
                    kill_at,
                };
                (Some(ending), now)
            }
            StallVerdict::Kill { info } => {
                let ending = Ending {
                    status: ChildStatus::Stalled,
                    detail: info.detail(grace),
                    kill_at: now,
                };
                (Some(ending), now)
            }
        }
    }

    /// The grace period is over (or was cut short: `hurried`): SIGKILL the group and finalize
    /// now, leaving the reaping to a detached task that publishes nothing.
    fn force_finalize(self, ending: Ending, now: Timestamp, hurried: bool) -> ChildOutcome {
        signal_group(self.process, Signal::SIGKILL);
        self.plan.log.note(
            now,
            if hurried {
                "hermes: asked to kill at once; SIGKILL sent to the process group"
            } else {
                "hermes: still running after the grace period; SIGKILL sent to the process group"
            },
        );
        let outcome = self.outcome(
            ending.status,
            None,
            Some(Signal::SIGKILL as i32),
            ending.detail,
            now,
        );
        let RunningChild {
            mut child,
            readers,
            process,
            plan,
            ctx,
            ..
        } = self;
        tokio::spawn(async move {
            let status = child.wait().await;
            let mut readers = readers;
            drain(&mut readers, process, &ctx.config).await;
            let what = status
                .map(|s| exit_words(&s))
                .unwrap_or_else(|e| format!("could not be waited for: {e}"));
            plan.log.note(
                ctx.clock.now(),
                &format!("hermes: exited after it was finalized ({what})"),
            );
        });
        outcome
    }

    /// The child exited: drain its output, then finalize.
    async fn exited(
        mut self,
        status: io::Result<ExitStatus>,
        ending: Option<Ending>,
    ) -> ChildOutcome {
        drain(&mut self.readers, self.process, &self.ctx.config).await;
        let now = self.ctx.clock.now();
        let (exit_code, signal) = match &status {
            Ok(s) => (s.code(), s.signal()),
            Err(_) => (None, None),
        };
        let transcript = self.plan.log.path().display().to_string();
        let agent_error = self
            .live
            .finals(
                self.ctx.config.result_max_bytes(),
                &Pointer::whole(&transcript),
            )
            .agent_error;
        let (child_status, detail) = match ending {
            Some(ending) => (ending.status, ending.detail),
            // An agent that says it failed failed, whatever its exit code.
            None if status.as_ref().is_ok_and(ExitStatus::success) && agent_error.is_none() => {
                (ChildStatus::Completed, ExitDetail::None)
            }
            None => (ChildStatus::Failed, ExitDetail::None),
        };
        if let Some((name, error)) = &agent_error {
            self.plan
                .log
                .note(now, &format!("hermes: {name} reported an error: {error}"));
        }
        let what = match &status {
            Ok(s) => exit_words(s),
            Err(e) => format!("could not be waited for: {e}"),
        };
        self.plan
            .log
            .note(now, &format!("hermes: {what}; status {child_status}"));
        self.outcome(child_status, exit_code, signal, detail, now)
    }

    fn outcome(
        &self,
        status: ChildStatus,
        exit_code: Option<i32>,
        signal: Option<i32>,
        detail: ExitDetail,
        ended_at: Timestamp,
    ) -> ChildOutcome {
        self.live.ended(status, ended_at);
        let transcript = self.plan.log.path().display().to_string();
        let pointer = Pointer {
            transcript: &transcript,
            capped_at: self.plan.log.cap_reached(),
        };
        let finals = self
            .live
            .finals(self.ctx.config.result_max_bytes(), &pointer);
        let failed = status != ChildStatus::Completed;
        ChildOutcome {
            index: self.plan.index,
            goal: self.plan.goal.clone(),
            status,
            exit_code,
            signal,
            started_at: Some(self.started_at),
            ended_at,
            api_calls: finals.token.api_calls,
            result: finals.result,
            stderr_tail: finals.stderr_tail.filter(|_| failed),
            transcript_tail: if failed {
                crate::reaper::read_tail(&transcript)
            } else {
                None
            },
            transcript,
            detail,
            model: finals.model,
            usage: finals.usage,
            changes: None,
            denials: (!finals.denials.is_empty()).then(|| {
                Box::new(hermes_ledger::Denials {
                    calls: finals.denials,
                })
            }),
        }
    }
}

/// Waits for the readers to reach the end of the child's pipes. If something of its process
/// group still holds them after [`DRAIN_WAIT`], the group's survivors get SIGTERM, then SIGKILL
/// after the kill grace period; the readers are abandoned if even that does not end them.
async fn drain(readers: &mut [JoinHandle<()>], leader: ProcessId, config: &Config) {
    if join_within(readers, DRAIN_WAIT).await {
        return;
    }
    signal_group(leader, Signal::SIGTERM);
    if join_within(readers, config.delegation.kill_grace).await {
        return;
    }
    signal_group(leader, Signal::SIGKILL);
    if !join_within(readers, Duration::from_secs(1)).await {
        readers.iter().for_each(JoinHandle::abort);
    }
}

/// The next sweep after `now`. Sweeps fall on multiples of the interval, so every child of a
/// host wakes at the same moment and the runtime handles them in one burst; deadlines between two
/// sweeps (a stall threshold, a timeout, the end of a grace period) are woken for on their own.
pub(crate) fn next_sweep(now: Timestamp, sweep_ms: u64) -> Timestamp {
    let sweep_ms = sweep_ms.max(1);
    Timestamp((now.0 / sweep_ms + 1).saturating_mul(sweep_ms))
}

async fn join_within(readers: &mut [JoinHandle<()>], limit: Duration) -> bool {
    let all = async {
        for reader in readers.iter_mut() {
            if !reader.is_finished() {
                let _ = reader.await;
            }
        }
    };
    tokio::time::timeout(limit, all).await.is_ok()
}

fn exit_words(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "ended".to_owned(),
    }
}

/// A few words on why a child is being stopped, for its transcript and the manifest.
pub(crate) fn describe(detail: &ExitDetail) -> String {
    match detail {
        ExitDetail::None => "ended".to_owned(),
        ExitDetail::SpawnError { reason } => format!("could not start: {reason}"),
        ExitDetail::Stalled {
            stalled_after_quiet_seconds,
            stall_threshold_seconds,
            stall_phase,
            ..
        } => format!(
            "stalled: quiet for {stalled_after_quiet_seconds:.1} s ({} threshold {stall_threshold_seconds} s)",
            stall_phase.as_str()
        ),
        ExitDetail::Timeout {
            timeout_seconds,
            timeout_phase,
            ..
        } => {
            format!(
                "timed out after {timeout_seconds} s ({})",
                timeout_phase.as_str()
            )
        }
        ExitDetail::Interrupted { reason } => format!("interrupted ({reason})"),
        ExitDetail::Cancelled { reason } => format!("cancelled ({reason})"),
        ExitDetail::Unknown { reason } => format!("outcome unknown ({reason})"),
    }
}

/// How a child ended, in words, for the manifest.
pub(crate) fn exit_reason(outcome: &ChildOutcome) -> String {
    match (&outcome.detail, outcome.exit_code, outcome.signal) {
        (ExitDetail::None, Some(code), _) => format!("exit {code}"),
        (ExitDetail::None, None, Some(signal)) => format!("signal {signal}"),
        (detail, _, _) => describe(detail),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_fall_on_multiples_of_the_interval() {
        assert_eq!(next_sweep(Timestamp(10_250), 1_000), Timestamp(11_000));
        assert_eq!(next_sweep(Timestamp(11_000), 1_000), Timestamp(12_000));
        assert_eq!(next_sweep(Timestamp(7), 0), Timestamp(8));
    }

    #[test]
    fn exit_reasons_read_as_words() {
        let outcome =
            |detail: ExitDetail, exit_code: Option<i32>, signal: Option<i32>| ChildOutcome {
                exit_code,
                signal,
                detail,
                ..ChildOutcome::new(0, "", ChildStatus::Failed, Timestamp(0))
            };
        assert_eq!(
            exit_reason(&outcome(ExitDetail::None, Some(2), None)),
            "exit 2"
        );
        assert_eq!(
            exit_reason(&outcome(ExitDetail::None, None, Some(9))),
            "signal 9"
        );
        let stalled = ExitDetail::Stalled {
            stalled_after_quiet_seconds: 451.0,
            stall_threshold_seconds: 450.0,
            stall_phase: hermes_ledger::StallPhase::Idle,
            stall_grace_seconds: 120.0,
        };
        assert_eq!(
            exit_reason(&outcome(stalled, None, Some(15))),
            "stalled: quiet for 451.0 s (idle threshold 450 s)"
        );
        let spawn = ExitDetail::SpawnError {
            reason: "nope".into(),
        };
        assert_eq!(
            exit_reason(&outcome(spawn, None, None)),
            "could not start: nope"
        );
    }
}
