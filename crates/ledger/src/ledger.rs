//! The `Ledger` façade: one concrete type over either backend, and the plumbing every
//! operation uses (read and write transactions, tokens, ids).

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Result;
use crate::group::GroupCommit;
use crate::model::{ClaimToken, DelegationId};
use crate::store::pg::PgTarget;
use crate::store::{Backend, Counters, Listen, Reader, Writer};

/// Tunables of the delivery state machine and of recovery, built from [`hermes_settings::Settings`]
/// (which holds every default and bound).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerConfig {
    /// Claims after which a released event is dropped (`delivery.max_attempts`).
    pub max_attempts: u32,
    /// Pending events older than this are dropped as `replay_expired`, in milliseconds.
    pub replay_max_age_ms: u64,
    /// Terminal units older than this are purged, in milliseconds.
    pub retention_ms: u64,
    /// Recovery runs at most this often, in milliseconds (`host.recovery_interval_seconds`).
    pub recovery_interval_ms: u64,
    /// The wall time one sweep spends on the retention purge before it leaves the rest to the
    /// next sweep, in milliseconds ([`crate::PURGE_BUDGET_MS`]): a short-lived
    /// command that happens to sweep never pays for a large backlog.
    pub purge_budget_ms: u64,
    /// The most units one read of a metrics census takes after its base's watermark
    /// ([`crate::FOLD_PAGE`]): the first census of a large ledger goes page by page.
    pub census_page: usize,
    /// The fewest changes (units passed by the watermark, open units settled) for which a
    /// census stores a new metrics base ([`crate::FOLD_MIN`]); fewer are read again instead.
    pub census_fold_min: usize,
}

impl LedgerConfig {
    /// The ledger's part of `settings`.
    pub fn from_settings(settings: &hermes_settings::Settings) -> LedgerConfig {
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        LedgerConfig {
            max_attempts: settings.delivery.max_attempts,
            replay_max_age_ms: ms(settings.delivery.replay_max_age),
            retention_ms: ms(settings.delivery.retention),
            recovery_interval_ms: ms(settings.host.recovery_interval),
            purge_budget_ms: crate::PURGE_BUDGET_MS,
            census_page: crate::FOLD_PAGE,
            census_fold_min: crate::FOLD_MIN,
        }
    }
}

impl Default for LedgerConfig {
    /// The default settings.
    fn default() -> Self {
        LedgerConfig::from_settings(&hermes_settings::Settings::default())
    }
}

/// Where claim tokens and delegation ids come from: the OS-seeded generator in production, a
/// seeded one in tests.
#[derive(Debug)]
pub enum TokenSource {
    /// Seeded from the operating system's entropy.
    Random,
    /// Deterministic from a seed.
    Seeded(u64),
}

/// An open ledger: a redb file or a PostgreSQL database. `Send + Sync`; every method is one
/// short transaction.
///
/// Writes issued concurrently by several threads share one durable commit (`write_grouped`,
/// see `group.rs`).
pub struct Ledger {
    pub(crate) backend: Backend,
    pub(crate) config: LedgerConfig,
    pub(crate) group: GroupCommit,
    /// Durable commits made through this handle.
    pub(crate) commits: AtomicU64,
    rng: Mutex<fastrand::Rng>,
    /// When this process last ran the recovery sweep, and what its last quiet one saw.
    pub(crate) sweeps: Mutex<crate::recovery::Sweeps>,
    /// The host record this process last renewed as it stands in the ledger (PostgreSQL): the
    /// next renewal of that host writes over it in one statement while it is still there
    /// unchanged (`Ledger::renew_host`).
    pub(crate) renewed: Mutex<Option<crate::model::HostRecord>>,
    /// Every write fails while set (`fault-injection` only).
    #[cfg(feature = "fault-injection")]
    fail_writes: std::sync::atomic::AtomicBool,
    pub(crate) counters: Counters,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("path", &self.path())
            .field("writable", &self.is_writable())
            .finish_non_exhaustive()
    }
}

impl Ledger {
    /// Opens (creating if needed) the ledger at `path` for shared use by many processes.
    ///
    /// A damaged file, or one written by a newer hermes, gives an error; it never panics.
    pub fn open(path: &Path, config: LedgerConfig) -> Result<Ledger> {
        Ledger::open_with(path, config, TokenSource::Random)
    }

    /// Opens the ledger with a given token source.
    pub fn open_with(path: &Path, config: LedgerConfig, tokens: TokenSource) -> Result<Ledger> {
        Ok(Ledger::over(Backend::open_file(path)?, config, tokens))
    }

    /// Connects to a PostgreSQL ledger, creating or migrating its schema on first use.
    ///
    /// An unreachable server is [`LedgerError::Unavailable`] naming host and port (never the
    /// password); a schema written by a newer hermes is [`LedgerError::NewerFormat`].
    pub fn connect(target: &PgTarget, config: LedgerConfig, tokens: TokenSource) -> Result<Ledger> {
        Ok(Ledger::over(Backend::connect(target)?, config, tokens))
    }

    /// Opens the ledger at `location`: a redb file or a PostgreSQL database.
    pub fn open_at(location: &crate::Location, config: LedgerConfig) -> Result<Ledger> {
        match location {
            crate::Location::File(path) => Ledger::open(path, config),
            crate::Location::Postgres(target) => {
                Ledger::connect(target, config, TokenSource::Random)
            }
        }
    }

    /// Looks at the ledger at `location` without creating, migrating or writing anything
    /// (`hermes ledger info`): the schema version a PostgreSQL database records or an existing
    /// redb file's format version; `None` where there is no ledger yet. Fails as opening
    /// would: an unreachable server (saying what it said), a damaged or newer file.
    pub fn probe(location: &crate::Location) -> Result<Option<u32>> {
        Backend::probe(location)
    }

    /// Proves the ledger takes writes, changing nothing (`hermes doctor`): one write
    /// transaction that bumps the activity counter and is rolled back (a redb file is opened
    /// writable for it; on PostgreSQL the grants and a read-only server are met as any write
    /// meets them).
    pub fn check_writable(&self) -> Result<()> {
        self.write_then(|w| {
            w.bump_activity()?;
            Ok(((), false))
        })
    }

    /// Creates or migrates the schema now (`hermes ledger migrate`); returns the schema version
    /// in force afterwards. A redb file has nothing to migrate: its format version.
    pub fn migrate(&self) -> Result<u32> {
        self.backend.migrate()
    }

    /// A connection that waits for this ledger's notifications of `what`, on a backend that
    /// sends them (PostgreSQL); `None` on redb, whose waiters poll the activity counter and the
    /// events instead.
    pub fn listen(&self, what: &[Listen]) -> Result<Option<crate::Listener>> {
        self.backend.listen(what)
    }

    /// Whether this ledger lives in PostgreSQL.
    pub fn is_shared(&self) -> bool {
        self.backend.is_shared()
    }

    /// A ledger over any redb storage backend, opened writable at once (the power-loss test's
    /// fault-injecting storage). `path` only names it in errors.
    #[cfg(test)]
    pub(crate) fn open_backend(
        backend: impl redb::StorageBackend,
        path: &Path,
        config: LedgerConfig,
        tokens: TokenSource,
    ) -> Result<Ledger> {
        let store = crate::store::redb::RedbStore::open_backend(backend, path)?;
        Ok(Ledger::over(Backend::Redb(store), config, tokens))
    }

    fn over(backend: Backend, config: LedgerConfig, tokens: TokenSource) -> Ledger {
        let rng = match tokens {
            TokenSource::Random => fastrand::Rng::new(),
            TokenSource::Seeded(seed) => fastrand::Rng::with_seed(seed),
        };
        Ledger {
            backend,
            config,
            group: GroupCommit::default(),
            sweeps: Mutex::default(),
            renewed: Mutex::default(),
            commits: AtomicU64::new(0),
            rng: Mutex::new(rng),
            #[cfg(feature = "fault-injection")]
            fail_writes: std::sync::atomic::AtomicBool::new(false),
            counters: Counters::default(),
        }
    }

    /// The file's path (a PostgreSQL ledger: its URL without the password).
    pub fn path(&self) -> &Path {
        self.backend.path()
    }

    /// The configuration in force.
    pub fn config(&self) -> &LedgerConfig {
        &self.config
    }

    /// How many child and unit rows this handle has decoded so far: the rows whose number can
    /// grow with a batch's size. For tests and benchmarks that check what an operation reads.
    #[cfg(any(test, feature = "testing"))]
    pub fn rows_read(&self) -> u64 {
        self.counters.rows.load(Ordering::Relaxed)
    }

    /// Durable commits this handle has made (a group commit counts once).
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// A value that changes whenever any process commits to the ledger, read without a
    /// transaction (on redb, one read of the file's header): equal stamps mean nothing was
    /// committed in between, so what a poll read last time still holds. `None` when the
    /// backend has no such check (PostgreSQL); then read.
    pub fn change_stamp(&self) -> Option<u64> {
        self.backend.stamp()
    }

    /// Whether this handle has opened the file for writing (it does so on its first write; a
    /// PostgreSQL ledger is always writable).
    pub fn is_writable(&self) -> bool {
        self.backend.is_writable()
    }

    /// Runs `f` in a read transaction. `f` may run more than once on PostgreSQL (after a
    /// dropped connection), so it must only read what it captured.
    pub(crate) fn read<T: Send>(
        &self,
        mut f: impl FnMut(&Reader<'_>) -> Result<T> + Send,
    ) -> Result<T> {
        self.backend.read(&self.counters, &mut f)
    }

    /// [`Ledger::read`] for a read that is most often one statement (a poll, a lookup): on
    /// PostgreSQL that statement runs without a transaction around it.
    pub(crate) fn read_one<T: Send>(
        &self,
        mut f: impl FnMut(&Reader<'_>) -> Result<T> + Send,
    ) -> Result<T> {
        self.backend.read_one(&self.counters, &mut f)
    }

    /// Runs `f` in a write transaction of its own and commits it if `f` succeeds.
    pub(crate) fn write<T: Send>(
        &self,
        mut f: impl FnMut(&Writer<'_>) -> Result<T> + Send,
    ) -> Result<T> {
        self.write_then(|w| f(w).map(|value| (value, true)))
    }

    /// Runs `f` in a write transaction of its own; commits when `f` returns `(value, true)`,
    /// aborts when it returns `(value, false)`. `f` may run more than once on PostgreSQL (after
    /// a serialization failure), so it must only read what it captured.
    pub(crate) fn write_then<T: Send>(
        &self,
        mut f: impl FnMut(&Writer<'_>) -> Result<(T, bool)> + Send,
    ) -> Result<T> {
        self.injected_failure()?;
        let (value, committed) = self.backend.write(&self.counters, &mut f)?;
        if committed {
            self.commits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(value)
    }

    pub(crate) fn next_token(&self) -> ClaimToken {
        let mut rng = self
            .rng
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        ClaimToken(rng.u128(..))
    }

    /// Runs one of the backend's one-statement transitions (`store::Transitions`): it fails
    /// as every write does while a failure is injected, and counts as one durable commit when
    /// `wrote` says its value changed something.
    pub(crate) fn at_once<T>(
        &self,
        f: impl FnOnce() -> Result<T>,
        wrote: impl FnOnce(&T) -> bool,
    ) -> Result<T> {
        self.injected_failure()?;
        let started = std::time::Instant::now();
        let value = f()?;
        if wrote(&value) {
            self.commits.fetch_add(1, Ordering::Relaxed);
            crate::observe::commit_took(started.elapsed());
        }
        Ok(value)
    }

    /// The injected write failure, while one is asked for (`fault-injection` only).
    pub(crate) fn injected_failure(&self) -> Result<()> {
        #[cfg(feature = "fault-injection")]
        if self.fail_writes.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(crate::error::LedgerError::Unavailable {
                path: self.path().to_owned(),
                reason: "injected write failure".into(),
            });
        }
        Ok(())
    }

    /// Makes every write transaction fail (as a disk that refuses writes would) while `fail`
    /// is set; reads still work. For tests of what hosts do when they cannot write.
    #[cfg(feature = "fault-injection")]
    pub fn fail_writes(&self, fail: bool) {
        self.fail_writes
            .store(fail, std::sync::atomic::Ordering::SeqCst);
    }

    /// A fresh host fencing epoch.
    pub fn next_host_id(&self) -> crate::model::HostId {
        let mut rng = self
            .rng
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        crate::model::HostId(rng.u128(1..))
    }

    pub(crate) fn next_delegation_id(&self) -> DelegationId {
        let mut rng = self
            .rng
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        DelegationId::from_bits(rng.u64(..))
    }
}
