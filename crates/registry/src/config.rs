//! The registry's settings: plain data, built from `hermes_settings::Settings` (which holds every
//! default and bound).

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How the registry runs children: the `[delegation]` and `[host]` settings sections as they
/// are, and what is the registry's own. Build it with [`Config::new`] or
/// [`Config::from_settings`] and override fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `[delegation]`: how children run (concurrency, stall and timeout limits, result and
    /// transcript sizes).
    pub delegation: hermes_settings::DelegationSettings,
    /// `[host]`: how a host sweeps, renews its lease and runs recovery.
    pub host: hermes_settings::HostSettings,
    /// Where transcripts live: `$HERMES_HOME/cache/delegation/live`.
    pub transcript_root: PathBuf,
    /// Where children of `--workspace worktree` units get their worktrees:
    /// `$HERMES_HOME/workspaces`.
    pub workspace_root: PathBuf,
    /// Live progress tokens are persisted as they change, in one write for all of a host's
    /// units, and at most once per this interval.
    pub progress_interval: Duration,
    /// The file-mode creation mask children start with (`None`: this process's own). hermes
    /// runs with a private mask for its own files and gives children the user's.
    pub child_umask: Option<u32>,
    /// Variables every child gets besides its unit's: the home as an absolute path
    /// (`HERMES_HOME`), and the ledger's password file (`PGPASSFILE`), so a hermes a child runs
    /// reaches the ledger without the password ever being in a child's environment.
    pub child_env: Vec<(String, String)>,
    /// hermes' home, where a redb ledger lives: a sandboxed `orchestrator` child may write it
    /// (to delegate), a `leaf` child never (`None`: not known, nothing is added).
    pub home: Option<PathBuf>,
}

impl Config {
    /// The default settings for a hermes home directory.
    pub fn new(home: &Path) -> Config {
        Config::from_settings(home, &hermes_settings::Settings::default())
    }

    /// The registry's part of `settings`, for a hermes home directory.
    pub fn from_settings(home: &Path, settings: &hermes_settings::Settings) -> Config {
        Config {
            workspace_root: home.join("workspaces"),
            home: Some(home.to_path_buf()),
            ..Config::with_transcript_root(
                home.join("cache").join("delegation").join("live"),
                settings,
            )
        }
    }

    /// The registry's part of `settings`, with transcripts under `transcript_root`.
    pub fn with_transcript_root(
        transcript_root: PathBuf,
        settings: &hermes_settings::Settings,
    ) -> Config {
        Config {
            delegation: settings.delegation.clone(),
            host: settings.host.clone(),
            workspace_root: transcript_root.join("workspaces"),
            transcript_root,
            progress_interval: PROGRESS_INTERVAL,
            child_umask: None,
            child_env: Vec::new(),
            home: None,
        }
    }

    /// Batch parallelism: `delegation.max_concurrent_children`, at least one.
    pub(crate) fn parallelism(&self) -> usize {
        self.delegation.max_concurrent_children.max(1) as usize
    }

    /// Bytes of result kept in an event: `delegation.result_max_bytes`, as a `usize`.
    pub fn result_max_bytes(&self) -> usize {
        usize::try_from(self.delegation.result_max_bytes).unwrap_or(usize::MAX)
    }

    /// How long a host that could not renew its lease waits before it stops its children and
    /// stops writing ([`hermes_settings::HostSettings::self_fence_after`]).
    pub fn self_fence_after(&self) -> Duration {
        self.host.self_fence_after()
    }
}

/// A host persists its children's live progress at most this often: a change is visible to
/// every process within about one interval, and a host with many busy children writes about
/// ten times a second, not once per change.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

/// Whole milliseconds of a duration, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A duration in seconds, as the event's detail fields carry it.
pub(crate) fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_spec() {
        let c = Config::new(Path::new("/h"));
        assert_eq!(c.transcript_root, Path::new("/h/cache/delegation/live"));
        assert_eq!(c.delegation.max_concurrent_children, 3);
        assert_eq!(c.delegation.max_queued, 100);
        assert_eq!(c.delegation.stall_idle, Duration::from_secs(450));
        assert_eq!(c.delegation.stall_in_tool, Duration::from_secs(1200));
        assert_eq!(c.delegation.stall_grace, Duration::from_secs(120));
        assert_eq!(c.delegation.child_timeout, None);
        assert_eq!(c.delegation.kill_grace, Duration::from_secs(5));
        assert_eq!(c.result_max_bytes(), 65_536);
        assert_eq!(
            c.delegation.transcript_retention,
            Duration::from_secs(604_800)
        );
        assert_eq!(c.delegation.transcript_max_bytes, 67_108_864);
        assert_eq!(c.host.sweep_interval, Duration::from_millis(1000));
        assert_eq!(c.self_fence_after(), c.host.lease - c.host.heartbeat);
        assert_eq!(c.progress_interval, Duration::from_millis(100));
    }
}
