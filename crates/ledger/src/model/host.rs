//! Hosts: the processes that run units, where they run, and their leases.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{HostId, SessionId, Timestamp};

/// A process identity that survives pid reuse: the pid and the process's start time (clock ticks
/// since boot, as `/proc/<pid>/stat` reports it).
///
/// A host's identity ([`ProcessId::as_host_in`]) carries its locality's tag in the bits of
/// `start_time` above [`ProcessId::START_BITS`]: processes of two pid namespaces (containers
/// started together, each its own pid 1) or two machines can share a pid and a start time, and
/// their host records, keyed by this identity, must not. Compare an identity with a process of
/// the operating system through [`ProcessId::names`], which reads the start time alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProcessId {
    /// The operating system's process id.
    pub pid: u32,
    /// The process start time in clock ticks since boot (modulo 2^[`ProcessId::START_BITS`]),
    /// and, above those bits, a host's locality tag.
    pub start_time: u64,
}

impl ProcessId {
    /// The bits of `start_time` that hold the start time itself: 2^36 clock ticks are 21 years
    /// at 100 a second, and a longer uptime only wraps the value, which [`ProcessId::names`]
    /// compares in the same bits.
    pub const START_BITS: u32 = 36;
    /// The bits above them that hold the locality tag, keeping `start_time` below 2^63 (a
    /// PostgreSQL `bigint`).
    pub const TAG_BITS: u32 = 27;
    const START_MASK: u64 = (1 << Self::START_BITS) - 1;

    /// The identity this process registers as a host under in `locality`: its pid, its start
    /// time, and the locality's tag ([`Locality::tag`]), so that two processes of different
    /// process tables sharing a pid and a start time are two hosts.
    pub fn as_host_in(self, locality: &Locality) -> ProcessId {
        ProcessId {
            pid: self.pid,
            start_time: (self.start_time & Self::START_MASK) | (locality.tag() << Self::START_BITS),
        }
    }

    /// The locality tag a host's identity carries ([`ProcessId::as_host_in`]); 0 for a plain
    /// identity.
    pub fn tag(self) -> u64 {
        self.start_time >> Self::START_BITS
    }

    /// Whether this identity (a host's, tagged, or a plain one) names the process `pid` that
    /// started at `start_time` clock ticks, as the process table reports it.
    pub fn names(self, pid: u32, start_time: u64) -> bool {
        self.pid == pid && (self.start_time ^ start_time) & Self::START_MASK == 0
    }
}

impl fmt::Display for ProcessId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.pid, self.start_time)
    }
}

/// Where a process lives. Two processes of the same locality see the same process table, so
/// one may judge the other by pid and start time; across localities (another pid namespace,
/// another boot, another machine) only a lease says whether a host is alive.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Locality {
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
    /// The pid namespace (`pid:[4026531836]`).
    pub pid_namespace: String,
    /// The host name.
    pub hostname: String,
}

impl Locality {
    /// A number telling this process table from others in a host's identity
    /// ([`ProcessId::as_host_in`]), [`ProcessId::TAG_BITS`] wide: the pid namespace's number
    /// mixed with a stable hash of the boot (the host name does not change which process a pid
    /// means). On one boot it is unique without luck: the kernel numbers the live pid
    /// namespaces apart (`pid:[4026531836]` for the first, then upwards from 2^32 − 2^28), and
    /// mixing in one boot's hash keeps them apart. Across boots and machines the boot's hash
    /// tells them apart. A namespace that does not read as a number is hashed.
    pub fn tag(&self) -> u64 {
        const MASK: u64 = (1 << ProcessId::TAG_BITS) - 1;
        /// Where the kernel starts numbering namespaces it creates (`PROC_DYNAMIC_FIRST`).
        const DYNAMIC_FIRST: u64 = 0xF000_0000;
        let boot = hermes_stdx::fnv1a(self.boot_id.as_bytes());
        let namespace = self
            .pid_namespace
            .strip_prefix("pid:[")
            .and_then(|rest| rest.strip_suffix(']'))
            .and_then(|number| number.parse::<u64>().ok())
            .map_or_else(
                || hermes_stdx::fnv1a(self.pid_namespace.as_bytes()),
                |inode| inode.wrapping_sub(DYNAMIC_FIRST),
            );
        (namespace ^ boot) & MASK
    }

    /// Whether a process of this locality may judge `process` by its pid: a plain identity, or
    /// a host's tagged with this locality's tag. A host of another process table (tagged
    /// otherwise) is judged by its lease alone, and before it has a record, not at all.
    pub fn judges(&self, process: ProcessId) -> bool {
        process.tag() == 0 || process.tag() == self.tag()
    }
}

/// What kind of process hosts units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HostKind {
    /// An interactive `hermes` session.
    Interactive,
    /// A headless `hermes host --session S`.
    Headless,
    /// A `hermes -z` or `hermes cron run` process running its own inline unit.
    Inline,
    /// A `hermes worker`: bound to no session, it runs the units of one pool.
    Worker,
}

impl HostKind {
    /// `interactive`, `headless`, `inline` or `worker`.
    pub fn as_str(self) -> &'static str {
        match self {
            HostKind::Interactive => "interactive",
            HostKind::Headless => "headless",
            HostKind::Inline => "inline",
            HostKind::Worker => "worker",
        }
    }
}

/// What a worker host serves: its pool and how many of the pool's units it runs at once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerPool {
    /// The pool's name (any non-empty name: a pool exists when named).
    pub pool: String,
    /// Units of the pool it runs at once, at least one.
    pub capacity: u32,
}

/// A live (or once-live) host process and its lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRecord {
    /// Who the host is.
    pub process: ProcessId,
    /// What kind of host.
    pub kind: HostKind,
    /// The session it hosts, if any (inline hosts have none).
    pub session: Option<SessionId>,
    /// When it registered.
    pub registered_at: Timestamp,
    /// Its last lease renewal.
    pub heartbeat_at: Timestamp,
    /// Its fencing epoch.
    pub host_id: HostId,
    /// Where it runs; only a process of the same locality judges it by pid.
    pub locality: Locality,
    /// When its lease runs out unless renewed: past it the host is dead wherever it runs.
    pub lease_expires_at: Timestamp,
    /// For a worker (`HostKind::Worker`), the pool it serves and its capacity. Added in
    /// format 3.
    pub worker: Option<WorkerPool>,
}

impl HostRecord {
    /// Whether this host is dead, judged from `here` at `now`: its lease ran out, or — only if
    /// it runs in the same locality, where pids mean the same thing — its process (pid and start
    /// time) is gone. A record with no locality (format 1) is judged by pid alone.
    pub fn is_dead(
        &self,
        here: &Locality,
        now: Timestamp,
        alive: &dyn Fn(ProcessId) -> bool,
    ) -> bool {
        if now >= self.lease_expires_at {
            return true;
        }
        let judged_by_pid = self.locality == Locality::default() || self.locality == *here;
        judged_by_pid && !alive(self.process)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_namespace(boot: &str, namespace: &str) -> Locality {
        Locality {
            boot_id: boot.into(),
            pid_namespace: namespace.into(),
            hostname: "node".into(),
        }
    }

    #[test]
    fn the_pid_namespaces_of_one_boot_have_tags_of_their_own() {
        // The first namespace and the kernel's next ones, as containers get them.
        let mut namespaces = vec!["pid:[4026531836]".to_owned()];
        namespaces.extend((0..5000u64).map(|n| format!("pid:[{}]", 0xF000_0000 + 4000 + n)));
        let tags: std::collections::HashSet<u64> = namespaces
            .iter()
            .map(|ns| in_namespace("b1", ns).tag())
            .collect();
        assert_eq!(tags.len(), namespaces.len());
        assert!(tags.iter().all(|&t| t < 1 << ProcessId::TAG_BITS));
        // Another boot's namespace of the same number is another process table.
        let ns = "pid:[4026532612]";
        assert_ne!(in_namespace("b1", ns).tag(), in_namespace("b2", ns).tag());
        // The host name is not part of it; an unreadable namespace still gets a tag.
        let renamed = Locality {
            hostname: "other".into(),
            ..in_namespace("b1", ns)
        };
        assert_eq!(renamed.tag(), in_namespace("b1", ns).tag());
        assert_ne!(in_namespace("b1", "").tag(), in_namespace("b1", "x").tag());
    }

    #[test]
    fn a_hosts_identity_names_its_process_whatever_its_tag() {
        let os = ProcessId {
            pid: 1,
            start_time: 663_037,
        };
        let host = os.as_host_in(&in_namespace("b1", "pid:[4026532612]"));
        assert!(host.start_time < 1 << 63, "fits a PostgreSQL bigint");
        assert!(host.names(1, 663_037));
        assert!(!host.names(1, 663_036) && !host.names(2, 663_037));
        // A start time past 2^36 ticks wraps, in the identity and in the comparison alike.
        let late = 663_037 + (1 << ProcessId::START_BITS);
        assert!(host.names(1, late));
    }
}
