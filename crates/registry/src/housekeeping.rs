//! What a process does on this machine after the ledger's recovery sweep: it brings the
//! `manifest.json` of every unit recovery finalized up to date (the ledger writes no files), and
//! prunes old transcript directories on a schedule — at most once per [`PRUNE_INTERVAL`], never
//! per dispatch, so dispatching costs the same whatever the history holds.
//!
//! The schedule is a marker file, `<transcript root>/.last-prune`: its mtime is when the last
//! prune started. It is per machine, as the transcripts are.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use hermes_ledger::{DelegationId, EventKey, Ledger, RecoveryReport};

use crate::child::exit_reason;
use crate::config::Config;
use crate::transcript::{self, Manifest};

/// Old transcripts are looked for at most this often.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(3600);

/// The marker whose mtime records the last prune.
const PRUNE_MARKER: &str = ".last-prune";

/// The recovery sweep as this machine runs it: [`hermes_ledger::Ledger::recover`] with the operating
/// system's answers, then [`after_recovery`]. Every process that sweeps goes through here.
pub fn sweep(
    ledger: &Ledger,
    reaper: &crate::OsReaper,
    config: &Config,
    now: hermes_ledger::Timestamp,
    when: hermes_ledger::Sweep,
) -> hermes_ledger::Result<RecoveryReport> {
    sweep_as_of(ledger, reaper, config, now, when, ledger.change_stamp())
}

/// [`sweep`] as of a change stamp the caller has where the ledger has none
/// ([`hermes_ledger::Ledger::recover_as_of`]): a host's count of the notifications it heard.
pub fn sweep_as_of(
    ledger: &Ledger,
    reaper: &crate::OsReaper,
    config: &Config,
    now: hermes_ledger::Timestamp,
    when: hermes_ledger::Sweep,
    stamp: Option<u64>,
) -> hermes_ledger::Result<RecoveryReport> {
    let report = ledger.recover_as_of(reaper, now, when, stamp)?;
    if !report.finalized.is_empty() || !report.adopted.is_empty() {
        tracing::info!(finalized = ?report.finalized, adopted = ?report.adopted, "recovered units of dead hosts");
    }
    after_recovery(ledger, config, &report);
    Ok(report)
}

/// Whether something stamped by the mtime of `stamp` is due again at `now`: never stamped, or
/// stamped `interval` or more ago. A stamp from further in the future than `interval` (a clock
/// that jumped back) does not block it forever.
pub fn stamp_due(stamp: &Path, interval: Duration, now: SystemTime) -> bool {
    let last = std::fs::metadata(stamp).and_then(|m| m.modified()).ok();
    last.is_none_or(|last| {
        now.duration_since(last)
            .map_or(last > now + interval, |age| age >= interval)
    })
}

/// Housekeeping after a recovery sweep: manifests of the units it finalized, then the scheduled
/// prune if one is due and the worktrees whose results are settled. Errors are logged and skipped: this is housekeeping.
pub fn after_recovery(ledger: &Ledger, config: &Config, report: &RecoveryReport) {
    for id in &report.finalized {
        update_manifest(ledger, id);
    }
    if report.ran {
        prune_if_due(config, SystemTime::now());
        crate::workspace::release_settled(ledger, &config.workspace_root);
    }
}

/// Rewrites the manifest of a unit from what the ledger holds, if its transcript directory is
/// on this machine (it has a `manifest.json`). Returns whether it was rewritten.
pub fn update_manifest(ledger: &Ledger, id: &DelegationId) -> bool {
    let rewrite = || -> Result<bool, Box<dyn std::error::Error>> {
        let Some(unit) = ledger.delegation(id)? else {
            return Ok(false);
        };
        let Some(dir) = unit.transcript_dir.as_deref().map(PathBuf::from) else {
            return Ok(false);
        };
        if !dir.join("manifest.json").is_file() {
            return Ok(false);
        }
        let children = ledger.children(id)?;
        let events = ledger.events(id)?;
        let mut manifest = Manifest::for_unit(&dir, &unit);
        for child in &children {
            let Some(entry) = manifest.tasks.get_mut(child.index as usize) else {
                continue;
            };
            entry.status = child.status.as_str();
            // Recorded now (recovery took the outcome its host kept, if there was one).
            if child.status.is_terminal()
                && let Some(transcript) = &child.transcript
            {
                crate::unrecorded::remove(transcript);
            }
            let outcome = events
                .iter()
                .filter(|e| e.key == EventKey::Task(child.index) || e.key == EventKey::Terminal)
                .flat_map(|e| e.payload.outcomes())
                .find(|o| o.index == child.index);
            entry.exit_reason = outcome.map(exit_reason);
        }
        if unit.status.is_terminal() {
            manifest.completed = unit.ended_at.map(transcript::rfc3339);
            manifest.status = Some(unit.status.as_str());
        }
        manifest.write(&dir)?;
        Ok(true)
    };
    match rewrite() {
        Ok(done) => done,
        Err(e) => {
            tracing::warn!(delegation = %id, error = %e, "cannot update manifest.json after recovery");
            false
        }
    }
}

/// Prunes transcript directories older than `transcript_retention` if the last prune on this
/// machine was [`PRUNE_INTERVAL`] or more before `now` (or never happened). Returns how many
/// directories were removed, or `None` if no prune was due.
pub fn prune_if_due(config: &Config, now: SystemTime) -> Option<usize> {
    let root = &config.transcript_root;
    let marker = root.join(PRUNE_MARKER);
    if !stamp_due(&marker, PRUNE_INTERVAL, now) || !root.is_dir() {
        return None;
    }
    // Stamp first, so concurrent processes do not all scan.
    if let Err(e) = touch(&marker, now) {
        tracing::warn!(path = %marker.display(), error = %e, "cannot record the transcript prune");
    }
    Some(transcript::prune(
        root,
        config.delegation.transcript_retention,
    ))
}

/// Sets the mtime of `path` (created 0600 if missing) to `at`: a stamp for [`stamp_due`].
pub fn touch(path: &Path, at: SystemTime) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)?;
    file.set_modified(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_is_due_once_per_interval_and_a_future_one_does_not_block() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stamp = dir.path().join("last-sweep");
        let now = SystemTime::now();
        let interval = Duration::from_secs(3);
        assert!(stamp_due(&stamp, interval, now), "never stamped");
        touch(&stamp, now).expect("stamp");
        assert!(!stamp_due(&stamp, interval, now + Duration::from_secs(1)));
        assert!(stamp_due(&stamp, interval, now + Duration::from_secs(4)));
        touch(&stamp, now + Duration::from_secs(3_600)).expect("mtime");
        assert!(
            stamp_due(&stamp, interval, now),
            "a stamp from the future does not block"
        );
    }

    #[test]
    fn prunes_at_most_once_per_interval() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut config = Config::new(tmp.path());
        config.delegation.transcript_retention = Duration::from_secs(3600);
        std::fs::create_dir_all(&config.transcript_root).expect("root");
        let now = SystemTime::now();
        assert_eq!(prune_if_due(&config, now), Some(0));
        assert_eq!(prune_if_due(&config, now + Duration::from_secs(60)), None);
        assert_eq!(prune_if_due(&config, now + PRUNE_INTERVAL), Some(0));
        // A marker far in the future (the clock went back) does not stop pruning.
        assert_eq!(prune_if_due(&config, now - 3 * PRUNE_INTERVAL), Some(0));
    }
}
