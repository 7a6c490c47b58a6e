//! PostgreSQL under faults (issue #22): the ledger reached through a fault proxy
//! that drops connections, loses answers or black-holes traffic when a test says so. These run
//! against the throwaway test server whatever the backend under test.

use crate::common::*;
use hermes_ledger::*;
use hermes_pgcluster::FaultProxy;
use hermes_testkit::{fresh_database, pg_admin_url};

/// The simple-query message that commits a transaction, as the client sends it.
const COMMIT: &[u8] = b"COMMIT\0";
/// The call that acks (one autocommit statement on PostgreSQL, `hermes_ack`), as the client
/// sends it.
const ACK_CALL: &[u8] = b"hermes_ack($1";

/// A ledger on a fresh database, reached through a proxy the test drives.
fn through_proxy() -> (Ledger, FaultProxy) {
    let (ledger, proxy, _) = through_proxy_with("");
    (ledger, proxy)
}

/// A ledger on a fresh database, reached through a proxy the test drives with `params` added
/// to its URL; and the database's own URL, another process's way to the server.
fn through_proxy_with(params: &str) -> (Ledger, FaultProxy, String) {
    let url = fresh_database(&pg_admin_url());
    let (proxy, via) = FaultProxy::in_front_of(&url).expect("the proxy starts");
    // In the clear, so that the proxy can see which message is a COMMIT.
    let via = format!(
        "{via}{}sslmode=disable{params}",
        if via.contains('?') { '&' } else { '?' }
    );
    let target = PgTarget::parse(&via, None).expect("the URL parses");
    let ledger = Ledger::connect(&target, LedgerConfig::default(), TokenSource::Seeded(7))
        .expect("connects through the proxy");
    (ledger, proxy, url)
}

/// A finished unit's `task:0`, claimed for a minute.
fn claimed_result(ledger: &Ledger) -> (EventRef, Claim) {
    let id = unit(ledger, 1);
    finish(ledger, &id, 0, T0);
    let c = claimed(claim(ledger, &[key(&id, 0)], 60_000, T0));
    (key(&id, 0), c)
}

#[test]
fn an_ack_whose_commit_never_reached_the_server_is_acked_again_on_a_fresh_connection() {
    let (ledger, proxy) = through_proxy();
    let (key, c) = claimed_result(&ledger);
    proxy.drop_before(ACK_CALL);
    let acked = ledger
        .ack_outcome(c.token, T0.plus_ms(10))
        .expect("the ack is retried, not reported as unreachable");
    assert_eq!(proxy.faults(), 1, "the connection was dropped at COMMIT");
    assert!(!acked.repeated, "the first COMMIT never arrived");
    assert_eq!(acked.transitions.len(), 1);
    assert_eq!(state(&ledger, &key), EventState::Delivered);
    let event = ledger.event(&key).expect("reads").expect("exists");
    assert_eq!(event.attempts, 1, "delivered once");
}

#[test]
fn an_ack_whose_answer_was_lost_is_a_no_op_that_says_so() {
    let (ledger, proxy) = through_proxy();
    let (key, c) = claimed_result(&ledger);
    proxy.lose_reply_to(ACK_CALL);
    let acked = ledger
        .ack_outcome(c.token, T0.plus_ms(10))
        .expect("the ack resolves its unknown outcome");
    assert_eq!(proxy.faults(), 1, "the answer to COMMIT was lost");
    assert!(
        acked.repeated,
        "the first COMMIT had landed: already acked by this token"
    );
    assert_eq!(acked.transitions.len(), 1);
    assert_eq!(acked.transitions[0].from, EventState::Claimed);
    assert_eq!(acked.transitions[0].to, EventState::Delivered);
    assert_eq!(state(&ledger, &key), EventState::Delivered);
    // Nobody can claim it again: it is delivered once.
    let again = claim(&ledger, &[key], 60_000, T0.plus_ms(120_000));
    assert!(matches!(again, ClaimOutcome::Refused(_)), "{again:?}");
}

#[test]
fn a_boundary_ack_of_several_claims_survives_a_lost_answer() {
    let (ledger, proxy) = through_proxy();
    let (first, a) = claimed_result(&ledger);
    let (second, b) = claimed_result(&ledger);
    proxy.lose_reply_to(ACK_CALL);
    let slots = ledger
        .ack_many(&[a.token, b.token], T0.plus_ms(10))
        .expect("the acks resolve");
    assert_eq!(proxy.faults(), 1);
    assert!(
        slots
            .iter()
            .all(|slot| slot.as_ref().is_ok_and(|t| t.len() == 1)),
        "{slots:?}"
    );
    assert_eq!(state(&ledger, &first), EventState::Delivered);
    assert_eq!(state(&ledger, &second), EventState::Delivered);
}

#[test]
fn an_ack_that_gave_up_on_its_unknown_outcome_is_found_acked_by_another_process() {
    // The server goes away the moment it committed the ack, for longer than the claim's lease:
    // the acking process gives up, as `hermes delivery ack` exiting 6 does.
    let (ledger, proxy, url) = through_proxy_with("&connect_timeout=1");
    let id = unit(&ledger, 1);
    finish(&ledger, &id, 0, T0);
    let c = claimed(claim(&ledger, &[key(&id, 0)], 2_000, T0));
    proxy.lose_reply_to(ACK_CALL);
    proxy.then_black_hole();
    let err = ledger
        .ack_outcome(c.token, T0.plus_ms(10))
        .expect_err("its outcome stays unknown while the lease lasts");
    assert!(matches!(err, LedgerError::Unavailable { .. }), "{err}");
    assert_eq!(proxy.faults(), 1, "the answer to COMMIT was lost");
    proxy.pass();
    // Another process, knowing only the token, acks again: the first had landed.
    let target = PgTarget::parse(&url, None).expect("the URL parses");
    let other = Ledger::connect(&target, LedgerConfig::default(), TokenSource::Seeded(8))
        .expect("connects");
    let commits = other.commits();
    let again = other
        .ack_outcome(c.token, T0.plus_ms(60_000))
        .expect("a repeat ack, not a lost claim");
    assert!(again.repeated, "already acked by this token");
    assert_eq!(again.transitions.len(), 1);
    assert_eq!(other.commits(), commits, "nothing written");
    // Delivered once: never offered again after the lease.
    let later = claim(&other, &[key(&id, 0)], 60_000, T0.plus_ms(120_000));
    assert!(matches!(later, ClaimOutcome::Refused(_)), "{later:?}");
    assert_eq!(state(&other, &key(&id, 0)), EventState::Delivered);
    assert_eq!(other.event(&key(&id, 0)).unwrap().unwrap().attempts, 1);
}

/// An ack whose server is unreachable from its first attempt on (a restart, an outage) never
/// read its claim's lease: a consumer that knows the lease (it took the claim) has the ack
/// retried that long, not the 10 s a bare ack allows, so a result it showed is not delivered
/// again after an outage longer than 10 s and shorter than the lease. (The soak's duplicate.)
#[test]
fn an_ack_unreachable_from_its_first_attempt_is_retried_for_the_lease_its_consumer_knows() {
    let (ledger, proxy) = through_proxy();
    let (event, c) = claimed_result(&ledger);
    // Every connection cut, every new one cut at its first byte.
    proxy.cut_after(0);
    proxy.drop_all();
    let outage = std::time::Instant::now();
    let ledger = std::sync::Arc::new(ledger);
    let acking = std::sync::Arc::clone(&ledger);
    let ack = std::thread::spawn(move || {
        acking.ack_many_within(
            &[c.token],
            T0.plus_ms(1),
            std::time::Duration::from_secs(60),
        )
    });
    // Past the 10 s a bare ack would have given up after.
    while outage.elapsed() < std::time::Duration::from_secs(11) {
        assert!(!ack.is_finished(), "the ack gave up during the outage");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    proxy.pass();
    let slots = ack
        .join()
        .expect("the ack thread")
        .expect("acked once the server is back");
    assert!(slots[0].is_ok(), "{slots:?}");
    assert_eq!(state(&ledger, &event), EventState::Delivered);
}

#[test]
fn a_claim_taken_over_after_its_lease_is_still_lost_not_already_acked() {
    let (ledger, proxy) = through_proxy();
    let id = unit(&ledger, 1);
    finish(&ledger, &id, 0, T0);
    let old = claimed(claim(&ledger, &[key(&id, 0)], 1_000, T0));
    let new = claimed(claim(&ledger, &[key(&id, 0)], 60_000, T0.plus_ms(1_000)));
    ledger
        .ack(new.token, T0.plus_ms(1_001))
        .expect("the new holder acks");
    proxy.drop_before(ACK_CALL);
    let err = ledger
        .ack(old.token, T0.plus_ms(1_002))
        .expect_err("the old token is fenced");
    assert!(
        matches!(err, LedgerError::ClaimLost(t) if t == old.token),
        "{err}"
    );
}

#[test]
fn a_ledger_whose_connections_were_all_terminated_reconnects_at_its_next_operation() {
    let url = fresh_database(&pg_admin_url());
    let target = PgTarget::parse(&url, None).expect("the URL parses");
    let ledger = Ledger::connect(&target, LedgerConfig::default(), TokenSource::Seeded(7))
        .expect("connects");
    let id = unit(&ledger, 1);
    let mut listener = ledger
        .listen(&[Listen::Events])
        .expect("listens")
        .expect("PostgreSQL notifies");
    // Its connection (the one its calls and its listener share) ends, as when an operator or
    // a failover ends hermes' backends.
    let ended = hermes_testkit::terminate_connections(&url);
    assert_eq!(ended, 1, "the calls and the listener share one connection");
    finish(&ledger, &id, 0, T0);
    let c = claimed(claim(&ledger, &[key(&id, 0)], 60_000, T0));
    ledger.ack(c.token, T0.plus_ms(1)).expect("acks");
    // The listener comes back and says so, so that its waiter looks again.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let notices = listener.wait(std::time::Duration::from_millis(200));
        if notices.is_ok_and(|n| n.contains(&Notice::Reconnected)) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the listener reconnects"
        );
    }
}

/// Runs `f` on a thread and returns its result, or `None` if it takes longer than `limit` (a
/// call that hangs fails the test instead of hanging it).
fn within<T: Send + 'static>(
    limit: std::time::Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).ok()
}

#[test]
fn a_server_that_accepts_and_never_answers_fails_the_connect_within_its_timeout() {
    let url = fresh_database(&pg_admin_url());
    let (proxy, via) = FaultProxy::in_front_of(&url).expect("the proxy starts");
    proxy.black_hole();
    let via = format!(
        "{via}{}connect_timeout=1",
        if via.contains('?') { '&' } else { '?' }
    );
    let connected = within(std::time::Duration::from_secs(20), move || {
        let target = PgTarget::parse(&via, None).expect("the URL parses");
        Ledger::connect(&target, LedgerConfig::default(), TokenSource::Seeded(7)).map(drop)
    })
    .expect("the login is under the connect timeout, not left hanging");
    let err = connected.expect_err("nothing answers");
    let text = err.to_string();
    assert!(matches!(err, LedgerError::Unavailable { .. }), "{text}");
    assert!(
        text.contains("did not answer the login within 1 s"),
        "{text}"
    );
    assert!(text.contains(&proxy.addr().to_string()), "{text}");
}

#[test]
fn every_session_gets_server_side_deadlines_and_keeps_the_urls_application_name() {
    let url = fresh_database(&pg_admin_url());
    assert_eq!(
        hermes_testkit::session_setting(&url, "statement_timeout"),
        "30s"
    );
    assert_eq!(
        hermes_testkit::session_setting(&url, "idle_in_transaction_session_timeout"),
        "1min"
    );
    assert_eq!(
        hermes_testkit::session_setting(&url, "application_name"),
        "hermes"
    );
    let named = format!(
        "{url}{}application_name=ops-east",
        if url.contains('?') { '&' } else { '?' }
    );
    assert_eq!(
        hermes_testkit::session_setting(&named, "application_name"),
        "ops-east"
    );
}

#[test]
fn refusals_say_what_the_server_said() {
    let url = fresh_database(&pg_admin_url());
    let (scheme_user, rest) = url.split_once('@').expect("user@host");
    let user = scheme_user
        .rsplit_once(':')
        .map(|(u, _)| u)
        .expect("a password");
    let connect = |url: &str| {
        let target = PgTarget::parse(url, None).expect("the URL parses");
        Ledger::connect(&target, LedgerConfig::default(), TokenSource::Seeded(7))
            .map(drop)
            .expect_err("refused")
            .to_string()
    };
    let wrong = connect(&format!("{user}:not-the-password@{rest}"));
    assert!(wrong.contains("refused the login"), "{wrong}");
    assert!(!wrong.contains("not-the-password"), "{wrong}");
    let missing = connect(&hermes_testkit::with_dbname(&url, "no_such_db_22"));
    assert!(missing.contains("has no such database"), "{missing}");
    assert!(!missing.contains("cannot reach"), "{missing}");
}

#[test]
fn libpq_variables_fill_in_what_the_url_leaves_out_and_the_url_wins() {
    let url = fresh_database(&pg_admin_url());
    // postgres://USER:PASSWORD@HOST:PORT/DB
    let rest = url.strip_prefix("postgres://").expect("a postgres:// URL");
    let (credentials, rest) = rest.split_once('@').expect("user@host");
    let (user, password) = credentials.split_once(':').expect("user:password");
    let (server, dbname) = rest.split_once('/').expect("host:port/db");
    let (host, port) = server.rsplit_once(':').expect("host:port");
    let env = PgEnv {
        port: Some(port.to_owned()),
        user: Some(user.to_owned()),
        dbname: Some(dbname.to_owned()),
        password: Some(password.to_owned()),
        sslmode: Some("disable".to_owned()),
        ..PgEnv::default()
    };
    let bare = format!("postgres://{host}");
    let target = PgTarget::parse_env(&bare, &env).expect("parses");
    assert_eq!(
        target.display(),
        format!("postgres://{user}@{server}/{dbname}")
    );
    let ledger = Ledger::connect(&target, LedgerConfig::default(), TokenSource::Seeded(7))
        .expect("PGPORT, PGUSER, PGDATABASE and PGPASSWORD reach the server");
    drop(ledger);
    // The URL's own port wins over PGPORT.
    let elsewhere = PgEnv {
        port: Some("1".to_owned()),
        ..env.clone()
    };
    let target = PgTarget::parse_env(&url, &elsewhere).expect("parses");
    Ledger::connect(&target, LedgerConfig::default(), TokenSource::Seeded(7))
        .expect("the URL's port is used");
    let wrong = PgEnv {
        port: Some("not-a-port".to_owned()),
        ..env
    };
    let err = PgTarget::parse_env(&bare, &wrong).expect_err("refused");
    assert!(err.to_string().contains("PGPORT"), "{err}");
}

#[test]
fn a_dispatch_whose_answer_was_lost_names_its_id_and_sent_again_under_it_is_recorded_once() {
    let (ledger, proxy) = through_proxy();
    ledger.ensure_session(&session(), T0).expect("the session");
    let id = ledger.new_delegation_id();
    let new = NewDelegation {
        id: Some(id.clone()),
        session: Some(session()),
        channel: Channel::Background,
        spec: spec(1),
        host: None,
        transcript_root: None,
    };
    proxy.lose_reply_to(COMMIT);
    let err = ledger
        .dispatch(new.clone(), ROOMY, T0)
        .expect_err("the answer to COMMIT never came");
    assert_eq!(proxy.faults(), 1, "the answer to COMMIT was lost");
    assert!(
        matches!(&err, LedgerError::Unavailable { reason, .. } if reason.contains("may or may not")),
        "{err}"
    );
    let again = ledger
        .dispatch(new, ROOMY, T0.plus_ms(10))
        .expect("sent again under its id");
    assert!(again.already_recorded, "the first COMMIT had landed");
    assert_eq!(again.delegation.id, id);
    let listing = ledger.list(Some(&session()), 10).expect("lists");
    assert_eq!(listing.running.len() + listing.queued.len(), 1, "one unit");
}

/// A ledger whose statements the server ends after `statement_timeout` (so that a call gives
/// up on a silent server soon after), reached through a proxy the test drives.
fn through_proxy_within(statement_timeout: std::time::Duration) -> (Ledger, FaultProxy) {
    let url = fresh_database(&pg_admin_url());
    let (proxy, via) = FaultProxy::in_front_of(&url).expect("the proxy starts");
    let via = format!(
        "{via}{}sslmode=disable&connect_timeout=1",
        if via.contains('?') { '&' } else { '?' }
    );
    let target = PgTarget::parse(&via, None)
        .expect("the URL parses")
        .with_statement_timeout(statement_timeout);
    let ledger = Ledger::connect(&target, LedgerConfig::default(), TokenSource::Seeded(7))
        .expect("connects through the proxy");
    (ledger, proxy)
}

#[test]
fn a_call_the_server_never_answers_fails_as_unavailable_within_its_deadline() {
    use std::time::{Duration, Instant};
    // Statements end after 1 s on the server; a call hears nothing for 2 s: it gives up.
    let (ledger, proxy) = through_proxy_within(Duration::from_secs(1));
    let ledger = std::sync::Arc::new(ledger);
    let id = unit(&ledger, 1);
    proxy.black_hole();
    let started = Instant::now();
    let asking = std::sync::Arc::clone(&ledger);
    let asked = id.clone();
    let read = within(Duration::from_secs(30), move || {
        asking.delegation(&asked).map(drop)
    })
    .expect("the call has a deadline: it is not left hanging");
    let err = read.expect_err("nothing answers");
    let text = err.to_string();
    assert!(matches!(err, LedgerError::Unavailable { .. }), "{text}");
    assert!(text.contains("did not answer"), "{text}");
    assert!(text.contains(&proxy.addr().to_string()), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the deadline (2 s) and one reconnection under the connect timeout (1 s): {:?}",
        started.elapsed()
    );
    // The server answers again: the next calls reconnect.
    proxy.pass();
    let deadline = Instant::now() + Duration::from_secs(30);
    while ledger.delegation(&id).is_err() {
        assert!(Instant::now() < deadline, "the ledger reconnects");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_statement_the_server_never_answers_is_given_up_after_its_deadline_and_said_so() {
    use std::time::{Duration, Instant};
    let (ledger, proxy) = through_proxy_within(Duration::from_millis(500));
    let id = unit(&ledger, 1);
    // Every connection goes silent at the statement that reads a unit (a call of
    // `hermes_read_unit`): the login and BEGIN are answered, that statement never is (the one
    // retry on a new connection neither).
    proxy.hang_at(b"hermes_read_unit");
    let started = Instant::now();
    let err = ledger.delegation(&id).expect_err("nothing answers");
    let text = err.to_string();
    assert!(matches!(err, LedgerError::Unavailable { .. }), "{text}");
    assert!(
        text.contains("did not answer within 1 s (the connection was dropped)"),
        "{text}"
    );
    assert!(
        proxy.faults() >= 2,
        "the retry hung too: {}",
        proxy.faults()
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    proxy.pass();
    ledger.delegation(&id).expect("answered again");
}

#[test]
fn an_idle_listener_outlives_the_call_deadline_and_still_hears() {
    use std::time::{Duration, Instant};
    let url = fresh_database(&pg_admin_url());
    // A call would be given up after 0.4 s without an answer.
    let target = PgTarget::parse(&url, None)
        .expect("the URL parses")
        .with_statement_timeout(Duration::from_millis(200));
    let ledger = Ledger::connect(&target, LedgerConfig::default(), TokenSource::Seeded(7))
        .expect("connects");
    let mut listener = ledger
        .listen(&[Listen::Events])
        .expect("listens")
        .expect("PostgreSQL notifies");
    assert!(listener.hears_notifications());
    // Idle far longer than a call may wait: nothing is wrong with it.
    let idle = listener
        .wait(Duration::from_millis(1_500))
        .expect("an idle listener is not a hung one");
    assert!(idle.is_empty(), "{idle:?}");
    let id = unit(&ledger, 1);
    finish(&ledger, &id, 0, T0);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let notices = listener.wait(Duration::from_millis(200)).expect("waits");
        assert!(
            !notices.contains(&Notice::Reconnected),
            "the connection was kept: {notices:?}"
        );
        if notices.iter().any(|n| matches!(n, Notice::Event(_))) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the event's notification arrives"
        );
    }
}

/// Issue #22, defect 9: a process's calls and listeners share one server connection. Here a
/// host's listener (activity) and a consumer's (events) wait while calls from several threads
/// run between their waits; the ledger never holds more than one connection once idle, and
/// both listeners still hear what concerns them.
#[test]
fn a_ledger_its_listeners_and_concurrent_calls_share_one_connection() {
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let url = fresh_database(&pg_admin_url());
    let named = format!(
        "{url}{}application_name=one_conn",
        if url.contains('?') { '&' } else { '?' }
    );
    let target = PgTarget::parse(&named, None).expect("the URL parses");
    let ledger = Arc::new(
        Ledger::connect(&target, LedgerConfig::default(), TokenSource::Seeded(7))
            .expect("connects"),
    );
    let mut activity = ledger
        .listen(&[Listen::Activity])
        .expect("listens")
        .expect("PostgreSQL notifies");
    let mut events = ledger
        .listen(&[Listen::Events])
        .expect("listens")
        .expect("PostgreSQL notifies");
    assert!(activity.hears_notifications() && events.hears_notifications());
    let heard_activity = std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            if activity
                .wait(Duration::from_millis(200))
                .is_ok_and(|n| n.contains(&Notice::Activity))
            {
                return true;
            }
        }
        false
    });
    let heard_event = std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            if events
                .wait(Duration::from_millis(200))
                .is_ok_and(|n| n.iter().any(|n| matches!(n, Notice::Event(_))))
            {
                return true;
            }
        }
        false
    });
    // Calls from several threads while both listeners wait.
    let callers: Vec<_> = (0..3)
        .map(|_| {
            let ledger = Arc::clone(&ledger);
            std::thread::spawn(move || {
                for _ in 0..5 {
                    let id = unit(&ledger, 1);
                    finish(&ledger, &id, 0, T0);
                }
            })
        })
        .collect();
    for caller in callers {
        caller.join().expect("the calls succeed");
    }
    assert!(
        heard_activity.join().expect("joins"),
        "the host's listener hears"
    );
    assert!(
        heard_event.join().expect("joins"),
        "the consumer's listener hears"
    );
    // Once the calls are over, any extra connection they opened was closed.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let held = hermes_testkit::connections_named(&url, "one_conn");
        if held == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{held} connections held while idle"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Issue 42: while the server cannot be reached, a listener's wait sleeps out the pause
/// between connection attempts instead of failing at once, so a waiter that simply calls again
/// (a host's activity watch, a consumer's follower) makes one attempt per pause — 100 ms
/// doubling to 2 s — and a handful of calls, not one call per microsecond.
#[test]
fn a_listener_whose_server_is_unreachable_waits_out_the_pause_between_attempts() {
    use std::time::{Duration, Instant};
    let (ledger, proxy) = through_proxy();
    let mut listener = ledger
        .listen(&[Listen::Events])
        .expect("listens")
        .expect("PostgreSQL notifies");
    // The outage: every connection cut, every new one cut at its first byte.
    proxy.cut_after(0);
    proxy.drop_all();
    let before = proxy.accepted();
    let (mut waits, mut failures) = (0u64, 0u64);
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        waits += 1;
        if listener.wait(Duration::from_millis(500)).is_err() {
            failures += 1;
        }
    }
    let attempts = proxy.accepted() - before;
    // In 3 s from the first failure: attempts 0.1, 0.3, 0.7 and 1.5 s after it (the next at
    // 3.1 s), each wait ending at an attempt or at its 500 ms.
    assert!(
        (2..=6).contains(&attempts),
        "{attempts} connection attempts in 3 s"
    );
    assert!(waits <= 20, "{waits} waits in 3 s ({failures} failed)");
    assert!(
        failures <= attempts + 1,
        "{failures} failed waits for {attempts} attempts"
    );
    // The server answers again: the next attempt reconnects, and the listener says so.
    proxy.pass();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !listener
        .wait(Duration::from_millis(500))
        .is_ok_and(|n| n.contains(&Notice::Reconnected))
    {
        assert!(Instant::now() < deadline, "the listener reconnects");
    }
}
