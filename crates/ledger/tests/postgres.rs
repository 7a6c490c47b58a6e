//! What only the PostgreSQL backend has: URLs, TLS, schema versions, an unreachable server.
//! These run against the throwaway test server whatever the backend under test.

use ledger::testing::{
    connection_is_encrypted, fresh_database, fresh_empty_database, pg_admin_url, set_schema_version,
};
use ledger::*;

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
        .listen(&[ledger::Listen::Activity, ledger::Listen::Events])
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
