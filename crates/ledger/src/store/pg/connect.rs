//! Opening one connection under a deadline, and saying what the server said when it refused
//! (SPEC §11.1): the socket, TLS, authentication and startup all fit in the connect timeout,
//! so an endpoint that accepts and never answers cannot hang a command.

use std::sync::mpsc;
use std::time::Duration;

use postgres::Client;
use postgres::error::SqlState;

use super::pool::{CONNECT_TIMEOUT, IDLE_IN_TRANSACTION_TIMEOUT, STATEMENT_TIMEOUT, one_line};
use super::url::PgTarget;

/// Why a connection could not be opened.
pub(super) enum Refused {
    /// The server (or the network) answered with an error.
    Error(postgres::Error),
    /// Nothing answered within the deadline.
    Silent(Duration),
}

/// Connects to `target`, the whole login within its connect timeout (the URL's
/// `connect_timeout`, else [`CONNECT_TIMEOUT`]). A login still hanging then is left to end on
/// its own thread (the TCP keepalives and user timeout end it once the peer is gone).
pub(super) fn connect_within(
    target: &PgTarget,
    tls: &tokio_postgres_rustls::MakeRustlsConnect,
) -> Result<Client, Refused> {
    let deadline = target
        .config
        .get_connect_timeout()
        .copied()
        .unwrap_or(CONNECT_TIMEOUT);
    let (config, tls) = (target.config.clone(), tls.clone());
    let settings = session_settings(config.get_options().unwrap_or_default());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // Over Unix-domain sockets only, the URL's parse set `sslmode` to disable (as libpq
        // ignores it there); no TLS connector is made either, having no server name to check.
        let in_the_clear = config.get_ssl_mode() == postgres::config::SslMode::Disable;
        let connected = if in_the_clear {
            config.connect(postgres::NoTls)
        } else {
            config.connect(tls)
        };
        let connected = connected.and_then(|mut client| {
            if !settings.is_empty() {
                client.batch_execute(&settings)?;
            }
            Ok(client)
        });
        // The receiver may have given up: the client is then dropped here.
        let _ = tx.send(connected);
    });
    match rx.recv_timeout(deadline) {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(err)) => Err(Refused::Error(err)),
        Err(_) => Err(Refused::Silent(deadline)),
    }
}

/// The server-side deadlines every session gets: `statement_timeout` ([`STATEMENT_TIMEOUT`])
/// and `idle_in_transaction_session_timeout` ([`IDLE_IN_TRANSACTION_TIMEOUT`]), each unless the
/// URL's `options` set it (the operator's choice wins). Set with `SET` once the session is open
/// rather than as startup `options`, which poolers refuse.
pub(super) fn session_settings(url_options: &str) -> String {
    [
        ("statement_timeout", STATEMENT_TIMEOUT),
        (
            "idle_in_transaction_session_timeout",
            IDLE_IN_TRANSACTION_TIMEOUT,
        ),
    ]
    .iter()
    .filter(|(name, _)| !url_options.contains(name))
    .map(|(name, limit)| format!("SET {name} = {};", limit.as_millis()))
    .collect::<Vec<_>>()
    .join(" ")
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
            Refused::Silent(deadline) => format!(
                "the PostgreSQL server at {server} did not answer the login within {} s",
                deadline.as_secs_f64()
            ),
        }
    }
}

/// One line for a connection that failed with `err`: what the server said, or that it cannot
/// be reached.
pub(super) fn describe(err: &postgres::Error, server: &str) -> String {
    match server_said(err) {
        Some(said) => format!("the PostgreSQL server at {server} {said}"),
        None => format!(
            "cannot reach the PostgreSQL server at {server}: {}",
            one_line(err)
        ),
    }
}
