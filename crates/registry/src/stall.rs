//! Stall detection as a pure decision: given what was seen of a child's progress token and the
//! time now, is it fine, stalling, or past its grace period?
//!
//! The quiet clock starts when the child starts (never while it waits in a queue) and restarts
//! whenever a look at the token finds it changed. A look that fails (the sampler could not read
//! the token) changes nothing: it never counts as progress.

use hermes_ledger::{ExitDetail, StallPhase, Timestamp};

use crate::config::seconds;
use crate::progress::Token;

/// The thresholds that apply, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// Quiet time allowed outside a tool.
    pub idle_ms: u64,
    /// Quiet time allowed inside a tool.
    pub in_tool_ms: u64,
    /// Time from SIGTERM to SIGKILL.
    pub grace_ms: u64,
}

/// A look at the token that did not work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleFailed;

/// What was known when a child was found stalling.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StallInfo {
    /// How long it had been quiet, in milliseconds.
    pub quiet_ms: u64,
    /// The threshold that applied, in milliseconds.
    pub threshold_ms: u64,
    /// Idle or inside a tool.
    pub phase: StallPhase,
    /// When the stall was detected.
    pub detected_at: Timestamp,
    /// When the threshold was crossed.
    pub crossed_at: Timestamp,
}

impl StallInfo {
    /// The event's stall fields.
    pub fn detail(&self, grace_ms: u64) -> ExitDetail {
        ExitDetail::Stalled {
            stalled_after_quiet_seconds: seconds(self.quiet_ms),
            stall_threshold_seconds: seconds(self.threshold_ms),
            stall_phase: self.phase,
            stall_grace_seconds: seconds(grace_ms),
        }
    }
}

/// The decision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StallVerdict {
    /// Nothing to do; the child would cross its threshold at `check_at` if nothing changes.
    Ok {
        /// When to look again at the latest.
        check_at: Timestamp,
    },
    /// The child is stalling: send SIGTERM (the first time), SIGKILL at `kill_at`.
    Stalling {
        /// What was found.
        info: StallInfo,
        /// When the grace period ends.
        kill_at: Timestamp,
    },
    /// The grace period is over: SIGKILL and force-finalize as `stalled`.
    Kill {
        /// What was found.
        info: StallInfo,
    },
}

/// What the monitor remembers about one child between looks.
#[derive(Clone, Debug)]
pub struct StallTracker {
    thresholds: Thresholds,
    last: Token,
    last_change_at: Timestamp,
    stalling: Option<StallInfo>,
}

impl StallTracker {
    /// A tracker for a child that started at `started_at`.
    pub fn new(thresholds: Thresholds, started_at: Timestamp) -> StallTracker {
        StallTracker {
            thresholds,
            last: Token::default(),
            last_change_at: started_at,
            stalling: None,
        }
    }

    /// Records a look at the token. `changed_at` is when the child last moved it, if known (the
    /// readers stamp it); a change seen without a stamp counts from `now`.
    pub fn observe(
        &mut self,
        sample: Result<(&Token, Option<Timestamp>), SampleFailed>,
        now: Timestamp,
    ) {
        let Ok((token, changed_at)) = sample else {
            return;
        };
        if *token != self.last && self.stalling.is_none() {
            self.last = token.clone();
            let at = changed_at.unwrap_or(now).min(now);
            self.last_change_at = self.last_change_at.max(at);
        }
    }

    /// The threshold in force and its phase.
    fn threshold(&self) -> (u64, StallPhase) {
        if self.last.current_tool.is_some() {
            (self.thresholds.in_tool_ms, StallPhase::InTool)
        } else {
            (self.thresholds.idle_ms, StallPhase::Idle)
        }
    }

    /// Decides. Once stalling, the child stays stalling: output during its shutdown does not
    /// save it.
    pub fn decide(&mut self, now: Timestamp) -> StallVerdict {
        let info = match self.stalling {
            Some(info) => info,
            None => {
                let (threshold_ms, phase) = self.threshold();
                let crossed_at = self.last_change_at.plus_ms(threshold_ms);
                if now < crossed_at {
                    return StallVerdict::Ok {
                        check_at: crossed_at,
                    };
                }
                let info = StallInfo {
                    quiet_ms: now.ms_since(self.last_change_at),
                    threshold_ms,
                    phase,
                    detected_at: now,
                    crossed_at,
                };
                self.stalling = Some(info);
                info
            }
        };
        let kill_at = info.detected_at.plus_ms(self.thresholds.grace_ms);
        if now >= kill_at {
            StallVerdict::Kill { info }
        } else {
            StallVerdict::Stalling { info, kill_at }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Thresholds = Thresholds {
        idle_ms: 1_000,
        in_tool_ms: 5_000,
        grace_ms: 500,
    };

    fn token(output_bytes: u64, tool: Option<&str>) -> Token {
        Token {
            output_bytes,
            current_tool: tool.map(str::to_owned),
            ..Token::default()
        }
    }

    #[test]
    fn the_clock_starts_when_the_child_starts() {
        let mut s = StallTracker::new(T, Timestamp(10_000));
        assert_eq!(
            s.decide(Timestamp(10_999)),
            StallVerdict::Ok {
                check_at: Timestamp(11_000)
            }
        );
        match s.decide(Timestamp(11_000)) {
            StallVerdict::Stalling { info, kill_at } => {
                assert_eq!(info.quiet_ms, 1_000);
                assert_eq!(info.phase, StallPhase::Idle);
                assert_eq!(kill_at, Timestamp(11_500));
            }
            other => panic!("expected stalling, got {other:?}"),
        }
        assert!(matches!(
            s.decide(Timestamp(11_499)),
            StallVerdict::Stalling { .. }
        ));
        assert!(matches!(
            s.decide(Timestamp(11_500)),
            StallVerdict::Kill { .. }
        ));
    }

    #[test]
    fn a_changing_token_keeps_the_child_alive() {
        let mut s = StallTracker::new(T, Timestamp(0));
        for i in 1..=20u64 {
            let now = Timestamp(i * 200);
            s.observe(Ok((&token(i, None), Some(now))), now);
            assert!(matches!(s.decide(now), StallVerdict::Ok { .. }));
        }
        assert_eq!(
            s.decide(Timestamp(4_999)),
            StallVerdict::Ok {
                check_at: Timestamp(5_000)
            }
        );
    }

    #[test]
    fn the_change_counts_from_when_it_happened() {
        let mut s = StallTracker::new(T, Timestamp(0));
        s.observe(Ok((&token(1, None), Some(Timestamp(300)))), Timestamp(900));
        assert_eq!(
            s.decide(Timestamp(900)),
            StallVerdict::Ok {
                check_at: Timestamp(1_300)
            }
        );
        // An unchanged token does not move the clock, whatever its stamp says.
        s.observe(
            Ok((&token(1, None), Some(Timestamp(1_200)))),
            Timestamp(1_200),
        );
        assert!(matches!(
            s.decide(Timestamp(1_300)),
            StallVerdict::Stalling { .. }
        ));
    }

    #[test]
    fn inside_a_tool_the_longer_threshold_applies() {
        let mut s = StallTracker::new(T, Timestamp(0));
        s.observe(
            Ok((
                &Token {
                    progress_seq: 1,
                    current_tool: Some("x".into()),
                    ..Token::default()
                },
                None,
            )),
            Timestamp(100),
        );
        assert_eq!(
            s.decide(Timestamp(1_500)),
            StallVerdict::Ok {
                check_at: Timestamp(5_100)
            }
        );
        match s.decide(Timestamp(5_100)) {
            StallVerdict::Stalling { info, .. } => {
                assert_eq!(info.phase, StallPhase::InTool);
                assert_eq!(info.threshold_ms, 5_000);
                assert_eq!(
                    info.detail(500),
                    ExitDetail::Stalled {
                        stalled_after_quiet_seconds: 5.0,
                        stall_threshold_seconds: 5.0,
                        stall_phase: StallPhase::InTool,
                        stall_grace_seconds: 0.5,
                    }
                );
            }
            other => panic!("expected stalling, got {other:?}"),
        }
    }

    #[test]
    fn a_failing_sampler_never_counts_as_progress() {
        let mut s = StallTracker::new(T, Timestamp(0));
        for i in 1..10 {
            s.observe(Err(SampleFailed), Timestamp(i * 100));
        }
        assert!(matches!(
            s.decide(Timestamp(1_000)),
            StallVerdict::Stalling { .. }
        ));
    }

    #[test]
    fn stalling_is_final() {
        let mut s = StallTracker::new(T, Timestamp(0));
        assert!(matches!(
            s.decide(Timestamp(1_000)),
            StallVerdict::Stalling { .. }
        ));
        s.observe(
            Ok((&token(5, None), Some(Timestamp(1_100)))),
            Timestamp(1_100),
        );
        assert!(matches!(
            s.decide(Timestamp(1_200)),
            StallVerdict::Stalling { .. }
        ));
        assert!(matches!(
            s.decide(Timestamp(1_500)),
            StallVerdict::Kill { .. }
        ));
    }
}
