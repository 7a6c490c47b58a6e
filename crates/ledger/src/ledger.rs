//! Opening the ledger file, and the transaction plumbing every operation uses.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use redb::{
    Builder, ConcurrencyMode, Database, DatabaseError, ReadOnlyDatabase, ReadableDatabase,
    StorageError,
};

use crate::backend::CountingBackend;
use crate::group::GroupCommit;

use crate::codec::FORMAT_VERSION;
use crate::error::{LedgerError, Result, StorageFault};
use crate::model::{ClaimToken, DelegationId};
use crate::store::pg::{Pg, PgTarget};
use crate::store::redb::{Read as RedbRead, Write as RedbWrite};
use crate::store::{Counters, ReadTx, Reader, WriteTx, Writer, storage};
use crate::tables::META_FORMAT_VERSION;

/// Tunables of the delivery state machine and of recovery, built from [`settings::Settings`]
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
}

impl LedgerConfig {
    /// The ledger's part of `settings`.
    pub fn from_settings(settings: &settings::Settings) -> LedgerConfig {
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        LedgerConfig {
            max_attempts: settings.delivery.max_attempts,
            replay_max_age_ms: ms(settings.delivery.replay_max_age),
            retention_ms: ms(settings.delivery.retention),
            recovery_interval_ms: ms(settings.host.recovery_interval),
        }
    }
}

impl Default for LedgerConfig {
    /// The defaults of SPEC §9.
    fn default() -> Self {
        LedgerConfig::from_settings(&settings::Settings::default())
    }
}

thread_local! {
    /// How many ledger calls on this thread are inside `catch_unwind` right now.
    static CATCHING: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Marks this thread as inside a ledger call whose panics are caught and reported as
/// [`LedgerError::EnginePanic`].
pub(crate) struct CatchingPanics;

impl CatchingPanics {
    pub(crate) fn enter() -> CatchingPanics {
        CATCHING.with(|c| c.set(c.get() + 1));
        CatchingPanics
    }
}

impl Drop for CatchingPanics {
    fn drop(&mut self) {
        CATCHING.with(|c| c.set(c.get().saturating_sub(1)));
    }
}

/// Whether a panic on this thread now will be caught by the ledger and returned as an error
/// (for a panic hook that should then stay quiet).
pub fn panic_is_caught() -> bool {
    CATCHING.with(|c| c.get() > 0)
}

/// A panic's message, on one line.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned());
    text.split_whitespace().collect::<Vec<_>>().join(" ")
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

/// An open ledger file. `Send + Sync`; every method is one short transaction.
///
/// The file is first opened read-only: a process that only reads (`delegation list`, a `drain`
/// with nothing ready) never opens it for writing, which costs redb two to three `fdatasync`s
/// to open and close even when nothing is written. The writable handle is opened on the first
/// write and kept. Writes issued concurrently by several threads share one durable commit
/// (`write_grouped`, see `group.rs`).
pub struct Ledger {
    /// The PostgreSQL backend, when the ledger lives there (the redb handles are then unused).
    pub(crate) pg: Option<Pg>,
    /// The writable handle, once something was written.
    writer: OnceLock<Database>,
    /// The read-only handle the ledger was opened with, if the file existed and was readable.
    reader: Option<ReadOnlyDatabase>,
    /// Serializes opening the writable handle.
    opening: Mutex<()>,
    pub(crate) path: PathBuf,
    pub(crate) config: LedgerConfig,
    pub(crate) group: GroupCommit,
    /// Durable commits made through this handle.
    pub(crate) commits: AtomicU64,
    rng: Mutex<fastrand::Rng>,
    /// When this process last ran the recovery sweep.
    pub(crate) last_sweep: Mutex<Option<crate::model::Timestamp>>,
    /// Every write fails while set (`fault-injection` only).
    #[cfg(feature = "fault-injection")]
    fail_writes: std::sync::atomic::AtomicBool,
    pub(crate) counters: Counters,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("path", &self.path)
            .field("writable", &self.writer.get().is_some())
            .finish_non_exhaustive()
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        // redb may panic closing a damaged file; dropping a ledger must never crash.
        let writer = self.writer.take();
        let reader = self.reader.take();
        let _inside = CatchingPanics::enter();
        let _ = catch_unwind(AssertUnwindSafe(move || drop((writer, reader))));
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
        let mut ledger = Ledger::unopened(path, config, tokens);
        // Look first through a read-only handle: it costs no sync. Anything it cannot settle (a
        // missing or empty file, one that needs a repair after a crash, one without tables yet)
        // is left to the writable open below, which reports errors as it always has.
        if !path.exists() {
            create_file(path, &ledger.config)?;
        }
        let existing = std::fs::metadata(path).is_ok_and(|m| m.len() > 0);
        if existing && let Ok(reader) = open_read_only(path) {
            ledger.reader = Some(reader);
            match ledger.stored_format() {
                Ok(Some(found)) => {
                    ledger.check_version(found)?;
                    return Ok(ledger);
                }
                Err(err @ (LedgerError::NewerFormat { .. } | LedgerError::Damaged { .. })) => {
                    return Err(err);
                }
                Ok(None) | Err(_) => ledger.reader = None,
            }
        }
        let db = open_writable(path)?;
        ledger.install_writer(db);
        ledger.check_format()?;
        Ok(ledger)
    }

    /// Connects to a PostgreSQL ledger, creating or migrating its schema on first use.
    ///
    /// An unreachable server is [`LedgerError::Unavailable`] naming host and port (never the
    /// password); a schema written by a newer hermes is [`LedgerError::NewerFormat`].
    pub fn connect(target: &PgTarget, config: LedgerConfig, tokens: TokenSource) -> Result<Ledger> {
        let pg = Pg::connect(target.clone())?;
        let mut ledger = Ledger::unopened(pg.path(), config, tokens);
        ledger.pg = Some(pg);
        Ok(ledger)
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

    /// Creates or migrates the schema now (`hermes ledger migrate`); returns the schema version
    /// in force afterwards. A redb file has nothing to migrate: its format version.
    pub fn migrate(&self) -> Result<u32> {
        match &self.pg {
            Some(pg) => Ok(u32::try_from(pg.migrate_now()?).unwrap_or(0)),
            None => Ok(u32::from(FORMAT_VERSION)),
        }
    }

    /// A connection that waits for this ledger's notifications (`activity`: hosts' work;
    /// `events`: deliverable events), on a backend that sends them (PostgreSQL); `None` on
    /// redb, whose waiters poll the activity counter and the events instead.
    pub fn listen(&self, activity: bool, events: bool) -> Result<Option<crate::Listener>> {
        self.pg
            .as_ref()
            .map(|pg| pg.listen(activity, events))
            .transpose()
    }

    /// Whether this ledger lives in PostgreSQL.
    pub fn is_shared(&self) -> bool {
        self.pg.is_some()
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
        let ledger = Ledger::unopened(path, config, tokens);
        let db = map_open(path, || builder().create_with_backend(backend))?;
        ledger.install_writer(db);
        ledger.check_format()?;
        Ok(ledger)
    }

    fn unopened(path: &Path, config: LedgerConfig, tokens: TokenSource) -> Ledger {
        let rng = match tokens {
            TokenSource::Random => fastrand::Rng::new(),
            TokenSource::Seeded(seed) => fastrand::Rng::with_seed(seed),
        };
        Ledger {
            pg: None,
            writer: OnceLock::new(),
            reader: None,
            opening: Mutex::new(()),
            path: path.to_owned(),
            config,
            group: GroupCommit::default(),
            last_sweep: Mutex::new(None),
            commits: AtomicU64::new(0),
            rng: Mutex::new(rng),
            #[cfg(feature = "fault-injection")]
            fail_writes: std::sync::atomic::AtomicBool::new(false),
            counters: Counters::default(),
        }
    }

    fn install_writer(&self, db: Database) {
        // Only `open_with`, `open_backend` and `writable` (under `opening`) install it.
        let _ = self.writer.set(db);
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The configuration in force.
    pub fn config(&self) -> &LedgerConfig {
        &self.config
    }

    /// How many child and unit rows this handle has decoded so far: the rows whose number can
    /// grow with a batch's size. For tests and benchmarks that check what an operation reads.
    pub fn rows_read(&self) -> u64 {
        self.counters
            .rows
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Durable commits this handle has made (a group commit counts once).
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Whether this handle has opened the file for writing (it does so on its first write; a
    /// PostgreSQL ledger is always writable).
    pub fn is_writable(&self) -> bool {
        self.pg.is_some() || self.writer.get().is_some()
    }

    /// The writable handle, opened on first use.
    pub(crate) fn writable(&self) -> Result<&Database> {
        if let Some(db) = self.writer.get() {
            return Ok(db);
        }
        let _opening = self
            .opening
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(db) = self.writer.get() {
            return Ok(db);
        }
        let db = open_writable(&self.path)?;
        self.install_writer(db);
        self.writer
            .get()
            .ok_or_else(|| LedgerError::Invalid("the writable ledger handle was lost".into()))
    }

    /// The format version the file records; `None` if it has no tables yet.
    fn stored_format(&self) -> Result<Option<u64>> {
        match self.read(|r| r.meta(META_FORMAT_VERSION)) {
            Ok(stored) => Ok(stored),
            // A fresh file has no tables yet.
            Err(LedgerError::Storage(StorageFault::MissingTable(_))) => Ok(None),
            Err(err) => Err(err),
        }
    }

    fn check_version(&self, found: u64) -> Result<()> {
        if found > u64::from(FORMAT_VERSION) {
            return Err(LedgerError::NewerFormat {
                path: self.path.clone(),
                found: u32::try_from(found).unwrap_or(u32::MAX),
                supported: u32::from(FORMAT_VERSION),
            });
        }
        Ok(())
    }

    /// Checks the format, creating the tables of a fresh file (the only write: a file that has
    /// them commits nothing here).
    fn check_format(&self) -> Result<()> {
        match self.stored_format()? {
            Some(found) => self.check_version(found),
            None => {
                let db = self.writable()?;
                self.guard(|| {
                    let w = RedbWrite::new(
                        db.begin_write().map_err(storage)?,
                        &self.path,
                        &self.counters,
                    );
                    w.create_tables()?;
                    if w.meta(META_FORMAT_VERSION)?.is_none() {
                        w.set_meta(META_FORMAT_VERSION, u64::from(FORMAT_VERSION))?;
                    }
                    Writer(Box::new(w)).commit()?;
                    self.commits.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                })
            }
        }
    }

    /// Runs `f` in a read transaction (on redb, on the writable handle if there is one). `f`
    /// may run more than once on PostgreSQL (after a dropped connection), so it must only read
    /// what it captured.
    pub(crate) fn read<T: Send>(
        &self,
        mut f: impl FnMut(&Reader<'_>) -> Result<T> + Send,
    ) -> Result<T> {
        if let Some(pg) = &self.pg {
            return pg.read(&self.counters, &mut f);
        }
        let txn = self.guard(|| match (self.writer.get(), &self.reader) {
            (Some(db), _) => db.begin_read().map_err(storage),
            (None, Some(db)) => db.begin_read().map_err(storage),
            (None, None) => Err(LedgerError::Invalid("the ledger has no open handle".into())),
        })?;
        let reader = Reader(Box::new(RedbRead {
            txn,
            path: &self.path,
            counters: &self.counters,
        }));
        self.guard(|| f(&reader))
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
        if let Some(pg) = &self.pg {
            let (value, committed) = pg.write(&self.counters, &mut f)?;
            if committed {
                self.commits.fetch_add(1, Ordering::Relaxed);
            }
            return Ok(value);
        }
        let db = self.writable()?;
        self.guard(|| {
            let writer = Writer(Box::new(RedbWrite::new(
                db.begin_write().map_err(storage)?,
                &self.path,
                &self.counters,
            )));
            let (value, commit) = f(&writer)?;
            if commit {
                writer.commit()?;
                self.commits.fetch_add(1, Ordering::Relaxed);
            }
            Ok(value)
        })
    }

    /// Names the file in storage errors, and turns a panic inside redb into an error.
    pub(crate) fn guard<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let caught = {
            let _inside = CatchingPanics::enter();
            catch_unwind(AssertUnwindSafe(f))
        };
        match caught {
            Ok(result) => result.map_err(|err| match err {
                LedgerError::Storage(StorageFault::Corrupted(reason)) => LedgerError::Damaged {
                    path: self.path.clone(),
                    reason,
                },
                LedgerError::Storage(StorageFault::Io(err)) => LedgerError::Unavailable {
                    path: self.path.clone(),
                    reason: err.to_string(),
                },
                other => other,
            }),
            Err(payload) => Err(LedgerError::EnginePanic {
                path: self.path.clone(),
                what: panic_message(payload.as_ref()),
            }),
        }
    }

    pub(crate) fn next_token(&self) -> ClaimToken {
        let mut rng = self
            .rng
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        ClaimToken(rng.u128(..))
    }

    /// The injected write failure, while one is asked for (`fault-injection` only).
    pub(crate) fn injected_failure(&self) -> Result<()> {
        #[cfg(feature = "fault-injection")]
        if self.fail_writes.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(LedgerError::Unavailable {
                path: self.path.clone(),
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

/// Creates a fresh ledger at `path` so that a power cut never leaves a half-made file there: it
/// is built under a temporary name beside it, made durable, then linked into place, never
/// replacing a file another process linked first. (A file system without hard links gets the
/// file created in place, as redb does.)
fn create_file(path: &Path, config: &LedgerConfig) -> Result<()> {
    let unavailable = |err: std::io::Error| LedgerError::Unavailable {
        path: path.to_owned(),
        reason: err.to_string(),
    };
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map_or_else(|| "ledger".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(
        ".{name}.{}.{:016x}.new",
        std::process::id(),
        fastrand::u64(..)
    ));
    let built = (|| {
        let fresh = Ledger::unopened(&tmp, config.clone(), TokenSource::Seeded(0));
        fresh.install_writer(open_writable(&tmp)?);
        fresh.check_format()
    })();
    // Linked now, or not at all: another process linked its file first (`AlreadyExists`), or
    // the file system has no hard links, and the plain open below creates the file in place.
    let linked = built.map(|()| std::fs::hard_link(&tmp, path).is_ok());
    let _ = std::fs::remove_file(&tmp);
    if linked? {
        // The new name must survive a power cut too.
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(unavailable)?;
    }
    Ok(())
}

fn builder() -> Builder {
    let mut builder = Database::builder();
    builder.set_concurrency_mode(ConcurrencyMode::MultiWriter);
    builder
}

/// Opens `path` writable (creating it), mapping redb's failures to the ledger's errors.
fn open_writable(path: &Path) -> Result<Database> {
    let backend = CountingBackend::file(path, true).map_err(|err| LedgerError::Unavailable {
        path: path.to_owned(),
        reason: err.to_string(),
    })?;
    map_open(path, || builder().create_with_backend(backend))
}

/// Opens an existing `path` read-only: no byte of the file is written, no sync issued.
fn open_read_only(path: &Path) -> Result<ReadOnlyDatabase> {
    let backend = CountingBackend::file(path, false).map_err(|err| LedgerError::Unavailable {
        path: path.to_owned(),
        reason: err.to_string(),
    })?;
    map_open(path, || builder().open_read_only_with_backend(backend))
}

/// Runs a redb open, turning its failures (and its panics on some malformed files) into errors.
fn map_open<D>(
    path: &Path,
    open: impl FnOnce() -> std::result::Result<D, DatabaseError>,
) -> Result<D> {
    let unavailable = |reason: String| LedgerError::Unavailable {
        path: path.to_owned(),
        reason,
    };
    let damaged = |reason: String| LedgerError::Damaged {
        path: path.to_owned(),
        reason,
    };
    // redb may panic on some malformed files: that must be an error, never a crash.
    let opened = {
        let _inside = CatchingPanics::enter();
        catch_unwind(AssertUnwindSafe(open))
    };
    match opened {
        Err(payload) => Err(LedgerError::EnginePanic {
            path: path.to_owned(),
            what: panic_message(payload.as_ref()),
        }),
        Ok(Err(DatabaseError::Storage(StorageError::Corrupted(reason)))) => Err(damaged(reason)),
        Ok(Err(DatabaseError::UpgradeRequired(version))) => Err(LedgerError::NewerFormat {
            path: path.to_owned(),
            found: u32::from(version),
            supported: u32::from(FORMAT_VERSION),
        }),
        Ok(Err(DatabaseError::Storage(StorageError::Io(err)))) => Err(unavailable(err.to_string())),
        Ok(Err(err)) => Err(damaged(err.to_string())),
        Ok(Ok(db)) => Ok(db),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_panic_is_an_error_that_does_not_call_the_file_damaged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger =
            Ledger::open(&dir.path().join("l.redb"), LedgerConfig::default()).expect("opens");
        assert!(!panic_is_caught());
        let err = ledger
            .guard(|| -> Result<()> {
                assert!(panic_is_caught());
                panic!("index out of bounds")
            })
            .expect_err("a panic is an error");
        assert!(!panic_is_caught(), "the marker is cleared after the call");
        assert!(
            matches!(&err, LedgerError::EnginePanic { what, .. } if what == "index out of bounds"),
            "{err}"
        );
        assert!(err.is_unavailable());
        assert!(!err.to_string().contains("move it aside"), "{err}");
    }

    #[test]
    fn storage_errors_are_classified_by_kind_not_by_text() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger =
            Ledger::open(&dir.path().join("l.redb"), LedgerConfig::default()).expect("opens");
        let damaged = ledger
            .guard(|| -> Result<()> {
                Err(crate::store::storage(redb::StorageError::Corrupted(
                    "x".into(),
                )))
            })
            .expect_err("damaged");
        assert!(matches!(damaged, LedgerError::Damaged { .. }), "{damaged}");
        let io = ledger
            .guard(|| -> Result<()> {
                Err(crate::store::storage(redb::StorageError::Io(
                    std::io::Error::from(std::io::ErrorKind::PermissionDenied),
                )))
            })
            .expect_err("io");
        assert!(matches!(io, LedgerError::Unavailable { .. }), "{io}");
        // Text that merely mentions corruption is not a damaged file.
        let other = ledger
            .guard(|| -> Result<()> {
                Err(crate::store::storage(redb::StorageError::ValueTooLarge(
                    1 << 40,
                )))
            })
            .expect_err("engine");
        assert!(
            matches!(other, LedgerError::Storage(StorageFault::Engine(_))),
            "{other}"
        );
    }
}
