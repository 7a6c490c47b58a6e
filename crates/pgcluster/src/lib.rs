//! A throwaway PostgreSQL cluster for this workspace's tests and benchmarks: created
//! on a fresh directory, started on a free port of 127.0.0.1, stopped and removed when done.
//! `cargo xtask ci|test|bench|pg` start one around their runs ([`Cluster::start`]), and a test
//! process that was given none starts its own ([`Cluster::start_for_process`], used by
//! `hermes_testkit`), so plain `cargo test` needs nothing set.
//!
//! The server is Debian's (`/usr/lib/postgresql/<highest version>/bin`, which `.ci/run`
//! installs). It refuses to run as root, so as root every server command runs as the
//! unprivileged `postgres` user through `runuser`, on a fresh `/tmp/hermes-pg-XXXX` chowned to
//! it; otherwise as the current user. It listens on 127.0.0.1 only, on a free port, with its unix
//! socket in the data directory; `fsync` stays on, so benchmarks against it are honest. The one
//! role, `hermes`, is a superuser with a random password, checked with scram-sha-256 on every
//! connection (nothing is `trust`). TLS is on with a self-signed certificate, so `sslmode=require`
//! and plain connections both work against the same server.
//!
//! Layout of the cluster's directory (`HERMES_TEST_PG_DIR`): `data/` (the cluster;
//! `data/server.crt` is its certificate, usable as an `sslrootcert`) and `server.log`. A test
//! that needs to stop or restart the server runs `$HERMES_TEST_PG_BIN/pg_ctl -D
//! $HERMES_TEST_PG_DIR/data …` as the data directory's owner.
//!
//! Development infrastructure like `xtask`, never part of the `hermes` binary.

use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

mod bouncer;
mod control;
mod error;
mod os;
mod proxy;

use os::{
    checked, free_port, is_root, parse_url, random_hex, server_binaries, tail, user_ids, user_name,
};

pub use bouncer::{Bouncer, PoolMode};
pub use control::StopMode;
use error::{Context, bail};
pub use error::{Error, Result};
pub use proxy::{FaultProxy, Mode};

/// The admin URL (`postgres://hermes:PASSWORD@127.0.0.1:PORT/postgres`) the tests create their
/// databases from, one database per test.
pub const URL_VAR: &str = "HERMES_TEST_PG_URL";
/// The cluster's directory (see the module docs for its layout).
pub const DIR_VAR: &str = "HERMES_TEST_PG_DIR";
/// The directory of the server's binaries (`pg_ctl`, `psql`, …).
pub const BIN_VAR: &str = "HERMES_TEST_PG_BIN";
/// The superuser role the URL names.
pub(crate) const ROLE: &str = "hermes";
/// Who runs the server when xtask runs as root.
const SERVER_USER: &str = "postgres";
/// Where Debian installs each major version's server binaries.
pub(crate) const DEBIAN_BINARIES: &str = "/usr/lib/postgresql";
/// How long the server may take to start or stop.
const DEADLINE: Duration = Duration::from_secs(30);
/// Attempts at a free port (another process may take the one we found before the server binds it).
const PORT_ATTEMPTS: usize = 3;

/// Settings appended to the cluster's `postgresql.conf`: small and quick, but durable.
const SETTINGS: &str = "
# cargo xtask pg: a throwaway cluster for tests and benches.
listen_addresses = '127.0.0.1'
fsync = on
synchronous_commit = on
shared_buffers = 32MB
max_connections = 200
ssl = on
ssl_cert_file = 'server.crt'
ssl_key_file = 'server.key'
";

/// Every connection, over TCP or the socket, with or without TLS, authenticates by password.
const PG_HBA: &str = "\
# cargo xtask pg: the password is checked on every connection; nothing is trusted.
local all all scram-sha-256
host  all all 127.0.0.1/32 scram-sha-256
";

/// A running throwaway cluster. Dropping it stops the server and removes its directory (errors
/// are printed, not raised); [`Cluster::stop`] does the same and reports them; [`Cluster::keep`]
/// leaves it running.
#[derive(Debug)]
pub struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    /// `Some(user)` when the server runs as another user than xtask (xtask is root).
    server_user: Option<String>,
    port: u16,
    password: String,
    /// Whether dropping this value stops the server.
    armed: bool,
}

impl Cluster {
    /// Creates, configures and starts a new cluster, returning once it accepts a TLS connection
    /// with the password over TCP.
    pub fn start() -> Result<Cluster> {
        Cluster::start_with("")
    }

    /// [`Cluster::start`] with `settings` (lines of `postgresql.conf`, such as
    /// `shared_preload_libraries = 'pg_stat_statements'`) appended after the cluster's own.
    pub fn start_with(settings: &str) -> Result<Cluster> {
        let started = Instant::now();
        let bin = server_binaries()?;
        let server_user = if is_root()? {
            Some(SERVER_USER.to_owned())
        } else {
            None
        };
        let dir = tempfile::Builder::new()
            .prefix("hermes-pg-")
            .tempdir_in("/tmp")
            .context("creating the cluster's directory under /tmp")?
            .keep();
        // From here on, dropping `cluster` (on any error below) removes the directory again.
        let mut cluster = Cluster {
            dir,
            bin,
            server_user,
            port: 0,
            password: random_hex(16)?,
            armed: true,
        };
        cluster.create(settings)?;
        cluster.launch()?;
        cluster.check_connections()?;
        eprintln!(
            "pg: PostgreSQL {} up on 127.0.0.1:{} in {:.2} s ({})",
            cluster.version(),
            cluster.port,
            started.elapsed().as_secs_f64(),
            cluster.dir.display()
        );
        Ok(cluster)
    }

    /// The admin URL: `postgres://hermes:PASSWORD@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!(
            "postgres://{ROLE}:{}@127.0.0.1:{}/postgres",
            self.password, self.port
        )
    }

    /// The variables a test run needs: `HERMES_TEST_PG_URL`, `HERMES_TEST_PG_DIR`,
    /// `HERMES_TEST_PG_BIN`.
    pub fn vars(&self) -> [(&'static str, String); 3] {
        [
            (URL_VAR, self.url()),
            (DIR_VAR, self.dir.display().to_string()),
            (BIN_VAR, self.bin.display().to_string()),
        ]
    }

    /// Sets [`Cluster::vars`] on `command`.
    pub fn export_to(&self, command: &mut Command) {
        for (name, value) in self.vars() {
            command.env(name, value);
        }
    }

    /// Shell `export` lines for [`Cluster::vars`].
    pub fn exports(&self) -> String {
        self.vars()
            .iter()
            .fold(String::new(), |mut out, (name, value)| {
                let _ = writeln!(out, "export {name}={value}");
                out
            })
    }

    /// Stops the server (`pg_ctl stop -m immediate`) and removes the cluster's directory.
    pub fn stop(mut self) -> Result<()> {
        self.armed = false;
        self.shut_down()
    }

    /// Leaves the server running after this value is dropped.
    pub fn keep(mut self) {
        self.armed = false;
    }

    /// The cluster's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's binaries.
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The role's password.
    pub(crate) fn password(&self) -> &str {
        &self.password
    }

    /// Who runs the server, when that is not this process's user.
    pub(crate) fn server_user(&self) -> Option<&str> {
        self.server_user.as_deref()
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    fn version(&self) -> String {
        fs::read_to_string(self.data().join("PG_VERSION"))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|_| "?".into())
    }

    /// A command that runs `program` as the server's user.
    fn as_server(&self, program: &Path) -> Command {
        let mut command = match &self.server_user {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(program);
                command
            }
            None => Command::new(program),
        };
        // The server's user may not be allowed into xtask's working directory.
        command.current_dir("/").stdin(Stdio::null());
        command
    }

    /// `initdb`, the certificate, `postgresql.conf` (with `settings` last) and `pg_hba.conf`.
    fn create(&self, settings: &str) -> Result<()> {
        self.init_data()?;
        self.make_certificates()?;
        self.configure(settings)
    }

    /// `initdb` as the server's user, the password passed in a private file removed after.
    fn init_data(&self) -> Result<()> {
        if let Some(user) = &self.server_user {
            let (uid, gid) = user_ids(user)?;
            std::os::unix::fs::chown(&self.dir, Some(uid), Some(gid))
                .with_context(|| format!("handing {} to {user}", self.dir.display()))?;
        }
        let pwfile = self.dir.join("pwfile");
        fs::write(&pwfile, &self.password).context("writing the password file")?;
        if let Some(user) = &self.server_user {
            let (uid, gid) = user_ids(user)?;
            std::os::unix::fs::chown(&pwfile, Some(uid), Some(gid))?;
        }
        fs::set_permissions(&pwfile, fs::Permissions::from_mode(0o600))?;
        let initdb = self
            .as_server(&self.bin.join("initdb"))
            .arg("-D")
            .arg(self.data())
            .args([
                "-U",
                ROLE,
                "--auth=scram-sha-256",
                "-E",
                "UTF8",
                "--locale=C",
            ])
            .arg(format!("--pwfile={}", pwfile.display()))
            // The cluster is thrown away: its initial files need not survive a power loss
            // (the server itself runs with fsync on).
            .args(["--no-sync", "--no-instructions"])
            .output();
        fs::remove_file(&pwfile).context("removing the password file")?;
        checked("initdb", initdb)?;
        Ok(())
    }

    /// A certificate authority of the cluster's own (`data/ca.crt`, which tests verify the
    /// server against) and the server's certificate signed by it for 127.0.0.1, all made by
    /// the server's user so it owns the keys.
    fn make_certificates(&self) -> Result<()> {
        let data = self.data();
        let key = data.join("server.key");
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        let openssl = |what: &str, args: &[&std::ffi::OsStr]| {
            let output = self.as_server(Path::new("openssl")).args(args).output();
            checked(what, output).context(
                "openssl makes the server's certificate; `.ci/run` installs it when missing",
            )
        };
        let os = |s: &'static str| std::ffi::OsStr::new(s);
        let path = |name: &str| data.join(name).into_os_string();
        let (ca_key, ca_crt, csr, ext) = (
            path("ca.key"),
            path("ca.crt"),
            path("server.csr"),
            path("server.ext"),
        );
        fs::write(
            &ext,
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .context("writing the certificate's extensions")?;
        let mut ca = vec![
            os("req"),
            os("-x509"),
            os("-nodes"),
            os("-days"),
            os("3650"),
        ];
        ca.extend([os("-subj"), os("/CN=hermes test CA")]);
        ca.extend(ec.map(os));
        ca.extend([os("-keyout"), &ca_key, os("-out"), &ca_crt]);
        openssl("openssl req (the test CA)", &ca)?;
        let mut request = vec![
            os("req"),
            os("-new"),
            os("-nodes"),
            os("-subj"),
            os("/CN=127.0.0.1"),
        ];
        request.extend(ec.map(os));
        request.extend([os("-keyout"), key.as_os_str(), os("-out"), &csr]);
        openssl("openssl req (the server's key)", &request)?;
        let server_crt = path("server.crt");
        let sign = [
            os("x509"),
            os("-req"),
            os("-in"),
            &csr,
            os("-CA"),
            &ca_crt,
            os("-CAkey"),
            &ca_key,
            os("-set_serial"),
            os("1"),
            os("-days"),
            os("3650"),
            os("-extfile"),
            &ext,
            os("-out"),
            &server_crt,
        ];
        openssl("openssl x509 (the server's certificate)", &sign)?;
        fs::set_permissions(&key, fs::Permissions::from_mode(0o600))?;
        Ok(())
    }

    /// `postgresql.conf` (the cluster's settings, its socket directory, then `settings`) and
    /// `pg_hba.conf`.
    fn configure(&self, settings: &str) -> Result<()> {
        // Appending and rewriting keep each file's owner.
        let conf = self.data().join("postgresql.conf");
        let mut text = fs::read_to_string(&conf).context("reading postgresql.conf")?;
        text.push_str(SETTINGS);
        let _ = writeln!(
            text,
            "unix_socket_directories = '{}'",
            self.data().display()
        );
        text.push_str(settings);
        fs::write(&conf, text).context("writing postgresql.conf")?;
        fs::write(self.data().join("pg_hba.conf"), PG_HBA).context("writing pg_hba.conf")?;
        Ok(())
    }

    /// Starts the server on a free port (trying another if that one is taken meanwhile) and
    /// waits until it accepts connections.
    fn launch(&mut self) -> Result<()> {
        for attempt in 1..=PORT_ATTEMPTS {
            self.port = free_port()?;
            let out = self.pg_ctl_up("start").output();
            match checked("pg_ctl start", out) {
                Ok(_) => return self.wait_ready(),
                Err(err) => {
                    let log = fs::read_to_string(self.log()).unwrap_or_default();
                    if attempt < PORT_ATTEMPTS && log.contains("could not bind") {
                        eprintln!("pg: port {} was taken; trying another", self.port);
                        continue;
                    }
                    return Err(Error::new(format!(
                        "the server did not start ({err}); the end of its log:\n{}",
                        tail(&log, 20)
                    )));
                }
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Polls `pg_isready` over TCP until the server accepts connections, up to the deadline.
    fn wait_ready(&self) -> Result<()> {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let status = Command::new(self.bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .args(["-U", ROLE, "-d", "postgres", "-t", "1"])
                .status()
                .context("running pg_isready")?;
            if status.success() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "the server on 127.0.0.1:{} was not ready after {} s; see {}",
                    self.port,
                    DEADLINE.as_secs(),
                    self.log().display()
                );
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Connects once with the password and TLS (`sslmode=require`), as the tests will.
    fn check_connections(&self) -> Result<()> {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-A", "-t", "-c", "show ssl"])
            .arg(format!("{}?sslmode=require&connect_timeout=10", self.url()))
            .env_remove("PGPASSWORD")
            .stdin(Stdio::null())
            .output();
        let out = checked("psql (a TLS connection with the password)", out)?;
        let ssl = String::from_utf8_lossy(&out.stdout);
        if ssl.trim() != "on" {
            bail!("the server answered `show ssl` with {ssl:?}, not \"on\"");
        }
        Ok(())
    }

    /// Stops the server if it runs, then removes the directory.
    pub fn shut_down(&self) -> Result<()> {
        if self.data().join("postmaster.pid").exists() {
            let out = self
                .as_server(&self.bin.join("pg_ctl"))
                .arg("stop")
                .arg("-D")
                .arg(self.data())
                .args([
                    "-m",
                    "immediate",
                    "-w",
                    "-t",
                    &DEADLINE.as_secs().to_string(),
                ])
                .output();
            // A server that would not stop keeps its directory, for its log; one that was
            // already gone (killed, leaving its pid file) is simply cleared away.
            if let Err(err) = checked("pg_ctl stop", out)
                && self.server_runs()
            {
                return Err(err);
            }
        }
        match fs::remove_dir_all(&self.dir) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                Err(err).with_context(|| format!("removing {}", self.dir.display()))
            }
            _ => Ok(()),
        }
    }

    /// Whether `pg_ctl status` finds the server's process (it exits 3 when there is none).
    fn server_runs(&self) -> bool {
        self.as_server(&self.bin.join("pg_ctl"))
            .arg("status")
            .arg("-D")
            .arg(self.data())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_or(true, |s| s.code() != Some(3))
    }

    /// The running cluster that `url` (its admin URL), `dir` and `bin` name (as
    /// [`Cluster::vars`] gave them), to stop or inspect it; dropping it leaves it running.
    pub fn attach(url: &str, dir: PathBuf, bin: PathBuf) -> Result<Cluster> {
        let (password, port) = parse_url(url).context("a malformed admin URL")?;
        // As root, act as whoever owns the cluster (the postgres user, unless a user started it).
        let server_user = match fs::metadata(&dir) {
            Ok(meta) if is_root()? && meta.uid() != 0 => Some(user_name(meta.uid())?),
            _ => None,
        };
        Ok(Cluster {
            dir,
            bin,
            server_user,
            port,
            password,
            armed: false,
        })
    }

    /// Starts a cluster that lives as long as this process: a watchdog in a session of its own
    /// waits on a pipe whose only writer is this process, and when the process ends (however
    /// it ends) stops the server and removes its directory.
    pub fn start_for_process() -> Result<ProcessCluster> {
        let cluster = Cluster::start()?;
        let mut watchdog = cluster.as_server(Path::new("sh"));
        watchdog
            .args([
                "-c",
                "cat >/dev/null; \"$1/pg_ctl\" -D \"$2/data\" stop -m immediate >/dev/null 2>&1; rm -rf \"$2\"",
                "watchdog",
            ])
            .arg(&cluster.bin)
            .arg(&cluster.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        let mut child = watchdog
            .spawn()
            .context("starting the cluster's watchdog")?;
        let pipe = child
            .stdin
            .take()
            .context("the watchdog's pipe was not opened")?;
        let mut cluster = cluster;
        cluster.armed = false;
        Ok(ProcessCluster {
            cluster,
            _pipe: pipe,
        })
    }

    /// Whether the server answers on its port.
    pub fn is_running(&self) -> bool {
        Command::new(self.bin.join("pg_isready"))
            .args([
                "-q",
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-t",
                "2",
            ])
            .status()
            .is_ok_and(|s| s.success())
    }
}

/// A cluster started for the life of this process ([`Cluster::start_for_process`]).
#[derive(Debug)]
pub struct ProcessCluster {
    cluster: Cluster,
    /// The watchdog's stdin: closed when this process ends, which stops the server.
    _pipe: std::process::ChildStdin,
}

impl ProcessCluster {
    /// The cluster.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.armed
            && let Err(err) = self.shut_down()
        {
            eprintln!(
                "pg: could not stop the PostgreSQL cluster in {}: {err:#}",
                self.dir.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_url_gives_back_its_password_and_port() {
        assert_eq!(
            parse_url("postgres://hermes:0a1b@127.0.0.1:5433/postgres"),
            Some(("0a1b".into(), 5433))
        );
        assert_eq!(
            parse_url("postgres://other:x@127.0.0.1:5433/postgres"),
            None
        );
    }

    #[test]
    fn a_password_is_hex() {
        let password = random_hex(16).unwrap();
        assert_eq!(password.len(), 32);
        assert!(password.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
