//! The state a host shares between its tasks, and the one way they reach the ledger (on a
//! blocking thread, and never once the host is fenced).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use hermes_ledger::{DelegationId, HostId, HostKind, Ledger, ProcessId, Progress, SessionId};
use tokio::sync::{Notify, watch};

use crate::child::{Context, LiveChild};
use crate::config::{Config, millis};
use crate::error::RegistryError;
use crate::unit::{UnitProgress, UnitReport};
use hermes_stdx::Clock;

use super::HostOptions;

#[derive(Debug)]
pub(crate) struct UnitEntry {
    pub(crate) session: Option<SessionId>,
    pub(crate) interrupt: watch::Sender<Option<String>>,
    pub(crate) progress: watch::Receiver<UnitProgress>,
    pub(crate) done: watch::Receiver<Option<Arc<UnitReport>>>,
    pub(crate) children: Vec<Arc<LiveChild>>,
    pub(crate) persisted: Vec<Persisted>,
}

/// What the ledger holds of a running child's progress, as this host last wrote it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Persisted {
    /// Its token.
    pub(crate) progress: Option<Progress>,
    /// The output bytes its stored transcript tail covers, and when that tail was written.
    pub(crate) tail: Option<(u64, hermes_ledger::Timestamp)>,
}

#[derive(Debug, Default)]
pub(crate) struct Units {
    pub(crate) running: HashMap<DelegationId, UnitEntry>,
    pub(crate) launched: HashSet<DelegationId>,
    pub(crate) reports: HashMap<DelegationId, Arc<UnitReport>>,
    pub(crate) order: VecDeque<DelegationId>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) ledger: Arc<Ledger>,
    pub(crate) ctx: Context,
    pub(crate) me: ProcessId,
    pub(crate) host_id: HostId,
    /// Set once the host fenced itself: it writes nothing more.
    pub(crate) fenced: AtomicBool,
    /// When the last lease renewal that got through was asked for (its registration at first),
    /// in milliseconds: the self-fencing clock reads it (`lease::fence_on_time`).
    pub(crate) renewed_at: AtomicU64,
    /// Whether a worker takes units from its pool (cleared by [`Host::stop_taking`]).
    pub(crate) taking: AtomicBool,
    pub(crate) options: HostOptions,
    pub(crate) units: Mutex<Units>,
    pub(crate) launch_gate: tokio::sync::Mutex<()>,
    pub(crate) wake: Notify,
    /// Told by every child of this host whose progress token moves (`progress::flush_progress`
    /// waits on it).
    pub(crate) progress_changed: Arc<Notify>,
    /// Whether the last pass saw a queued unit ([`hermes_ledger::HostPass::queued`]), and whether a
    /// pass is reading: a unit that finishes wakes the loop to start queued work only if either
    /// holds (a unit queued after the pass's read sends an activity notice of its own).
    pub(crate) queue_seen: AtomicBool,
    pub(crate) in_pass: AtomicBool,
    pub(crate) stop: watch::Sender<bool>,
    /// Cuts short the grace period of the children being stopped ([`super::Host::hurry`]).
    pub(crate) hurry: watch::Sender<bool>,
    pub(crate) launches: watch::Sender<u64>,
    /// Set for a host that runs one inline unit and leaves with it
    /// ([`super::Host::start_dispatching`]): the finish that ends the unit also removes the
    /// host's record ([`hermes_ledger::FinishAs::leaving`]).
    pub(crate) leaves_with_unit: AtomicBool,
    /// Set once the host left that way: it renews nothing more.
    pub(crate) left: AtomicBool,
    /// Held by a lease renewal, and by a finish that may leave, so that no renewal runs
    /// after the host left (its record gone, it would read as a lost lease and fence).
    pub(crate) renewal_gate: tokio::sync::Mutex<()>,
    /// Whether this host's listener hears the ledger's notifications (PostgreSQL), and how
    /// many it heard (with its start and every reconnect): together the stand-in for the
    /// change stamp a ledger without one lacks ([`Inner::state_stamp`]).
    pub(crate) listening: AtomicBool,
    pub(crate) heard: AtomicU64,
}

impl Inner {
    /// The state of a host about to start, and the record it registers with (a fresh fencing
    /// epoch, this process, its locality and a lease from now).
    pub(super) fn prepare(
        ledger: Arc<Ledger>,
        mut config: Config,
        clock: Arc<dyn Clock>,
        options: HostOptions,
    ) -> (Arc<Inner>, hermes_ledger::HostRecord) {
        if let Some(worker) = &options.worker {
            // A worker's capacity is its own: it bounds its units and their batches.
            config.delegation.max_concurrent_children = worker.capacity.max(1);
        }
        let me = crate::procs::current_host();
        let now = clock.now();
        let host_id = ledger.next_host_id();
        let record = hermes_ledger::HostRecord {
            process: me,
            kind: options.kind,
            session: options.session.clone(),
            registered_at: now,
            heartbeat_at: now,
            host_id,
            locality: crate::procs::current_locality(),
            lease_expires_at: now.plus_ms(millis(config.host.lease)),
            worker: options.worker.clone(),
        };
        let (hurry, hurried) = watch::channel(false);
        let inner = Arc::new(Inner {
            ledger,
            ctx: Context {
                config: Arc::new(config),
                clock,
                hurry: hurried,
            },
            me,
            host_id,
            fenced: AtomicBool::new(false),
            renewed_at: AtomicU64::new(now.0),
            taking: AtomicBool::new(true),
            options,
            units: Mutex::new(Units::default()),
            launch_gate: tokio::sync::Mutex::new(()),
            wake: Notify::new(),
            progress_changed: Arc::new(Notify::new()),
            queue_seen: AtomicBool::new(true),
            in_pass: AtomicBool::new(false),
            stop: watch::channel(false).0,
            hurry,
            launches: watch::channel(0).0,
            leaves_with_unit: AtomicBool::new(false),
            left: AtomicBool::new(false),
            renewal_gate: tokio::sync::Mutex::new(()),
            listening: AtomicBool::new(false),
            heard: AtomicU64::new(0),
        });
        (inner, record)
    }

    /// Whether this host is a worker (bound to no session).
    pub(crate) fn is_worker(&self) -> bool {
        self.options.kind == HostKind::Worker
    }

    /// The host left with its unit's last finish: its loops end, and it writes nothing more
    /// of its own (its record is gone).
    pub(super) fn has_left(&self) {
        self.left.store(true, Ordering::SeqCst);
        self.stop.send_replace(true);
    }

    /// What a clean pass over interrupts and pick-up stays current against while it stands
    /// still: the ledger's change stamp where it has one (redb: every commit moves it), else,
    /// while this host listens, the count of notices its listener heard (every write a pass
    /// depends on notifies: a dispatch, an interrupt, a pool's change, recovery, an event made
    /// deliverable; a lost connection counts as heard). `None`: nothing vouches, so poll.
    pub(crate) fn state_stamp(&self) -> Option<u64> {
        self.ledger.change_stamp().or_else(|| {
            self.listening
                .load(Ordering::SeqCst)
                .then(|| self.heard.load(Ordering::SeqCst))
        })
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Units> {
        self.units
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs a ledger operation on the blocking pool (each is one short transaction).
    pub(super) async fn call<T, F>(&self, f: F) -> Result<T, RegistryError>
    where
        T: Send + 'static,
        F: FnOnce(&Ledger) -> hermes_ledger::Result<T> + Send + 'static,
    {
        self.call_raw(move |l| f(l).map_err(RegistryError::from))
            .await
    }

    pub(super) async fn call_raw<T, F>(&self, f: F) -> Result<T, RegistryError>
    where
        T: Send + 'static,
        F: FnOnce(&Ledger) -> Result<T, RegistryError> + Send + 'static,
    {
        if self.fenced.load(Ordering::SeqCst) {
            return Err(RegistryError::Fenced(self.host_id));
        }
        let ledger = self.ledger.clone();
        tokio::task::spawn_blocking(move || f(&ledger))
            .await
            .map_err(|e| RegistryError::Worker(e.to_string()))?
    }
}
