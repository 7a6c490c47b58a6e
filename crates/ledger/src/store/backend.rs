//! The one place the backend is chosen: [`Backend`] wraps either store the way sqlx's
//! `AnyConnection` wraps its kinds, and owns opening, reading, writing, listening and
//! migrating. The ledger's operations never see which one they run on.

use std::path::Path;

use super::pg::{Listener, Pg, PgTarget};
use super::redb::RedbStore;
use super::{Counters, Reader, Writer};
use crate::codec::FORMAT_VERSION;
use crate::error::Result;

/// Which notifications a [`Listener`] waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listen {
    /// The activity counter moved: work for hosts and workers.
    Activity,
    /// An event became deliverable: work for consumers.
    Events,
}

/// A ledger's storage: the embedded redb file, or a PostgreSQL database.
pub(crate) enum Backend {
    Redb(RedbStore),
    /// Boxed: its connection pool is far larger than the redb handles.
    Pg(Box<Pg>),
}

impl Backend {
    /// Opens (creating if needed) the redb file at `path`.
    pub(crate) fn open_file(path: &Path) -> Result<Backend> {
        RedbStore::open(path).map(Backend::Redb)
    }

    /// Connects to a PostgreSQL database (checking, creating or migrating the schema).
    pub(crate) fn connect(target: &PgTarget) -> Result<Backend> {
        Pg::connect(target.clone()).map(|pg| Backend::Pg(Box::new(pg)))
    }

    /// How the ledger is named in messages: the file's path, or the server's URL without its
    /// password.
    pub(crate) fn path(&self) -> &Path {
        match self {
            Backend::Redb(store) => store.path(),
            Backend::Pg(pg) => pg.path(),
        }
    }

    /// Whether the ledger is shared by machines (PostgreSQL).
    pub(crate) fn is_shared(&self) -> bool {
        matches!(self, Backend::Pg(_))
    }

    /// Whether writes need no further open (a redb file opens for writing on its first write;
    /// a PostgreSQL ledger is always writable).
    pub(crate) fn is_writable(&self) -> bool {
        match self {
            Backend::Redb(store) => store.is_writable(),
            Backend::Pg(_) => true,
        }
    }

    /// A value that changes whenever anything is committed (redb); `None` where there is no
    /// such cheap check (PostgreSQL: it pushes notifications instead).
    pub(crate) fn stamp(&self) -> Option<u64> {
        match self {
            Backend::Redb(store) => store.stamp(),
            Backend::Pg(_) => None,
        }
    }

    /// The hot transitions as one statement each, when this backend has them.
    pub(crate) fn transitions(&self) -> Option<&dyn super::Transitions> {
        match self {
            Backend::Redb(_) => None,
            Backend::Pg(pg) => Some(pg.as_ref()),
        }
    }

    /// The PostgreSQL connections, when the ledger lives there (tests).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn pg(&self) -> Option<&Pg> {
        match self {
            Backend::Redb(_) => None,
            Backend::Pg(pg) => Some(pg),
        }
    }

    /// Runs `f` in one read transaction. `f` may run more than once on PostgreSQL (after a
    /// dropped connection), so it must only read what it captured.
    pub(crate) fn read<T: Send>(
        &self,
        counters: &Counters,
        f: &mut (dyn FnMut(&Reader<'_>) -> Result<T> + Send),
    ) -> Result<T> {
        match self {
            Backend::Redb(store) => store.read(counters, f),
            Backend::Pg(pg) => pg.read(counters, f),
        }
    }

    /// [`Backend::read`] for a read that is most often one statement: on PostgreSQL it runs
    /// without a transaction around it, and again in one if it reads more ([`Pg::read_one`]).
    pub(crate) fn read_one<T: Send>(
        &self,
        counters: &Counters,
        f: &mut (dyn FnMut(&Reader<'_>) -> Result<T> + Send),
    ) -> Result<T> {
        match self {
            Backend::Redb(store) => store.read(counters, f),
            Backend::Pg(pg) => pg.read_one(counters, f),
        }
    }

    /// Runs `f` in one write transaction; commits when `f` returns `(value, true)`, aborts when
    /// it returns `(value, false)` or fails. Returns `f`'s value and whether it committed. `f`
    /// may run more than once on PostgreSQL (after a serialization failure), so it must only
    /// read what it captured.
    pub(crate) fn write<T: Send>(
        &self,
        counters: &Counters,
        f: &mut (dyn FnMut(&Writer<'_>) -> Result<(T, bool)> + Send),
    ) -> Result<(T, bool)> {
        match self {
            Backend::Redb(store) => store.write(counters, f),
            Backend::Pg(pg) => pg.write(counters, f),
        }
    }

    /// Runs one operation of a group inside its transaction: on redb, a panic of the engine
    /// there becomes that operation's error (the others of the group still run).
    pub(crate) fn guard<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        match self {
            Backend::Redb(store) => store.guard(f),
            Backend::Pg(_) => f(),
        }
    }

    /// A connection that waits for `what`, on a backend that sends notifications (PostgreSQL);
    /// `None` on redb, whose waiters poll the activity counter and the events instead.
    pub(crate) fn listen(&self, what: &[Listen]) -> Result<Option<Listener>> {
        match self {
            Backend::Redb(_) => Ok(None),
            Backend::Pg(pg) => pg.listen(what).map(Some),
        }
    }

    /// The version recorded at `location` (`None`: no ledger there yet), read without creating,
    /// migrating or writing anything: an existing redb file is opened (read-only until a
    /// write, and nothing writes), a PostgreSQL server asked over one connection.
    pub(crate) fn probe(location: &crate::Location) -> Result<Option<u32>> {
        match location {
            crate::Location::File(path) if !path.exists() => Ok(None),
            crate::Location::File(path) => {
                RedbStore::open(path)?;
                Ok(Some(u32::from(FORMAT_VERSION)))
            }
            crate::Location::Postgres(target) => {
                Ok(Pg::probe((**target).clone())?
                    .map(|version| u32::try_from(version).unwrap_or(0)))
            }
        }
    }

    /// Creates or migrates the schema now; the version in force afterwards. A redb file has
    /// nothing to migrate: its format version.
    pub(crate) fn migrate(&self) -> Result<u32> {
        match self {
            Backend::Redb(_) => Ok(u32::from(FORMAT_VERSION)),
            Backend::Pg(pg) => Ok(u32::try_from(pg.migrate_now()?).unwrap_or(0)),
        }
    }
}
