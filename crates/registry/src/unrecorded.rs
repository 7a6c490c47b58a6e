//! Results a host has not been able to record yet: `task-N.unrecorded.json`
//! beside the child's transcript.
//!
//! A finished child's outcome whose write to the ledger failed is kept here from the first
//! failure until a write gets through: rewritten on every failed attempt (how many, since when,
//! the last error), removed once recorded. It stays on the host's machine, as the transcripts
//! do, and two readers use it there:
//!
//! - `delegation status` shows `"recording": "retrying …"` for the child while the host retries;
//! - recovery ([`crate::OsReaper`]) finalizes the child of a host that fenced or died before
//!   recording it with this outcome, its result and tails, instead of `unknown`.
//!
//! Writing it is best effort: a host that cannot write the file still retries the ledger, as
//! before.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use hermes_ledger::{ChildOutcome, Timestamp};
use serde::{Deserialize, Serialize};

use crate::transcript::rfc3339;

/// A finished child's outcome that its host has not recorded yet, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Unrecorded {
    /// The outcome as the host saw it.
    pub outcome: ChildOutcome,
    /// When the first attempt at recording it failed.
    pub since: Timestamp,
    /// Attempts that failed so far.
    pub attempts: u32,
    /// Why the last one failed, on one line.
    pub error: String,
}

impl Unrecorded {
    /// What `delegation status` says of it.
    pub fn describe(&self) -> String {
        format!(
            "retrying since {} ({} failed attempt{}): {}",
            rfc3339(self.since),
            self.attempts,
            if self.attempts == 1 { "" } else { "s" },
            self.error
        )
    }

    /// Writes it beside its child's transcript, atomically and privately (0600). An outcome
    /// with no transcript has nowhere to go: nothing is written.
    pub fn write(&self) -> io::Result<()> {
        let Some(path) = path_for(&self.outcome.transcript) else {
            return Ok(());
        };
        crate::transcript::write_json(self, &path.with_extension("json.tmp"), &path)
    }
}

/// Where the unrecorded outcome of the child whose transcript is `transcript` is kept
/// (`task-N.log` → `task-N.unrecorded.json`); `None` for no transcript.
pub fn path_for(transcript: &str) -> Option<PathBuf> {
    (!transcript.is_empty()).then(|| Path::new(transcript).with_extension("unrecorded.json"))
}

/// The unrecorded outcome kept for child `index` beside `transcript`, if there is one on this
/// machine and it is readable (a damaged file is logged and ignored: the child then ends as
/// recovery would have ended it without one).
pub fn read(transcript: &str, index: u32) -> Option<Unrecorded> {
    let path = path_for(transcript)?;
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read an unrecorded outcome");
            return None;
        }
    };
    match serde_json::from_slice::<Unrecorded>(&bytes) {
        Ok(kept) if kept.outcome.index == index => Some(kept),
        Ok(_) => {
            tracing::warn!(path = %path.display(), "an unrecorded outcome of another child; ignored");
            None
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "a damaged unrecorded outcome; ignored");
            None
        }
    }
}

/// Forgets the unrecorded outcome beside `transcript` (it was recorded, by its host or by
/// recovery).
pub fn remove(transcript: &str) {
    if let Some(path) = path_for(transcript)
        && let Err(e) = fs::remove_file(&path)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "cannot remove a recorded outcome's file");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hermes_ledger::ChildStatus;

    fn outcome(dir: &Path, index: u32) -> ChildOutcome {
        ChildOutcome {
            exit_code: Some(0),
            result: "the answer".into(),
            transcript_tail: Some("last line".into()),
            transcript: crate::transcript::task_log_path(dir, index)
                .display()
                .to_string(),
            ..ChildOutcome::new(index, "goal", ChildStatus::Completed, Timestamp(5_000))
        }
    }

    #[test]
    fn it_is_kept_beside_the_transcript_until_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kept = Unrecorded {
            outcome: outcome(dir.path(), 1),
            since: Timestamp(1_000),
            attempts: 3,
            error: "the PostgreSQL server at 127.0.0.1:1 did not answer".into(),
        };
        kept.write().expect("write");
        let path = dir.path().join("task-1.unrecorded.json");
        assert!(path.is_file());
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            fs::metadata(&path).expect("meta").permissions().mode() & 0o777,
            0o600
        );
        let transcript = kept.outcome.transcript.clone();
        assert_eq!(read(&transcript, 1), Some(kept.clone()));
        // Another child's index never takes it.
        assert_eq!(read(&transcript, 0), None);
        assert_eq!(
            kept.describe(),
            "retrying since 1970-01-01T00:00:01Z (3 failed attempts): \
             the PostgreSQL server at 127.0.0.1:1 did not answer"
        );
        remove(&transcript);
        assert!(!path.exists());
        assert_eq!(read(&transcript, 1), None);
        // Removing what is gone, or what has no transcript, is fine.
        remove(&transcript);
        remove("");
    }

    #[test]
    fn a_damaged_file_is_ignored_and_no_transcript_writes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let transcript = crate::transcript::task_log_path(dir.path(), 0)
            .display()
            .to_string();
        fs::write(dir.path().join("task-0.unrecorded.json"), b"{not json").expect("write");
        assert_eq!(read(&transcript, 0), None);
        let mut nowhere = Unrecorded {
            outcome: outcome(dir.path(), 0),
            since: Timestamp(0),
            attempts: 1,
            error: "x".into(),
        };
        nowhere.outcome.transcript.clear();
        nowhere.write().expect("nothing to write");
        assert_eq!(path_for(""), None);
    }
}
