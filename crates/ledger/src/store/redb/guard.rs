//! redb's failures as the ledger's errors: storage faults named by the file, and the engine's
//! panics on some damaged pages caught and reported instead of crashing the process.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use redb::{DatabaseError, StorageError};

use crate::codec::FORMAT_VERSION;
use crate::error::{LedgerError, Result, StorageFault};

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
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned());
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A redb error as the ledger's storage fault.
pub(crate) fn storage<E: Into<redb::Error>>(err: E) -> LedgerError {
    LedgerError::Storage(err.into().into())
}

/// Runs `f` against the file at `path`: names the file in storage errors, and turns a panic
/// inside redb into an error.
pub(crate) fn guard<T>(path: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let caught = {
        let _inside = CatchingPanics::enter();
        catch_unwind(AssertUnwindSafe(f))
    };
    match caught {
        Ok(result) => result.map_err(|err| match err {
            LedgerError::Storage(StorageFault::Corrupted(reason)) => LedgerError::Damaged {
                path: path.to_owned(),
                reason,
            },
            LedgerError::Storage(StorageFault::Io(err)) => LedgerError::Unavailable {
                path: path.to_owned(),
                reason: err.to_string(),
            },
            other => other,
        }),
        Err(payload) => Err(LedgerError::EnginePanic {
            path: path.to_owned(),
            what: panic_message(payload.as_ref()),
        }),
    }
}

/// Runs a redb open, turning its failures (and its panics on some malformed files) into errors.
pub(crate) fn map_open<D>(
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
        let path = Path::new("/l.redb");
        assert!(!panic_is_caught());
        let err = guard(path, || -> Result<()> {
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
        let path = Path::new("/l.redb");
        let damaged = guard(path, || -> Result<()> {
            Err(storage(StorageError::Corrupted("x".into())))
        })
        .expect_err("damaged");
        assert!(matches!(damaged, LedgerError::Damaged { .. }), "{damaged}");
        let io = guard(path, || -> Result<()> {
            Err(storage(StorageError::Io(std::io::Error::from(
                std::io::ErrorKind::PermissionDenied,
            ))))
        })
        .expect_err("io");
        assert!(matches!(io, LedgerError::Unavailable { .. }), "{io}");
        // Text that merely mentions corruption is not a damaged file.
        let other = guard(path, || -> Result<()> {
            Err(storage(StorageError::ValueTooLarge(1 << 40)))
        })
        .expect_err("engine");
        assert!(
            matches!(other, LedgerError::Storage(StorageFault::Engine(_))),
            "{other}"
        );
    }
}
