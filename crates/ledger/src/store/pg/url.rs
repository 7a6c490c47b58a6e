//! Where a PostgreSQL ledger is: its URL parsed (libpq's forms), and the TLS connector its
//! `sslmode` asks for.

use std::str::FromStr;

use super::retry::{
    ANSWER_MARGIN, CONNECT_TIMEOUT, KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_RETRIES,
    STATEMENT_TIMEOUT, TCP_USER_TIMEOUT,
};
use super::tls::{Check, Roots, Verify};
use crate::error::{LedgerError, Result};

/// Whether `url` names a PostgreSQL ledger.
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// Where a PostgreSQL ledger is, parsed from its URL; `Debug` and `Display` never show the
/// password.
#[derive(Clone)]
pub struct PgTarget {
    pub(super) config: tokio_postgres::Config,
    /// `postgres://user@host:port/dbname`, for messages.
    pub(super) display: String,
    /// `host:port`, for the one-line error when the server cannot be reached.
    pub(super) server: String,
    /// The deployment's namespace (`ledger.namespace`); `None`: the default, `hermes`, whose
    /// tables are where hermes always kept them (the `search_path`, normally `public`).
    pub(super) namespace: Option<hermes_settings::Namespace>,
    /// The TLS its `sslmode` asks for (`tls::connector`).
    pub(super) tls: tokio_postgres_rustls::MakeRustlsConnect,
    /// Where `LISTEN` goes (`ledger.listen_url`: a direct connection past a pooler in
    /// transaction mode); `None`: here.
    pub(super) listen: Option<Box<PgTarget>>,
    /// The server ends a statement that runs longer (`ledger.statement_timeout_seconds`,
    /// set per session); the client gives up on a call a margin later
    /// ([`PgTarget::answer_within`]).
    pub(super) statement_timeout: std::time::Duration,
}

impl std::fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display)
    }
}

impl std::fmt::Display for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display)
    }
}

impl PgTarget {
    /// Parses a libpq URL (`postgres://` or `postgresql://`: host, port, user, password,
    /// dbname, `sslmode` of `disable`, `prefer` or `require`); a URL without a password takes
    /// `PGPASSWORD`'s. The error never contains the password.
    pub fn parse(url: &str, pgpassword: Option<&str>) -> Result<PgTarget> {
        let env = PgEnv {
            password: pgpassword.map(str::to_owned),
            ..PgEnv::default()
        };
        PgTarget::parse_env(url, &env)
    }

    /// Parses a libpq URL, taking what it leaves out from libpq's environment (`env`): the
    /// host, port, user, database and `sslmode` (`PGHOST`, `PGPORT`, `PGUSER`, `PGDATABASE`,
    /// `PGSSLMODE`) and the password (`PGPASSWORD`). What the URL says wins.
    pub fn parse_env(url: &str, env: &PgEnv) -> Result<PgTarget> {
        let invalid = |why: String| LedgerError::Invalid(format!("ledger.url: {why}"));
        if !is_postgres_url(url) {
            return Err(invalid(
                "expected a postgres:// or postgresql:// URL".into(),
            ));
        }
        let (url, verify) = verification(url, env)?;
        let url = &env.complete_authority(&url)?;
        let mut config = tokio_postgres::Config::from_str(url).map_err(|err| {
            // The parser's message quotes at most an option name or value, never the URL.
            invalid(format!("not a valid PostgreSQL URL ({err})"))
        })?;
        env.fill(url, &mut config)?;
        if config.get_user().is_none() {
            return Err(invalid(
                "the URL names no user (postgres://USER@HOST/DB, or PGUSER)".into(),
            ));
        }
        deadlines(&mut config);
        // libpq ignores `sslmode` on Unix-domain sockets (SSL is for TCP/IP connections only:
        // libpq-connect, "sslmode"); a TLS handshake there has no server name to verify and
        // fails. A URL of sockets only connects in the clear, as libpq does.
        #[cfg(unix)]
        if !config.get_hosts().is_empty()
            && config
                .get_hosts()
                .iter()
                .all(|h| matches!(h, postgres::config::Host::Unix(_)))
        {
            config.ssl_mode(postgres::config::SslMode::Disable);
        }
        if config.get_application_name().is_none() {
            config.application_name("hermes");
        }
        let host = first_host(&config);
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let server = format!("{host}:{port}");
        let display = format!(
            "postgres://{}@{server}/{}",
            config.get_user().unwrap_or_default(),
            config
                .get_dbname()
                .or(config.get_user())
                .unwrap_or_default()
        );
        // Over sockets only there is no TLS to verify (libpq ignores sslmode there too).
        let verify = verify.filter(|_| config.get_ssl_mode() != postgres::config::SslMode::Disable);
        let tls = super::tls::connector(verify.as_ref())?;
        Ok(PgTarget {
            config,
            display,
            server,
            namespace: None,
            tls,
            listen: None,
            statement_timeout: STATEMENT_TIMEOUT,
        })
    }

    /// The password file's lines (libpq's `host:port:database:user:password`, `:` and `\\`
    /// escaped) that give this target's password for exactly this server, database and user,
    /// and its listeners' (`ledger.listen_url`) for theirs; `None` without a password.
    pub fn passfile_lines(&self) -> Option<String> {
        let own = self.passfile_line();
        let listen = self.listen.as_ref().and_then(|l| l.passfile_line());
        match (own, listen) {
            (Some(own), Some(listen)) if own != listen => Some(own + &listen),
            (own, listen) => own.or(listen),
        }
    }

    fn passfile_line(&self) -> Option<String> {
        let password = self.config.get_password()?;
        let escape = |field: &str| field.replace('\\', "\\\\").replace(':', "\\:");
        let host = first_host(&self.config);
        let user = self.config.get_user().unwrap_or_default();
        let fields = [
            host,
            self.config
                .get_ports()
                .first()
                .copied()
                .unwrap_or(5432)
                .to_string(),
            self.config.get_dbname().unwrap_or(user).to_owned(),
            user.to_owned(),
            String::from_utf8_lossy(password).into_owned(),
        ];
        Some(
            fields
                .iter()
                .map(|f| escape(f))
                .collect::<Vec<_>>()
                .join(":")
                + "\n",
        )
    }

    /// The same database, in the deployment namespace `namespace` (`ledger.namespace`): a
    /// PostgreSQL schema of that name holding this deployment's tables, created by migration.
    /// The default namespace keeps the tables where every hermes before namespaces put them.
    pub fn in_namespace(mut self, namespace: &hermes_settings::Namespace) -> PgTarget {
        self.namespace = (!namespace.is_default()).then(|| namespace.clone());
        self
    }

    /// The same ledger, its notifications listened for at `direct` (`ledger.listen_url`): a
    /// connection to the same database that bypasses a pooler in transaction mode, where
    /// `LISTEN` cannot work (see README, "Behind a pooler").
    pub fn listening_at(mut self, direct: PgTarget) -> PgTarget {
        let direct = direct.with_statement_timeout(self.statement_timeout);
        self.listen = Some(Box::new(direct));
        self
    }

    /// The same ledger, each statement ended by the server after `timeout`
    /// (`ledger.statement_timeout_seconds`) unless the URL's `options` set `statement_timeout`,
    /// and each round trip given up by the client when nothing answers a margin later.
    pub fn with_statement_timeout(mut self, timeout: std::time::Duration) -> PgTarget {
        self.statement_timeout = timeout;
        self.listen = self
            .listen
            .map(|l| Box::new(l.with_statement_timeout(timeout)));
        self
    }

    /// How long a call waits for a byte from the server before the connection is taken for
    /// broken: the statement timeout in force (the URL's `options`, else
    /// `ledger.statement_timeout_seconds`) and a margin for the answer to travel, as long again
    /// as the timeout up to [`ANSWER_MARGIN`]. A server that ended the statement on time has
    /// answered by then.
    pub(super) fn answer_within(&self) -> std::time::Duration {
        let options = self.config.get_options().unwrap_or_default();
        let timeout = options_statement_timeout(options)
            .filter(|t| !t.is_zero())
            .unwrap_or(self.statement_timeout);
        timeout + timeout.min(ANSWER_MARGIN)
    }

    /// Where this ledger's listeners connect.
    pub(super) fn listen_target(&self) -> &PgTarget {
        self.listen.as_deref().unwrap_or(self)
    }

    /// The deployment namespace (`hermes` by default).
    pub fn namespace(&self) -> &str {
        self.namespace
            .as_ref()
            .map_or(hermes_settings::Namespace::DEFAULT, |ns| ns.as_str())
    }

    /// The notification channel `channel` (`hermes_activity`, `hermes_events`) of this
    /// namespace: `NAME_activity`, `NAME_events` (the default namespace's are the old names).
    pub(super) fn channel(&self, channel: &str) -> String {
        match &self.namespace {
            None => channel.to_owned(),
            Some(ns) => format!(
                "{ns}_{}",
                channel.strip_prefix("hermes_").unwrap_or(channel)
            ),
        }
    }

    /// `sql` with every table of hermes' (`hermes_…` not qualified already, and not a column
    /// qualifier `hermes_x.column`) qualified by the namespace's schema; unchanged in the
    /// default namespace. A namespace is `[a-z_][a-z0-9_]*` (checked by `settings`), so
    /// quoting it is enough.
    pub(super) fn qualify<'a>(&self, sql: &'a str) -> std::borrow::Cow<'a, str> {
        let Some(namespace) = &self.namespace else {
            return std::borrow::Cow::Borrowed(sql);
        };
        let schema = quote_ident(namespace.as_str());
        let bytes = sql.as_bytes();
        let mut out = String::with_capacity(sql.len() + 64);
        let mut last = 0;
        let mut from = 0;
        while let Some(found) = sql[from..].find("hermes_") {
            let at = from + found;
            from = at + "hermes_".len();
            let before = at.checked_sub(1).map(|i| bytes[i]);
            let joined = before.is_some_and(|b| b.is_ascii_alphanumeric() || b"_.\"$".contains(&b));
            let end = at
                + sql[at..]
                    .bytes()
                    .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
                    .count();
            let column_qualifier = bytes.get(end) == Some(&b'.');
            if joined || column_qualifier {
                continue;
            }
            out.push_str(&sql[last..at]);
            out.push_str(&schema);
            out.push('.');
            last = at;
        }
        out.push_str(&sql[last..]);
        std::borrow::Cow::Owned(out)
    }

    /// `postgres://user@host:port/dbname`, without the password.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// The same server with another database.
    pub fn with_dbname(&self, dbname: &str) -> PgTarget {
        let mut other = self.clone();
        other.config.dbname(dbname);
        other.display = format!(
            "postgres://{}@{}/{dbname}",
            other.config.get_user().unwrap_or_default(),
            other.server
        );
        other.listen = other.listen.map(|l| Box::new(l.with_dbname(dbname)));
        other
    }
}

/// libpq's environment variables hermes honours, as read by the caller (the ledger reads no
/// environment): each fills in what the URL leaves out.
#[derive(Clone, Default)]
pub struct PgEnv {
    /// `PGHOST` (a path: a Unix-socket directory).
    pub host: Option<String>,
    /// `PGPORT`.
    pub port: Option<String>,
    /// `PGUSER`.
    pub user: Option<String>,
    /// `PGDATABASE`.
    pub dbname: Option<String>,
    /// `PGSSLMODE`.
    pub sslmode: Option<String>,
    /// `PGSSLROOTCERT`.
    pub sslrootcert: Option<String>,
    /// `HOME`, for libpq's default `sslrootcert` (`~/.postgresql/root.crt`) and password file
    /// (`~/.pgpass`).
    pub home: Option<String>,
    /// `PGPASSFILE`.
    pub passfile: Option<String>,
    /// `PGPASSWORD`.
    pub password: Option<String>,
}

impl std::fmt::Debug for PgEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgEnv")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("dbname", &self.dbname)
            .field("sslmode", &self.sslmode)
            .field("sslrootcert", &self.sslrootcert)
            .field("passfile", &self.passfile)
            .field("password", &self.password.as_ref().map(|_| "…"))
            .finish()
    }
}

impl PgEnv {
    /// The variables as `var` reads them (`|name| std::env::var(name).ok()`); empty ones are
    /// unset, as for libpq.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> PgEnv {
        let get = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        PgEnv {
            host: get("PGHOST"),
            port: get("PGPORT"),
            user: get("PGUSER"),
            dbname: get("PGDATABASE"),
            sslmode: get("PGSSLMODE"),
            sslrootcert: get("PGSSLROOTCERT"),
            home: get("HOME"),
            passfile: get("PGPASSFILE"),
            password: get("PGPASSWORD"),
        }
    }

    fn port(&self) -> Result<Option<u16>> {
        self.port
            .as_deref()
            .map(|port| {
                port.trim().parse().map_err(|_| {
                    LedgerError::Invalid(format!("PGPORT: {port:?} is not a port number"))
                })
            })
            .transpose()
    }

    /// `url` with `PGHOST` and `PGPORT` written into its authority where it names no host or
    /// no port (the URL parser would otherwise fill in `localhost` and 5432 itself).
    fn complete_authority(&self, url: &str) -> Result<String> {
        let port = self.port()?;
        let Some((scheme, rest)) = url.split_once("://") else {
            return Ok(url.to_owned());
        };
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let (userinfo, hosts) = match authority.rfind('@') {
            Some(at) => authority.split_at(at + 1),
            None => ("", authority),
        };
        let tcp_host = self.host.as_deref().filter(|h| !h.starts_with('/'));
        let hosts = match (hosts.is_empty(), tcp_host) {
            (true, Some(host)) => host.to_owned(),
            _ => hosts.to_owned(),
        };
        let hosts = match port {
            Some(port) if !hosts.is_empty() => hosts
                .split(',')
                .map(|host| {
                    let named = host.rsplit_once(':').is_some_and(|(_, p)| !p.contains(']'));
                    if named {
                        host.to_owned()
                    } else {
                        format!("{host}:{port}")
                    }
                })
                .collect::<Vec<_>>()
                .join(","),
            _ => hosts,
        };
        Ok(format!("{scheme}://{userinfo}{hosts}{tail}"))
    }

    fn fill(&self, url: &str, config: &mut tokio_postgres::Config) -> Result<()> {
        let invalid = |why: String| LedgerError::Invalid(why);
        // A Unix-socket directory in PGHOST (a TCP one went into the URL's authority).
        if config.get_hosts().is_empty()
            && let Some(host) = self.host.as_deref().filter(|h| h.starts_with('/'))
        {
            config.host(host);
        }
        if config.get_ports().is_empty()
            && let Some(port) = self.port()?
        {
            config.port(port);
        }
        if config.get_user().is_none()
            && let Some(user) = &self.user
        {
            config.user(user);
        }
        if config.get_dbname().is_none()
            && let Some(dbname) = &self.dbname
        {
            config.dbname(dbname);
        }
        let query = url.split_once('?').map_or("", |(_, q)| q);
        let url_sets_sslmode = query.split('&').any(|kv| kv.starts_with("sslmode="));
        if !url_sets_sslmode && let Some(mode) = &self.sslmode {
            let mode = match mode.trim() {
                "disable" => postgres::config::SslMode::Disable,
                "prefer" | "allow" => postgres::config::SslMode::Prefer,
                "require" | "verify-ca" | "verify-full" => postgres::config::SslMode::Require,
                other => {
                    return Err(invalid(format!(
                        "PGSSLMODE: {other:?} is not supported (use disable, prefer, require, verify-ca or verify-full)"
                    )));
                }
            };
            config.ssl_mode(mode);
        }
        if config.get_password().is_none()
            && let Some(password) = self.password.as_deref().filter(|p| !p.is_empty())
        {
            config.password(password);
        }
        // Last, libpq's password file: where a child's hermes, given the URL without the
        // password (`url_without_password`), finds it.
        if config.get_password().is_none()
            && let Some(file) =
                super::credentials::passfile(self.passfile.as_deref(), self.home.as_deref())
        {
            let host = first_host(config);
            let user = config.get_user().unwrap_or_default().to_owned();
            let database = config.get_dbname().unwrap_or(&user).to_owned();
            let wanted = super::credentials::Wanted {
                host: &host,
                port: config.get_ports().first().copied().unwrap_or(5432),
                database: &database,
                user: &user,
            };
            if let Some(password) = super::credentials::lookup(&file, &wanted) {
                config.password(password);
            }
        }
        Ok(())
    }
}

/// The first host `config` names (a Unix-socket directory as its path), `localhost` if none:
/// what messages name and the password file is matched against.
fn first_host(config: &tokio_postgres::Config) -> String {
    match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(host)) => host.clone(),
        #[cfg(unix)]
        Some(postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_owned(),
    }
}

/// Takes `sslmode=verify-ca|verify-full` and `sslrootcert` out of `url`'s query (the URL parser
/// knows neither), or from `PGSSLMODE`/`PGSSLROOTCERT` where the URL says nothing, and leaves
/// `sslmode=require` for the parser: the encryption they imply. Without `sslrootcert` the
/// authorities are libpq's default file, `~/.postgresql/root.crt`.
fn verification(url: &str, env: &PgEnv) -> Result<(String, Option<Verify>)> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut kept: Vec<String> = Vec::new();
    let (mut mode, mut root) = (None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("sslmode", value)) if value.starts_with("verify-") => {
                mode = Some(value.to_owned());
                kept.push("sslmode=require".to_owned());
            }
            Some(("sslmode", value)) => {
                mode = Some(value.to_owned());
                kept.push(pair.to_owned());
            }
            Some(("sslrootcert", value)) => root = Some(percent_decoded(value)),
            _ => kept.push(pair.to_owned()),
        }
    }
    let check = match mode
        .or_else(|| env.sslmode.clone())
        .as_deref()
        .map(str::trim)
    {
        Some("verify-ca") => Some(Check::Authority),
        Some("verify-full") => Some(Check::Full),
        Some(other) if other.starts_with("verify-") => {
            return Err(LedgerError::Invalid(format!(
                "ledger.url: sslmode {other:?} is not supported (use disable, prefer, require, verify-ca or verify-full)"
            )));
        }
        _ => None,
    };
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    let verify = check.map(|check| {
        let roots = match root.or_else(|| env.sslrootcert.clone()) {
            Some(root) if root == "system" => Roots::System,
            Some(root) => Roots::File(root.into()),
            None => Roots::File(
                std::path::Path::new(env.home.as_deref().unwrap_or("~"))
                    .join(".postgresql/root.crt"),
            ),
        };
        Verify { check, roots }
    });
    Ok((url, verify))
}

/// A URL query value with its `%XX` escapes decoded (invalid ones kept as written).
fn percent_decoded(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every round trip gets a deadline: the login its connect timeout (the URL's, or
/// [`CONNECT_TIMEOUT`]; enforced by `client::Client::connect`); a peer that stops
/// acknowledging is dropped by the kernel after [`TCP_USER_TIMEOUT`], an idle one that vanished
/// after the keepalives; the server itself ends a statement and an idle transaction on
/// time (`connect::session_settings`, set on every new session); and a call that hears nothing
/// for [`PgTarget::answer_within`] fails, its connection dropped (`client.rs`), for a peer
/// that acknowledges and never answers.
fn deadlines(config: &mut tokio_postgres::Config) {
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    config
        .tcp_user_timeout(TCP_USER_TIMEOUT)
        .keepalives(true)
        .keepalives_idle(KEEPALIVE_IDLE)
        .keepalives_interval(KEEPALIVE_INTERVAL)
        .keepalives_retries(KEEPALIVE_RETRIES);
}

/// The `statement_timeout` the URL's `options` set (`-c statement_timeout=5000`, `=5s`,
/// `=2min`: PostgreSQL's units, milliseconds when none), if it sets one this can read.
fn options_statement_timeout(options: &str) -> Option<std::time::Duration> {
    let value = options
        .split_whitespace()
        .filter_map(|word| word.split_once("statement_timeout="))
        .map(|(_, value)| value.trim_matches(['\'', '"']))
        .next_back()?;
    let digits = value.bytes().take_while(u8::is_ascii_digit).count();
    let number: u64 = value[..digits].parse().ok()?;
    let ms = match value[digits..].trim() {
        "" | "ms" => number,
        "s" => number.checked_mul(1_000)?,
        "min" => number.checked_mul(60_000)?,
        "h" => number.checked_mul(3_600_000)?,
        _ => return None,
    };
    Some(std::time::Duration::from_millis(ms))
}

/// `name` as a quoted SQL identifier (`"name"`, any `"` doubled).
pub(super) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(namespace: &str) -> PgTarget {
        let ns = hermes_settings::Namespace::parse("test", namespace).expect("a namespace");
        PgTarget::parse("postgres://u@h/d", None)
            .expect("parses")
            .in_namespace(&ns)
    }

    #[test]
    fn the_passfile_line_gives_the_password_back_for_exactly_this_target() {
        use super::super::credentials::{Wanted, find};
        let target = PgTarget::parse("postgres://u:p%3Aw%5Cx@db:6543/x", None).expect("parses");
        let line = target.passfile_line().expect("a password");
        assert_eq!(line, "db:6543:x:u:p\\:w\\\\x\n");
        let wanted = |database| Wanted {
            host: "db",
            port: 6543,
            database,
            user: "u",
        };
        assert_eq!(find(&line, &wanted("x")).as_deref(), Some("p:w\\x"));
        assert_eq!(find(&line, &wanted("other")), None);
        let bare = PgTarget::parse("postgres://u@db/x", None).expect("parses");
        assert_eq!(bare.passfile_line(), None);
        // Past a pooler, the listeners' direct connection has a line of its own.
        let pooled = PgTarget::parse("postgres://u:p@bouncer:6432/x", None)
            .expect("parses")
            .listening_at(PgTarget::parse("postgres://u:q@db:5432/x", None).expect("parses"));
        assert_eq!(
            pooled.passfile_lines().as_deref(),
            Some("bouncer:6432:x:u:p\ndb:5432:x:u:q\n")
        );
        assert_eq!(bare.passfile_lines(), None);
    }

    #[test]
    fn verify_modes_come_from_the_url_or_pgsslmode_and_leave_require_to_the_parser() {
        let env = PgEnv {
            sslmode: Some("verify-ca".into()),
            sslrootcert: Some("/etc/env-root.crt".into()),
            home: Some("/home/op".into()),
            ..PgEnv::default()
        };
        let (url, verify) = verification(
            "postgres://u@h/d?sslmode=verify-full&sslrootcert=%2Fa%20b.crt&x=1",
            &env,
        )
        .expect("parses");
        assert_eq!(url, "postgres://u@h/d?sslmode=require&x=1");
        assert_eq!(
            verify,
            Some(Verify {
                check: Check::Full,
                roots: Roots::File("/a b.crt".into())
            })
        );
        let (url, verify) = verification("postgres://u@h/d", &env).expect("parses");
        assert_eq!(url, "postgres://u@h/d");
        assert_eq!(
            verify,
            Some(Verify {
                check: Check::Authority,
                roots: Roots::File("/etc/env-root.crt".into())
            })
        );
        let only_home = PgEnv {
            sslrootcert: None,
            ..env.clone()
        };
        let (_, verify) =
            verification("postgres://u@h/d?sslrootcert=system", &only_home).expect("parses");
        assert_eq!(verify.map(|v| v.roots), Some(Roots::System));
        let (_, verify) = verification("postgres://u@h/d", &only_home).expect("parses");
        assert_eq!(
            verify.map(|v| v.roots),
            Some(Roots::File("/home/op/.postgresql/root.crt".into())),
            "libpq's default file"
        );
        let (_, none) = verification("postgres://u@h/d?sslmode=require", &env).expect("parses");
        assert_eq!(none, None, "the URL's sslmode wins over PGSSLMODE");
        assert!(verification("postgres://u@h/d?sslmode=verify-some", &env).is_err());
    }

    #[test]
    fn the_call_deadline_is_the_statement_timeout_in_force_and_a_margin() {
        use std::time::Duration;
        let t = PgTarget::parse("postgres://u@h/d", None).expect("parses");
        assert_eq!(t.answer_within(), Duration::from_secs(35), "30 s and 5 s");
        let short = t.clone().with_statement_timeout(Duration::from_secs(1));
        assert_eq!(short.answer_within(), Duration::from_secs(2), "1 s and 1 s");
        let url = "postgres://u@h/d?options=-c%20statement_timeout%3D2min";
        let operators = PgTarget::parse(url, None).expect("parses");
        assert_eq!(
            operators.answer_within(),
            Duration::from_secs(125),
            "the URL's statement_timeout wins"
        );
        for (options, ms) in [
            ("-c statement_timeout=1500", Some(1_500)),
            ("-c statement_timeout=3s -c lock_timeout=1s", Some(3_000)),
            ("-cstatement_timeout='2min'", Some(120_000)),
            ("-c statement_timeout=0", Some(0)),
            ("-c statement_timeout=1d", None),
            ("-c lock_timeout=5s", None),
        ] {
            assert_eq!(
                options_statement_timeout(options),
                ms.map(Duration::from_millis),
                "{options}"
            );
        }
        let off = PgTarget::parse("postgres://u@h/d?options=-c%20statement_timeout%3D0", None)
            .expect("parses");
        assert_eq!(
            off.answer_within(),
            Duration::from_secs(35),
            "no server limit: the setting's deadline still holds"
        );
    }

    #[test]
    fn a_namespace_qualifies_hermes_tables_and_nothing_else() {
        let t = target("team_a");
        assert_eq!(t.namespace(), "team_a");
        assert_eq!(
            t.qualify("SELECT record FROM hermes_units u JOIN hermes_children c ON c.unit = u.id"),
            r#"SELECT record FROM "team_a".hermes_units u JOIN "team_a".hermes_children c ON c.unit = u.id"#
        );
        assert_eq!(
            t.qualify(
                "INSERT INTO hermes_meta (key, value) VALUES ($1, 1) \
                 ON CONFLICT (key) DO UPDATE SET value = hermes_meta.value + 1"
            ),
            "INSERT INTO \"team_a\".hermes_meta (key, value) VALUES ($1, 1) \
             ON CONFLICT (key) DO UPDATE SET value = hermes_meta.value + 1",
            "a column's table qualifier names the target as it is"
        );
        assert_eq!(
            t.qualify("SELECT to_regclass('hermes_schema') IS NOT NULL"),
            r#"SELECT to_regclass('"team_a".hermes_schema') IS NOT NULL"#
        );
        assert_eq!(
            t.qualify(r#"SELECT 1 FROM "x".hermes_units, my_hermes_units"#),
            r#"SELECT 1 FROM "x".hermes_units, my_hermes_units"#,
            "qualified or longer names are left alone"
        );
        assert_eq!(t.channel("hermes_events"), "team_a_events");
        assert_eq!(t.channel("hermes_activity"), "team_a_activity");
    }

    #[test]
    fn the_default_namespace_is_the_tables_and_channels_hermes_always_used() {
        for t in [
            target("hermes"),
            PgTarget::parse("postgres://u@h/d", None).expect("parses"),
        ] {
            assert_eq!(t.namespace(), "hermes");
            let sql = "SELECT record FROM hermes_units";
            assert!(matches!(t.qualify(sql), std::borrow::Cow::Borrowed(s) if s == sql));
            assert_eq!(t.channel("hermes_events"), "hermes_events");
        }
    }
}
