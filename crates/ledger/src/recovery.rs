//! The recovery sweep any process runs cheaply when it opens the ledger: units of dead hosts
//! are finalized (their surviving children killed first), stale pending events are dropped, old
//! terminal units are purged.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::sync::atomic::Ordering;

use nix::sys::signal::Signal;

use crate::error::Result;
use crate::ledger::Ledger;
use crate::model::{ChildStatus, DelegationId, DropReason, EventState, ProcessId, Timestamp};
use crate::procs;
use crate::tables::META_LAST_RECOVERY;
use crate::units::{force_finish, unknown_outcome};

/// Lines of transcript kept for a child whose outcome is unknown.
pub const TAIL_LINES: usize = 20;
/// Characters of transcript kept for a child whose outcome is unknown.
pub const TAIL_CHARS: usize = 2_000;

/// What recovery needs from the operating system; `OsReaper` in production, fakes in tests.
pub trait Reaper {
    /// Whether the process still runs (same pid and start time).
    fn is_alive(&self, process: ProcessId) -> bool;
    /// Kills the process group `leader` led, verified by start time.
    fn kill_group(&self, leader: ProcessId);
    /// The last lines of a transcript.
    fn transcript_tail(&self, path: &str) -> Option<String>;
}

/// The real operating system.
#[derive(Clone, Copy, Debug, Default)]
pub struct OsReaper;

impl Reaper for OsReaper {
    fn is_alive(&self, process: ProcessId) -> bool {
        procs::is_alive(process)
    }

    fn kill_group(&self, leader: ProcessId) {
        procs::signal_group(leader, Signal::SIGKILL);
    }

    fn transcript_tail(&self, path: &str) -> Option<String> {
        read_tail(path)
    }
}

/// The last `TAIL_LINES` lines of a file, at most `TAIL_CHARS` characters.
pub fn read_tail(path: &str) -> Option<String> {
    let mut file = File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let start = len.saturating_sub(16 * 1024);
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    Some(tail_of(&String::from_utf8_lossy(&bytes)))
}

/// The last `TAIL_LINES` lines of `text`, at most `TAIL_CHARS` characters, cut on a character
/// boundary.
pub fn tail_of(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let kept = lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n");
    let count = kept.chars().count();
    if count <= TAIL_CHARS {
        kept
    } else {
        kept.chars().skip(count - TAIL_CHARS).collect()
    }
}

/// What a sweep did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Whether the sweep ran (it is skipped if another ran within `recovery_interval_ms`).
    pub ran: bool,
    /// Units of dead hosts finalized.
    pub finalized: Vec<DelegationId>,
    /// Process groups killed.
    pub killed_groups: usize,
    /// Pending events dropped as `replay_expired`.
    pub expired_events: usize,
    /// Terminal units purged.
    pub purged_units: usize,
    /// Host records of dead processes removed.
    pub dead_hosts: usize,
}

impl Ledger {
    /// Runs the recovery sweep unless one ran within `recovery_interval_ms` (or `force`).
    pub fn recover(
        &self,
        reaper: &dyn Reaper,
        now: Timestamp,
        force: bool,
    ) -> Result<RecoveryReport> {
        let interval = self.config.recovery_interval_ms;
        let is_due = |last: Option<u64>| {
            force
                || last
                    .map(Timestamp)
                    .is_none_or(|last| now.ms_since(last) >= interval || last > now)
        };
        // Cheap reads first: the common cases (a sweep ran moments ago, or there is nothing to
        // do) take no write lock and commit nothing. Only a sweep with work claims the sweep in
        // a write, re-checked, so concurrent processes don't all run it.
        let swept_here = self.last_sweep.load(Ordering::Relaxed);
        let last = self
            .read(|r| r.meta(META_LAST_RECOVERY))?
            .into_iter()
            .chain((swept_here > 0).then_some(swept_here))
            .chain(self.swept_hint())
            .max();
        if !is_due(last) {
            return Ok(RecoveryReport::default());
        }
        self.last_sweep.store(now.0.max(1), Ordering::Relaxed);
        // Whatever the sweep finds, the next ones within the interval are skipped: in this
        // process by `last_sweep`, in others by the hint file.
        self.set_swept_hint(now);
        if !self.has_recovery_work(reaper, now)? {
            return Ok(RecoveryReport {
                ran: true,
                ..RecoveryReport::default()
            });
        }
        let due = self.write_then(|w| {
            let due = is_due(w.meta(META_LAST_RECOVERY)?);
            if due {
                w.set_meta(META_LAST_RECOVERY, now.0)?;
            }
            Ok((due, due))
        })?;
        let mut report = RecoveryReport {
            ran: due,
            ..RecoveryReport::default()
        };
        if !due {
            return Ok(report);
        }
        self.finalize_dead_hosts(reaper, now, &mut report)?;
        self.expire_events(now, &mut report)?;
        self.purge_old_units(now, &mut report)?;
        Ok(report)
    }

    /// The hint file beside the ledger that rate-limits sweeps across processes without a
    /// commit: it holds the time of the last sweep, in ms. Losing it (no fsync) only costs an
    /// extra read-only sweep; the ledger's own `last_recovery_at` still guards sweeps that write.
    fn swept_hint_path(&self) -> std::path::PathBuf {
        let mut name = self.path.file_name().unwrap_or_default().to_os_string();
        name.push(".swept");
        self.path.with_file_name(name)
    }

    fn swept_hint(&self) -> Option<u64> {
        std::fs::read_to_string(self.swept_hint_path())
            .ok()
            .and_then(|t| t.trim().parse().ok())
    }

    fn set_swept_hint(&self, now: Timestamp) {
        // Best effort: a hint that cannot be written only means more read-only sweeps.
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(self.swept_hint_path())
            .and_then(|mut f| f.write_all(now.0.to_string().as_bytes()));
    }

    /// Whether a sweep at `now` would change anything: a unit or host record of a dead
    /// process, an expired pending event, a unit past retention. Read-only.
    fn has_recovery_work(&self, reaper: &dyn Reaper, now: Timestamp) -> Result<bool> {
        let replay_cutoff = now.minus_ms(self.config.replay_max_age_ms);
        let retention_cutoff = now.minus_ms(self.config.retention_ms);
        self.read(|r| {
            if r.active_units()?
                .iter()
                .any(|u| u.host.is_some_and(|h| !reaper.is_alive(h)))
                || r.hosts()?.iter().any(|h| !reaper.is_alive(h.process))
            {
                return Ok(true);
            }
            for event_ref in r.all_open_events()? {
                if r.event(&event_ref)?
                    .is_some_and(|e| e.published_at < replay_cutoff && e.is_deliverable(now))
                {
                    return Ok(true);
                }
            }
            for (_, id) in r.units_before(retention_cutoff)? {
                if r.delegation(&id)?.is_some_and(|u| {
                    u.status.is_terminal() && u.ended_at.is_some_and(|t| t < retention_cutoff)
                }) {
                    return Ok(true);
                }
            }
            Ok(false)
        })
    }

    fn finalize_dead_hosts(
        &self,
        reaper: &dyn Reaper,
        now: Timestamp,
        report: &mut RecoveryReport,
    ) -> Result<()> {
        let orphans: Vec<(DelegationId, ProcessId)> = self.read(|r| {
            Ok(r.active_units()?
                .into_iter()
                .filter_map(|u| u.host.map(|h| (u.id, h)))
                .filter(|(_, host)| !reaper.is_alive(*host))
                .collect())
        })?;
        for (id, host) in orphans {
            // Kill first, outside any transaction; the write below re-checks everything.
            let children = self.children(&id)?;
            for child in &children {
                if let (ChildStatus::Running, Some(process)) = (child.status, child.process) {
                    reaper.kill_group(process);
                    report.killed_groups += 1;
                }
            }
            let tails: Vec<(u32, Option<String>)> = children
                .iter()
                .filter(|c| !c.status.is_terminal())
                .map(|c| {
                    (
                        c.index,
                        c.transcript
                            .as_deref()
                            .and_then(|p| reaper.transcript_tail(p)),
                    )
                })
                .collect();
            let finalized = self.write_then(|w| {
                let Some(unit) = w.delegation(id.as_str())? else {
                    return Ok((false, false));
                };
                if unit.status.is_terminal() || unit.host != Some(host) {
                    return Ok((false, false));
                }
                let mut missing = Vec::new();
                for child in w.children(&id)? {
                    if child.status.is_terminal() {
                        continue;
                    }
                    let mut outcome = unknown_outcome(&unit, &child, "owner_died", now);
                    outcome.transcript_tail = tails
                        .iter()
                        .find(|(i, _)| *i == child.index)
                        .and_then(|(_, t)| t.clone());
                    missing.push(outcome);
                }
                force_finish(w, unit, missing, "owner_died", now)?;
                Ok((true, true))
            })?;
            if finalized {
                report.finalized.push(id);
            }
        }
        // Each step commits only if it changed something: a sweep with nothing to do costs no
        // durable commit beyond its timestamp.
        report.dead_hosts = self.write_then(|w| {
            let mut removed = 0;
            for host in w.hosts()? {
                if !reaper.is_alive(host.process) {
                    if let Some(session) = &host.session
                        && let Some(mut record) = w.session(session)?
                        && record.host == Some(host.process)
                    {
                        record.host = None;
                        w.put_session(&record)?;
                    }
                    w.remove_host(host.process)?;
                    removed += 1;
                }
            }
            Ok((removed, removed > 0))
        })?;
        Ok(())
    }

    fn expire_events(&self, now: Timestamp, report: &mut RecoveryReport) -> Result<()> {
        let cutoff = now.minus_ms(self.config.replay_max_age_ms);
        report.expired_events = self.write_then(|w| {
            let mut expired = 0;
            for event_ref in w.all_open_events()? {
                let Some(mut event) = w.event(&event_ref)? else {
                    continue;
                };
                if event.published_at < cutoff && event.is_deliverable(now) {
                    if let Some(lease) = event.lease.take() {
                        w.remove_claim(lease.token)?;
                    }
                    event.state = EventState::Dropped;
                    event.dropped_at = Some(now);
                    event.drop_reason = Some(DropReason::ReplayExpired);
                    w.put_event(&event)?;
                    expired += 1;
                }
            }
            Ok((expired, expired > 0))
        })?;
        Ok(())
    }

    fn purge_old_units(&self, now: Timestamp, report: &mut RecoveryReport) -> Result<()> {
        let cutoff = now.minus_ms(self.config.retention_ms);
        report.purged_units = self.write_then(|w| {
            let mut purged = 0;
            for (_, id) in w.units_before(cutoff)? {
                let Some(unit) = w.delegation(&id)? else {
                    continue;
                };
                if unit.status.is_terminal() && unit.ended_at.is_some_and(|t| t < cutoff) {
                    w.purge_delegation(&unit)?;
                    purged += 1;
                }
            }
            Ok((purged, purged > 0))
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines_within_the_char_limit() {
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let tail = tail_of(&text);
        assert_eq!(tail.lines().count(), TAIL_LINES);
        assert!(tail.starts_with("line 80"));
        let long = "é".repeat(5_000);
        let tail = tail_of(&long);
        assert_eq!(tail.chars().count(), TAIL_CHARS);
    }
}
