//! Sessions and the hosts that run their children.

use crate::error::{LedgerError, Result};
use crate::ledger::Ledger;
use crate::model::{
    DelegationId, DropReason, HostId, HostRecord, ProcessId, Session, SessionId, SessionState,
    Timestamp,
};
use crate::rules;
use crate::txn::assign::adopt_in;
use crate::txn::hosts::{register_in, release_host};
use crate::txn::interrupt::{InterruptTarget, interrupt_in};
use crate::txn::liveness::{Liveness, is_live};
use crate::txn::sessions::{SESSION_END, ensure_active};

/// What ending a session did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionEnd {
    /// Running units asked to stop (their host interrupts them with reason `session_end`).
    pub interrupted: Vec<DelegationId>,
    /// Queued units cancelled outright.
    pub cancelled: Vec<DelegationId>,
    /// Pending or claimed events dropped as `session_ended`.
    pub dropped_events: usize,
    /// Whether the session was already ended.
    pub already_ended: bool,
    /// The session's host when it ended, if it had one with a record: it leaves once its
    /// interrupted units are finalized (a headless host notices, or is told by whoever ended the
    /// session when it runs in the same locality).
    pub host: Option<HostRecord>,
}

/// The result of asking to host a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostClaim {
    /// The caller now hosts the session.
    Acquired,
    /// The caller already hosted it.
    AlreadyHeld,
    /// Another live process hosts it.
    HeldBy(ProcessId),
}

impl Ledger {
    /// The session, creating it as active if the ledger has never seen it.
    ///
    /// Fails with `SessionEnded` if it has ended.
    pub fn ensure_session(&self, id: &SessionId, now: Timestamp) -> Result<Session> {
        // A session the ledger knows commits nothing (and needs no writable open).
        match self.session(id)? {
            Some(session) if session.state == SessionState::Ended => {
                Err(LedgerError::SessionEnded(id.clone()))
            }
            Some(session) => Ok(session),
            None => self.write(|w| ensure_active(w, id, now)),
        }
    }

    /// The session, if the ledger knows it.
    pub fn session(&self, id: &SessionId) -> Result<Option<Session>> {
        self.read_one(|r| r.session(id))
    }

    /// Ends a session: running units are asked to stop (`session_end`), queued ones cancelled,
    /// pending events dropped (`session_ended`), later dispatches refused.
    pub fn end_session(&self, id: &SessionId, now: Timestamp) -> Result<SessionEnd> {
        self.write(|w| {
            let mut session = w
                .session(id)?
                .ok_or_else(|| LedgerError::SessionNotFound(id.clone()))?;
            let host = match session.host {
                Some(process) => w.host(process)?,
                None => None,
            };
            let mut end = SessionEnd {
                already_ended: session.state == SessionState::Ended,
                host,
                ..SessionEnd::default()
            };
            session.state = SessionState::Ended;
            session.ended_at.get_or_insert(now);
            w.put_session(&session)?;
            for event_ref in w.open_events(Some(id))? {
                if let Some(mut event) = w.event(&event_ref)? {
                    if let Some(lease) = event.lease.take() {
                        w.remove_claim(lease.token)?;
                    }
                    rules::drop_event(&mut event, DropReason::SessionEnded, now);
                    w.put_event(&event)?;
                    end.dropped_events += 1;
                }
            }
            let stopped = interrupt_in(w, &InterruptTarget::Session(id.clone()), SESSION_END, now)?;
            end.interrupted = stopped.flagged;
            end.cancelled = stopped.cancelled;
            Ok(end)
        })
    }

    /// Reopens a session its agent ended, because the conversation came back under the same id
    /// (an agent's `--resume` after it exited): it takes new work again. What was dropped when
    /// it ended stays dropped and nothing delivered is offered again: only the session's state
    /// changes. An active session is left as it is (nothing written); an unknown one is created
    /// active. Returns whether it had ended.
    pub fn reopen_session(&self, id: &SessionId, now: Timestamp) -> Result<bool> {
        match self.session(id)? {
            Some(session) if session.state == SessionState::Active => return Ok(false),
            Some(_) => {}
            None => {
                self.write(|w| ensure_active(w, id, now))?;
                return Ok(false);
            }
        }
        self.write(|w| {
            let Some(mut session) = w.session(id)? else {
                ensure_active(w, id, now)?;
                return Ok(false);
            };
            if session.state == SessionState::Active {
                return Ok(false);
            }
            session.state = SessionState::Active;
            session.ended_at = None;
            w.put_session(&session)?;
            Ok(true)
        })
    }

    /// Records a host process (an interactive session, a headless host, a worker or an inline
    /// run).
    ///
    /// Host records are keyed by the host's identity: pid and start time with its locality's
    /// tag ([`ProcessId::as_host_in`]), so processes of two process tables sharing a pid and a
    /// start time (containers started together, each its own pid 1) are two hosts. Should two
    /// localities' tags ever coincide as well, a record of another locality is never
    /// overwritten while its lease runs or units are recorded as its: that would hand its units
    /// to this process. The caller then gets [`LedgerError::HostCollision`] and should start
    /// again (as a new process, with another pid or start time).
    pub fn register_host(&self, host: &HostRecord) -> Result<()> {
        self.write(|w| register_in(w, host))
    }

    /// Records the host of `session` as [`Ledger::register_host`] does and, in the same commit,
    /// hands it the session's queued units (not a pool's) that another host held: the session's
    /// host changed (`--resume`, a new headless host). Returns how many moved. One write: a
    /// host seen registered has its units, whatever happens to it next.
    pub fn register_session_host(&self, host: &HostRecord, session: &SessionId) -> Result<usize> {
        self.write(|w| {
            register_in(w, host)?;
            adopt_in(w, session, host.process)
        })
    }

    /// Renews a host's lease until `now + lease_ms`: one small write. Fails with
    /// `LeaseLost` if the host's record is gone or carries another epoch (someone judged it dead
    /// and recovered its units): the host must then stop its children and stop writing.
    ///
    /// On PostgreSQL a renewal after the first is one statement: it writes over the record this
    /// process last renewed, only while the ledger still holds exactly that record (which
    /// carries `host_id`, so the fence is the same); otherwise it renews in a transaction.
    pub fn renew_host(
        &self,
        process: ProcessId,
        host_id: HostId,
        lease_ms: u64,
        now: Timestamp,
    ) -> Result<Timestamp> {
        let renew = |mut host: HostRecord| {
            host.heartbeat_at = now;
            host.lease_expires_at = now.plus_ms(lease_ms);
            host
        };
        let in_txn = || {
            self.write(|w| {
                let host = w
                    .host(process)?
                    .filter(|h| h.host_id == host_id)
                    .ok_or(LedgerError::LeaseLost(host_id))?;
                let host = renew(host);
                w.put_host(&host)?;
                Ok(host)
            })
        };
        let Some(at_once) = self.backend.transitions() else {
            return in_txn().map(|host| host.lease_expires_at);
        };
        let held = hermes_stdx::lock(&self.renewed)
            .take()
            .filter(|h| h.process == process && h.host_id == host_id);
        if let Some(held) = held {
            let renewed = renew(held.clone());
            if self.at_once(|| at_once.renew_host(&held, &renewed), |wrote| *wrote)? {
                let expires = renewed.lease_expires_at;
                *hermes_stdx::lock(&self.renewed) = Some(renewed);
                return Ok(expires);
            }
        }
        let host = in_txn()?;
        let expires = host.lease_expires_at;
        *hermes_stdx::lock(&self.renewed) = Some(host);
        Ok(expires)
    }

    /// Forgets a host that is shutting down, and lets go of the session it hosted.
    pub fn unregister_host(&self, process: ProcessId) -> Result<()> {
        self.write(|w| release_host(w, process))
    }

    /// Retires a host that wants to exit: in one transaction, if no queued or running unit is
    /// assigned to it, it is unregistered and lets go of its session, and from then on nothing
    /// can be dispatched to it (`LedgerError::HostGone`). Returns `false`, changing nothing, if
    /// work is assigned to it: the host must stay and run it.
    pub fn retire_host(&self, process: ProcessId) -> Result<bool> {
        self.write_then(|w| {
            if w.active_units()?.iter().any(|u| u.host == Some(process)) {
                return Ok((false, false));
            }
            release_host(w, process)?;
            Ok((true, true))
        })
    }

    /// A host's record.
    pub fn host(&self, process: ProcessId) -> Result<Option<HostRecord>> {
        self.read_one(|r| r.host(process))
    }

    /// Whether the host `process` is alive, judged by its lease and, from its own locality, its
    /// pid (see [`HostRecord::is_dead`]).
    #[cfg(any(test, feature = "testing"))]
    pub fn host_is_live(
        &self,
        process: ProcessId,
        liveness: &dyn Liveness,
        now: Timestamp,
    ) -> Result<bool> {
        Ok(is_live(self.host(process)?, process, liveness, now))
    }

    /// The session and its host if that host is live (see [`Ledger::host_is_live`]): what
    /// `delegate` looks at before it dispatches. The host is `None` when the session is
    /// unknown, has none, or its host is dead.
    ///
    /// Two reads of one statement each, not one read transaction of two (on PostgreSQL, two
    /// statements instead of four): a host that left between them reads as dead, as it would
    /// a moment later, and what `delegate` then does is decided by writes that check again
    /// (a dispatch to a host gone fails with `HostGone`; `claim_session_host` finds the
    /// session's live host, if another took it).
    pub fn session_with_live_host(
        &self,
        id: &SessionId,
        liveness: &dyn Liveness,
        now: Timestamp,
    ) -> Result<(Option<Session>, Option<ProcessId>)> {
        let session = self.session(id)?;
        let record = match session.as_ref().and_then(|s| s.host) {
            Some(process) => self.host(process)?,
            None => None,
        };
        let live = session
            .as_ref()
            .and_then(|s| s.host)
            .filter(|&process| is_live(record, process, liveness, now));
        Ok((session, live))
    }

    /// Makes `process` the host of `session` unless another live process hosts it (at most one
    /// live host per session). `liveness` judges the recorded host (see [`HostRecord::is_dead`]).
    pub fn claim_session_host(
        &self,
        session: &SessionId,
        process: ProcessId,
        liveness: &dyn Liveness,
        now: Timestamp,
    ) -> Result<HostClaim> {
        self.write(|w| {
            let mut record = ensure_active(w, session, now)?;
            match record.host {
                Some(current) if current == process => Ok(HostClaim::AlreadyHeld),
                Some(current) if is_live(w.host(current)?, current, liveness, now) => {
                    Ok(HostClaim::HeldBy(current))
                }
                _ => {
                    record.host = Some(process);
                    w.put_session(&record)?;
                    Ok(HostClaim::Acquired)
                }
            }
        })
    }
}
