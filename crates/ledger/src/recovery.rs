//! The recovery sweep every long-lived hermes process runs every `host.recovery_interval_seconds`
//! and every short-lived one at start: units of dead hosts are settled, stale pending events
//! dropped, old terminal units purged (in batches, each its own short transaction). A sweep that
//! finds nothing to do writes nothing.
//!
//! A host is dead when its lease ran out, or — judged only from its own locality — when its
//! process is gone. A dead host's running units end `unknown` (children that never
//! started: `cancelled`), after its surviving children are killed where that is provably safe
//! (the [`Reaper`] decides, from the same locality only); its queued units are never cancelled
//! for its death: they go to the session's live host, or wait for the next one. A pool unit a
//! dead worker took but never started goes back to its pool. A child whose host saw it finish
//! but could not record its outcome before it fenced or died is recorded with that outcome,
//! when its host kept it on this machine, not as `unknown`.

use std::collections::HashMap;

use crate::error::Result;
use crate::ledger::Ledger;
use crate::model::{
    Changes, Channel, Child, ChildOutcome, ChildStatus, DelegationId, HostRecord, Locality,
    ProcessId, SessionId, Timestamp, UnitRecord, UnitStatus, Workspace,
};
use crate::store::SweepCutoffs;
use crate::txn::assign::set_host;
use crate::txn::finalize::{force_finish, unknown_outcome};
use crate::txn::liveness::{Liveness, is_live, unrecorded_is_alive};
use crate::txn::pool::{return_to_pool, returns_to_pool};

/// Lines of transcript kept for a child whose outcome is unknown.
pub const TAIL_LINES: usize = 20;
/// Characters of transcript kept for a child whose outcome is unknown.
pub const TAIL_CHARS: usize = 2_000;
/// What recovery needs from the operating system of the caller's locality: the registry's
/// `OsReaper` in production, fakes in tests. The ledger itself never touches a process.
pub trait Reaper: Liveness {
    /// Kills what is provably child `child` of dead host's unit `unit`: called only for running
    /// children of hosts in the caller's own locality, also for one whose process was never
    /// recorded (`child.process` is `None`: then only what carries its marker).
    fn kill_child(&self, unit: &DelegationId, child: &Child);
    /// The last lines of a transcript of this machine, if it can be read here.
    fn transcript_tail(&self, path: &str) -> Option<String>;
    /// The outcome the dead host kept on this machine for its child `child` of `unit` because
    /// it could not record it before it fenced or died, if there is one: recovery
    /// records it, with its result and tails, instead of `unknown`.
    fn unrecorded_outcome(&self, unit: &DelegationId, child: &Child) -> Option<ChildOutcome> {
        let _ = (unit, child);
        None
    }
    /// For a unit whose children work in their own worktrees: commits what child `child` left
    /// in its worktree on its branch, removes the worktree and says what it changed. Called
    /// only from the dead host's locality, after its process was killed.
    fn workspace_changes(&self, unit: &UnitRecord, child: &Child) -> Option<Changes> {
        let _ = (unit, child);
        None
    }
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
    /// Whether the sweep ran (a process sweeps at most once per `recovery_interval_ms`).
    pub ran: bool,
    /// Running units of dead hosts finalized.
    pub finalized: Vec<DelegationId>,
    /// Queued units of dead hosts handed to their session's live host (or left for the next).
    pub adopted: Vec<DelegationId>,
    /// Children of dead hosts killed.
    pub killed_children: usize,
    /// Pending events dropped as `replay_expired`.
    pub expired_events: usize,
    /// Terminal units purged.
    pub purged_units: usize,
    /// Host records of dead hosts removed.
    pub dead_hosts: usize,
    /// Pool units a dead worker had taken but not started, back in their pool.
    pub returned_to_pool: Vec<DelegationId>,
    /// Sessions left with queued units and no host: their host, of this locality, is gone
    /// (its process too, so it will not rejoin) and no other host of theirs lives. The ledger
    /// starts no process; the sweeping process of this machine starts each a host.
    pub hostless: Vec<SessionId>,
}

/// What a process remembers of its recovery sweeps.
#[derive(Debug, Default)]
pub(crate) struct Sweeps {
    /// When it last ran one.
    at: Option<Timestamp>,
    /// What its last sweep that found no dead host read, while nothing was committed since.
    quiet: Option<QuietSweep>,
}

/// The hosts a sweep judged alive, as of a change stamp. While the ledger's stamp stays the
/// same, the same records and units would be read again: only time (a lease running out) and
/// the processes (one exiting) can make one of them dead, and that is judged without a read.
#[derive(Debug)]
struct QuietSweep {
    stamp: u64,
    /// Every host record.
    hosts: Vec<HostRecord>,
    /// The processes units name as their host without a record, judged by pid.
    unrecorded: Vec<ProcessId>,
    /// Before when neither the replay limit nor retention can have anything to do (its oldest
    /// open event and unit are younger): until then, a sweep while the stamp stands still
    /// looks at nothing.
    until: Timestamp,
    /// The sweeps since the last that read the hosts: after [`QUIET_RECHECK`] of them, one
    /// reads everything again whatever the stamp says.
    skipped: u32,
}

/// After how many sweeps that read no host while the stamp stood still the next reads them
/// all again. A stamp heard from notifications ([`Ledger::recover_as_of`]) misses what
/// notifies nobody, such as a host that registers and dies with no unit.
const QUIET_RECHECK: u32 = 10;

/// The change stamp a sweep read as of, and until when nothing it looked at ages enough for
/// the replay limit or retention ([`QuietSweep::until`]).
#[derive(Clone, Copy)]
struct AsOf {
    stamp: Option<u64>,
    until: Timestamp,
}

/// What a sweep reads, by what the last ones found ([`Ledger::recover_as_of`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// Everything: hosts, units, and what the replay limit and retention act on.
    All,
    /// Only what the replay limit and retention act on: the hosts are as a quiet sweep found.
    Aged,
    /// Nothing: nothing was committed, every host lives, and nothing has aged enough.
    Nothing,
}

impl QuietSweep {
    fn all_alive(&self, here: &Locality, now: Timestamp, reaper: &dyn Reaper) -> bool {
        !self
            .hosts
            .iter()
            .any(|h| h.is_dead(here, now, &|p| reaper.is_alive(p)))
            && self
                .unrecorded
                .iter()
                .all(|p| unrecorded_is_alive(*p, reaper))
    }
}

/// What recovery did with a dead host's running unit.
enum Orphan {
    /// It ended (`unknown`, or `cancelled` children).
    Finalized,
    /// A pool unit never started: back in its pool.
    ReturnedToPool,
    /// Someone else settled it first.
    Untouched,
}

/// Whether a queued unit waits for a host of its session: a background unit of no pool (a
/// pool's units wait for its workers; an inline unit has no session).
fn needs_host(unit: &UnitRecord) -> bool {
    unit.channel == Channel::Background && unit.spec.pool.is_none()
}

/// What recovery found on this machine of a dead host's running unit, outside any
/// transaction: the tails of its children's transcripts, and the outcomes its host kept because
/// it could not record them.
#[derive(Debug, Default)]
struct Found {
    tails: Vec<(u32, Option<String>)>,
    left: Vec<ChildOutcome>,
    changes: Vec<(u32, Box<Changes>)>,
}

/// When [`Ledger::recover`] sweeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sweep {
    /// Unless this process swept within `recovery_interval_ms` (what periodic callers ask).
    IfDue,
    /// Now, whenever the last one was (a resume, a test, an operator's command).
    Now,
}

impl Ledger {
    /// Runs the recovery sweep, unless `when` is [`Sweep::IfDue`] and this process ran one
    /// within `recovery_interval_ms`. It reads first and writes only what it changes.
    pub fn recover(
        &self,
        reaper: &dyn Reaper,
        now: Timestamp,
        when: Sweep,
    ) -> Result<RecoveryReport> {
        self.recover_as_of(reaper, now, when, self.change_stamp())
    }

    /// [`Ledger::recover`] as of the change stamp `stamp`, for a caller that has one where
    /// the ledger has none: a PostgreSQL host counts the notifications its listener heard.
    /// While the stamp stands still since a sweep that found every host alive, and nothing
    /// has aged past the replay limit or retention, a sweep reads nothing; every
    /// [`QUIET_RECHECK`]th reads everything regardless.
    pub fn recover_as_of(
        &self,
        reaper: &dyn Reaper,
        now: Timestamp,
        when: Sweep,
        stamp: Option<u64>,
    ) -> Result<RecoveryReport> {
        {
            let mut sweeps = hermes_stdx::lock(&self.sweeps);
            let due = when == Sweep::Now
                || sweeps.at.is_none_or(|last: Timestamp| {
                    now.ms_since(last) >= self.config.recovery_interval_ms || last > now
                });
            if !due {
                return Ok(RecoveryReport::default());
            }
            sweeps.at = Some(now);
        }
        let mut report = RecoveryReport {
            ran: true,
            ..RecoveryReport::default()
        };
        let reading = match when {
            Sweep::Now => Reading::All,
            Sweep::IfDue => self.reading(stamp, now, reaper),
        };
        if reading == Reading::Nothing {
            return Ok(report);
        }
        let cutoffs = SweepCutoffs {
            hosts: reading == Reading::All,
            replay: now.minus_ms(self.config.replay_max_age_ms),
            now,
        };
        // One look decides which steps have work; only those read on and write. The steps
        // before a later one change nothing it looks for (what they end or publish is new).
        let look = self.read_one(|r| r.sweep_look(cutoffs))?;
        let retention = now.minus_ms(self.config.retention_ms);
        let aged =
            |at: Option<Timestamp>, age: u64| at.map_or(Timestamp(u64::MAX), |t| t.plus_ms(age));
        let until = aged(look.oldest_open_event, self.config.replay_max_age_ms)
            .min(aged(look.oldest_unit, self.config.retention_ms));
        match look.hosts {
            Some((hosts, units)) => {
                let as_of = AsOf { stamp, until };
                self.settle_dead_hosts(hosts, units, as_of, reaper, now, &mut report)?;
            }
            None => {
                if let Some(quiet) = &mut hermes_stdx::lock(&self.sweeps).quiet {
                    quiet.until = until;
                }
            }
        }
        if look.replay_expired {
            report.expired_events = self.expire_events(now)?;
        }
        if look.oldest_unit.is_some_and(|at| at < retention) {
            self.purge_old_units(now, &mut report.purged_units)?;
        }
        Ok(report)
    }

    /// What a due sweep reads as of `stamp`: nothing while the stamp stands still since a
    /// sweep that found every host alive, they all still are and nothing has aged enough; the
    /// aged steps' look once something may have; everything when the stamp moved, a host
    /// died, or [`QUIET_RECHECK`] sweeps read no host.
    fn reading(&self, stamp: Option<u64>, now: Timestamp, reaper: &dyn Reaper) -> Reading {
        if !self.still_quiet(stamp, &reaper.locality(), now, reaper) {
            return Reading::All;
        }
        let mut sweeps = hermes_stdx::lock(&self.sweeps);
        let Some(quiet) = &mut sweeps.quiet else {
            return Reading::All;
        };
        if quiet.skipped >= QUIET_RECHECK {
            return Reading::All;
        }
        quiet.skipped += 1;
        if now < quiet.until {
            Reading::Nothing
        } else {
            Reading::Aged
        }
    }

    /// Settles the units of dead hosts among `hosts` and `units` (read as of `as_of`) and
    /// forgets the hosts.
    fn settle_dead_hosts(
        &self,
        hosts: Vec<HostRecord>,
        units: Vec<UnitRecord>,
        as_of: AsOf,
        reaper: &dyn Reaper,
        now: Timestamp,
        report: &mut RecoveryReport,
    ) -> Result<()> {
        let here = reaper.locality();
        let records: HashMap<ProcessId, HostRecord> =
            hosts.into_iter().map(|h| (h.process, h)).collect();
        // Each recorded host is judged once; a unit naming a host with no record (one still
        // registering, or a format-1 leftover) is judged by pid, from its own locality only.
        let dead_hosts: Vec<&HostRecord> = records
            .values()
            .filter(|h| h.is_dead(&here, now, &|p| reaper.is_alive(p)))
            .collect();
        let dead = |process: ProcessId| match records.get(&process) {
            Some(_) => dead_hosts.iter().any(|h| h.process == process),
            None => !unrecorded_is_alive(process, reaper),
        };
        let found_dead = !dead_hosts.is_empty() || units.iter().any(|u| u.host.is_some_and(dead));
        self.remember_quiet(as_of, &records, &units, found_dead);
        for unit in units {
            let Some(host) = unit.host.filter(|h| dead(*h)) else {
                continue;
            };
            let local = records.get(&host).map_or_else(
                || here.judges(host),
                |h| h.locality == here || h.locality == Locality::default(),
            );
            if unit.status == UnitStatus::Queued {
                self.adopt_orphan(unit, host, local, reaper, now, report)?;
            } else {
                self.settle_orphan(unit, host, local, reaper, now, report)?;
            }
        }
        // Forget the dead hosts (re-judged inside the write: a host that renewed meanwhile is
        // alive after all).
        if !dead_hosts.is_empty() {
            report.dead_hosts = self.forget_dead_hosts(&dead_hosts, reaper, now)?;
        }
        Ok(())
    }

    /// Whether the last sweep found every host alive as of `stamp`, and they all still are.
    fn still_quiet(
        &self,
        stamp: Option<u64>,
        here: &Locality,
        now: Timestamp,
        reaper: &dyn Reaper,
    ) -> bool {
        stamp.is_some_and(|stamp| {
            hermes_stdx::lock(&self.sweeps)
                .quiet
                .as_ref()
                .is_some_and(|q| q.stamp == stamp && q.all_alive(here, now, reaper))
        })
    }

    /// Remembers what this sweep read as of `stamp` when it found no dead host, so the next
    /// one can skip the read while nothing is committed; forgets it otherwise.
    fn remember_quiet(
        &self,
        AsOf { stamp, until }: AsOf,
        records: &HashMap<ProcessId, HostRecord>,
        units: &[UnitRecord],
        found_dead: bool,
    ) {
        let quiet = stamp.map(|stamp| QuietSweep {
            stamp,
            until,
            skipped: 0,
            hosts: records.values().cloned().collect(),
            unrecorded: units
                .iter()
                .filter_map(|u| u.host)
                .filter(|p| !records.contains_key(p))
                .collect(),
        });
        hermes_stdx::lock(&self.sweeps).quiet = quiet.filter(|_| !found_dead);
    }

    /// Hands a dead host's queued unit over ([`Ledger::hand_over`]); a session left with no
    /// host, whose host of this locality is gone with its process, is reported `hostless`.
    fn adopt_orphan(
        &self,
        unit: UnitRecord,
        host: ProcessId,
        local: bool,
        reaper: &dyn Reaper,
        now: Timestamp,
        report: &mut RecoveryReport,
    ) -> Result<()> {
        if let Some(heir) = self.hand_over(&unit.id, host, reaper, now)? {
            // A host that fenced but still runs rejoins by itself; one of another machine is
            // that machine's to replace, where the unit's files are.
            if heir.is_none()
                && local
                && !reaper.is_alive(host)
                && let Some(session) = unit.session.as_ref().filter(|_| needs_host(&unit))
                && !report.hostless.contains(session)
            {
                report.hostless.push(session.clone());
            }
            report.adopted.push(unit.id);
        }
        Ok(())
    }

    /// Settles a dead host's running unit: its surviving children killed first, outside any
    /// transaction, and only what is provably the dead host's (same locality; the reaper
    /// checks pid + start time or the child's marker); then finalized, or put back in its
    /// pool ([`Ledger::finalize_orphan`], which re-checks everything).
    fn settle_orphan(
        &self,
        unit: UnitRecord,
        host: ProcessId,
        local: bool,
        reaper: &dyn Reaper,
        now: Timestamp,
        report: &mut RecoveryReport,
    ) -> Result<()> {
        let children = self.children(&unit.id)?;
        let mut found = Found::default();
        for child in children.iter().filter(|c| !c.status.is_terminal()) {
            if local {
                // With or without a recorded pid: a running child's marker finds it.
                if child.status == ChildStatus::Running {
                    reaper.kill_child(&unit.id, child);
                    report.killed_children += 1;
                    found
                        .left
                        .extend(reaper.unrecorded_outcome(&unit.id, child));
                }
                if unit.spec.workspace == Workspace::Worktree
                    && let Some(changes) = reaper.workspace_changes(&unit, child)
                {
                    found.changes.push((child.index, Box::new(changes)));
                }
                let tail = child
                    .transcript
                    .as_deref()
                    .and_then(|p| reaper.transcript_tail(p));
                found.tails.push((child.index, tail));
            }
        }
        match self.finalize_orphan(&unit.id, host, found, now)? {
            Orphan::Finalized => report.finalized.push(unit.id),
            Orphan::ReturnedToPool => report.returned_to_pool.push(unit.id),
            Orphan::Untouched => {}
        }
        Ok(())
    }

    /// Removes the records of the hosts judged dead that are still dead inside the write (a
    /// host that renewed meanwhile is alive after all), letting go of their sessions; returns
    /// how many it removed.
    fn forget_dead_hosts(
        &self,
        dead_hosts: &[&HostRecord],
        liveness: &dyn Liveness,
        now: Timestamp,
    ) -> Result<usize> {
        self.write_then(|w| {
            let mut removed = 0;
            for host in dead_hosts {
                let current = w.host(host.process)?;
                if current.as_ref().map(|h| h.host_id) != Some(host.host_id)
                    || is_live(current, host.process, liveness, now)
                {
                    continue;
                }
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
            Ok((removed, removed > 0))
        })
    }

    /// Gives a dead host's queued unit to its session's live host (or to none, for the next
    /// host of the session to adopt), and wakes the hosts. Never cancels it. Returns the heir
    /// (`Some(None)`: handed to no host), `None` if the unit was not the dead host's any more.
    fn hand_over(
        &self,
        id: &DelegationId,
        dead: ProcessId,
        liveness: &dyn Liveness,
        now: Timestamp,
    ) -> Result<Option<Option<ProcessId>>> {
        self.write_then(|w| {
            let Some(mut unit) = w.delegation(id.as_str())? else {
                return Ok((None, false));
            };
            if unit.status != UnitStatus::Queued || unit.host != Some(dead) {
                return Ok((None, false));
            }
            let heir = match &unit.session {
                Some(session) => w
                    .session(session)?
                    .and_then(|s| s.host)
                    .filter(|h| *h != dead)
                    .filter(|h| is_live(w.host(*h).ok().flatten(), *h, liveness, now)),
                None => None,
            };
            set_host(w, &mut unit, heir)?;
            w.bump_activity()?;
            Ok((Some(heir), true))
        })
    }

    /// Finalizes a dead host's running unit: every child with no event ends `unknown` (never
    /// started: `cancelled`) in one `terminal` event, with the tail read here or, failing that,
    /// the one its host stored — unless its host left the outcome it could not record on this
    /// machine, which is recorded as it was. Wakes the hosts, since a slot came free. A pool
    /// unit the dead worker took but never started a child of goes back to its pool instead.
    fn finalize_orphan(
        &self,
        id: &DelegationId,
        dead: ProcessId,
        found: Found,
        now: Timestamp,
    ) -> Result<Orphan> {
        let Found {
            tails,
            left,
            changes,
        } = found;
        let changes_of = |index: u32| {
            changes
                .iter()
                .find(|(i, _)| *i == index)
                .map(|(_, c)| c.clone())
        };
        self.write_then(|w| {
            let Some(unit) = w.delegation(id.as_str())? else {
                return Ok((Orphan::Untouched, false));
            };
            if unit.status.is_terminal() || unit.host != Some(dead) {
                return Ok((Orphan::Untouched, false));
            }
            let children = w.children(id)?;
            if returns_to_pool(&unit, &children) {
                return_to_pool(w, unit)?;
                return Ok((Orphan::ReturnedToPool, true));
            }
            let mut missing = Vec::new();
            for child in children {
                if child.status.is_terminal() {
                    continue;
                }
                if let Some(kept) = left
                    .iter()
                    .find(|o| o.index == child.index && o.status.is_terminal())
                {
                    tracing::info!(delegation = %id, index = child.index, status = kept.status.as_str(), "recorded the outcome a dead host could not");
                    let mut kept = kept.clone();
                    kept.changes = kept.changes.or_else(|| changes_of(child.index));
                    missing.push(kept);
                    continue;
                }
                let mut outcome = unknown_outcome(&unit, &child, "owner_died", now);
                outcome.changes = changes_of(child.index);
                let read_here = tails
                    .iter()
                    .find(|(i, _)| *i == child.index)
                    .and_then(|(_, t)| t.clone());
                outcome.transcript_tail = match read_here {
                    Some(tail) => Some(tail),
                    None => w.child_tail(id, child.index)?.map(|t| tail_of(&t)),
                };
                missing.push(outcome);
            }
            force_finish(w, unit, missing, "owner_died", now)?;
            w.bump_activity()?;
            Ok((Orphan::Finalized, true))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    use crate::PURGE_BATCH;

    use crate::model::{Capacity, ChildStatus, HostId};
    use crate::testing::bulk::{self, History, Live};
    use crate::{LedgerConfig, NewDelegation};

    const T0: Timestamp = Timestamp(1_700_000_000_000);
    /// History units, one ended every 10 ms from `T0`.
    const UNITS: usize = 700;

    struct NoProcesses;

    impl Liveness for NoProcesses {
        fn locality(&self) -> crate::model::Locality {
            crate::model::Locality::default()
        }
        fn is_alive(&self, _: ProcessId) -> bool {
            false
        }
    }

    impl Reaper for NoProcesses {
        fn kill_child(&self, _: &DelegationId, _: &Child) {}
        fn transcript_tail(&self, _: &str) -> Option<String> {
            None
        }
    }

    /// Every unit the ledger keeps.
    fn kept(ledger: &Ledger) -> HashSet<DelegationId> {
        ledger
            .read(|r| r.units_before(Timestamp(i64::MAX as u64), None, usize::MAX))
            .expect("ids")
            .into_iter()
            .filter_map(|(_, id)| id.parse().ok())
            .collect()
    }

    /// A unit of one `true` task dispatched at `at`; finished at `ended`, or left running.
    fn unit_at(ledger: &Ledger, at: Timestamp, ended: Option<Timestamp>) -> DelegationId {
        let new = NewDelegation {
            channel: Channel::Inline,
            session: None,
            ..crate::testing::background_unit(
                SessionId::new("s").expect("id"),
                crate::testing::spec(1),
            )
        };
        let capacity = Capacity {
            max_running: 100,
            max_queued: 100,
        };
        let id = ledger
            .dispatch(new, capacity, at)
            .expect("dispatch")
            .delegation
            .id;
        let child = ProcessId {
            pid: 9,
            start_time: 1,
        };
        ledger
            .child_started(HostId(0), &id, 0, child, at)
            .expect("started");
        if let Some(ended) = ended {
            let outcome = ChildOutcome::new(0, "task 0", ChildStatus::Completed, ended);
            ledger
                .finish_child(HostId(0), &id, outcome, ended)
                .expect("finished");
        }
        id
    }

    #[test]
    fn the_purge_goes_in_batches_removes_every_expired_unit_keeps_the_rest_and_resumes() {
        let dir = tempfile::tempdir().expect("dir");
        let (location, url) = crate::testing::TestBackend::from_env().fresh(dir.path());
        // No time for the purge: every sweep removes one batch and leaves the rest.
        let config = LedgerConfig {
            retention_ms: 5_000,
            purge_budget_ms: 0,
            ..LedgerConfig::default()
        };
        let ledger = Ledger::open_at(&location, config).expect("ledger");
        let history = History {
            units: UNITS,
            first_end: T0,
            step_ms: 10,
        };
        let live = Live {
            queued: 0,
            running: 0,
            ready: 0,
        };
        bulk::load(&ledger, url.as_deref(), &history, &live).expect("loaded");
        // Dispatched long before the cutoff, but still running, or ended after it.
        let running = unit_at(&ledger, T0, None);
        let late = unit_at(&ledger, T0, Some(T0.plus_ms(7_500)));
        let now = T0.plus_ms(8_000);
        let cutoff = now.minus_ms(5_000);
        // History units 0..300 ended before the cutoff.
        let expired: HashSet<DelegationId> = (0..300).map(bulk::history_id).collect();
        let before = kept(&ledger);
        assert_eq!(before.len(), UNITS + 2);

        // One batch removes its share and no more: a sweep cut short there loses nothing.
        let mut report = RecoveryReport::default();
        let last = ledger
            .purge_batch(cutoff, None, 100, &mut report.purged_units)
            .expect("a batch");
        assert_eq!(report.purged_units, 100);
        assert!(last.is_some(), "more may follow a full batch");
        let after_one = kept(&ledger);
        assert_eq!(before.difference(&after_one).count(), 100);
        assert!(before.difference(&after_one).all(|id| expired.contains(id)));

        // Each sweep goes on from there with one batch (its budget spent), to the end: a
        // short-lived command that sweeps pays for one batch, not for the backlog.
        let mut sweeps = Vec::new();
        loop {
            let report = ledger
                .recover(&NoProcesses, now, Sweep::Now)
                .expect("a sweep");
            if report.purged_units == 0 {
                break;
            }
            sweeps.push(report.purged_units);
            assert!(sweeps.len() <= 200, "the purge never ends: {sweeps:?}");
        }
        assert_eq!(sweeps.iter().sum::<usize>(), 200, "{sweeps:?}");
        assert!(sweeps.len() > 1, "one sweep purged everything: {sweeps:?}");
        assert!(sweeps.iter().all(|&n| n <= PURGE_BATCH), "{sweeps:?}");
        let after = kept(&ledger);
        assert!(after.is_disjoint(&expired), "every expired unit is gone");
        assert_eq!(after.len(), UNITS - 300 + 2);
        assert!(after.contains(&running) && after.contains(&late));
        let first_kept = bulk::history_id(300);
        assert!(!ledger.events(&first_kept).expect("events").is_empty());
        assert!(!ledger.children(&first_kept).expect("children").is_empty());
        let gone = bulk::history_id(0);
        assert!(ledger.events(&gone).expect("events").is_empty());
        assert!(ledger.children(&gone).expect("children").is_empty());

        // Nothing left to purge: the next sweep reads and writes nothing.
        let commits = ledger.commits();
        let report = ledger
            .recover(&NoProcesses, now, Sweep::Now)
            .expect("a sweep");
        assert_eq!(report.purged_units, 0);
        assert_eq!(ledger.commits(), commits);
    }

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
