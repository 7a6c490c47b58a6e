//! The question the ledger asks about processes ([`Liveness`]) and how a host is judged alive
//! with it: by its lease and, from its own locality, its pid.

use crate::model::{HostRecord, Locality, ProcessId, Timestamp};

/// What the ledger asks about processes: where the caller runs, and whether a process of the
/// caller's own locality still runs. The ledger itself knows nothing of `/proc` or signals;
/// the registry answers for the real operating system, tests with fakes.
pub trait Liveness: Sync {
    /// Where the caller runs.
    fn locality(&self) -> Locality;
    /// Whether `process` (pid and start time) runs in the caller's locality.
    fn is_alive(&self, process: ProcessId) -> bool;
}

/// Whether the host `process` (whose record is `record`) is alive. A process with no record
/// (one that claimed a session and is still registering) is judged by pid from its own
/// locality, and taken for alive from any other ([`unrecorded_is_alive`]).
pub(crate) fn is_live(
    record: Option<HostRecord>,
    process: ProcessId,
    liveness: &dyn Liveness,
    now: Timestamp,
) -> bool {
    match record {
        Some(host) => !host.is_dead(&liveness.locality(), now, &|p| liveness.is_alive(p)),
        None => unrecorded_is_alive(process, liveness),
    }
}

/// Whether a host with no record yet (still registering) is alive: judged by pid from its own
/// locality; from another, where its pid means nothing, nothing says it is dead.
pub(crate) fn unrecorded_is_alive(process: ProcessId, liveness: &dyn Liveness) -> bool {
    !liveness.locality().judges(process) || liveness.is_alive(process)
}
