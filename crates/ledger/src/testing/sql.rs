//! SQL on a test database, for this workspace's tests: databases made fresh (from a template
//! holding hermes' schema) and dropped, what the server says of a ledger's connections and
//! statements, and a trigger that makes event writes fail as a full disk would.
//!
//! Here rather than in `hermes-testkit` because only this crate may name a PostgreSQL client.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::store::pg::off_runtime;
use crate::{Ledger, LedgerConfig, PgTarget, TokenSource};

/// The variable holding the admin URL of the throwaway test server (`hermes-pgcluster`'s
/// `URL_VAR`, named in messages).
const PG_URL_VAR: &str = "HERMES_TEST_PG_URL";

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

/// The texts of the statements `ledger`'s own connection has prepared
/// (`pg_prepared_statements` is the asking session's).
pub fn prepared_statements(ledger: &Ledger) -> Vec<String> {
    let texts = ledger
        .backend
        .pg()
        .expect("a PostgreSQL ledger")
        .query_value::<String>(
            "SELECT coalesce(string_agg(statement, chr(30) ORDER BY statement), '') \
             FROM pg_prepared_statements",
        )
        .expect("pg_prepared_statements answers");
    texts
        .split('\u{1e}')
        .filter(|text| !text.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Drops every statement `ledger`'s own connection prepared, behind its back (as a pooler's
/// `DISCARD ALL` would).
pub fn deallocate_prepared_statements(ledger: &Ledger) {
    let pg = ledger.backend.pg().expect("a PostgreSQL ledger");
    // `DEALLOCATE` answers no row, which `query_value` reports as its one error of this kind.
    match pg.query_value::<i64>("DEALLOCATE ALL") {
        Err(crate::LedgerError::Invalid(_)) => {}
        other => panic!("DEALLOCATE ALL: {other:?}"),
    }
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
    off_runtime(|| {
        let mut client = postgres::Client::connect(admin, postgres::NoTls)?;
        client.batch_execute(&sql)
    })
    .unwrap_or_else(|err| panic!("cannot create test database {name} ({PG_URL_VAR}): {err}"));
    with_dbname(admin, &name)
}

/// The database part of `url`.
pub fn database_name(url: &str) -> String {
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
    off_runtime(|| {
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
    off_runtime(|| {
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
    off_runtime(|| {
        let mut client = postgres::Client::connect(url, postgres::NoTls)?;
        client.batch_execute(sql)
    })
    .unwrap_or_else(|err| panic!("cannot switch the refusal of event writes: {err}"));
}

/// How many event writes [`fail_event_writes`] refused so far (sequences are not rolled back
/// with the refused transaction).
pub fn refused_event_writes(url: &str) -> i64 {
    off_runtime(|| {
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
    off_runtime(|| {
        let mut client = postgres::Client::connect(url, postgres::NoTls)?;
        client.batch_execute(sql)
    })
    .unwrap_or_else(|err| panic!("{sql}: {err}"));
}

/// How many backends of `role` are connected to the database of `url`.
pub fn connections_of(url: &str, role: &str) -> usize {
    off_runtime(|| {
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
    off_runtime(|| {
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
    off_runtime(|| {
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
    off_runtime(|| {
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
    off_runtime(|| {
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

/// How many backends are connected to the database of `url`, asked through the admin
/// database (so that asking runs no statement in the database counted).
pub fn backends_of(admin: &str, url: &str) -> usize {
    let name = database_name(url);
    off_runtime(|| {
        let mut client = postgres::Client::connect(admin, postgres::NoTls)?;
        let row = client.query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1",
            &[&name],
        )?;
        Ok::<i64, postgres::Error>(row.get(0))
    })
    .map_or(0, |n| usize::try_from(n).unwrap_or(0))
}

/// The `n` statements the server ran most often in the database of `url` since
/// [`reset_statements`]: each one's calls and its text (normalized by `pg_stat_statements`,
/// on one line), most calls first.
pub fn top_statements(admin: &str, url: &str, n: i64) -> Vec<(u64, String)> {
    let name = database_name(url);
    off_runtime(|| {
        let mut client = postgres::Client::connect(admin, postgres::NoTls)?;
        client.query(
            "SELECT s.calls::bigint, regexp_replace(s.query, '\\s+', ' ', 'g') \
             FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid \
             WHERE d.datname = $1 ORDER BY s.calls DESC, s.query LIMIT $2",
            &[&name, &n],
        )
    })
    .map(|rows| {
        rows.iter()
            .map(|row| (u64::try_from(row.get::<_, i64>(0)).unwrap_or(0), row.get(1)))
            .collect()
    })
    .unwrap_or_else(|err| panic!("cannot read the statements of {name}: {err}"))
}

/// The boolean columns of the one row `sql` answers in the database of `url` (an empty list
/// if it cannot be asked).
pub fn query_bools(url: &str, sql: &str) -> Vec<bool> {
    off_runtime(|| {
        let mut client = postgres::Client::connect(url, postgres::NoTls)?;
        let row = client.query_one(sql, &[])?;
        Ok::<Vec<bool>, postgres::Error>((0..row.len()).map(|i| row.get::<_, bool>(i)).collect())
    })
    .unwrap_or_default()
}

/// Drops the database `name` on the server of `admin`, with any connection still open to it.
/// Best effort: the server is a throwaway, a database left behind only costs space.
pub fn drop_database(admin: &str, name: &str) {
    let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
    let _ = off_runtime(move || {
        let mut client = postgres::Client::connect(admin, postgres::NoTls)?;
        client.batch_execute(&sql)
    });
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
