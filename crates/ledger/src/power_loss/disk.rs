//! The power-loss test's disk: a `redb` storage backend whose written-but-unsynced data is
//! volatile, and which loses it at a cut (the n-th write or sync), keeping a random prefix of
//! the last unsynced write (a torn write). Byte-range locks are delegated to redb's
//! `FileBackend` on a scratch file; data lives in memory.

use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

/// The simulated disk.
#[derive(Debug)]
pub(super) struct Disk {
    /// What survives a power cut.
    durable: Vec<u8>,
    /// What reads see: durable plus unsynced writes.
    current: Vec<u8>,
    /// Writes (and length changes) since the last sync, oldest first.
    unsynced: Vec<Pending>,
    /// Writes and syncs so far.
    ops: u64,
    /// The op at which the power goes (0: never).
    cut_at: u64,
    /// What survived, once the power went.
    pub(super) survivor: Option<Vec<u8>>,
    /// A lying disk: `sync_data` succeeds and persists nothing.
    lying: bool,
    rng: fastrand::Rng,
}

#[derive(Debug)]
enum Pending {
    Write(u64, Vec<u8>),
    SetLen(u64),
}

fn apply(image: &mut Vec<u8>, pending: &Pending) {
    match pending {
        Pending::Write(offset, data) => {
            let start = usize::try_from(*offset).expect("offset fits");
            if image.len() < start + data.len() {
                image.resize(start + data.len(), 0);
            }
            image[start..start + data.len()].copy_from_slice(data);
        }
        Pending::SetLen(len) => image.resize(usize::try_from(*len).expect("length fits"), 0),
    }
}

impl Disk {
    pub(super) fn new(image: Vec<u8>, cut_at: u64, lying: bool, seed: u64) -> Disk {
        Disk {
            current: image.clone(),
            durable: image,
            unsynced: Vec::new(),
            ops: 0,
            cut_at,
            survivor: None,
            lying,
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    /// Counts one write or sync; true if the power goes now.
    fn tick(&mut self) -> bool {
        self.ops += 1;
        self.ops == self.cut_at
    }

    /// The power goes: unsynced data is lost, the last unsynced write torn.
    pub(super) fn power_cut(&mut self) {
        if self.survivor.is_some() {
            return;
        }
        let mut image = self.durable.clone();
        if let Some(Pending::Write(offset, data)) = self.unsynced.last() {
            let kept = self.rng.usize(0..=data.len());
            apply(&mut image, &Pending::Write(*offset, data[..kept].to_vec()));
        }
        self.survivor = Some(image);
    }

    fn down(&self) -> std::io::Result<()> {
        if self.survivor.is_some() {
            Err(std::io::Error::other("the power is off"))
        } else {
            Ok(())
        }
    }
}

#[derive(Debug)]
pub(super) struct PowerCutBackend {
    pub(super) disk: Arc<Mutex<Disk>>,
    pub(super) locks: FileBackend,
}

pub(super) fn lock(disk: &Mutex<Disk>) -> MutexGuard<'_, Disk> {
    disk.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl StorageBackend for PowerCutBackend {
    fn len(&self) -> Result<u64, std::io::Error> {
        let disk = lock(&self.disk);
        disk.down()?;
        Ok(disk.current.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        let disk = lock(&self.disk);
        disk.down()?;
        let start = usize::try_from(offset).map_err(std::io::Error::other)?;
        let source = disk
            .current
            .get(start..start + out.len())
            .ok_or_else(|| std::io::Error::other("read past the end"))?;
        out.copy_from_slice(source);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        let mut disk = lock(&self.disk);
        disk.down()?;
        let pending = Pending::SetLen(len);
        apply(&mut disk.current, &pending);
        disk.unsynced.push(pending);
        Ok(())
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        let mut disk = lock(&self.disk);
        disk.down()?;
        if disk.tick() {
            disk.power_cut();
            return disk.down();
        }
        if !disk.lying {
            let pending = std::mem::take(&mut disk.unsynced);
            for p in &pending {
                apply(&mut disk.durable, p);
            }
        }
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        let mut disk = lock(&self.disk);
        disk.down()?;
        disk.unsynced.push(Pending::Write(offset, data.to_vec()));
        if disk.tick() {
            // The write was on its way to the disk when the power went: it is the torn one.
            disk.power_cut();
            return disk.down();
        }
        apply(&mut disk.current, &Pending::Write(offset, data.to_vec()));
        Ok(())
    }

    fn close(&self) -> Result<(), std::io::Error> {
        self.locks.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.locks.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.locks.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.locks.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.locks.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.locks.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.locks.query_lock_range(start, end)
    }
}
