//! Where a PostgreSQL ledger is: its URL parsed (libpq's forms), and the TLS connector its
//! `sslmode` asks for.

use std::str::FromStr;
use std::sync::Arc;

use super::pool::*;
use crate::error::{LedgerError, Result};

/// Whether `url` names a PostgreSQL ledger.
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// Where a PostgreSQL ledger is, parsed from its URL; `Debug` and `Display` never show the
/// password.
#[derive(Clone)]
pub struct PgTarget {
    pub(super) config: postgres::Config,
    /// `postgres://user@host:port/dbname`, for messages.
    pub(super) display: String,
    /// `host:port`, for the one-line error when the server cannot be reached.
    pub(super) server: String,
    /// The deployment's namespace (`ledger.namespace`); `None`: the default, `hermes`, whose
    /// tables are where hermes always kept them (the `search_path`, normally `public`).
    pub(super) namespace: Option<settings::Namespace>,
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
        let url = &env.complete_authority(url)?;
        let mut config = postgres::Config::from_str(url).map_err(|err| {
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
        let host = match config.get_hosts().first() {
            Some(postgres::config::Host::Tcp(host)) => host.clone(),
            #[cfg(unix)]
            Some(postgres::config::Host::Unix(path)) => path.display().to_string(),
            None => "localhost".to_owned(),
        };
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
        Ok(PgTarget {
            config,
            display,
            server,
            namespace: None,
        })
    }

    /// The same database, in the deployment namespace `namespace` (`ledger.namespace`): a
    /// PostgreSQL schema of that name holding this deployment's tables, created by migration.
    /// The default namespace keeps the tables where every hermes before namespaces put them.
    pub fn in_namespace(mut self, namespace: &settings::Namespace) -> PgTarget {
        self.namespace = (!namespace.is_default()).then(|| namespace.clone());
        self
    }

    /// The deployment namespace (`hermes` by default).
    pub fn namespace(&self) -> &str {
        self.namespace
            .as_ref()
            .map_or(settings::Namespace::DEFAULT, |ns| ns.as_str())
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

    fn fill(&self, url: &str, config: &mut postgres::Config) -> Result<()> {
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
                "require" => postgres::config::SslMode::Require,
                other => {
                    return Err(invalid(format!(
                        "PGSSLMODE: {other:?} is not supported (use disable, prefer or require)"
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
        Ok(())
    }
}

/// Every round trip gets a deadline (SPEC §11.1): the login its connect timeout (the URL's, or
/// [`CONNECT_TIMEOUT`]; enforced by `connect::connect_within`); a peer that stops
/// acknowledging is dropped by the kernel after [`TCP_USER_TIMEOUT`], an idle one that vanished
/// after the keepalives; and the server itself ends a statement and an idle transaction on
/// time (`connect::session_settings`, set on every new session).
fn deadlines(config: &mut postgres::Config) {
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

/// A TLS connector for `sslmode=prefer|require`: encrypted, the server's certificate not
/// verified (libpq's meaning of those modes).
pub(super) fn tls_connector() -> tokio_postgres_rustls::MakeRustlsConnect {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map(|builder| {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unverified(provider)))
                .with_no_client_auth()
        });
    match config {
        Ok(config) => tokio_postgres_rustls::MakeRustlsConnect::new(config),
        // ring supports the default protocol versions; unreachable in practice.
        Err(_) => tokio_postgres_rustls::MakeRustlsConnect::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap_or_else(|_| unreachable!("TLS 1.3 is supported by ring"))
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unverified(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))))
            .with_no_client_auth(),
        ),
    }
}

/// Accepts any server certificate (as libpq's `sslmode=require` does) while still checking the
/// handshake's signatures.
#[derive(Debug)]
pub(super) struct Unverified(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> std::result::Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `name` as a quoted SQL identifier (`"name"`, any `"` doubled).
pub(super) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(namespace: &str) -> PgTarget {
        let ns = settings::Namespace::parse("test", namespace).expect("a namespace");
        PgTarget::parse("postgres://u@h/d", None)
            .expect("parses")
            .in_namespace(&ns)
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
