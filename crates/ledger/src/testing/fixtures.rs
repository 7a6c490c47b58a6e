//! The values the workspace's tests build ledgers from: a dispatch of `true` children, a
//! recorded running unit, a background unit of a session.

use crate::NewDelegation;
use crate::model::{
    Channel, DelegationId, DispatchSpec, SessionId, TaskSpec, Timestamp, UnitRecord, UnitStatus,
};

/// A dispatch of `tasks` children that each run `true`, their goals `task 0`, `task 1`, ….
pub fn spec(tasks: u32) -> DispatchSpec {
    let tasks = (0..tasks)
        .map(|i| TaskSpec::new(format!("task {i}"), vec!["true".into()]))
        .collect();
    DispatchSpec::new("goal", tasks)
}

/// A recorded unit `id` that runs `spec`, dispatched and running since `at`: background, of no
/// session and no host (set what a test needs with `..`).
pub fn running_unit(id: DelegationId, spec: DispatchSpec, at: Timestamp) -> UnitRecord {
    UnitRecord {
        id,
        session: None,
        channel: Channel::Background,
        spec,
        status: UnitStatus::Running,
        dispatched_at: at,
        started_at: None,
        ended_at: None,
        host: None,
        queue_seq: None,
        interrupt: None,
        transcript_dir: None,
    }
}

/// A background unit of `session` that runs `spec`, named by no process yet.
pub fn background_unit(session: SessionId, spec: DispatchSpec) -> NewDelegation {
    NewDelegation {
        id: None,
        session: Some(session),
        channel: Channel::Background,
        spec,
        host: None,
        transcript_root: None,
    }
}
