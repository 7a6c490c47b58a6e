//! Rules of admission, written once for every backend: pure functions of what a transaction
//! read, tested on their own.
//!
//! Capacity is per machine (SPEC §5, §11): a unit counts on the machine of its host, known by
//! the host's locality (boot id, pid namespace, host name: one process table). Units with no
//! host, or whose host record is gone, count together as one "machine" of their own, so a
//! ledger used by hand (tests, benchmarks) behaves as before.

use std::collections::HashMap;

use crate::model::{Channel, Delegation, Host, Locality, ProcessId, UnitStatus};
use crate::units::Capacity;

/// The machines of a ledger's hosts.
pub(crate) struct Machines<'h> {
    by_process: HashMap<ProcessId, &'h Locality>,
}

impl<'h> Machines<'h> {
    /// The machines of `hosts`.
    pub(crate) fn of(hosts: &'h [Host]) -> Machines<'h> {
        Machines {
            by_process: hosts.iter().map(|h| (h.process, &h.locality)).collect(),
        }
    }

    /// The machine a unit's host runs on (`None`: no host, or its record is gone).
    pub(crate) fn of_unit(&self, unit: &Delegation) -> Option<&'h Locality> {
        self.of_host(unit.host)
    }

    /// The machine of a host.
    pub(crate) fn of_host(&self, host: Option<ProcessId>) -> Option<&'h Locality> {
        host.and_then(|p| self.by_process.get(&p).copied())
    }
}

/// What a background dispatch may do on its machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    /// A slot is free and nothing of this machine waits before it: run now.
    Run,
    /// Queue behind the machine's `ahead` waiting units.
    Queue {
        /// Units of this machine already waiting.
        ahead: u32,
    },
    /// The machine's queue is full.
    Full,
}

/// Running background units (the ones capacity counts) on `machine`.
pub(crate) fn running_on(
    active: &[Delegation],
    machines: &Machines<'_>,
    machine: Option<&Locality>,
) -> u32 {
    active
        .iter()
        .filter(|u| u.channel == Channel::Background && u.status == UnitStatus::Running)
        .filter(|u| machines.of_unit(u) == machine)
        .count() as u32
}

/// Queued units on `machine`, oldest first.
pub(crate) fn queued_on<'a>(
    active: &'a [Delegation],
    machines: &Machines<'_>,
    machine: Option<&Locality>,
) -> Vec<&'a Delegation> {
    let mut queued: Vec<&Delegation> = active
        .iter()
        .filter(|u| u.status == UnitStatus::Queued && machines.of_unit(u) == machine)
        .collect();
    queued.sort_by_key(|u| (u.queue_seq, u.dispatched_at));
    queued
}

/// Admission of a new background unit on `machine`: FIFO per machine, `max_running` slots and
/// `max_queued` places per machine.
pub(crate) fn admit(
    active: &[Delegation],
    machines: &Machines<'_>,
    machine: Option<&Locality>,
    capacity: Capacity,
) -> Admit {
    let waiting = queued_on(active, machines, machine).len();
    if waiting == 0 && running_on(active, machines, machine) < capacity.max_running {
        Admit::Run
    } else if waiting >= capacity.max_queued as usize {
        Admit::Full
    } else {
        Admit::Queue {
            ahead: waiting as u32,
        }
    }
}

/// The queued unit `host` may start now: the oldest waiting on its machine, if it is the
/// host's own and the machine has a free slot.
pub(crate) fn startable<'a>(
    active: &'a [Delegation],
    machines: &Machines<'_>,
    host: ProcessId,
    capacity: Capacity,
) -> Option<&'a Delegation> {
    let machine = machines.of_host(Some(host));
    let next = *queued_on(active, machines, machine).first()?;
    (next.host == Some(host) && running_on(active, machines, machine) < capacity.max_running)
        .then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        DelegationId, DispatchSpec, HostId, HostKind, SessionId, TaskSpec, Timestamp,
    };

    fn host(pid: u32, machine: &str) -> Host {
        Host {
            process: ProcessId { pid, start_time: 1 },
            kind: HostKind::Headless,
            session: None,
            registered_at: Timestamp(0),
            heartbeat_at: Timestamp(0),
            host_id: HostId(u128::from(pid)),
            locality: Locality {
                boot_id: machine.into(),
                pid_namespace: "pid:[1]".into(),
                hostname: machine.into(),
            },
            lease_expires_at: Timestamp(u64::MAX),
        }
    }

    fn unit(n: u64, pid: u32, status: UnitStatus, seq: Option<u64>) -> Delegation {
        Delegation {
            id: DelegationId::from_bits(n),
            session: Some(SessionId::new("s").expect("id")),
            channel: Channel::Background,
            status,
            dispatched_at: Timestamp(n),
            started_at: None,
            ended_at: None,
            host: Some(ProcessId { pid, start_time: 1 }),
            queue_seq: seq,
            interrupt: None,
            transcript_dir: None,
            spec: DispatchSpec::new("g", vec![TaskSpec::new("t", vec!["true".into()])]),
        }
    }

    const TWO: Capacity = Capacity {
        max_running: 2,
        max_queued: 1,
    };

    #[test]
    fn each_machine_has_its_own_slots_and_queue() {
        let hosts = [host(1, "a"), host(2, "b")];
        let machines = Machines::of(&hosts);
        let a = machines.of_host(Some(hosts[0].process));
        let b = machines.of_host(Some(hosts[1].process));
        let active = vec![
            unit(1, 1, UnitStatus::Running, None),
            unit(2, 1, UnitStatus::Running, None),
        ];
        assert_eq!(admit(&active, &machines, a, TWO), Admit::Queue { ahead: 0 });
        assert_eq!(
            admit(&active, &machines, b, TWO),
            Admit::Run,
            "b's slots are free"
        );
        let mut active = active;
        active.push(unit(3, 1, UnitStatus::Queued, Some(0)));
        assert_eq!(admit(&active, &machines, a, TWO), Admit::Full);
        assert_eq!(
            admit(&active, &machines, b, TWO),
            Admit::Run,
            "a's queue is not b's"
        );
    }

    #[test]
    fn a_host_starts_only_the_oldest_unit_waiting_on_its_machine() {
        let hosts = [host(1, "a"), host(2, "a"), host(3, "b")];
        let machines = Machines::of(&hosts);
        let active = vec![
            unit(1, 1, UnitStatus::Running, None),
            unit(2, 1, UnitStatus::Running, None),
            unit(3, 2, UnitStatus::Queued, Some(5)),
            unit(4, 1, UnitStatus::Queued, Some(6)),
            unit(5, 3, UnitStatus::Queued, Some(4)),
        ];
        let host1 = hosts[0].process;
        assert_eq!(
            startable(&active, &machines, host1, TWO),
            None,
            "machine a is full"
        );
        let mut active = active;
        active[0].status = UnitStatus::Completed;
        assert_eq!(
            startable(&active, &machines, host1, TWO),
            None,
            "host 2's unit waits before host 1's"
        );
        let started = startable(&active, &machines, hosts[1].process, TWO).map(|u| u.id.clone());
        assert_eq!(started, Some(DelegationId::from_bits(3)));
        let b = startable(&active, &machines, hosts[2].process, TWO).map(|u| u.id.clone());
        assert_eq!(
            b,
            Some(DelegationId::from_bits(5)),
            "b's own queue, b's own slots"
        );
    }

    #[test]
    fn units_without_a_live_host_record_count_together() {
        let hosts = [host(1, "a")];
        let machines = Machines::of(&hosts);
        let mut orphan = unit(1, 9, UnitStatus::Running, None);
        orphan.host = None;
        let active = vec![orphan, unit(2, 9, UnitStatus::Running, None)];
        assert_eq!(running_on(&active, &machines, None), 2);
        assert_eq!(
            running_on(&active, &machines, machines.of_host(Some(hosts[0].process))),
            0
        );
    }
}
