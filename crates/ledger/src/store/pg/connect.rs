//! Opening one connection under a deadline, and saying what the server said when it refused:
//! the socket, TLS, authentication and startup all fit in the connect timeout, so an endpoint
//! that accepts and never answers cannot hang a command.

use std::time::Duration;

use postgres::error::SqlState;

use super::client::{Client, no_answer};
use super::retry::{CONNECT_TIMEOUT, IDLE_IN_TRANSACTION_TIMEOUT, one_line};
use super::url::PgTarget;

/// Why a connection could not be opened.
pub(super) enum Refused {
    /// The server (or the network) answered with an error.
    Error(postgres::Error),
    /// No socket could be opened (refused, unreachable, no such host).
    Io(std::io::Error),
    /// Nothing answered within the deadline.
    Silent(Duration),
    /// The server asked for a password and none was given.
    NoPassword,
}

/// Connects to `target`, the whole login within its connect timeout (the URL's
/// `connect_timeout`, else [`CONNECT_TIMEOUT`]), and sets the session's server-side
/// deadlines; every later call on the connection must hear from the server within
/// [`PgTarget::answer_within`].
pub(super) fn connect_within(
    target: &PgTarget,
    tls: &tokio_postgres_rustls::MakeRustlsConnect,
) -> Result<Client, Refused> {
    let (mut client, settings) = login(target, tls)?;
    if !settings.is_empty() {
        client.batch_execute(&settings).map_err(Refused::Error)?;
    }
    Ok(client)
}

/// [`connect_within`] without the session's deadlines, for a connection that runs one short
/// statement and closes (a listener's probe): the statement it would pay for them is saved,
/// and the client's own deadline ([`PgTarget::answer_within`]) still bounds the call.
pub(super) fn connect_bare(
    target: &PgTarget,
    tls: &tokio_postgres_rustls::MakeRustlsConnect,
) -> Result<Client, Refused> {
    login(target, tls).map(|(client, _)| client)
}

/// [`connect_within`], and the schema version recorded (`None`: hermes never created its
/// schema there), asked in the statement that sets the deadlines: a short-lived command's
/// first connection pays one statement for both, not two.
pub(super) fn connect_reading_schema(
    target: &PgTarget,
    tls: &tokio_postgres_rustls::MakeRustlsConnect,
) -> Result<(Client, Option<i32>), Refused> {
    let (mut client, settings) = login(target, tls)?;
    let version = "SELECT max(version) FROM hermes_schema";
    let both = match settings.strip_prefix("SELECT ") {
        Some(set) => format!("SELECT ({version}), {set}"),
        None => version.to_owned(),
    };
    match super::schema::schema_version_by(target, &mut client, &both) {
        Ok(Some(found)) => Ok((client, found)),
        // No schema: the failed statement set nothing either.
        Ok(None) => {
            if !settings.is_empty() {
                client.batch_execute(&settings).map_err(Refused::Error)?;
            }
            Ok((client, None))
        }
        Err(err) => Err(Refused::Error(err)),
    }
}

/// Logs in to `target` within its connect timeout (the URL's `connect_timeout`, else
/// [`CONNECT_TIMEOUT`]); returns the client and the statement that sets its deadlines
/// ([`session_settings`], empty when the URL sets both).
fn login(
    target: &PgTarget,
    tls: &tokio_postgres_rustls::MakeRustlsConnect,
) -> Result<(Client, String), Refused> {
    let deadline = target
        .config
        .get_connect_timeout()
        .copied()
        .unwrap_or(CONNECT_TIMEOUT);
    let settings = session_settings(
        target.config.get_options().unwrap_or_default(),
        target.statement_timeout,
    );
    // Over Unix-domain sockets only, the URL's parse set `sslmode` to disable (as libpq
    // ignores it there): the client then makes no TLS connection, having no server name.
    let client = Client::connect(&target.config, tls, deadline, target.answer_within())?;
    Ok((client, settings))
}

/// The server-side deadlines every session gets: `statement_timeout` (`statement_timeout`,
/// `ledger.statement_timeout_seconds`) and `idle_in_transaction_session_timeout`
/// ([`IDLE_IN_TRANSACTION_TIMEOUT`]), each unless the URL's `options` set it (the operator's
/// choice wins). Set once the session is open rather than as startup `options`, which poolers
/// refuse, and by one statement (`set_config(…, false)` is a session-wide `SET`): a
/// short-lived command pays one round trip for them, not one per setting.
pub(super) fn session_settings(url_options: &str, statement_timeout: Duration) -> String {
    let set: Vec<String> = [
        ("statement_timeout", statement_timeout),
        (
            "idle_in_transaction_session_timeout",
            IDLE_IN_TRANSACTION_TIMEOUT,
        ),
    ]
    .iter()
    .filter(|(name, _)| !url_options.contains(name))
    .map(|(name, limit)| format!("set_config('{name}', '{}', false)", limit.as_millis()))
    .collect();
    if set.is_empty() {
        return String::new();
    }
    format!("SELECT {}", set.join(", "))
}

/// What the server said, in words an operator acts on, when it refused for a reason of its
/// own (not a broken network); `None` for anything else.
pub(super) fn server_said(err: &postgres::Error) -> Option<String> {
    let db = err.as_db_error()?;
    let code = db.code();
    let what = if *code == SqlState::INVALID_PASSWORD
        || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
    {
        "refused the login (check the user and password)"
    } else if *code == SqlState::INVALID_CATALOG_NAME {
        "has no such database (create it, or fix the URL's database name)"
    } else if *code == SqlState::INSUFFICIENT_PRIVILEGE {
        "refused: missing rights (grant the role the rights on hermes' schema)"
    } else if *code == SqlState::READ_ONLY_SQL_TRANSACTION
        || db.message().contains("hot standby")
        || db.message().contains("recovery is in progress")
    {
        "is a read-only server (a hot standby?): point ledger.url at the primary"
    } else if *code == SqlState::TOO_MANY_CONNECTIONS {
        "has too many connections (raise max_connections, or run fewer hermes processes)"
    } else {
        return None;
    };
    Some(format!("{what}: {}", one_line(err)))
}

impl Refused {
    /// One line for `LedgerError::Unavailable`, naming `server` (never a password).
    pub(super) fn reason(&self, server: &str) -> String {
        match self {
            Refused::Error(err) => describe(err, server),
            Refused::Io(err) => format!(
                "cannot reach the PostgreSQL server at {server}: {}",
                hermes_stdx::one_line(&err.to_string())
            ),
            Refused::NoPassword => format!(
                "the PostgreSQL server at {server} asked for a password and none was given: \
                 put it in ledger.url (postgres://USER:PASSWORD@…), in PGPASSWORD, or in a \
                 password file (PGPASSFILE, else ~/.pgpass)"
            ),
            Refused::Silent(deadline) => format!(
                "the PostgreSQL server at {server} did not answer the login within {} s",
                deadline.as_secs_f64()
            ),
        }
    }
}

/// One line for an established connection that broke with `err` (a backend ended by an
/// operator, a restart or a failover; a connection cut on the way): what the server said, or
/// that the connection broke — not that the server cannot be reached, which it was.
pub(super) fn describe_broken(err: &postgres::Error, server: &str) -> String {
    if no_answer(err).is_some() || server_said(err).is_some() {
        return describe(err, server);
    }
    format!(
        "the connection to the PostgreSQL server at {server} broke: {}",
        one_line(err)
    )
}

/// One line for a connection that failed with `err`: what the server said, or that it cannot
/// be reached.
pub(super) fn describe(err: &postgres::Error, server: &str) -> String {
    if let Some(after) = no_answer(err) {
        return format!(
            "the PostgreSQL server at {server} did not answer within {} s (the connection was dropped)",
            after.as_secs_f64()
        );
    }
    match server_said(err) {
        Some(said) => format!("the PostgreSQL server at {server} {said}"),
        None => format!(
            "cannot reach the PostgreSQL server at {server}: {}",
            one_line(err)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_deadlines_are_one_statement_and_the_urls_options_win() {
        let both = session_settings("", Duration::from_secs(30));
        assert_eq!(
            both,
            format!(
                "SELECT set_config('statement_timeout', '30000', false), \
                 set_config('idle_in_transaction_session_timeout', '{}', false)",
                IDLE_IN_TRANSACTION_TIMEOUT.as_millis()
            )
        );
        let one = session_settings("-c statement_timeout=5000", Duration::from_secs(30));
        assert!(!one.contains("'statement_timeout'"), "{one}");
        assert!(one.starts_with("SELECT set_config('idle_in"), "{one}");
        let none = session_settings(
            "-c statement_timeout=5s -c idle_in_transaction_session_timeout=9s",
            Duration::from_secs(30),
        );
        assert_eq!(none, "");
    }
}
