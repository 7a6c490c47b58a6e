//! The throwaway PostgreSQL server the tests share: the one `cargo xtask` started
//! (`HERMES_TEST_PG_URL`, `HERMES_TEST_PG_DIR`, `HERMES_TEST_PG_BIN`), or else one this test
//! process starts the first time a test asks for it and that ends with the process
//! ([`pg_server`]), so a plain `cargo test` needs nothing set: only Debian's PostgreSQL server
//! binaries installed. PgBouncer in front of it for tests of hermes behind a pooler.

use std::path::PathBuf;
use std::sync::OnceLock;

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
