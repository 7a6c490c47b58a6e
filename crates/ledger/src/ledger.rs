//! Opening the ledger file, and the transaction plumbing every operation uses.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use redb::{ConcurrencyMode, Database, DatabaseError, ReadableDatabase, StorageError};

use crate::codec::FORMAT_VERSION;
use crate::error::{LedgerError, Result, StorageFault};
use crate::model::{ClaimToken, DelegationId};
use crate::store::{Counters, Reader, Writer, storage};
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
struct CatchingPanics;

impl CatchingPanics {
    fn enter() -> CatchingPanics {
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
pub struct Ledger {
    pub(crate) db: Database,
    pub(crate) path: PathBuf,
    pub(crate) config: LedgerConfig,
    rng: Mutex<fastrand::Rng>,
    /// When this process last ran the recovery sweep.
    pub(crate) last_sweep: Mutex<Option<crate::model::Timestamp>>,
    /// Every write fails while set (`fault-injection` only).
    #[cfg(feature = "fault-injection")]
    fail_writes: std::sync::atomic::AtomicBool,
    counters: Counters,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("path", &self.path)
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
            catch_unwind(AssertUnwindSafe(|| {
                let mut builder = Database::builder();
                builder.set_concurrency_mode(ConcurrencyMode::MultiWriter);
                builder.create(path)
            }))
        };
        let db = match opened {
            Err(payload) => {
                return Err(LedgerError::EnginePanic {
                    path: path.to_owned(),
                    what: panic_message(payload.as_ref()),
                });
            }
            Ok(Err(DatabaseError::Storage(StorageError::Corrupted(reason)))) => {
                return Err(damaged(reason));
            }
            Ok(Err(DatabaseError::UpgradeRequired(version))) => {
                return Err(LedgerError::NewerFormat {
                    path: path.to_owned(),
                    found: u32::from(version),
                    supported: u32::from(FORMAT_VERSION),
                });
            }
            Ok(Err(DatabaseError::Storage(StorageError::Io(err)))) => {
                return Err(unavailable(err.to_string()));
            }
            Ok(Err(err)) => return Err(damaged(err.to_string())),
            Ok(Ok(db)) => db,
        };
        let rng = match tokens {
            TokenSource::Random => fastrand::Rng::new(),
            TokenSource::Seeded(seed) => fastrand::Rng::with_seed(seed),
        };
        let ledger = Ledger {
            db,
            path: path.to_owned(),
            config,
            rng: Mutex::new(rng),
            last_sweep: Mutex::new(None),
            #[cfg(feature = "fault-injection")]
            fail_writes: std::sync::atomic::AtomicBool::new(false),
            counters: Counters::default(),
        };
        ledger.check_format()?;
        Ok(ledger)
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

    fn check_format(&self) -> Result<()> {
        let stored = match self.read(|r| r.meta(META_FORMAT_VERSION)) {
            Ok(stored) => stored,
            // A fresh file has no tables yet.
            Err(LedgerError::Storage(StorageFault::MissingTable(_))) => None,
            Err(err) => return Err(err),
        };
        match stored {
            Some(found) if found > u64::from(FORMAT_VERSION) => Err(LedgerError::NewerFormat {
                path: self.path.clone(),
                found: u32::try_from(found).unwrap_or(u32::MAX),
                supported: u32::from(FORMAT_VERSION),
            }),
            Some(_) => Ok(()),
            None => self.write(|w| {
                w.create_tables()?;
                if w.meta(META_FORMAT_VERSION)?.is_none() {
                    w.set_meta(META_FORMAT_VERSION, u64::from(FORMAT_VERSION))?;
                }
                Ok(())
            }),
        }
    }

    /// Runs `f` in a read transaction.
    pub(crate) fn read<T>(&self, f: impl FnOnce(&Reader<'_>) -> Result<T>) -> Result<T> {
        let txn = self.guard(|| self.db.begin_read().map_err(storage))?;
        let reader = Reader {
            txn,
            path: &self.path,
            counters: &self.counters,
        };
        self.guard(|| f(&reader))
    }

    /// Runs `f` in a write transaction and commits it if `f` succeeds.
    pub(crate) fn write<T>(&self, f: impl FnOnce(&Writer<'_>) -> Result<T>) -> Result<T> {
        self.write_then(|w| f(w).map(|value| (value, true)))
    }

    /// Runs `f` in a write transaction; commits when `f` returns `(value, true)`, aborts when it
    /// returns `(value, false)`.
    pub(crate) fn write_then<T>(
        &self,
        f: impl FnOnce(&Writer<'_>) -> Result<(T, bool)>,
    ) -> Result<T> {
        #[cfg(feature = "fault-injection")]
        if self.fail_writes.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(LedgerError::Unavailable {
                path: self.path.clone(),
                reason: "injected write failure".into(),
            });
        }
        self.guard(|| {
            let txn = self.db.begin_write().map_err(storage)?;
            let writer = Writer {
                txn,
                path: &self.path,
                counters: &self.counters,
            };
            let (value, commit) = f(&writer)?;
            if commit {
                writer.commit()?;
            }
            Ok(value)
        })
    }

    /// Names the file in storage errors, and turns a panic inside redb into an error.
    fn guard<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
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
