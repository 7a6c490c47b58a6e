//! A redb ledger file: opened read-only first, writable on the first write, created so that a
//! power cut never leaves a half-made file in its place.
//!
//! A process that only reads (`delegation list`, a `drain` with nothing ready) never opens the
//! file for writing, which costs redb two to three `fdatasync`s to open and close even when
//! nothing is written. The writable handle is opened on the first write and kept.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use redb::{Builder, ConcurrencyMode, Database, ReadOnlyDatabase, ReadableDatabase};

use super::counting::CountingBackend;
use super::guard::{CatchingPanics, guard, map_open, storage};
use super::tx::{Read, Write};
use crate::codec::FORMAT_VERSION;
use crate::error::{LedgerError, Result, StorageFault};
use crate::store::{Counters, META_FORMAT_VERSION, ReadTx, Reader, WriteTx, Writer};

/// The bytes of a redb file's header (its `DB_HEADER_SIZE`), where every commit lands.
const HEADER_BYTES: usize = 320;

/// An open redb ledger file.
pub(crate) struct RedbStore {
    path: PathBuf,
    /// The writable handle, once something was written.
    writer: OnceLock<Database>,
    /// The read-only handle the file was opened with, if it existed and was readable.
    reader: Option<ReadOnlyDatabase>,
    /// Serializes opening the writable handle.
    opening: Mutex<()>,
    /// The file, read by [`RedbStore::stamp`] (opened on first use).
    stamp_file: OnceLock<Option<std::fs::File>>,
}

impl Drop for RedbStore {
    fn drop(&mut self) {
        // redb may panic closing a damaged file; dropping a ledger must never crash.
        let writer = self.writer.take();
        let reader = self.reader.take();
        let _inside = CatchingPanics::enter();
        let _ = catch_unwind(AssertUnwindSafe(move || drop((writer, reader))));
    }
}

impl RedbStore {
    /// Opens (creating if needed) the file at `path` for shared use by many processes. A
    /// damaged file, or one written by a newer hermes, gives an error; it never panics.
    pub(crate) fn open(path: &Path) -> Result<RedbStore> {
        let mut store = RedbStore::unopened(path);
        // Look first through a read-only handle: it costs no sync. Anything it cannot settle (a
        // missing or empty file, one that needs a repair after a crash, one without tables yet)
        // is left to the writable open below, which reports errors as it always has.
        if !path.exists() {
            create_file(path)?;
        }
        let existing = std::fs::metadata(path).is_ok_and(|m| m.len() > 0);
        if existing && let Ok(reader) = open_read_only(path) {
            store.reader = Some(reader);
            match store.stored_format() {
                // An older file is migrated below, through the writable handle.
                Ok(Some(found)) if found >= u64::from(FORMAT_VERSION) => {
                    store.check_version(found)?;
                    return Ok(store);
                }
                Err(err @ (LedgerError::NewerFormat { .. } | LedgerError::Damaged { .. })) => {
                    return Err(err);
                }
                Ok(_) | Err(_) => store.reader = None,
            }
        }
        let _ = store.writer.set(open_writable(path)?);
        store.check_format()?;
        Ok(store)
    }

    /// A store over any redb storage backend, opened writable at once (the power-loss test's
    /// fault-injecting storage). `path` only names it in errors.
    #[cfg(test)]
    pub(crate) fn open_backend(backend: impl redb::StorageBackend, path: &Path) -> Result<Self> {
        let store = RedbStore::unopened(path);
        let _ = store
            .writer
            .set(map_open(path, || builder().create_with_backend(backend))?);
        store.check_format()?;
        Ok(store)
    }

    fn unopened(path: &Path) -> RedbStore {
        RedbStore {
            path: path.to_owned(),
            writer: OnceLock::new(),
            reader: None,
            opening: Mutex::new(()),
            stamp_file: OnceLock::new(),
        }
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// A value that changes with every commit any process makes: a hash of the file's header,
    /// which every redb commit rewrites with its new transaction id. One `pread` of the page
    /// cache, no lock, no transaction; a torn read only looks like a change. `None` if the file
    /// cannot be read.
    pub(crate) fn stamp(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt as _;
        let file = self
            .stamp_file
            .get_or_init(|| std::fs::File::open(&self.path).ok())
            .as_ref()?;
        let mut header = [0u8; HEADER_BYTES];
        let n = file.read_at(&mut header, 0).ok()?;
        Some(hermes_stdx::fnv1a(&header[..n]))
    }

    /// Whether the file was opened for writing (on its first write).
    pub(crate) fn is_writable(&self) -> bool {
        self.writer.get().is_some()
    }

    /// The writable handle, opened on first use.
    fn writable(&self) -> Result<&Database> {
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
        let _ = self.writer.set(open_writable(&self.path)?);
        self.writer
            .get()
            .ok_or_else(|| LedgerError::Invalid("the writable ledger handle was lost".into()))
    }

    /// Names the file in storage errors, and turns a panic inside redb into an error.
    pub(crate) fn guard<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        guard(&self.path, f)
    }

    /// Runs `f` in a read transaction (on the writable handle if there is one).
    pub(crate) fn read<T>(
        &self,
        counters: &Counters,
        f: &mut dyn FnMut(&Reader<'_>) -> Result<T>,
    ) -> Result<T> {
        let txn = self.guard(|| match (self.writer.get(), &self.reader) {
            (Some(db), _) => db.begin_read().map_err(storage),
            (None, Some(db)) => db.begin_read().map_err(storage),
            (None, None) => Err(LedgerError::Invalid("the ledger has no open handle".into())),
        })?;
        let reader = Reader(Box::new(Read {
            txn,
            path: &self.path,
            counters,
        }));
        self.guard(|| f(&reader))
    }

    /// Runs `f` in a write transaction; commits when it returns `(value, true)`, aborts when it
    /// returns `(value, false)` or fails. Returns `f`'s value and whether it committed.
    pub(crate) fn write<T>(
        &self,
        counters: &Counters,
        f: &mut dyn FnMut(&Writer<'_>) -> Result<(T, bool)>,
    ) -> Result<(T, bool)> {
        let db = self.writable()?;
        self.guard(|| {
            let txn = db.begin_write().map_err(storage)?;
            let writer = Writer(Box::new(Write::new(txn, &self.path, counters)));
            let (value, commit) = f(&writer)?;
            if commit {
                writer.commit()?;
            }
            Ok((value, commit))
        })
    }

    /// The format version the file records; `None` if it has no tables yet.
    fn stored_format(&self) -> Result<Option<u64>> {
        match self.read(&Counters::default(), &mut |r| r.meta(META_FORMAT_VERSION)) {
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

    /// Checks the format, creating the tables of a fresh file and migrating an older one (the
    /// only writes: a file of this format commits nothing here).
    fn check_format(&self) -> Result<()> {
        match self.stored_format()? {
            Some(found) if found < u64::from(FORMAT_VERSION) => self.migrate(),
            Some(found) => self.check_version(found),
            None => {
                let db = self.writable()?;
                let counters = Counters::default();
                self.guard(|| {
                    let w = Write::new(db.begin_write().map_err(storage)?, &self.path, &counters);
                    w.create_tables()?;
                    if w.meta(META_FORMAT_VERSION)?.is_none() {
                        w.set_meta(META_FORMAT_VERSION, u64::from(FORMAT_VERSION))?;
                    }
                    Writer(Box::new(w)).commit()
                })
            }
        }
    }
}

impl RedbStore {
    /// Brings a file of an older format to this one, in one transaction (another process may
    /// have done it first: the format is read again inside it). Format 7 keeps the records,
    /// children and events of the active units in tables of their own, filled here from format
    /// 6's index of their ids.
    fn migrate(&self) -> Result<()> {
        let db = self.writable()?;
        let counters = Counters::default();
        self.guard(|| {
            let w = Write::new(db.begin_write().map_err(storage)?, &self.path, &counters);
            if w.meta(META_FORMAT_VERSION)?.unwrap_or(0) >= u64::from(FORMAT_VERSION) {
                return Ok(());
            }
            w.create_tables()?;
            w.move_active_units_v6()?;
            w.set_meta(META_FORMAT_VERSION, u64::from(FORMAT_VERSION))?;
            Writer(Box::new(w)).commit()
        })
    }
}

/// Creates a fresh ledger at `path` so that a power cut never leaves a half-made file there: it
/// is built under a temporary name beside it, made durable, then linked into place, never
/// replacing a file another process linked first. (A file system without hard links gets the
/// file created in place, as redb does.)
fn create_file(path: &Path) -> Result<()> {
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
        let fresh = RedbStore::unopened(&tmp);
        let _ = fresh.writer.set(open_writable(&tmp)?);
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
