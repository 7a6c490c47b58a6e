//! hermes behind PgBouncer (README, "Behind a pooler"), in both pool modes, on the real
//! server. What transaction pooling takes away is documented at
//! <https://www.pgbouncer.org/features.html> ("SQL feature map for pooling modes"): session
//! `SET`, `LISTEN`, session-level advisory locks and protocol-level named prepared statements.

use std::time::{Duration, Instant};

use hermes_ledger::*;
use hermes_testkit::{PoolMode, fresh_empty_database, pg_admin_url, pg_bouncer, query_bools};

fn connect(url: &str) -> Result<Ledger> {
    let target = PgTarget::parse(url, None)?;
    Ledger::connect(&target, LedgerConfig::default(), TokenSource::Random)
}

fn database_of(url: &str) -> String {
    let base = url.split('?').next().unwrap_or(url);
    base.rsplit('/').next().unwrap_or_default().to_owned()
}

/// One background unit of session `s`, finished: a result to deliver.
fn finished_unit(ledger: &Ledger) -> DelegationId {
    let new = NewDelegation {
        id: None,
        session: Some(SessionId::new("s").expect("id")),
        channel: Channel::Background,
        spec: DispatchSpec::new("g", vec![TaskSpec::new("t", vec!["true".into()])]),
        host: None,
        transcript_root: None,
    };
    let roomy = Capacity {
        max_running: 100,
        max_queued: 100,
    };
    let id = ledger
        .dispatch(new, roomy, Timestamp(1))
        .expect("dispatch")
        .delegation
        .id;
    let outcome = ChildOutcome::new(0, "t", ChildStatus::Completed, Timestamp(2));
    ledger
        .finish_child(HostId(0), &id, outcome, Timestamp(2))
        .expect("finishes");
    id
}

/// A listener on `ledger`'s events hears that notifications reach it, and then the event of a
/// unit finished meanwhile.
fn hears_a_finished_units_event(ledger: &Ledger) {
    let mut listener = ledger
        .listen(&[Listen::Events])
        .expect("listens")
        .expect("postgres");
    assert!(listener.hears_notifications());
    finished_unit(ledger);
    let wanted = Notice::Event("s".into());
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut heard = Vec::new();
    while !heard.contains(&wanted) && Instant::now() < deadline {
        heard.extend(listener.wait(Duration::from_millis(200)).expect("waits"));
    }
    assert!(heard.contains(&wanted), "{heard:?}");
}

#[test]
fn through_a_transaction_pooler_processes_starting_together_create_the_schema_once_and_work() {
    // Two server connections for eight clients: they share backends, so a named prepared
    // statement or a session advisory lock of one would meet another.
    let bouncer = pg_bouncer(PoolMode::Transaction, 2);
    let direct = fresh_empty_database(&pg_admin_url());
    let url = bouncer.url(&database_of(&direct));
    let ids: Vec<DelegationId> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    let ledger = connect(&url).expect("connects through the pooler");
                    finished_unit(&ledger)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("no panic"))
            .collect()
    });
    let ledger = connect(&url).expect("connects");
    let session = SessionId::new("s").expect("id");
    let ready = ledger.deliverable(&session, Timestamp(3)).expect("reads");
    assert_eq!(ready.len(), ids.len(), "every unit's result is there");
    assert_eq!(
        Ledger::probe(&Location::Postgres(Box::new(
            PgTarget::parse(&url, None).expect("parses")
        )))
        .expect("probes"),
        Some(u32::try_from(SCHEMA_VERSION).expect("positive"))
    );
    // No session advisory lock is left behind on the server's backends.
    assert_eq!(
        query_bools(&direct, NO_ADVISORY_LOCK),
        vec![true],
        "{}",
        bouncer.log()
    );
}

#[test]
fn ledger_migrate_through_a_transaction_pooler_never_hangs_and_holds_no_lock_after() {
    // Two processes migrating over and over through two shared server connections: a
    // session-level lock taken on one backend and "released" on the other would be held for
    // good, and the next migrate on the other backend would wait for it forever.
    let bouncer = pg_bouncer(PoolMode::Transaction, 2);
    let direct = fresh_empty_database(&pg_admin_url());
    let url = bouncer.url(&database_of(&direct));
    let (done, finished) = std::sync::mpsc::channel();
    for _ in 0..2 {
        let (url, done) = (url.clone(), done.clone());
        std::thread::spawn(move || {
            let ledger = connect(&url).expect("connects");
            for _ in 0..10 {
                assert_eq!(
                    ledger.migrate().expect("migrates"),
                    u32::try_from(SCHEMA_VERSION).expect("positive")
                );
            }
            let _ = done.send(());
        });
    }
    for _ in 0..2 {
        finished
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("a migrate hung (or failed)\n{}", bouncer.log()));
    }
    assert_eq!(query_bools(&direct, NO_ADVISORY_LOCK), vec![true]);
}

#[test]
fn through_a_session_pooler_everything_works_notifications_included() {
    let bouncer = pg_bouncer(PoolMode::Session, 4);
    let direct = fresh_empty_database(&pg_admin_url());
    let url = bouncer.url(&database_of(&direct));
    let ledger = connect(&url).expect("connects");
    hears_a_finished_units_event(&ledger);
}

#[test]
fn behind_a_transaction_pooler_a_listener_knows_it_hears_nothing_and_polls_instead() {
    let bouncer = pg_bouncer(PoolMode::Transaction, 2);
    let direct = fresh_empty_database(&pg_admin_url());
    let url = bouncer.url(&database_of(&direct));
    let ledger = connect(&url).expect("connects");
    let mut listener = ledger
        .listen(&[Listen::Events])
        .expect("listens")
        .expect("postgres");
    assert!(
        !listener.hears_notifications(),
        "LISTEN through a transaction pooler hears nothing"
    );
    // It tells its caller to look, often: a result waits a poll interval, not the 2 s poll.
    let started = Instant::now();
    let heard = listener.wait(Duration::from_secs(5)).expect("waits");
    assert_eq!(heard, vec![Notice::Reconnected]);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn behind_a_transaction_pooler_a_listen_url_takes_the_notifications_past_it() {
    let bouncer = pg_bouncer(PoolMode::Transaction, 2);
    let direct = fresh_empty_database(&pg_admin_url());
    let url = bouncer.url(&database_of(&direct));
    let target = PgTarget::parse(&url, None)
        .expect("parses")
        .listening_at(PgTarget::parse(&direct, None).expect("parses"));
    let ledger =
        Ledger::connect(&target, LedgerConfig::default(), TokenSource::Random).expect("connects");
    hears_a_finished_units_event(&ledger);
}

/// Whether no advisory lock is held in the current database. `pg_locks` is the whole server's:
/// another test migrating its own database at the same moment holds one there, which says
/// nothing about this one.
const NO_ADVISORY_LOCK: &str = "SELECT count(*) = 0 FROM pg_locks WHERE locktype = 'advisory' \
     AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";
