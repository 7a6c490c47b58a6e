//! Live progress, persisted as it changes and coalesced per host: a child whose token moves
//! tells the host's flusher, which writes every changed child of every unit of this host in one
//! ledger write, then lets one `progress_interval` (100 ms) pass before the next. An isolated
//! change reaches the ledger at once (within one write), a busy host writes at most once per
//! interval whatever its children do, and an idle host writes nothing.
//!
//! A child's progress is persisted once the ledger has its start: at once for most, after its
//! first second for an inline child its dispatch recorded running (a shorter one's start and
//! progress go with its outcome, so a short one-shot run stays two commits).
//!
//! A child's transcript tail (what recovery and `status` show of its output) goes with its
//! token when its output moved, at most once per [`TAIL_INTERVAL`] per child: a tail that moved
//! since is written when that interval is over, even if nothing else changes.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use hermes_ledger::{ChildStatus, ProgressUpdate, Timestamp};

use super::inner::{Inner, Persisted};

/// How often, at most, a running child's transcript tail is written.
const TAIL_INTERVAL_MS: u64 = 1000;

/// The host's progress flusher: waits for a child's token to move, persists what changed, and
/// starts no other write until one `progress_interval` after this one started (changes
/// meanwhile are kept by the notification's permit and go out together then). A slow write
/// is not followed by a full interval's rest on top of it.
pub(super) async fn flush_progress(inner: Arc<Inner>) {
    let mut stop = inner.stop.subscribe();
    let interval = inner.ctx.config.progress_interval;
    loop {
        tokio::select! {
            () = inner.progress_changed.notified() => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() || inner.fenced.load(Ordering::SeqCst) {
            return;
        }
        let next = tokio::time::Instant::now() + interval;
        if inner.persist_progress().await {
            // A tail is waiting for its interval: look again at the next tick.
            inner.progress_changed.notify_one();
        }
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            _ = stop.changed() => return,
        }
    }
}

/// What to write of one child, given what the ledger holds of it: its token if it changed, a
/// tail if its output moved and the last tail is [`TAIL_INTERVAL_MS`] old; and whether a
/// moved tail is left for later.
#[derive(Debug, PartialEq, Eq)]
struct Due {
    token: bool,
    tail: bool,
    tail_waits: bool,
}

fn due(persisted: &Persisted, progress: &hermes_ledger::Progress, now: Timestamp) -> Due {
    let token = persisted.progress.as_ref() != Some(progress);
    let moved = persisted
        .tail
        .is_none_or(|(bytes, _)| bytes != progress.output_bytes);
    let ripe = persisted
        .tail
        .is_none_or(|(_, at)| now.ms_since(at) >= TAIL_INTERVAL_MS);
    Due {
        token,
        tail: moved && ripe,
        tail_waits: moved && !ripe,
    }
}

impl Inner {
    /// Persists the progress token (and, where output moved, the transcript's tail) of every
    /// running child of this host whose token changed since it was last persisted: one write.
    /// Returns whether a tail that moved was left for later.
    pub(super) async fn persist_progress(&self) -> bool {
        let (updates, tail_waits) = self.changed_progress();
        if updates.is_empty() {
            return tail_waits;
        }
        let writer = self.host_id;
        let recorded = self
            .call(move |l| {
                let updates: Vec<ProgressUpdate> = updates
                    .into_iter()
                    .map(|mut u| {
                        u.tail = u.tail.and_then(|path| crate::reaper::read_tail(&path));
                        u
                    })
                    .collect();
                l.record_progress(writer, &updates)
            })
            .await;
        match recorded {
            Ok(fenced) => {
                // A unit that finished meanwhile (an inline host leaves with its last finish)
                // is no news; one still running here is.
                let units = self.lock();
                for id in fenced.iter().filter(|id| units.running.contains_key(*id)) {
                    tracing::warn!(delegation = %id, "progress refused: this host no longer owns the unit");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot persist progress"),
        }
        tail_waits
    }

    /// The updates of every running child whose token moved since it was last persisted, or
    /// whose tail is due; each is marked persisted. A tail is asked for (its transcript's
    /// path) where one is due. Also whether a moved tail waits for its interval.
    fn changed_progress(&self) -> (Vec<ProgressUpdate>, bool) {
        let now = self.ctx.clock.now();
        let mut units = self.lock();
        let mut updates = Vec::new();
        let mut tail_waits = false;
        for (id, entry) in units.running.iter_mut() {
            for (child, persisted) in entry.children.iter().zip(entry.persisted.iter_mut()) {
                let snap = child.snapshot();
                if snap.status != ChildStatus::Running || !child.is_start_recorded() {
                    continue;
                }
                let due = due(persisted, &snap.progress, now);
                tail_waits |= due.tail_waits;
                if !due.token && !due.tail {
                    continue;
                }
                persisted.progress = Some(snap.progress.clone());
                if due.tail {
                    persisted.tail = Some((snap.progress.output_bytes, now));
                }
                updates.push(ProgressUpdate {
                    delegation_id: id.clone(),
                    index: child.index(),
                    progress: snap.progress,
                    // Filled in by the write, off the async threads, from the transcript.
                    tail: due.tail.then(|| child.transcript_path().to_owned()),
                });
            }
        }
        (updates, tail_waits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hermes_ledger::Progress;

    fn progress(bytes: u64, tool: Option<&str>) -> Progress {
        Progress {
            output_bytes: bytes,
            current_tool: tool.map(str::to_owned),
            ..Progress::default()
        }
    }

    #[test]
    fn a_first_look_writes_the_token_and_the_tail() {
        let d = due(&Persisted::default(), &progress(0, None), Timestamp(5));
        assert_eq!(
            d,
            Due {
                token: true,
                tail: true,
                tail_waits: false
            }
        );
    }

    #[test]
    fn a_tool_change_goes_out_at_once_and_output_waits_for_its_tail_interval() {
        let written = Persisted {
            progress: Some(progress(10, None)),
            tail: Some((10, Timestamp(1_000))),
        };
        // Entering a tool 50 ms later: the token at once, no tail (output did not move).
        let d = due(&written, &progress(10, Some("grep")), Timestamp(1_050));
        assert!(d.token && !d.tail && !d.tail_waits, "{d:?}");
        // Output moved 300 ms later: the token goes, the tail waits.
        let d = due(&written, &progress(20, None), Timestamp(1_300));
        assert!(d.token && !d.tail && d.tail_waits, "{d:?}");
        // Nothing new but the tail's interval is over: the tail alone is due.
        let caught_up = Persisted {
            progress: Some(progress(20, None)),
            ..written
        };
        let d = due(&caught_up, &progress(20, None), Timestamp(2_000));
        assert!(!d.token && d.tail && !d.tail_waits, "{d:?}");
    }

    #[test]
    fn nothing_changed_is_nothing_to_write() {
        let written = Persisted {
            progress: Some(progress(10, Some("make"))),
            tail: Some((10, Timestamp(1_000))),
        };
        let d = due(&written, &progress(10, Some("make")), Timestamp(90_000));
        assert_eq!(
            d,
            Due {
                token: false,
                tail: false,
                tail_waits: false
            }
        );
    }
}
