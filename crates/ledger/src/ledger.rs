//! Opening the ledger file, and the transaction plumbing every operation uses.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use redb::{ConcurrencyMode, Database, DatabaseError, ReadableDatabase, StorageError};

use crate::codec::FORMAT_VERSION;
use crate::error::{LedgerError, Result};
use crate::model::{ClaimToken, DelegationId};
use crate::store::{Counters, Reader, Writer, storage};
use crate::tables::META_FORMAT_VERSION;

/// Tunables of the delivery state machine and of recovery (SPEC §9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerConfig {
    /// Claims after which a released event is dropped (`delivery.max_attempts`).
    pub max_attempts: u32,
    /// Pending events older than this are dropped as `replay_expired`, in milliseconds.
    pub replay_max_age_ms: u64,
    /// Terminal units older than this are purged, in milliseconds.
    pub retention_ms: u64,
    /// Recovery runs at most this often, in milliseconds.
    pub recovery_interval_ms: u64,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            max_attempts: 8,
            replay_max_age_ms: 48 * 3_600_000,
            retention_ms: 7 * 86_400_000,
            recovery_interval_ms: 3_000,
        }
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

/// An open ledger file. `Send + Sync`; every method is one short transaction.
pub struct Ledger {
    pub(crate) db: Database,
    pub(crate) path: PathBuf,
    pub(crate) config: LedgerConfig,
    rng: Mutex<fastrand::Rng>,
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
        // redb may panic on some malformed files; a damaged file must be an error, never a crash.
        let opened = catch_unwind(AssertUnwindSafe(|| {
            let mut builder = Database::builder();
            builder.set_concurrency_mode(ConcurrencyMode::MultiWriter);
            builder.create(path)
        }));
        let db = match opened {
            Err(_) => return Err(damaged("the file could not be parsed".into())),
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
            Err(LedgerError::Storage(_)) => None,
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

    /// Turns a panic inside redb (a damaged page) into an error.
    fn guard<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(result) => result.map_err(|err| match err {
                LedgerError::Storage(reason) if reason.contains("orrupt") => LedgerError::Damaged {
                    path: self.path.clone(),
                    reason,
                },
                other => other,
            }),
            Err(_) => Err(LedgerError::Damaged {
                path: self.path.clone(),
                reason: "a page could not be read".into(),
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

    pub(crate) fn next_delegation_id(&self) -> DelegationId {
        let mut rng = self
            .rng
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        DelegationId::from_bits(rng.u64(..))
    }
}
