//! PgBouncer in front of a throwaway cluster, in either pool mode, for the tests that check
//! hermes behind a pooler.
//!
//! Debian's `pgbouncer` (`.ci/run` installs it), started in the foreground on a free port of
//! 127.0.0.1 with a directory of its own (`pgbouncer.ini`, `userlist.txt`, `pgbouncer.log`),
//! as the cluster's server user when that is not us (PgBouncer refuses to run as root).
//! Clients log in with the cluster's role and password (scram-sha-256, checked by the
//! bouncer, which logs in to the server the same way); TLS is off between client and bouncer.
//! Dropping the value stops the bouncer and removes its directory.

use std::fmt::Write as _;
use std::fs;
use std::net::TcpStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{Context, bail};
use crate::os::{free_port, tail, user_ids};
use crate::{Cluster, ROLE, Result};

/// Where Debian installs PgBouncer.
const PGBOUNCER: &str = "/usr/sbin/pgbouncer";
/// How long the bouncer may take to start.
const DEADLINE: Duration = Duration::from_secs(10);

/// PgBouncer's `pool_mode`: when a server connection goes back to the pool
/// (<https://www.pgbouncer.org/config.html#pool_mode>).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolMode {
    /// When the client disconnects: every PostgreSQL feature works.
    Session,
    /// When each transaction ends: session state (`SET`, `LISTEN`, session advisory locks,
    /// named prepared statements) does not survive from one transaction to the next.
    Transaction,
}

impl PoolMode {
    fn as_str(self) -> &'static str {
        match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
        }
    }
}

/// A running PgBouncer.
#[derive(Debug)]
pub struct Bouncer {
    dir: PathBuf,
    port: u16,
    password: String,
    child: Child,
}

impl Bouncer {
    /// Starts PgBouncer in `mode` in front of `cluster` (every database, the cluster's role),
    /// with at most `pool_size` server connections per database, returning once it accepts
    /// connections.
    pub fn start(cluster: &Cluster, mode: PoolMode, pool_size: u32) -> Result<Bouncer> {
        if !Path::new(PGBOUNCER).exists() {
            bail!("{PGBOUNCER} is missing: install Debian's `pgbouncer` package (`.ci/run` does)");
        }
        let dir = tempfile::Builder::new()
            .prefix("hermes-pgbouncer-")
            .tempdir_in("/tmp")
            .context("creating the bouncer's directory under /tmp")?
            .keep();
        let port = free_port()?;
        let mut ini = String::new();
        let _ = writeln!(ini, "[databases]");
        let _ = writeln!(ini, "* = host=127.0.0.1 port={}", cluster.port());
        let _ = writeln!(ini, "[pgbouncer]");
        let _ = writeln!(ini, "listen_addr = 127.0.0.1");
        let _ = writeln!(ini, "listen_port = {port}");
        let _ = writeln!(ini, "unix_socket_dir =");
        let _ = writeln!(ini, "auth_type = scram-sha-256");
        let _ = writeln!(ini, "auth_file = {}", dir.join("userlist.txt").display());
        let _ = writeln!(ini, "pool_mode = {}", mode.as_str());
        let _ = writeln!(ini, "default_pool_size = {pool_size}");
        let _ = writeln!(ini, "max_client_conn = 500");
        let _ = writeln!(ini, "logfile = {}", dir.join("pgbouncer.log").display());
        let _ = writeln!(ini, "server_tls_sslmode = prefer");
        let _ = writeln!(ini, "admin_users = {ROLE}");
        fs::write(dir.join("pgbouncer.ini"), ini).context("writing pgbouncer.ini")?;
        fs::write(
            dir.join("userlist.txt"),
            format!("\"{ROLE}\" \"{}\"\n", cluster.password()),
        )
        .context("writing userlist.txt")?;
        if let Some(user) = cluster.server_user() {
            let (uid, gid) = user_ids(user)?;
            for path in [
                dir.clone(),
                dir.join("pgbouncer.ini"),
                dir.join("userlist.txt"),
            ] {
                std::os::unix::fs::chown(&path, Some(uid), Some(gid))
                    .with_context(|| format!("handing {} to {user}", path.display()))?;
            }
        }
        let mut command = Command::new(PGBOUNCER);
        if let Some(user) = cluster.server_user() {
            // Run as that user directly (not through runuser), so the child is the bouncer
            // itself and stopping it stops the bouncer.
            let (uid, gid) = user_ids(user)?;
            command.uid(uid).gid(gid);
        }
        let child = command
            .arg(dir.join("pgbouncer.ini"))
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting pgbouncer")?;
        let mut bouncer = Bouncer {
            dir,
            port,
            password: cluster.password().to_owned(),
            child,
        };
        bouncer.wait_ready()?;
        Ok(bouncer)
    }

    /// Waits until the bouncer accepts TCP connections.
    fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                bail!(
                    "pgbouncer exited ({status}); the end of its log:\n{}",
                    tail(&self.log(), 20)
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "pgbouncer did not listen on 127.0.0.1:{} within {} s",
                    self.port,
                    DEADLINE.as_secs()
                );
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The URL of `dbname` through the bouncer (no TLS between client and bouncer).
    pub fn url(&self, dbname: &str) -> String {
        format!(
            "postgres://{ROLE}:{}@127.0.0.1:{}/{dbname}?sslmode=disable",
            self.password, self.port
        )
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}
