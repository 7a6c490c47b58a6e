//! What only the PostgreSQL backend has: URLs, TLS, schema versions, an unreachable server.
//! These run against the throwaway test server whatever the backend under test.

use hermes_ledger::*;
use hermes_testkit::{
    connection_is_encrypted, fresh_database, fresh_empty_database, pg_admin_url, set_schema_version,
};

fn connect(url: &str) -> Result<Ledger> {
    let target = PgTarget::parse(url, None)?;
    Ledger::connect(&target, LedgerConfig::default(), TokenSource::Seeded(1))
}

fn with_option(url: &str, option: &str) -> String {
    format!("{url}{}{option}", if url.contains('?') { '&' } else { '?' })
}

#[test]
fn sslmode_require_encrypts_and_disable_does_not() {
    let url = fresh_database(&pg_admin_url());
    assert!(connection_is_encrypted(&with_option(
        &url,
        "sslmode=require"
    )));
    assert!(!connection_is_encrypted(&with_option(
        &url,
        "sslmode=disable"
    )));
    // The ledger works over TLS.
    let ledger = connect(&with_option(&url, "sslmode=require")).expect("connects");
    let session = SessionId::new("tls").expect("id");
    ledger
        .ensure_session(&session, Timestamp(1))
        .expect("writes");
    assert!(ledger.session(&session).expect("reads").is_some());
}

#[test]
fn verify_full_and_verify_ca_check_the_servers_certificate_against_sslrootcert() {
    let url = fresh_database(&pg_admin_url());
    let ca = hermes_testkit::pg_authority();
    let root = |file: &std::path::Path| format!("sslrootcert={}", file.display());
    // The server's certificate is for 127.0.0.1, signed by the cluster's CA.
    for mode in ["verify-full", "verify-ca"] {
        let verified = with_option(&url, &format!("sslmode={mode}&{}", root(&ca)));
        assert!(connection_is_encrypted(&verified), "{mode}");
        let ledger = connect(&verified).unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert!(ledger.session(&SessionId::new("v").expect("id")).is_ok());
    }
    // Another name for the same address: verify-full refuses the certificate, verify-ca (which
    // checks only who signed it) takes it (libpq-connect, "sslmode").
    let elsewhere = url.replacen("@127.0.0.1:", "@db.invalid:", 1);
    let named = |mode: &str| {
        with_option(
            &elsewhere,
            &format!("hostaddr=127.0.0.1&sslmode={mode}&{}", root(&ca)),
        )
    };
    let refused = connect(&named("verify-full")).expect_err("the name does not match");
    assert!(
        matches!(&refused, LedgerError::Unavailable { reason, .. } if reason.contains("certificate")),
        "{refused}"
    );
    connect(&named("verify-ca")).expect("verify-ca takes any name the CA signed");
    // Trusting the wrong authority (the server's own certificate is no CA) fails the handshake.
    let wrong = ca.with_file_name("server.crt");
    let untrusted = connect(&with_option(
        &url,
        &format!("sslmode=verify-full&{}", root(&wrong)),
    ))
    .expect_err("not signed by what is trusted");
    assert!(untrusted.to_string().contains("certificate"), "{untrusted}");
    // A root file that is not there is said to be, naming the parameter.
    let missing = PgTarget::parse(
        &with_option(
            &url,
            "sslmode=verify-full&sslrootcert=/nonexistent/root.crt",
        ),
        None,
    )
    .expect_err("no such file");
    assert!(
        missing
            .to_string()
            .contains("sslrootcert /nonexistent/root.crt"),
        "{missing}"
    );
}

/// The test server's URL with its host replaced by the directory of its Unix-domain socket
/// (`data/` of the cluster: `unix_socket_directories`), in the `?host=` form libpq documents
/// for a socket directory (libpq-connect, "Connection URIs").
fn over_the_socket(url: &str) -> String {
    let socket_dir = hermes_testkit::pg_server().dir.join("data");
    let (scheme_user, rest) = url.split_once('@').expect("the URL has a user");
    let (authority, path) = rest.split_once('/').expect("the URL names a database");
    let port = authority.rsplit_once(':').map_or("5432", |(_, port)| port);
    format!(
        "{scheme_user}@/{path}?host={}&port={port}",
        socket_dir.display()
    )
}

#[test]
fn a_unix_socket_url_connects_in_the_clear_whatever_sslmode_says() {
    let url = fresh_database(&pg_admin_url());
    for sslmode in ["", "&sslmode=prefer", "&sslmode=require"] {
        let unix = format!("{}{sslmode}", over_the_socket(&url));
        // libpq ignores sslmode on Unix-domain sockets (libpq-connect, "sslmode").
        assert!(!connection_is_encrypted(&unix), "{unix}");
        let ledger = connect(&unix).unwrap_or_else(|e| panic!("{unix}: {e}"));
        let session = SessionId::new("socket").expect("id");
        ledger
            .ensure_session(&session, Timestamp(1))
            .expect("writes");
        assert!(ledger.session(&session).expect("reads").is_some());
    }
}

#[test]
fn the_password_comes_from_the_url_or_pgpassword_and_is_never_shown() {
    let url = fresh_database(&pg_admin_url());
    let (scheme_user, rest) = url.split_once('@').expect("user@host");
    let (user, password) = scheme_user
        .rsplit_once(':')
        .filter(|(u, _)| u.contains("://"))
        .expect("the test URL has a password");
    let without = format!("{user}@{rest}");
    let target = PgTarget::parse(&without, Some(password)).expect("parses");
    Ledger::connect(&target, LedgerConfig::default(), TokenSource::Seeded(1))
        .expect("PGPASSWORD supplies the password");
    let wrong = format!("{user}:not-the-password@{rest}");
    let err = connect(&wrong).expect_err("refused");
    let text = err.to_string();
    assert!(err.is_unavailable(), "{text}");
    assert!(!text.contains("not-the-password"), "{text}");
    assert!(!format!("{target:?}").contains(password));
}

#[test]
fn an_unreachable_server_is_unavailable_naming_host_and_port_only() {
    let err = connect("postgres://u:secret@127.0.0.1:1/db").expect_err("nothing listens on 1");
    let text = err.to_string();
    assert!(matches!(err, LedgerError::Unavailable { .. }), "{text}");
    assert!(text.contains("127.0.0.1:1"), "{text}");
    assert!(!text.contains("secret"), "{text}");
    assert!(!text.contains('\n'), "{text}");
}

#[test]
fn a_schema_written_by_a_newer_hermes_is_refused_and_an_equal_one_reused() {
    let url = fresh_empty_database(&pg_admin_url());
    let first = connect(&url).expect("creates the schema");
    assert_eq!(first.migrate().expect("migrates"), SCHEMA_VERSION as u32);
    drop(first);
    connect(&url).expect("the same version is reused");
    set_schema_version(&url, SCHEMA_VERSION + 1);
    let err = connect(&url).expect_err("newer");
    assert!(matches!(err, LedgerError::NewerFormat { .. }), "{err}");
}

/// A database a build of schema version 2 made (units without host columns, that build's
/// transition functions) is migrated by the first hermes of a later version to connect: the units'
/// hosts are filled in from their records, the functions replaced, and a child of a unit
/// dispatched before starts and finishes under its host, its event claimed and acked. (A
/// function raising an error stands in for version 2's `hermes_ack`.)
#[test]
fn a_version_2_schema_is_migrated_to_the_current_one_and_carries_on() {
    let url = fresh_empty_database(&pg_admin_url());
    let ledger = connect(&url).expect("creates the schema");
    let host = crate::common::registered_host(&ledger, 42);
    let (session, now) = (crate::common::session(), crate::common::T0);
    let new = NewDelegation {
        id: None,
        session: Some(session.clone()),
        channel: Channel::Background,
        spec: crate::common::spec(1),
        host: Some(host),
        transcript_root: None,
    };
    let unit = ledger
        .dispatch(new, crate::common::ROOMY, now)
        .expect("dispatches")
        .delegation
        .id;
    drop(ledger);
    let version_2 = "ALTER TABLE hermes_units DROP COLUMN host_pid, DROP COLUMN host_start; \
        CREATE OR REPLACE FUNCTION hermes_ack(p_tokens bytea[], p_now bigint) \
        RETURNS TABLE (o_i integer, o_standing text, o_expires_at bigint, o_unit text, \
        o_code bigint) LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'a version 2 ack'; END $$";
    let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connects");
    client
        .batch_execute(version_2)
        .expect("makes it version 2's");
    set_schema_version(&url, 2);

    let ledger = connect(&url).expect("migrates");
    assert_eq!(ledger.migrate().expect("migrated"), SCHEMA_VERSION as u32);
    assert_eq!(SCHEMA_VERSION, 5);
    let row = client
        .query_one("SELECT host_pid, host_start FROM hermes_units", &[])
        .expect("one unit");
    assert_eq!(
        (row.get::<_, Option<i64>>(0), row.get::<_, Option<i64>>(1)),
        (Some(42), Some(1))
    );
    let writer = HostId(42);
    ledger
        .child_started(writer, &unit, 0, host, now)
        .expect("its host starts it");
    assert!(matches!(
        ledger.child_started(HostId(7), &unit, 0, host, now),
        Err(LedgerError::Fenced { .. })
    ));
    let outcome = crate::common::outcome(0, ChildStatus::Completed, now);
    ledger
        .finish_child(writer, &unit, outcome, now)
        .expect("its host finishes it");
    let request = ClaimRequest {
        keys: vec![EventRef {
            delegation_id: unit,
            key: EventKey::Task(0),
        }],
        consumer: "v3".into(),
        session: Some(session),
        lease_ms: 60_000,
    };
    let ClaimOutcome::Claimed(claim) = ledger.claim(&request, now).expect("claims") else {
        panic!("the event is claimable");
    };
    ledger
        .ack(claim.token, now)
        .expect("acks with the current function");
}

/// A build of schema version 2 still running after the migration writes a unit's record
/// without its host columns (a new unit's are empty; a handed-over unit's name its previous
/// host). The unit's host is the one its record names all the same: its writes go through and
/// the host the columns name is fenced.
#[test]
fn a_units_host_is_the_one_its_record_names_whatever_the_host_columns_say() {
    let url = fresh_database(&pg_admin_url());
    let ledger = connect(&url).expect("connects");
    let (owner, other) = (
        crate::common::registered_host(&ledger, 42),
        crate::common::registered_host(&ledger, 43),
    );
    let new = NewDelegation {
        host: Some(owner),
        ..crate::common::background(2)
    };
    let now = crate::common::T0;
    let unit = ledger
        .dispatch(new, crate::common::ROOMY, now)
        .expect("dispatches")
        .delegation
        .id;
    let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connects");
    let set_columns = |client: &mut postgres::Client, pid: Option<i64>| {
        client
            .execute(
                "UPDATE hermes_units SET host_pid = $1, host_start = $2",
                &[&pid, &pid.map(|_| 1_i64)],
            )
            .expect("rewrites the columns");
    };

    set_columns(&mut client, None);
    ledger
        .child_started(HostId(42), &unit, 0, owner, now)
        .expect("the record's host starts it");
    set_columns(&mut client, Some(43));
    assert!(matches!(
        ledger.child_started(HostId(43), &unit, 1, other, now),
        Err(LedgerError::Fenced { .. })
    ));
    let outcome = crate::common::outcome(0, ChildStatus::Completed, now);
    ledger
        .finish_child(HostId(42), &unit, outcome, now)
        .expect("the record's host finishes it");
}

/// A column whose type is not the one hermes gave it (a schema altered by hand) makes a read
/// fail with a damaged ledger naming the column, not panic.
#[test]
fn a_column_altered_by_hand_is_a_damaged_ledger_not_a_panic() {
    let url = fresh_database(&pg_admin_url());
    let ledger = connect(&url).expect("connects");
    crate::common::unit(&ledger, 1);
    assert_eq!(ledger.list(None, 10).expect("lists").running.len(), 1);
    let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connects");
    client
        .batch_execute(
            "ALTER TABLE hermes_units ALTER COLUMN record TYPE text USING encode(record, 'hex')",
        )
        .expect("alters the column");
    let err = ledger
        .list(None, 10)
        .expect_err("the records are not bytea");
    assert!(
        matches!(&err, LedgerError::Damaged { reason, .. } if reason.contains("column record")),
        "{err}"
    );
}

#[test]
fn many_processes_creating_the_schema_at_once_agree() {
    let url = fresh_empty_database(&pg_admin_url());
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || connect(&url).map(|l| l.migrate()))
        })
        .collect();
    for t in threads {
        let version = t
            .join()
            .expect("no panic")
            .expect("connects")
            .expect("migrates");
        assert_eq!(version, SCHEMA_VERSION as u32);
    }
}

#[test]
fn a_listener_hears_a_dispatch_and_a_deliverable_event() {
    let url = fresh_database(&pg_admin_url());
    let ledger = connect(&url).expect("connects");
    let mut listener = ledger
        .listen(&[
            hermes_ledger::Listen::Activity,
            hermes_ledger::Listen::Events,
        ])
        .expect("listens")
        .expect("postgres");
    let session = SessionId::new("s").expect("id");
    let new = NewDelegation {
        id: None,
        session: Some(session.clone()),
        channel: Channel::Background,
        spec: DispatchSpec::new("g", vec![TaskSpec::new("t", vec!["true".into()])]),
        host: None,
        transcript_root: None,
    };
    let roomy = Capacity {
        max_running: 10,
        max_queued: 10,
    };
    let id = ledger
        .dispatch(new, roomy, Timestamp(1))
        .expect("dispatch")
        .delegation
        .id;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut heard = Vec::new();
    while !heard.contains(&Notice::Activity) && std::time::Instant::now() < deadline {
        heard.extend(
            listener
                .wait(std::time::Duration::from_millis(200))
                .expect("waits"),
        );
    }
    assert!(heard.contains(&Notice::Activity), "{heard:?}");
    let outcome = ChildOutcome::new(0, "t", ChildStatus::Completed, Timestamp(2));
    ledger
        .finish_child(HostId(0), &id, outcome, Timestamp(2))
        .expect("finishes");
    let mut heard = Vec::new();
    let wanted = Notice::Event("s".into());
    while !heard.contains(&wanted) && std::time::Instant::now() < deadline {
        heard.extend(
            listener
                .wait(std::time::Duration::from_millis(200))
                .expect("waits"),
        );
    }
    assert!(heard.contains(&wanted), "{heard:?}");
}

/// A ledger on `url` in the deployment namespace `namespace`.
fn in_namespace(url: &str, namespace: &str) -> Ledger {
    let ns = hermes_settings::Namespace::parse("test", namespace).expect("a namespace");
    let target = PgTarget::parse(url, None)
        .expect("parses")
        .in_namespace(&ns);
    Ledger::connect(&target, LedgerConfig::default(), TokenSource::Seeded(3)).expect("connects")
}

#[test]
fn two_namespaces_on_one_database_never_see_each_others_sessions_units_or_results() {
    let url = fresh_database(&pg_admin_url());
    let ledgers = [
        connect(&url).expect("the default namespace"),
        in_namespace(&url, "team_a"),
        in_namespace(&url, "team_b"),
    ];
    let session = SessionId::new("s").expect("id");
    let roomy = Capacity {
        max_running: 1,
        max_queued: 10,
    };
    // The same session in each deployment, one unit each, finished: a result to deliver.
    let ids: Vec<DelegationId> = ledgers
        .iter()
        .map(|ledger| {
            let new = NewDelegation {
                id: None,
                session: Some(session.clone()),
                channel: Channel::Background,
                spec: DispatchSpec::new("g", vec![TaskSpec::new("t", vec!["true".into()])]),
                host: None,
                transcript_root: None,
            };
            let admission = ledger.dispatch(new, roomy, Timestamp(1)).expect("dispatch");
            assert_eq!(
                admission.delegation.status,
                UnitStatus::Running,
                "capacity is each deployment's own"
            );
            let id = admission.delegation.id;
            let outcome = ChildOutcome::new(0, "t", ChildStatus::Completed, Timestamp(2));
            ledger
                .finish_child(HostId(0), &id, outcome, Timestamp(2))
                .expect("finishes");
            id
        })
        .collect();
    for (ledger, id) in ledgers.iter().zip(&ids) {
        let ready = ledger.deliverable(&session, Timestamp(3)).expect("reads");
        let units: Vec<&DelegationId> = ready.iter().map(|(unit, _)| &unit.id).collect();
        assert_eq!(
            units,
            vec![id],
            "each deployment drains only its own result"
        );
        assert_eq!(ledger.sessions().expect("reads").len(), 1);
        for other in ids.iter().filter(|other| *other != id) {
            assert_eq!(ledger.delegation(other).expect("reads"), None);
        }
    }
    // B ends its session "s": A's session "s" and its result are untouched.
    ledgers[2]
        .end_session(&session, Timestamp(4))
        .expect("ends");
    assert!(
        ledgers[2]
            .deliverable(&session, Timestamp(5))
            .expect("reads")
            .is_empty()
    );
    for ledger in &ledgers[..2] {
        assert_eq!(
            ledger
                .deliverable(&session, Timestamp(5))
                .expect("reads")
                .len(),
            1
        );
        let s = ledger.session(&session).expect("reads").expect("exists");
        assert_eq!(s.state, SessionState::Active);
    }
    // The default namespace's tables are where hermes always kept them; the others are
    // schemas of their own.
    let placed = hermes_testkit::query_bools(
        &url,
        "SELECT to_regclass('public.hermes_units') IS NOT NULL, \
                to_regclass('team_a.hermes_units') IS NOT NULL, \
                to_regclass('team_b.hermes_events') IS NOT NULL, \
                to_regclass('hermes.hermes_units') IS NULL",
    );
    assert_eq!(placed, vec![true, true, true, true]);
    // Reopening finds each namespace's schema in place.
    let again = in_namespace(&url, "team_a");
    assert_eq!(
        again
            .deliverable(&session, Timestamp(5))
            .expect("reads")
            .len(),
        1
    );
}

/// A claim never waits on an event another transaction holds (a consumer taking it at that
/// moment): the key is refused at once as held, the other keys of the call are decided as
/// usual, and once the holder is done the same claim takes the key.
#[test]
fn a_claim_refuses_an_event_another_transaction_holds_without_waiting() {
    use crate::common::{T0, finish, key, session, unit};
    let url = fresh_database(&pg_admin_url());
    let ledger = connect(&url).expect("connects");
    let (held, free) = (unit(&ledger, 1), unit(&ledger, 1));
    finish(&ledger, &held, 0, T0);
    finish(&ledger, &free, 0, T0);
    let mut holder = postgres::Client::connect(&url, postgres::NoTls).expect("connects");
    let mut txn = holder.transaction().expect("begins");
    txn.execute(
        "SELECT 1 FROM hermes_events WHERE unit = $1 FOR UPDATE",
        &[&held.as_str()],
    )
    .expect("locks the event");
    let request = |keys: Vec<EventRef>| ClaimRequest {
        keys,
        consumer: "racer".into(),
        session: Some(session()),
        lease_ms: 60_000,
    };
    let requests = [request(vec![key(&held, 0)]), request(vec![key(&free, 0)])];
    let (answer, answered) = std::sync::mpsc::channel();
    let claims = std::thread::spawn({
        let ledger = connect(&url).expect("connects");
        let one = requests[0].clone();
        move || {
            let alone = ledger.claim(&one, T0);
            let both = ledger.claim_many(&requests, T0);
            answer.send((alone, both)).expect("the test waits");
        }
    });
    let got = answered.recv_timeout(std::time::Duration::from_secs(20));
    txn.rollback().expect("lets go");
    let (alone, both) = got.expect("the claims answered while the row was held");
    claims.join().expect("the claims' thread ran");
    let refused_as_held = |outcome: &ClaimOutcome| {
        matches!(outcome, ClaimOutcome::Refused(why)
            if why.len() == 1 && why[0].1 == Refusal::LiveClaim { expires_at: T0 })
    };
    assert!(
        refused_as_held(&alone.expect("runs")),
        "one key, one request"
    );
    let both = both.expect("runs");
    assert!(refused_as_held(&both[0]), "{:?}", both[0]);
    assert!(matches!(both[1], ClaimOutcome::Claimed(_)), "{:?}", both[1]);
    let retried = ledger
        .claim(&request(vec![key(&held, 0)]), T0)
        .expect("runs");
    assert!(matches!(retried, ClaimOutcome::Claimed(_)), "{retried:?}");
}
