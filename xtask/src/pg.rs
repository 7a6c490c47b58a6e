//! `cargo xtask pg start|stop|env`: a throwaway PostgreSQL cluster (the `pgcluster` crate) for
//! a shell, and [`start`], which `cargo xtask ci`, `test` and `bench` call around their runs.
//!
//! The server is Debian's (`/usr/lib/postgresql/<highest version>/bin`, which `.ci/run`
//! installs). It refuses to run as root, so when xtask runs as root every server command runs as
//! the unprivileged `postgres` user through `runuser`, on a fresh `/tmp/hermes-pg-XXXX` chowned to
//! it; otherwise as the current user. It listens on 127.0.0.1 only, on a free port, with its unix
//! socket in the data directory; `fsync` stays on, so benchmarks against it are honest. The one
//! role, `hermes`, is a superuser with a random password, checked with scram-sha-256 on every
//! connection (nothing is `trust`). TLS is on with a self-signed certificate, so `sslmode=require`
//! and plain connections both work against the same server.
//!
//! In a shell: `eval "$(cargo xtask pg start)"` sets the variables below (they are also in
//! `target/pg/env`), `cargo xtask pg env` prints them again, `cargo xtask pg stop` ends it.
//!
//! Layout of `HERMES_TEST_PG_DIR`: `data/` (the cluster; `data/server.crt` is its certificate,
//! usable as an `sslrootcert`) and `server.log`. A test that needs to stop or restart the server
//! runs `$HERMES_TEST_PG_BIN/pg_ctl -D $HERMES_TEST_PG_DIR/data …` as the data directory's owner.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
pub(crate) use hermes_pgcluster::Cluster;
use hermes_pgcluster::{BIN_VAR, DIR_VAR, URL_VAR};
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};

use crate::boundaries::target_dir;

/// Starts a throwaway cluster for one xtask run (see `pgcluster`), which xtask outlives a Ctrl-C
/// to stop.
pub(crate) fn start() -> Result<Cluster> {
    start_with("")
}

/// [`start`] with `settings` appended to the cluster's `postgresql.conf`.
pub(crate) fn start_with(settings: &str) -> Result<Cluster> {
    outlive_ctrl_c();
    Ok(Cluster::start_with(settings)?)
}

/// Lets xtask outlive a Ctrl-C, so the cluster is still stopped: the terminal interrupts the
/// whole foreground group, the cargo child dies of it, and xtask carries on to its `Drop`. The
/// server itself does not see it (pg_ctl starts it in a session of its own).
fn outlive_ctrl_c() {
    extern "C" fn ignore(_: nix::libc::c_int) {}
    let action = SigAction::new(
        SigHandler::Handler(ignore),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    // SAFETY: the handler does nothing, so it is async-signal-safe; a handler (unlike SIG_IGN)
    // is reset to the default in the children xtask starts, so they still stop on Ctrl-C.
    if let Err(err) = unsafe { sigaction(Signal::SIGINT, &action) } {
        eprintln!(
            "xtask: could not handle Ctrl-C ({err}); an interrupted run may leave its cluster"
        );
    }
}

/// `cargo xtask pg start|stop|env`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("start") => {
            if let Some(old) = recorded()? {
                if old.is_running() {
                    bail!(
                        "a cluster is already running ({DIR_VAR}={}); `cargo xtask pg env` \
                         prints its variables, `cargo xtask pg stop` stops it",
                        old.dir().display()
                    );
                }
                // A stale record (the machine restarted, or /tmp was cleaned): clear it.
                let _ = old.shut_down();
                fs::remove_file(env_file())?;
            }
            let cluster = start()?;
            let exports = cluster.exports();
            let file = env_file();
            // The password is in it: readable by its owner only.
            let written = fs::create_dir_all(file.parent().unwrap_or(Path::new(".")))
                .and_then(|()| fs::write(&file, &exports))
                .and_then(|()| fs::set_permissions(&file, fs::Permissions::from_mode(0o600)))
                .with_context(|| format!("writing {}", file.display()));
            // Without the record `pg stop` could not find it: stop it rather than leak it.
            written?;
            cluster.keep();
            print!("{exports}");
            Ok(())
        }
        Some("stop") => {
            let Some(cluster) = recorded()? else {
                eprintln!(
                    "xtask: no cluster recorded in {}; nothing to stop",
                    env_file().display()
                );
                return Ok(());
            };
            cluster.shut_down()?;
            fs::remove_file(env_file())?;
            eprintln!("xtask: stopped and removed {}", cluster.dir().display());
            Ok(())
        }
        Some("env") => {
            let Some(cluster) = recorded()? else {
                bail!("no cluster is running; `cargo xtask pg start` starts one");
            };
            if !cluster.is_running() {
                bail!(
                    "the cluster in {} does not answer on 127.0.0.1:{}; `cargo xtask pg stop` \
                     clears it, `cargo xtask pg start` starts a new one",
                    cluster.dir().display(),
                    cluster.port()
                );
            }
            print!("{}", cluster.exports());
            Ok(())
        }
        _ => bail!("usage: cargo xtask pg start|stop|env"),
    }
}

/// Where `pg start` records the running cluster's exports.
fn env_file() -> PathBuf {
    target_dir().join("pg").join("env")
}

/// The cluster recorded in `target/pg/env` by `cargo xtask pg start`, if any.
fn recorded() -> Result<Option<Cluster>> {
    let text = match fs::read_to_string(env_file()) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => {
            return Err(err).with_context(|| format!("reading {}", env_file().display()));
        }
    };
    let var = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("export {name}=")))
            .map(str::to_owned)
            .with_context(|| format!("{} has no {name}", env_file().display()))
    };
    let cluster = Cluster::attach(&var(URL_VAR)?, var(DIR_VAR)?.into(), var(BIN_VAR)?.into())
        .with_context(|| format!("{} records no usable cluster", env_file().display()))?;
    Ok(Some(cluster))
}
