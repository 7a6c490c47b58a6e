//! Test support: the backend the suites run against, chosen by `HERMES_TEST_BACKEND` (`redb`,
//! the default, or `postgres`), and a fresh ledger of it per test (a file in the test's own
//! directory, or a new database on the throwaway server). `cargo xtask ci` runs the backend
//! suites once per backend; nothing here ever skips a test.
//!
//! The throwaway server is the one `cargo xtask` started (`HERMES_TEST_PG_URL`,
//! `HERMES_TEST_PG_DIR`, `HERMES_TEST_PG_BIN`), or else one this test process starts the first
//! time a test asks for it and that ends with the process ([`pg_server`]), so a plain `cargo
//! test` needs nothing set: only Debian's PostgreSQL server binaries installed.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::model::{
    Channel, Delegation, DelegationId, DispatchSpec, SessionId, TaskSpec, Timestamp, UnitStatus,
};
use crate::{Ledger, LedgerConfig, Location, NewDelegation, PgTarget, TokenSource};

/// The variable naming the backend under test.
pub const BACKEND_VAR: &str = "HERMES_TEST_BACKEND";
/// The variable holding the admin URL of the throwaway test server.
pub const PG_URL_VAR: &str = hermes_pgcluster::URL_VAR;

/// The throwaway test server.
#[derive(Clone, Debug)]
pub struct TestServer {
    /// Its admin URL (`postgres://hermes:PASSWORD@127.0.0.1:PORT/postgres`), to create
    /// databases from.
    pub admin_url: String,
    /// Its directory (`data/` inside is the cluster), for tests that stop or restart it.
    pub dir: PathBuf,
    /// Its binaries (`pg_ctl`, …).
    pub bin: PathBuf,
}

/// The throwaway test server: the one `cargo xtask` named in the environment, or one started
/// now for the rest of this process (once; every test of the process shares it). Panics when
/// none can be had, saying what to install: a test that needs the server fails without it,
/// never skips.
pub fn pg_server() -> &'static TestServer {
    static SERVER: OnceLock<std::result::Result<TestServer, String>> = OnceLock::new();
    static STARTED: OnceLock<hermes_pgcluster::ProcessCluster> = OnceLock::new();
    let server = SERVER.get_or_init(|| {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if let Some(admin_url) = var(PG_URL_VAR) {
            return Ok(TestServer {
                admin_url,
                dir: var(hermes_pgcluster::DIR_VAR).unwrap_or_default().into(),
                bin: var(hermes_pgcluster::BIN_VAR).unwrap_or_default().into(),
            });
        }
        let started =
            hermes_pgcluster::Cluster::start_for_process().map_err(|err| format!("{err:#}"))?;
        let cluster = STARTED.get_or_init(|| started).cluster();
        Ok(TestServer {
            admin_url: cluster.url(),
            dir: cluster.dir().to_owned(),
            bin: cluster.bin().to_owned(),
        })
    });
    match server {
        Ok(server) => server,
        Err(why) => {
            panic!("this test needs a throwaway PostgreSQL server and none could be started: {why}")
        }
    }
}

/// The backend the suites run against.
#[derive(Clone, Debug)]
pub enum TestBackend {
    /// A redb file per test.
    Redb,
    /// A database per test on this server (its admin URL).
    Postgres(String),
}

impl TestBackend {
    /// The backend `HERMES_TEST_BACKEND` names. Panics (failing the test) on an unknown value,
    /// or when PostgreSQL is asked for and no server can be had ([`pg_server`]): a missing
    /// server must fail, never skip.
    pub fn from_env() -> TestBackend {
        match std::env::var(BACKEND_VAR).as_deref() {
            Err(_) | Ok("") | Ok("redb") => TestBackend::Redb,
            Ok("postgres") => TestBackend::Postgres(pg_server().admin_url.clone()),
            Ok(other) => panic!("{BACKEND_VAR}={other:?}: expected redb or postgres"),
        }
    }

    /// Whether this is PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        matches!(self, TestBackend::Postgres(_))
    }

    /// A fresh, empty ledger location: `dir/ledger.redb`, or a new database. The second value
    /// is the URL to hand to a `hermes` process (`HERMES_LEDGER_URL`), if any.
    pub fn fresh(&self, dir: &Path) -> (Location, Option<String>) {
        match self {
            TestBackend::Redb => (Location::File(dir.join("ledger.redb")), None),
            TestBackend::Postgres(admin) => {
                let url = fresh_database(admin);
                let target = PgTarget::parse(&url, None).expect("the test URL parses");
                (Location::Postgres(Box::new(target)), Some(url))
            }
        }
    }

    /// [`TestBackend::fresh`], with a guard that drops the database when the test is done
    /// (each costs the server some megabytes; a suite makes hundreds).
    pub fn fresh_owned(&self, dir: &Path) -> (Location, Option<String>, Option<TestDatabase>) {
        let (location, url) = self.fresh(dir);
        let guard = match (self, &url) {
            (TestBackend::Postgres(admin), Some(url)) => Some(TestDatabase {
                admin: admin.clone(),
                name: database_name(url),
            }),
            _ => None,
        };
        (location, url, guard)
    }

    /// A fresh ledger, opened with a seeded token source. (Its database, on PostgreSQL, stays
    /// until the server goes: prefer `fresh_owned` where a fixture can hold the guard.)
    pub fn open(&self, dir: &Path, config: LedgerConfig, seed: u64) -> Ledger {
        open_location(&self.fresh(dir).0, config, seed)
    }
}

/// A test database, dropped (with any connection still open to it) when this is dropped.
#[derive(Debug)]
pub struct TestDatabase {
    admin: String,
    name: String,
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let admin = self.admin.clone();
        // Best effort: the server is a throwaway, a database left behind only costs space.
        let _ = crate::store::pg::off_runtime(move || {
            let mut client = postgres::Client::connect(&admin, postgres::NoTls)?;
            client.batch_execute(&sql)
        });
    }
}

/// Opens (another handle on) the ledger at `location` with a seeded token source.
pub fn open_location(location: &Location, config: LedgerConfig, seed: u64) -> Ledger {
    match location {
        Location::File(path) => Ledger::open_with(path, config, TokenSource::Seeded(seed)),
        Location::Postgres(target) => Ledger::connect(target, config, TokenSource::Seeded(seed)),
    }
    .expect("the test ledger opens")
}

/// The admin URL of the throwaway test server, for tests that need PostgreSQL whatever the
/// backend under test (several machines sharing one ledger, TLS, a server restart); see
/// [`pg_server`].
pub fn pg_admin_url() -> String {
    pg_server().admin_url.clone()
}

/// The certificate authority that signed the test server's certificate (`data/ca.crt` of the
/// cluster), for `sslrootcert`.
pub fn pg_authority() -> PathBuf {
    pg_server().dir.join("data").join("ca.crt")
}

/// PgBouncer's pool modes, for [`pg_bouncer`].
pub use hermes_pgcluster::PoolMode;

/// PgBouncer in `mode` in front of the test server, with at most `pool_size` server
/// connections per database (hermes behind a pooler). Dropping it stops it.
pub fn pg_bouncer(mode: PoolMode, pool_size: u32) -> hermes_pgcluster::Bouncer {
    let server = pg_server();
    let cluster = hermes_pgcluster::Cluster::attach(
        &server.admin_url,
        server.dir.clone(),
        server.bin.clone(),
    )
    .expect("the test server's URL names it");
    hermes_pgcluster::Bouncer::start(&cluster, mode, pool_size)
        .unwrap_or_else(|err| panic!("this test needs PgBouncer and it did not start: {err:#}"))
}

/// Whether a ledger connection to `url` is encrypted (the server's own view of it).
pub fn connection_is_encrypted(url: &str) -> bool {
    let target = PgTarget::parse(url, None).expect("the test URL parses");
    let ledger = Ledger::connect(&target, LedgerConfig::default(), TokenSource::Seeded(0))
        .expect("the ledger connects");
    ledger
        .backend
        .pg()
        .expect("a PostgreSQL ledger")
        .query_value::<bool>("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .expect("pg_stat_ssl answers")
}

/// Creates a new database on the server of `admin` with hermes' schema in it, and returns its
/// URL. The schema is copied from a template this process made once (by hermes itself, on
/// first use, as in production), which is what keeps a database per test cheap.
pub fn fresh_database(admin: &str) -> String {
    static TEMPLATE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let template = TEMPLATE.get_or_init(|| {
        let url = fresh_empty_database(admin);
        let target = PgTarget::parse(&url, None).expect("the test URL parses");
        drop(
            Ledger::connect(&target, LedgerConfig::default(), TokenSource::Seeded(0))
                .expect("hermes creates its schema in the template"),
        );
        database_name(&url)
    });
    create_database(admin, Some(template))
}

/// Creates a new, empty database on the server of `admin` (hermes creates its schema on first
/// use) and returns its URL.
pub fn fresh_empty_database(admin: &str) -> String {
    create_database(admin, None)
}

fn create_database(admin: &str, template: Option<&str>) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "hermes_t_{}_{}_{:08x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        fastrand::u32(..)
    );
    let sql = match template {
        Some(template) => format!("CREATE DATABASE {name} TEMPLATE {template}"),
        None => format!("CREATE DATABASE {name}"),
    };
    crate::store::pg::off_runtime(|| {
        let mut client = postgres::Client::connect(admin, postgres::NoTls)?;
        client.batch_execute(&sql)
    })
    .unwrap_or_else(|err| panic!("cannot create test database {name} ({PG_URL_VAR}): {err}"));
    with_dbname(admin, &name)
}

/// The database part of `url`.
fn database_name(url: &str) -> String {
    let base = url.split('?').next().unwrap_or(url);
    base.rsplit('/').next().unwrap_or_default().to_owned()
}

/// Creates hermes' schema in the database of `url` and records `version` as its schema
/// version, as a newer (or older) hermes would have.
pub fn set_schema_version(url: &str, version: i32) {
    let target = PgTarget::parse(url, None).expect("the test URL parses");
    drop(
        Ledger::connect(&target, LedgerConfig::default(), TokenSource::Seeded(0))
            .expect("the schema is created"),
    );
    crate::store::pg::off_runtime(|| {
        let mut client = postgres::Client::connect(url, postgres::NoTls)?;
        client.execute("UPDATE hermes_schema SET version = $1", &[&version])
    })
    .unwrap_or_else(|err| panic!("cannot set the schema version: {err}"));
}

/// `url` with its database replaced by `dbname`.
pub fn with_dbname(url: &str, dbname: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let authority_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{dbname}", &base[..authority_end]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// Ends every other server connection to the database of `url` (`pg_terminate_backend`, as an
/// operator or a failover does) and returns how many it ended.
pub fn terminate_connections(url: &str) -> usize {
    crate::store::pg::off_runtime(|| {
        let mut client = postgres::Client::connect(url, postgres::NoTls)?;
        let rows = client.query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )?;
        Ok::<usize, postgres::Error>(rows.iter().filter(|row| row.get::<_, bool>(0)).count())
    })
    .unwrap_or_else(|err| panic!("cannot terminate the connections: {err}"))
}

/// The value of the server setting `name` on a ledger connection to `url` (the server's own
/// view of that session: `application_name`, `statement_timeout`, …).
pub fn session_setting(url: &str, name: &str) -> String {
    let target = PgTarget::parse(url, None).expect("the test URL parses");
    let ledger = Ledger::connect(&target, LedgerConfig::default(), TokenSource::Seeded(0))
        .expect("the ledger connects");
    let pg = ledger.backend.pg().expect("a PostgreSQL ledger");
    pg.query_value::<String>(&format!("SELECT current_setting('{name}')"))
        .expect("reads the setting")
}

/// Makes every write of an event in the database of `url` fail with SQLSTATE 53100
/// (`disk_full`), a storage error that is not a broken connection, until called again with
/// `fail: false`. Each refused write counts in [`refused_event_writes`].
pub fn fail_event_writes(url: &str, fail: bool) {
    let sql = if fail {
        "CREATE SEQUENCE IF NOT EXISTS hermes_test_refused; \
         CREATE OR REPLACE FUNCTION hermes_test_refuse() RETURNS trigger AS $$ \
         BEGIN PERFORM nextval('hermes_test_refused'); \
         RAISE EXCEPTION 'could not extend file (test)' USING ERRCODE = '53100'; END $$ \
         LANGUAGE plpgsql; \
         DROP TRIGGER IF EXISTS hermes_test_refuse ON hermes_events; \
         CREATE TRIGGER hermes_test_refuse BEFORE INSERT OR UPDATE ON hermes_events \
         FOR EACH ROW EXECUTE FUNCTION hermes_test_refuse();"
    } else {
        "DROP TRIGGER IF EXISTS hermes_test_refuse ON hermes_events;"
    };
    crate::store::pg::off_runtime(|| {
        let mut client = postgres::Client::connect(url, postgres::NoTls)?;
        client.batch_execute(sql)
    })
    .unwrap_or_else(|err| panic!("cannot switch the refusal of event writes: {err}"));
}

/// How many event writes [`fail_event_writes`] refused so far (sequences are not rolled back
/// with the refused transaction).
pub fn refused_event_writes(url: &str) -> i64 {
    crate::store::pg::off_runtime(|| {
        let mut client = postgres::Client::connect(url, postgres::NoTls)?;
        let row = client.query_one(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM hermes_test_refused",
            &[],
        )?;
        Ok::<i64, postgres::Error>(row.get(0))
    })
    .unwrap_or(0)
}

/// Runs `sql` (any number of statements) on the database of `url`, as its superuser.
pub fn execute_sql(url: &str, sql: &str) {
    crate::store::pg::off_runtime(|| {
        let mut client = postgres::Client::connect(url, postgres::NoTls)?;
        client.batch_execute(sql)
    })
    .unwrap_or_else(|err| panic!("{sql}: {err}"));
}

/// How many backends of `role` are connected to the database of `url`.
pub fn connections_of(url: &str, role: &str) -> usize {
    crate::store::pg::off_runtime(|| {
        let mut client = postgres::Client::connect(url, postgres::NoTls)?;
        let row = client.query_one(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND usename = $1",
            &[&role],
        )?;
        Ok::<i64, postgres::Error>(row.get(0))
    })
    .map_or(0, |n| usize::try_from(n).unwrap_or(0))
}

/// How many server connections to the database of `url` (other than the one asking) have
/// `application_name` (`?application_name=…` in a URL names a process's connections).
pub fn connections_named(url: &str, application_name: &str) -> usize {
    crate::store::pg::off_runtime(|| {
        let mut client = postgres::Client::connect(url, postgres::NoTls)?;
        let row = client.query_one(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND application_name = $1 \
             AND pid <> pg_backend_pid()",
            &[&application_name],
        )?;
        Ok::<i64, postgres::Error>(row.get(0))
    })
    .map_or(0, |n| usize::try_from(n).unwrap_or(0))
}

/// How many server connections to the database of `url` last ran exactly `query` (say
/// `LISTEN hermes_events`: the consumers waiting on it).
pub fn connections_that_ran(url: &str, query: &str) -> usize {
    crate::store::pg::off_runtime(|| {
        let mut client = postgres::Client::connect(url, postgres::NoTls)?;
        let row = client.query_one(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND query = $1",
            &[&query],
        )?;
        Ok::<i64, postgres::Error>(row.get(0))
    })
    .map_or(0, |n| usize::try_from(n).unwrap_or(0))
}

/// Forgets what the server counted for the database of `url` ([`statements_run`] counts from
/// here), creating the extension in the admin database first. Panics, saying so, when the
/// server does not preload `pg_stat_statements` (`shared_preload_libraries`, as the server of
/// `cargo xtask bench` does).
pub fn reset_statements(admin: &str, url: &str) {
    let name = database_name(url);
    crate::store::pg::off_runtime(|| {
        let mut client = postgres::Client::connect(admin, postgres::NoTls)?;
        client.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")?;
        client.execute(
            "SELECT pg_stat_statements_reset(0, oid, 0) FROM pg_database WHERE datname = $1",
            &[&name],
        )
    })
    .unwrap_or_else(|err| {
        panic!(
            "cannot reset the statement counts of {name} (the server must preload \
             pg_stat_statements: `cargo xtask bench` starts its server so): {err}"
        )
    });
}

/// The statements the server ran in the database of `url` since [`reset_statements`]: the sum
/// of `pg_stat_statements.calls` over the database's entries (every connection's, utility
/// statements included; a statement that failed is not counted).
pub fn statements_run(admin: &str, url: &str) -> u64 {
    let name = database_name(url);
    crate::store::pg::off_runtime(|| {
        let mut client = postgres::Client::connect(admin, postgres::NoTls)?;
        let row = client.query_one(
            "SELECT coalesce(sum(s.calls), 0)::bigint FROM pg_stat_statements s \
             JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1",
            &[&name],
        )?;
        Ok::<i64, postgres::Error>(row.get(0))
    })
    .map(|n| u64::try_from(n).unwrap_or(0))
    .unwrap_or_else(|err| panic!("cannot read the statement counts of {name}: {err}"))
}

/// The boolean columns of the one row `sql` answers in the database of `url` (an empty list
/// if it cannot be asked).
pub fn query_bools(url: &str, sql: &str) -> Vec<bool> {
    crate::store::pg::off_runtime(|| {
        let mut client = postgres::Client::connect(url, postgres::NoTls)?;
        let row = client.query_one(sql, &[])?;
        Ok::<Vec<bool>, postgres::Error>((0..row.len()).map(|i| row.get::<_, bool>(i)).collect())
    })
    .unwrap_or_default()
}

/// A dispatch of `tasks` children that each run `true`, their goals `task 0`, `task 1`, ….
pub fn spec(tasks: u32) -> DispatchSpec {
    let tasks = (0..tasks)
        .map(|i| TaskSpec::new(format!("task {i}"), vec!["true".into()]))
        .collect();
    DispatchSpec::new("goal", tasks)
}

/// A recorded unit `id` that runs `spec`, dispatched and running since `at`: background, of no
/// session and no host (set what a test needs with `..`).
pub fn running_unit(id: DelegationId, spec: DispatchSpec, at: Timestamp) -> Delegation {
    Delegation {
        id,
        session: None,
        channel: Channel::Background,
        spec,
        status: UnitStatus::Running,
        dispatched_at: at,
        started_at: None,
        ended_at: None,
        host: None,
        queue_seq: None,
        interrupt: None,
        transcript_dir: None,
    }
}

/// A background unit of `session` that runs `spec`, named by no process yet.
pub fn background_unit(session: SessionId, spec: DispatchSpec) -> NewDelegation {
    NewDelegation {
        id: None,
        session: Some(session),
        channel: Channel::Background,
        spec,
        host: None,
        transcript_root: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_name_replaces_the_urls_own_keeping_its_options() {
        assert_eq!(
            with_dbname("postgres://u:p@h:5/postgres?sslmode=require", "t1"),
            "postgres://u:p@h:5/t1?sslmode=require"
        );
        assert_eq!(with_dbname("postgres://u@h:5", "t1"), "postgres://u@h:5/t1");
    }
}
