//! The registry's settings: plain data, built from `hermes_settings::Settings` (which holds every
//! default and bound).

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How the registry runs children. Build it with [`Config::new`] and override fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Where transcripts live: `$HERMES_HOME/cache/delegation/live`.
    pub transcript_root: PathBuf,
    /// Running background units across every process of a home, and the parallelism inside one
    /// batch (`delegation.max_concurrent_children`, 3).
    pub max_concurrent_children: u32,
    /// Queued units at most before dispatch is refused (`delegation.max_queued`, 100).
    pub max_queued: u32,
    /// Quiet time after which a child outside any tool is stalling
    /// (`delegation.stall_idle_seconds`, 450 s).
    pub stall_idle: Duration,
    /// Quiet time after which a child inside a tool is stalling
    /// (`delegation.stall_in_tool_seconds`, 1200 s).
    pub stall_in_tool: Duration,
    /// Time between SIGTERM and SIGKILL for a stalling child (`delegation.stall_grace_seconds`,
    /// 120 s).
    pub stall_grace: Duration,
    /// Wall-clock limit per child when the dispatch names none (`delegation.child_timeout_seconds`,
    /// `None` = off).
    pub child_timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL for a timeout or an interrupt
    /// (`delegation.kill_grace_seconds`, 5 s).
    pub kill_grace: Duration,
    /// Bytes of result kept in an event (`delegation.result_max_bytes`, 65,536).
    pub result_max_bytes: usize,
    /// Transcript directories older than this are pruned, at most hourly, after a recovery
    /// sweep (`delegation.transcript_retention_days`, 7 days).
    pub transcript_retention: Duration,
    /// Bytes a transcript holds at most: beyond it the head and a rolling tail are kept, with a
    /// line saying how much was skipped (`delegation.transcript_max_bytes`, 64 MiB).
    pub transcript_max_bytes: u64,
    /// How often the monitor looks at its children at the latest (`host.sweep_interval_ms`,
    /// 1000 ms). Deadlines that fall between two sweeps are acted on when they fall.
    pub sweep_interval: Duration,
    /// How often a host renews its lease (`host.heartbeat_seconds`, 5 s).
    pub heartbeat_interval: Duration,
    /// How long a host's lease lasts (`host.lease_seconds`, 30 s).
    pub lease: Duration,
    /// A host that could not renew for this long stops its children and stops writing
    /// (`lease − heartbeat`).
    pub self_fence_after: Duration,
    /// How often a host runs the recovery sweep (`host.recovery_interval_seconds`, 3 s).
    pub recovery_interval: Duration,
    /// Live progress tokens are persisted as they change, in one write for all of a host's
    /// units, and at most once per this interval (100 ms).
    pub progress_interval: Duration,
    /// The file-mode creation mask children start with (`None`: this process's own). hermes
    /// runs with a private mask for its own files and gives children the user's.
    pub child_umask: Option<u32>,
    /// Variables every child gets besides its unit's: the home as an absolute path
    /// (`HERMES_HOME`), and the ledger's password file (`PGPASSFILE`), so a hermes a child runs reaches the ledger without the password ever
    /// being in a child's environment.
    pub child_env: Vec<(String, String)>,
}

impl Config {
    /// The default settings for a hermes home directory.
    pub fn new(home: &Path) -> Config {
        Config::from_settings(home, &hermes_settings::Settings::default())
    }

    /// The registry's part of `settings`, for a hermes home directory.
    pub fn from_settings(home: &Path, settings: &hermes_settings::Settings) -> Config {
        Config::with_transcript_root(home.join("cache").join("delegation").join("live"), settings)
    }

    /// The registry's part of `settings`, with transcripts under `transcript_root`.
    pub fn with_transcript_root(
        transcript_root: PathBuf,
        settings: &hermes_settings::Settings,
    ) -> Config {
        let d = &settings.delegation;
        Config {
            transcript_root,
            max_concurrent_children: d.max_concurrent_children,
            max_queued: d.max_queued,
            stall_idle: d.stall_idle,
            stall_in_tool: d.stall_in_tool,
            stall_grace: d.stall_grace,
            child_timeout: d.child_timeout,
            kill_grace: d.kill_grace,
            result_max_bytes: usize::try_from(d.result_max_bytes).unwrap_or(usize::MAX),
            transcript_retention: d.transcript_retention,
            transcript_max_bytes: d.transcript_max_bytes,
            sweep_interval: settings.host.sweep_interval,
            heartbeat_interval: settings.host.heartbeat,
            lease: settings.host.lease,
            self_fence_after: settings.host.self_fence_after(),
            recovery_interval: settings.host.recovery_interval,
            progress_interval: PROGRESS_INTERVAL,
            child_umask: None,
            child_env: Vec::new(),
        }
    }

    /// Batch parallelism: `max_concurrent_children`, at least one.
    pub(crate) fn parallelism(&self) -> usize {
        self.max_concurrent_children.max(1) as usize
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
        assert_eq!(c.max_concurrent_children, 3);
        assert_eq!(c.max_queued, 100);
        assert_eq!(c.stall_idle, Duration::from_secs(450));
        assert_eq!(c.stall_in_tool, Duration::from_secs(1200));
        assert_eq!(c.stall_grace, Duration::from_secs(120));
        assert_eq!(c.child_timeout, None);
        assert_eq!(c.kill_grace, Duration::from_secs(5));
        assert_eq!(c.result_max_bytes, 65_536);
        assert_eq!(c.transcript_retention, Duration::from_secs(604_800));
        assert_eq!(c.transcript_max_bytes, 67_108_864);
        assert_eq!(c.sweep_interval, Duration::from_millis(1000));
    }
}
