//! The tables of one write transaction, opened once and kept open for all of it.
//!
//! A group commit runs a few dozen operations in one transaction, and each of them reads and
//! writes through a handful of tables. Opening a redb table looks its root up in the table tree
//! and closing it writes the root back: measured on a busy host's group commits, that was a
//! third of the time the operations took. [`OpenTables`] keeps every table the transaction
//! opened, lends it out for one use at a time ([`Lent`]) and takes it back afterwards, so each
//! table is opened once per transaction.
//!
//! A redb table borrows its transaction, and the transaction is a field of the same `Write` as
//! this cache, so the cache keeps tables whose lifetime it erases. That is sound because:
//! - the transaction lives on the heap ([`Write`](super::tx::Write) boxes it), so the tables'
//!   references to it stay valid when the `Write` moves;
//! - the cache is emptied before the transaction is committed or dropped (`Write::commit`
//!   empties it first; the `Write` declares it before the transaction, so a drop drops it first);
//! - a lent table carries the lifetime of the cache's borrow, so it cannot outlive the `Write`.

use std::any::Any;
use std::cell::RefCell;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};

use redb::{Key, Table, TableDefinition, TableError, TableHandle, Value, WriteTransaction};

/// The open tables of one write transaction (see the module docs).
#[derive(Default)]
pub(crate) struct OpenTables {
    /// The tables not lent out, by name: each an `Option<Table<'static, K, V>>` (its lifetime
    /// erased), boxed once when first opened and reused by every lending after.
    idle: RefCell<Vec<Held>>,
}

/// A table's name and its box.
type Held = (String, Box<dyn Any>);

impl OpenTables {
    /// The table `def` names in `txn`, opened now unless it is idle here.
    ///
    /// # Safety
    /// `txn` must be the transaction every table of this cache was opened in, and it must
    /// outlive every table the cache holds: the caller empties the cache ([`OpenTables::close`])
    /// before it commits, drops or moves the transaction.
    pub(crate) unsafe fn lend<'s, K: Key + 'static, V: Value + 'static>(
        &'s self,
        txn: &'s WriteTransaction,
        def: TableDefinition<K, V>,
    ) -> Result<Lent<'s, K, V>, TableError> {
        let idle = {
            let mut idle = self.idle.borrow_mut();
            idle.iter()
                .position(|(name, _)| name == def.name())
                .map(|at| idle.swap_remove(at))
        };
        let (name, mut slot) = match idle {
            Some(held) if held.1.is::<Option<Table<'static, K, V>>>() => held,
            // Not held, or held with other types: that one is closed first, and redb reports
            // the mismatch when it opens the table again.
            other => {
                drop(other);
                let slot: Box<dyn Any> = Box::new(None::<Table<'static, K, V>>);
                (def.name().to_owned(), slot)
            }
        };
        let held = slot
            .downcast_mut::<Option<Table<'static, K, V>>>()
            .and_then(Option::take);
        let table = match held {
            // SAFETY: the table was opened in `txn` (the caller's contract), which outlives
            // `'s`; only the lifetime changes, not the type.
            Some(held) => unsafe { relabel(held) },
            None => txn.open_table(def)?,
        };
        Ok(Lent {
            table: Some(table),
            held: Some((name, slot)),
            home: self,
        })
    }

    /// Closes every idle table (each writes its root back into the transaction).
    pub(crate) fn close(&self) {
        // Taken out before they drop: a table's drop never reaches back into the cache.
        let idle = std::mem::take(&mut *self.idle.borrow_mut());
        drop(idle);
    }
}

impl Drop for OpenTables {
    fn drop(&mut self) {
        self.close();
    }
}

/// A table lent out by [`OpenTables`]; back in the cache when dropped.
pub(crate) struct Lent<'s, K: Key + 'static, V: Value + 'static> {
    table: Option<Table<'s, K, V>>,
    /// Where it goes back: its name and its box in the cache.
    held: Option<Held>,
    home: &'s OpenTables,
}

impl<'s, K: Key + 'static, V: Value + 'static> Deref for Lent<'s, K, V> {
    type Target = Table<'s, K, V>;

    fn deref(&self) -> &Self::Target {
        self.table
            .as_ref()
            .expect("a lent table is present until dropped")
    }
}

impl<K: Key + 'static, V: Value + 'static> DerefMut for Lent<'_, K, V> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.table
            .as_mut()
            .expect("a lent table is present until dropped")
    }
}

impl<'s, K: Key + 'static, V: Value + 'static> Drop for Lent<'s, K, V> {
    fn drop(&mut self) {
        let (Some(table), Some((name, mut slot))) = (self.table.take(), self.held.take()) else {
            return;
        };
        if table.name() != name {
            // Swapped with another table through `DerefMut`: closed, not kept under a wrong name.
            return;
        }
        // SAFETY: the erased lifetime is never used: the table leaves the cache only through
        // `lend`, which gives it back the lifetime of a borrow of the cache, and the cache is
        // emptied before the transaction it borrows ends (see `lend`'s contract).
        let table = unsafe { relabel::<K, V>(table) };
        if let Some(place) = slot.downcast_mut::<Option<Table<'static, K, V>>>() {
            *place = Some(table);
            self.home.idle.borrow_mut().push((name, slot));
        }
    }
}

/// The same table under another lifetime.
///
/// # Safety
/// The table must not be used after the transaction it was opened in ends.
unsafe fn relabel<'a, 'b, K: Key + 'static, V: Value + 'static>(
    table: Table<'a, K, V>,
) -> Table<'b, K, V> {
    let table = ManuallyDrop::new(table);
    // SAFETY: the two types differ only in a lifetime, so they have the same layout; the
    // original is never dropped (`ManuallyDrop`), so the table is moved, not duplicated.
    unsafe { std::ptr::read((&raw const *table).cast::<Table<'b, K, V>>()) }
}

#[cfg(test)]
mod tests {
    //! SAFETY, for every `lend` below: each test's transaction is boxed, and its cache is
    //! declared after it (so dropped first) or dropped before the transaction ends.
    use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata};

    use super::*;

    const ROWS: TableDefinition<u64, u64> = TableDefinition::new("rows");
    const OTHER: TableDefinition<u64, u64> = TableDefinition::new("other");

    fn database() -> (tempfile::TempDir, Database) {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Database::create(dir.path().join("t.redb")).expect("database");
        (dir, db)
    }

    #[test]
    fn a_table_is_opened_once_and_what_it_wrote_commits() {
        let (_dir, db) = database();
        let txn = Box::new(db.begin_write().expect("begin"));
        let open = OpenTables::default();
        for n in 0..3u64 {
            let mut rows = unsafe { open.lend(&txn, ROWS) }.expect("lend");
            rows.insert(n, n * 10).expect("insert");
            // A second table while the first is lent.
            let mut other = unsafe { open.lend(&txn, OTHER) }.expect("lend other");
            other.insert(n, n).expect("insert other");
        }
        assert_eq!(open.idle.borrow().len(), 2, "each table is kept once");
        // Reads in the same transaction see the writes.
        let rows = unsafe { open.lend(&txn, ROWS) }.expect("lend");
        assert_eq!(rows.get(2).expect("get").map(|v| v.value()), Some(20));
        drop(rows);
        drop(open);
        txn.commit().expect("commit");

        let read = db.begin_read().expect("read");
        let rows = read.open_table(ROWS).expect("rows");
        assert_eq!(rows.len().expect("len"), 3);
        assert_eq!(
            read.open_table(OTHER).expect("other").len().expect("len"),
            3
        );
    }

    #[test]
    fn a_table_lent_twice_at_once_is_an_error_not_a_panic() {
        let (_dir, db) = database();
        let txn = Box::new(db.begin_write().expect("begin"));
        let open = OpenTables::default();
        let first = unsafe { open.lend(&txn, ROWS) }.expect("lend");
        let second = unsafe { open.lend(&txn, ROWS) };
        assert!(matches!(second, Err(TableError::TableAlreadyOpen(..))));
        drop(first);
        // Given back, it lends again.
        assert!(unsafe { open.lend(&txn, ROWS) }.is_ok());
    }

    #[test]
    fn tables_swapped_through_their_loans_are_never_kept_under_each_others_names() {
        let (_dir, db) = database();
        let txn = Box::new(db.begin_write().expect("begin"));
        let open = OpenTables::default();
        let mut rows = unsafe { open.lend(&txn, ROWS) }.expect("lend");
        let mut other = unsafe { open.lend(&txn, OTHER) }.expect("lend other");
        std::mem::swap(&mut *rows, &mut *other);
        drop((rows, other));
        unsafe { open.lend(&txn, ROWS) }
            .expect("lend")
            .insert(7, 7)
            .expect("insert");
        drop(open);
        txn.commit().expect("commit");
        let read = db.begin_read().expect("read");
        let rows = read.open_table(ROWS).expect("rows");
        assert_eq!(rows.get(7).expect("get").map(|v| v.value()), Some(7));
        assert_eq!(
            read.open_table(OTHER).expect("other").len().expect("len"),
            0
        );
    }

    #[test]
    fn an_aborted_transaction_keeps_nothing_its_open_tables_wrote() {
        let (_dir, db) = database();
        {
            let txn = Box::new(db.begin_write().expect("begin"));
            let open = OpenTables::default();
            unsafe { open.lend(&txn, ROWS) }
                .expect("lend")
                .insert(1, 1)
                .expect("insert");
            drop(open);
            txn.abort().expect("abort");
        }
        let read = db.begin_read().expect("read");
        assert!(matches!(
            read.open_table(ROWS),
            Err(TableError::TableDoesNotExist(_))
        ));
    }

    #[test]
    fn a_name_held_with_other_types_is_reopened_and_redb_reports_the_mismatch() {
        let (_dir, db) = database();
        let txn = Box::new(db.begin_write().expect("begin"));
        let open = OpenTables::default();
        drop(unsafe { open.lend(&txn, ROWS) }.expect("lend"));
        const MISTYPED: TableDefinition<u64, &str> = TableDefinition::new("rows");
        // The kept table is closed and redb checks the types against what the file holds.
        let mistyped = unsafe { open.lend(&txn, MISTYPED) };
        assert!(matches!(
            mistyped,
            Err(TableError::TableTypeMismatch { .. })
        ));
    }
}
