//! A connection that reaches the server itself prepares its hot statements once they have run
//! a few times; one through a proxy or a pooler never does, since another client's statement
//! of the same name could be run there (<https://www.pgbouncer.org/features.html>). These run
//! against the throwaway test server whatever the backend under test.

use crate::common::*;
use hermes_ledger::*;
use hermes_pgcluster::FaultProxy;
use hermes_testkit::{
    PoolMode, deallocate_prepared_statements, fresh_database, pg_admin_url, pg_bouncer,
    prepared_statements,
};

fn connect(url: &str) -> Ledger {
    let target = PgTarget::parse(url, None).expect("the URL parses");
    Ledger::connect(&target, LedgerConfig::default(), TokenSource::Seeded(11)).expect("connects")
}

/// Runs `n` results through dispatch, finish, claim and ack, and checks that each was
/// delivered once.
fn deliver(ledger: &Ledger, n: u32) {
    for _ in 0..n {
        let id = unit(ledger, 1);
        finish(ledger, &id, 0, T0);
        let c = claimed(claim(ledger, &[key(&id, 0)], 60_000, T0));
        let acked = ledger.ack_outcome(c.token, T0.plus_ms(1)).expect("acks");
        assert!(!acked.repeated);
        let event = ledger.event(&key(&id, 0)).expect("reads").expect("exists");
        assert_eq!(event.state, EventState::Delivered);
        assert_eq!(event.attempts, 1, "claimed once");
    }
}

/// The prepared statements of `ledger`'s connection that call `function`.
fn calling(ledger: &Ledger, function: &str) -> usize {
    let call = format!("{function}(");
    prepared_statements(ledger)
        .iter()
        .filter(|text| text.contains(&call))
        .count()
}

#[test]
fn a_direct_connection_prepares_a_statement_once_it_ran_three_times() {
    let ledger = connect(&fresh_database(&pg_admin_url()));
    deliver(&ledger, 2);
    assert_eq!(
        (
            calling(&ledger, "hermes_claim"),
            calling(&ledger, "hermes_ack")
        ),
        (0, 0),
        "a statement run twice, as a short command runs it, is not prepared"
    );
    deliver(&ledger, 1);
    assert_eq!(
        (
            calling(&ledger, "hermes_claim"),
            calling(&ledger, "hermes_ack")
        ),
        (1, 1)
    );
    let prepared = prepared_statements(&ledger);
    assert!(
        prepared.len() > 2,
        "the dispatch's and the finish's statements too: {prepared:?}"
    );
    deliver(&ledger, 5);
    assert_eq!(
        prepared_statements(&ledger),
        prepared,
        "each is prepared once"
    );
}

#[test]
fn statements_dropped_behind_the_connections_back_run_unnamed_once_and_are_prepared_again() {
    let ledger = connect(&fresh_database(&pg_admin_url()));
    deliver(&ledger, 5);
    let prepared = prepared_statements(&ledger);
    deallocate_prepared_statements(&ledger);
    assert_eq!(prepared_statements(&ledger), Vec::<String>::new());
    // Every call and transaction meets its statement gone, which is harmless: it had not run.
    // The transitions run unnamed at once; a transaction runs again from the start.
    deliver(&ledger, 5);
    assert_eq!(prepared_statements(&ledger), prepared, "prepared anew");
    let listing = ledger.list(None, 100).expect("lists");
    let units = listing.running.len() + listing.queued.len() + listing.recent.len();
    assert_eq!(units, 10, "no dispatch recorded twice");
}

#[test]
fn a_connection_through_a_proxy_prepares_nothing() {
    let url = fresh_database(&pg_admin_url());
    let (proxy, via) = FaultProxy::in_front_of(&url).expect("the proxy starts");
    let ledger = connect(&via);
    deliver(&ledger, 10);
    assert_eq!(prepared_statements(&ledger), Vec::<String>::new());
    drop(proxy);
}

#[test]
fn a_connection_through_a_transaction_pooler_prepares_nothing() {
    // One server connection: what is read through the pooler is that connection's.
    let bouncer = pg_bouncer(PoolMode::Transaction, 1);
    let direct = fresh_database(&pg_admin_url());
    let database = direct
        .split('?')
        .next()
        .unwrap_or(&direct)
        .rsplit('/')
        .next();
    let ledger = connect(&bouncer.url(database.unwrap_or_default()));
    deliver(&ledger, 10);
    assert_eq!(prepared_statements(&ledger), Vec::<String>::new());
}
