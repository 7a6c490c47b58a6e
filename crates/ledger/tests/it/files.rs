//! Damaged files and files from a newer hermes give clear errors, never panics.

use std::io::{Seek, SeekFrom, Write};

use hermes_ledger::*;

fn make(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("ledger.redb");
    let ledger = Ledger::open(&path, LedgerConfig::default()).expect("fresh ledger");
    ledger
        .ensure_session(&SessionId::new("s").unwrap(), Timestamp(1))
        .unwrap();
    drop(ledger);
    path
}

/// Writes the file's format record the way a newer hermes would.
fn set_format_version(path: &std::path::Path, version: u64) {
    const META: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
    let mut builder = redb::Database::builder();
    builder.set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
    let db = builder.create(path).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(META)
        .unwrap()
        .insert("format_version", version)
        .unwrap();
    txn.commit().unwrap();
}

#[test]
fn a_newer_format_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let path = make(dir.path());
    // Pretend a newer hermes wrote the file.
    set_format_version(&path, u64::from(FORMAT_VERSION) + 1);
    let err = Ledger::open(&path, LedgerConfig::default()).unwrap_err();
    assert!(
        matches!(err, LedgerError::NewerFormat { found, .. } if found == u32::from(FORMAT_VERSION) + 1),
        "{err}"
    );
    assert!(err.to_string().contains("newer hermes"));
    assert!(err.is_unavailable());
}

#[test]
fn a_truncated_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = make(dir.path());
    let len = std::fs::metadata(&path).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(len / 3).unwrap();
    drop(file);
    let err = Ledger::open(&path, LedgerConfig::default()).unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    assert!(
        err.to_string().contains(path.to_str().unwrap()),
        "the error names the file: {err}"
    );
}

#[test]
fn garbage_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.redb");
    std::fs::write(
        &path,
        b"this is not a ledger at all, just some text that someone wrote here",
    )
    .unwrap();
    let err = Ledger::open(&path, LedgerConfig::default()).unwrap_err();
    assert!(err.is_unavailable(), "{err}");
}

#[test]
fn scribbled_pages_never_panic() {
    for seed in 0..20u64 {
        let dir = tempfile::tempdir().unwrap();
        let path = make(dir.path());
        let len = std::fs::metadata(&path).unwrap().len();
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        for _ in 0..8 {
            file.seek(SeekFrom::Start(rng.u64(0..len))).unwrap();
            let junk: Vec<u8> = (0..64).map(|_| rng.u8(..)).collect();
            file.write_all(&junk).unwrap();
        }
        drop(file);
        // Either it opens and reads (the scribble hit free space) or it fails with an error.
        if let Ok(ledger) = Ledger::open(&path, LedgerConfig::default()) {
            let _ = ledger.sessions();
            let _ = ledger.list(None, 10);
        }
    }
}

#[test]
fn a_missing_directory_is_unavailable() {
    let err = Ledger::open(
        std::path::Path::new("/nonexistent/dir/ledger.redb"),
        LedgerConfig::default(),
    )
    .unwrap_err();
    assert!(matches!(err, LedgerError::Unavailable { .. }), "{err}");
}

/// The change stamp (what hosts' activity polls and metrics endpoints look at before reading)
/// moves with every commit of any handle on the file, and not with reads.
#[test]
fn the_change_stamp_moves_with_every_commit_of_any_handle_and_only_then() {
    let dir = tempfile::tempdir().unwrap();
    let path = make(dir.path());
    let a = Ledger::open(&path, LedgerConfig::default()).unwrap();
    let b = Ledger::open(&path, LedgerConfig::default()).unwrap();
    let mut last = a.change_stamp().expect("a redb file has a stamp");
    a.activity().unwrap();
    b.session(&SessionId::new("s").unwrap()).unwrap();
    assert_eq!(a.change_stamp(), Some(last), "reads commit nothing");
    for i in 0..20u64 {
        let writer = if i % 2 == 0 { &a } else { &b };
        writer
            .ensure_session(&SessionId::new(format!("s{i}")).unwrap(), Timestamp(i + 2))
            .unwrap();
        let now = a.change_stamp().expect("stamp");
        assert_ne!(now, last, "commit {i} moved the stamp");
        assert_eq!(b.change_stamp(), Some(now), "both handles see one file");
        last = now;
    }
}

#[test]
fn the_writability_check_writes_and_rolls_back_leaving_nothing() {
    let f = crate::common::fixture();
    crate::common::unit(&f.ledger, 1);
    let activity = f.ledger.activity().expect("activity");
    let commits = f.ledger.commits();
    f.ledger.check_writable().expect("the ledger takes writes");
    assert_eq!(f.ledger.activity().expect("activity"), activity);
    assert_eq!(f.ledger.commits(), commits);
    // Another process sees the same.
    assert_eq!(f.reopen().activity().expect("activity"), activity);
}

/// Lays `path` out as format 6 did: the ids of the active units in `active_units`, none of
/// the tables of the active units' records, children and events.
fn lay_out_as_format_6(path: &std::path::Path, active: &[&DelegationId]) {
    const ACTIVE_UNITS: redb::TableDefinition<&str, ()> =
        redb::TableDefinition::new("active_units");
    const ACTIVE_RECORDS: redb::TableDefinition<&str, &[u8]> =
        redb::TableDefinition::new("active_records");
    {
        let mut builder = redb::Database::builder();
        builder.set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
        let db = builder.create(path).unwrap();
        let txn = db.begin_write().unwrap();
        assert!(txn.delete_table(ACTIVE_RECORDS).unwrap());
        for name in ["active_children", "active_events"] {
            let def: redb::TableDefinition<(&str, u32), &[u8]> = redb::TableDefinition::new(name);
            assert!(txn.delete_table(def).unwrap());
        }
        let mut table = txn.open_table(ACTIVE_UNITS).unwrap();
        for id in active {
            table.insert(id.as_str(), ()).unwrap();
        }
        drop(table);
        txn.commit().unwrap();
    }
    set_format_version(path, 6);
}

#[test]
fn a_format_6_file_is_migrated_on_open_and_keeps_its_active_units() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.redb");
    let (active, ended) = {
        let ledger = Ledger::open(&path, LedgerConfig::default()).unwrap();
        let active = crate::common::unit(&ledger, 2);
        let ended = crate::common::unit(&ledger, 1);
        crate::common::finish(&ledger, &ended, 0, crate::common::T0.plus_ms(5));
        (active, ended)
    };
    lay_out_as_format_6(&path, &[&active]);

    let ledger = Ledger::open(&path, LedgerConfig::default()).expect("a format 6 file opens");
    let overview = ledger.overview(10).unwrap();
    let live: Vec<&DelegationId> = overview
        .running
        .iter()
        .chain(&overview.queued)
        .map(|v| &v.unit.id)
        .collect();
    assert_eq!(
        live,
        [&active],
        "the active unit stays active, the ended one ended"
    );
    assert!(ledger.delegation(&ended).unwrap().is_some());
    let view = overview
        .running
        .iter()
        .chain(&overview.queued)
        .next()
        .unwrap();
    assert_eq!(view.children, ledger.children(&active).unwrap());
    assert_eq!(view.children.len(), 2);
    drop(ledger);

    // The file now says this format, and format 6's index is gone.
    let mut builder = redb::Database::builder();
    builder.set_concurrency_mode(redb::ConcurrencyMode::MultiWriter);
    let db = builder.create(&path).unwrap();
    let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
    const META: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
    let meta = txn.open_table(META).unwrap();
    assert_eq!(
        meta.get("format_version").unwrap().map(|v| v.value()),
        Some(u64::from(FORMAT_VERSION))
    );
    const ACTIVE_UNITS: redb::TableDefinition<&str, ()> =
        redb::TableDefinition::new("active_units");
    assert!(matches!(
        txn.open_table(ACTIVE_UNITS),
        Err(redb::TableError::TableDoesNotExist(_))
    ));
}
