//! Statements a connection prepares once and runs by name: the server parses and plans a hot
//! statement once per connection instead of on every run. That was about an eighth of the
//! one-caller cycle's time (three transition calls) and over a third of a busy host's
//! (`docs/benchmarks.md`).
//!
//! Only on a connection that reaches the server itself. Behind a pooler in transaction mode
//! the next run of a name may land on another server connection, which lacks it or — worse —
//! holds another client's statement of the same name (`tokio-postgres` numbers them per
//! process), so a prepared statement there could run something else
//! (<https://www.pgbouncer.org/features.html>). The proof: the address the server says it
//! accepted the connection on (`inet_server_addr()`, `inet_server_port()`) is the address the
//! socket connected to. A pooler or proxy in between makes two connections, so the two
//! differ; over a Unix-domain socket the server reports none and nothing is prepared. Asked
//! once per connection, and only when a statement is about to be prepared: a short-lived
//! command, whose statements run once or twice, prepares nothing and asks nothing.
//!
//! A prepared statement that fails because it is gone or its plan went stale (a migration
//! replaced what it calls) is forgotten with the others, and the statement runs unnamed
//! instead: it failed before it ran, in a transaction of its own, so running it again is
//! running it once.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use postgres::error::SqlState;
use postgres::types::{ToSql, Type};
use postgres::{Error, Row};
use tokio_postgres::Statement;

use super::{Client, Transaction};

/// Runs of one statement on a connection before it is prepared there (psycopg's default
/// threshold is 5; a transition runs thousands of times on a host's connection, a command's
/// once or twice).
const PREPARE_AFTER: u32 = 3;
/// The most statements one connection prepares, and the most texts whose runs it counts at
/// once: hermes' statements are fixed texts, a few dozen of them, so the bounds only keep a
/// caller with ever-new texts from growing the maps.
const MAX_PREPARED: usize = 64;
const MAX_COUNTED: usize = 256;

/// A connection's prepared statements, and what decides whether it prepares any.
pub(super) struct Prepared {
    /// The address the socket connected to (`None`: a Unix-domain socket).
    peer: Option<SocketAddr>,
    /// Whether the server accepted this very connection (asked once; `None`: not yet).
    direct: Option<bool>,
    /// Runs of each statement not prepared yet.
    runs: HashMap<String, u32>,
    statements: HashMap<String, Statement>,
    /// The statement that failed last was a prepared one, gone or stale.
    stale: bool,
}

impl Prepared {
    pub(super) fn new(peer: Option<SocketAddr>) -> Prepared {
        Prepared {
            peer,
            direct: None,
            runs: HashMap::new(),
            statements: HashMap::new(),
            stale: false,
        }
    }

    /// Forgets every statement (each asks the server to close it).
    fn forget(&mut self) {
        self.statements.clear();
        self.runs.clear();
    }

    /// Counts a run of `sql`; whether it has now run often enough to be prepared.
    fn count_run(&mut self, sql: &str) -> bool {
        if self.statements.len() >= MAX_PREPARED {
            return false;
        }
        if self.runs.len() >= MAX_COUNTED && !self.runs.contains_key(sql) {
            // Counts start again rather than shut a hot statement out for good.
            self.runs.clear();
        }
        let runs = self.runs.entry(sql.to_owned()).or_insert(0);
        *runs += 1;
        *runs >= PREPARE_AFTER
    }

    /// Keeps `statement`, prepared for `sql`.
    fn keep(&mut self, sql: &str, statement: &Statement) {
        self.runs.remove(sql);
        self.statements.insert(sql.to_owned(), statement.clone());
    }
}

/// Whether the address the server reports having accepted the connection on is `peer`.
fn same_address(peer: SocketAddr, host: Option<&str>, port: Option<i32>) -> bool {
    let Some(ip) = host.and_then(|host| host.parse::<IpAddr>().ok()) else {
        return false;
    };
    ip.to_canonical() == peer.ip().to_canonical() && port == Some(i32::from(peer.port()))
}

/// Whether a prepared statement failed for being prepared: it no longer exists on the
/// connection, or its cached plan may not be used (a migration changed what it reads).
fn unprepared(err: &Error) -> bool {
    err.code().is_some_and(|code| {
        *code == SqlState::INVALID_SQL_STATEMENT_NAME || *code == SqlState::FEATURE_NOT_SUPPORTED
    })
}

impl Client {
    /// Runs `sql` in a transaction of its own (none may be open), its parameters' types given:
    /// unnamed like [`Client::query_typed`] until it has run [`PREPARE_AFTER`] times on this
    /// connection, then prepared once and run by name, on a connection that reaches the
    /// server itself. A prepared statement that is gone or stale is forgotten, and `sql` runs
    /// unnamed instead.
    pub(in crate::store::pg) fn query_hot(
        &mut self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, Error> {
        match self.query_hot_in_transaction(sql, params) {
            Err(_) if self.take_stale() => self.query_typed(sql, params),
            result => result,
        }
    }

    /// [`Client::query_hot`] inside an open transaction, which a failed statement aborts: a
    /// prepared statement that is gone or stale is forgotten and fails the transaction, and
    /// [`Client::take_stale`] then says so (the transaction is to run again, unprepared).
    fn query_hot_in_transaction(
        &mut self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, Error> {
        match self.run_prepared(sql, params) {
            Some(Err(err)) if unprepared(&err) => {
                self.prepared.forget();
                self.prepared.stale = true;
                Err(err)
            }
            Some(result) => result,
            None => self.query_typed(sql, params),
        }
    }

    /// Whether the statement that just failed was a prepared one found gone or stale (and
    /// now forgotten); asking clears it.
    fn take_stale(&mut self) -> bool {
        std::mem::take(&mut self.prepared.stale)
    }

    /// Runs `sql` by name when it is prepared here or is now to be; `None` when it runs
    /// unnamed.
    fn run_prepared(
        &mut self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Option<Result<Vec<Row>, Error>> {
        let kept = self.prepared.statements.get(sql).cloned();
        let statement = match kept {
            Some(statement) => statement,
            None if self.prepared.count_run(sql) && self.reaches_the_server() => {
                let types: Vec<Type> = params.iter().map(|(_, ty)| ty.clone()).collect();
                match self.call(|c| c.prepare_typed(sql, &types)) {
                    Ok(statement) => {
                        self.prepared.keep(sql, &statement);
                        statement
                    }
                    Err(err) => return Some(Err(err)),
                }
            }
            None => return None,
        };
        let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(value, _)| *value).collect();
        Some(self.call(|c| c.query(&statement, &values)))
    }

    /// Whether this connection reaches the server itself, not a pooler or proxy: asked of the
    /// server once (see the module's header); `false` when that cannot be shown. An answer
    /// that did not come (a broken connection, an aborted transaction) is asked again later.
    fn reaches_the_server(&mut self) -> bool {
        if let Some(direct) = self.prepared.direct {
            return direct;
        }
        let Some(peer) = self.prepared.peer else {
            self.prepared.direct = Some(false);
            return false;
        };
        let Ok(rows) = self.query_typed("SELECT host(inet_server_addr()), inet_server_port()", &[])
        else {
            return false;
        };
        let direct = rows.first().is_some_and(|row| {
            let host: Option<String> = row.try_get(0).unwrap_or_default();
            let port: Option<i32> = row.try_get(1).unwrap_or_default();
            same_address(peer, host.as_deref(), port)
        });
        self.prepared.direct = Some(direct);
        direct
    }
}

impl Transaction<'_> {
    /// Runs `sql` as [`Client::query_hot_in_transaction`] does: prepared once it is hot.
    pub(in crate::store::pg) fn query_hot(
        &mut self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, Error> {
        self.client.query_hot_in_transaction(sql, params)
    }

    /// Whether the statement that just failed was a prepared one, gone or stale.
    pub(in crate::store::pg) fn take_stale(&mut self) -> bool {
        self.client.take_stale()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_address_the_socket_reached_is_the_server() {
        let peer: SocketAddr = "127.0.0.1:5432".parse().unwrap();
        assert!(same_address(peer, Some("127.0.0.1"), Some(5432)));
        // A pooler on another port, or the server behind it on another host.
        assert!(!same_address(peer, Some("127.0.0.1"), Some(6432)));
        assert!(!same_address(peer, Some("10.0.0.7"), Some(5432)));
        // A Unix-domain socket on the server's side, or an answer that is not an address.
        assert!(!same_address(peer, None, None));
        assert!(!same_address(peer, Some("local"), Some(5432)));
        // The same address written as IPv4-mapped IPv6.
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:5432".parse().unwrap();
        assert!(same_address(mapped, Some("127.0.0.1"), Some(5432)));
        assert!(same_address(peer, Some("::ffff:127.0.0.1"), Some(5432)));
    }

    #[test]
    fn a_statement_is_prepared_on_its_third_run_and_the_texts_counted_are_bounded() {
        let mut prepared = Prepared::new(None);
        assert!(!prepared.count_run("SELECT 1"));
        assert!(!prepared.count_run("SELECT 1"));
        assert!(prepared.count_run("SELECT 1"));
        // Ever-new texts start the counts again instead of filling the map for good.
        let mut counted = Prepared::new(None);
        for n in 0..MAX_COUNTED + 10 {
            counted.count_run(&format!("SELECT {n}"));
        }
        assert!(counted.runs.len() <= MAX_COUNTED);
        assert!(!counted.count_run("SELECT hot"));
        assert!(!counted.count_run("SELECT hot"));
        assert!(counted.count_run("SELECT hot"));
    }
}
