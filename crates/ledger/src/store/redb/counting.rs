//! The storage under redb: its file backend, wrapped to count what reaches the disk.
//!
//! Every handle the ledger opens (writable or read-only) goes through `CountingBackend`, which
//! forwards each call to redb's own `FileBackend` and counts `sync_data` calls (each one an
//! `fdatasync`) and writes in process-wide counters. The counts cost one relaxed atomic add per
//! call, so they are always on; `io_counts` reads them. This is how the benchmarks count syncs
//! per command "by the process itself" rather than estimating them.

use std::fs::OpenOptions;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

static SYNCS: AtomicU64 = AtomicU64::new(0);
static WRITES: AtomicU64 = AtomicU64::new(0);
static COMMITS: AtomicU64 = AtomicU64::new(0);

/// What this process has asked of the ledger's storage so far, over every ledger it opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoCounts {
    /// `fdatasync` calls (redb's `sync_data`), including those of opening and closing a file.
    pub syncs: u64,
    /// Write calls to the file.
    pub writes: u64,
    /// Durable commits of ledger transactions (a group commit counts once).
    pub commits: u64,
}

/// The process-wide counts (see `IoCounts`).
pub fn io_counts() -> IoCounts {
    IoCounts {
        syncs: SYNCS.load(Ordering::Relaxed),
        writes: WRITES.load(Ordering::Relaxed),
        commits: COMMITS.load(Ordering::Relaxed),
    }
}

pub(crate) fn count_commit() {
    COMMITS.fetch_add(1, Ordering::Relaxed);
}

/// redb's file backend, counting syncs and writes.
#[derive(Debug)]
pub(crate) struct CountingBackend<B: StorageBackend> {
    inner: B,
}

impl CountingBackend<FileBackend> {
    /// The backend of the file at `path`: created if missing when `writable`.
    pub(crate) fn file(path: &Path, writable: bool) -> std::io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .create(writable)
            .truncate(false)
            .open(path)?;
        let inner = FileBackend::new(file).map_err(std::io::Error::other)?;
        Ok(CountingBackend { inner })
    }
}

impl<B: StorageBackend> StorageBackend for CountingBackend<B> {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        SYNCS.fetch_add(1, Ordering::Relaxed);
        self.inner.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        WRITES.fetch_add(1, Ordering::Relaxed);
        self.inner.write(offset, data)
    }

    fn close(&self) -> Result<(), std::io::Error> {
        self.inner.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(start, end)
    }
}
