//! The hermes home: `$HERMES_HOME` (created 0700) with `ledger.redb`, `config.toml` and
//! `cache/`, the settings in force, and the ledger opened and swept.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use anyhow::Context as _;
use hermes_ledger::{Ledger, SessionId, Timestamp};
use hermes_registry::{Clock, SystemClock, housekeeping};

use hermes_settings::Settings;

use crate::services::config::{self, home_dir};
use crate::services::exit::{Code, fail};
use crate::services::session_host;

/// Everything a command needs from its surroundings.
#[derive(Clone, Debug)]
pub struct Home {
    /// The home directory.
    pub dir: PathBuf,
    /// The settings in force.
    pub settings: Settings,
    /// The children's `PGPASSFILE`, worked out (and the file written) once per process.
    child_passfile: OnceLock<Option<(String, String)>>,
}

/// The process environment, as a lookup function.
pub fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The session of `delegate`/`drain`: `--session`, else `HERMES_SESSION_ID`.
pub fn session_of(flag: Option<&str>) -> anyhow::Result<SessionId> {
    let raw = match flag {
        Some(s) => s.to_owned(),
        None => env_var("HERMES_SESSION_ID").filter(|s| !s.is_empty()).ok_or_else(|| {
            fail(
                Code::Usage,
                "no session: pass --session S or set HERMES_SESSION_ID (for a one-shot run without a session use hermes -z)",
            )
        })?,
    };
    SessionId::new(raw).map_err(|e| fail(Code::Usage, e.to_string()))
}

/// The file-mode creation mask hermes was started with. hermes itself runs with `077`, so every
/// file it creates is 0600 and every directory 0700 whatever the user's mask (the ledger holds
/// result text in plain); the processes it starts get the user's mask back.
static USER_UMASK: OnceLock<libc::mode_t> = OnceLock::new();

// The registry carries the mask as a `u32`, which `mode_t` is on Linux.
const _: () = assert!(size_of::<libc::mode_t>() == size_of::<u32>());

/// Makes every file and directory this process creates private; call once, first thing.
pub fn make_files_private() {
    // SAFETY: `umask` only swaps the process's mask; it cannot fail.
    let user = unsafe { libc::umask(0o077) };
    let _ = USER_UMASK.set(user);
}

/// The mask to give the processes hermes starts (`None` if [`make_files_private`] never ran).
pub fn user_umask() -> Option<u32> {
    USER_UMASK.get().copied()
}

/// Gives a command the user's file-mode mask back (hermes' own is private).
pub fn with_user_umask(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt as _;
    if let Some(&mask) = USER_UMASK.get() {
        // SAFETY: runs in the forked child before exec; `umask` is async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                libc::umask(mask);
                Ok(())
            });
        }
    }
}

impl Home {
    /// Finds the home, creates it if needed and reads its settings.
    pub fn load() -> anyhow::Result<Home> {
        let dir = home_dir(&env_var)?;
        for d in [dir.clone(), dir.join("cache")] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&d)
                .map_err(|e| unusable_home(&dir, &d, e))?;
        }
        if !QUIET.load(Ordering::Relaxed) {
            warn_if_shared(&dir);
        }
        let settings = config::load(&dir.join("config.toml"), config::environment())?;
        Ok(Home {
            dir,
            settings,
            child_passfile: OnceLock::new(),
        })
    }

    /// The home at `dir` with `settings`, as found elsewhere (`hermes doctor`, which creates
    /// nothing).
    pub fn at(dir: PathBuf, settings: Settings) -> Home {
        Home {
            dir,
            settings,
            child_passfile: OnceLock::new(),
        }
    }

    /// `cache/`.
    pub fn cache(&self) -> PathBuf {
        self.dir.join("cache")
    }

    /// Opens the ledger, runs the recovery sweep and may start headless hosts. The sweep is skipped when a short-lived command of this home
    /// swept within `host.recovery_interval_seconds` (short-lived commands sweep at
    /// start, rate-limited to that interval). The limit is the mtime of `cache/last-sweep`: a
    /// hint, never synced, so a command with nothing to write still syncs nothing.
    ///
    /// Sessions the sweep left with queued units and no host (their host of this machine died)
    /// get a new headless host ([`session_host::host_orphans`]).
    pub fn open_ledger_and_sweep(&self) -> anyhow::Result<Arc<Ledger>> {
        self.swept_ledger(None)
    }

    /// [`Home::open_ledger_and_sweep`] for a command that waits until `deadline` (`drain
    /// --wait`): a PostgreSQL server that cannot be reached (down or restarting) is looked for again, with
    /// a pause growing from 100 ms to 2 s, until the deadline; one still unreachable then is
    /// the error, saying how long it was waited for. A redb file that cannot be opened is the
    /// error at once.
    pub fn open_ledger_and_sweep_by(&self, deadline: Timestamp) -> anyhow::Result<Arc<Ledger>> {
        if !matches!(
            self.ledger_location()?,
            hermes_ledger::Location::Postgres(_)
        ) {
            return self.open_ledger_and_sweep();
        }
        let started = now();
        let mut pause = std::time::Duration::from_millis(100);
        loop {
            let err = match self.open_ledger_and_sweep() {
                Ok(ledger) => return Ok(ledger),
                Err(err) => err,
            };
            let at = now();
            let unreachable = matches!(
                err.downcast_ref::<hermes_ledger::LedgerError>(),
                Some(hermes_ledger::LedgerError::Unavailable { .. })
            );
            if !unreachable {
                return Err(err);
            }
            let waited = std::time::Duration::from_millis(at.ms_since(started));
            if at >= deadline {
                return match err.downcast::<hermes_ledger::LedgerError>() {
                    Ok(err) if !waited.is_zero() => Err(err.after_waiting(waited).into()),
                    Ok(err) => Err(err.into()),
                    Err(err) => Err(err),
                };
            }
            tracing::warn!(error = %format!("{err:#}"), "the ledger cannot be reached; waiting for it");
            let left = std::time::Duration::from_millis(deadline.ms_since(at));
            std::thread::sleep(pause.min(left));
            pause = (pause * 2).min(std::time::Duration::from_secs(2));
        }
    }

    /// [`Home::open_ledger_and_sweep`] for a process about to host `session` itself: it starts
    /// no other host for that session, whose queued units wait for it.
    pub fn open_ledger_and_sweep_as_host(
        &self,
        session: &SessionId,
    ) -> anyhow::Result<Arc<Ledger>> {
        self.swept_ledger(Some(session))
    }

    fn swept_ledger(&self, hosting: Option<&SessionId>) -> anyhow::Result<Arc<Ledger>> {
        let ledger = self.open_ledger()?;
        let hint = self.cache().join("last-sweep");
        let interval = self.settings.host.recovery_interval;
        let at = std::time::SystemTime::now();
        if housekeeping::stamp_due(&hint, interval, at) {
            // Stamp first, so commands starting together do not all sweep.
            let _ = housekeeping::touch(&hint, at);
            let report = housekeeping::sweep(
                &ledger,
                &hermes_registry::OsReaper::new(),
                &self.registry(),
                now(),
                hermes_ledger::Sweep::IfDue,
            )?;
            session_host::host_orphans(self, &ledger, &report, hosting);
        }
        Ok(Arc::new(ledger))
    }

    /// Where the ledger lives: `ledger.url` (a PostgreSQL database), else `ledger.redb` here.
    pub fn ledger_location(&self) -> anyhow::Result<hermes_ledger::Location> {
        let url = self.settings.ledger.url.as_ref().map(|u| u.expose());
        // libpq's variables fill in what the URL leaves out.
        let env = hermes_ledger::PgEnv::from_vars(|name| std::env::var(name).ok());
        let location =
            hermes_ledger::Location::from_url_env(url, &self.dir.join("ledger.redb"), &env)?;
        // Each deployment on a shared database keeps to its namespace, and its listeners go
        // past a pooler in transaction mode when `ledger.listen_url` says where.
        Ok(match location {
            hermes_ledger::Location::Postgres(target) => {
                let mut target = target
                    .in_namespace(&self.settings.ledger.namespace)
                    .with_statement_timeout(self.settings.ledger.statement_timeout);
                if let Some(listen) = &self.settings.ledger.listen_url {
                    let direct = hermes_ledger::PgTarget::parse_env(listen.expose(), &env)
                        .map_err(|e| anyhow::anyhow!("ledger.listen_url: {e}"))?;
                    target = target.listening_at(direct);
                }
                hermes_ledger::Location::Postgres(Box::new(target))
            }
            file => file,
        })
    }

    /// Opens the ledger (no sweep).
    pub fn open_ledger(&self) -> anyhow::Result<Ledger> {
        let location = self.ledger_location()?;
        if let hermes_ledger::Location::File(path) = &location {
            make_private(path);
        }
        Ok(Ledger::open_at(
            &location,
            hermes_ledger::LedgerConfig::from_settings(&self.settings),
        )?)
    }

    /// Runs `f` while a thread runs the recovery sweep every `host.recovery_interval_seconds`:
    /// every long-lived process sweeps, waiting consumers and followers included.
    pub fn sweeping<T>(&self, ledger: &Arc<Ledger>, f: impl FnOnce() -> T) -> T {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let every = self.settings.host.recovery_interval;
        let (ledger, config, home) = (Arc::clone(ledger), self.registry(), self.clone());
        let sweeper = std::thread::spawn(move || {
            let reaper = hermes_registry::OsReaper::new();
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(every)
            {
                match housekeeping::sweep(
                    &ledger,
                    &reaper,
                    &config,
                    now(),
                    hermes_ledger::Sweep::IfDue,
                ) {
                    Ok(report) => session_host::host_orphans(&home, &ledger, &report, None),
                    Err(e) => tracing::warn!(error = %e, "recovery sweep failed"),
                }
            }
        });
        let out = f();
        drop(stop);
        let _ = sweeper.join();
        out
    }

    /// The registry's settings.
    pub fn registry(&self) -> hermes_registry::Config {
        // The home is absolute (`config::home_dir`): a child in another directory that runs
        // hermes finds this home, not one relative to its own working directory.
        let home = ("HERMES_HOME".to_owned(), self.dir.display().to_string());
        hermes_registry::Config {
            child_umask: user_umask(),
            child_env: std::iter::once(home)
                .chain(
                    self.child_passfile
                        .get_or_init(|| self.write_child_passfile())
                        .iter()
                        .cloned(),
                )
                .collect(),
            ..hermes_registry::Config::from_settings(&self.dir, &self.settings)
        }
    }

    /// `PGPASSFILE` for children, when the ledger has a password: a password file of this
    /// home's own (`run/ledger.pgpass`, 0600), so a hermes a child runs reaches the ledger while
    /// no child's environment holds the password. Written only when it changed;
    /// [`Home::registry`] asks once per process.
    fn write_child_passfile(&self) -> Option<(String, String)> {
        let Ok(hermes_ledger::Location::Postgres(target)) = self.ledger_location() else {
            return None;
        };
        let line = target.passfile_lines()?;
        let run = self.dir.join("run");
        let path = run.join("ledger.pgpass");
        if std::fs::read_to_string(&path).ok().as_deref() != Some(line.as_str()) {
            let written = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&run)
                .and_then(|()| {
                    use std::io::Write as _;
                    let mut file = std::fs::OpenOptions::new()
                        .write(true)
                        .create(true)
                        .truncate(true)
                        .mode(0o600)
                        .open(&path)?;
                    file.write_all(line.as_bytes())
                });
            if let Err(e) = written {
                tracing::warn!(file = %path.display(), error = %e, "cannot write the children's password file: a hermes a child runs cannot reach the ledger");
                return None;
            }
            make_private(&path);
        }
        Some(("PGPASSFILE".to_owned(), path.display().to_string()))
    }

    /// Where the headless host of `session` logs.
    pub fn host_log(&self, session: &str) -> PathBuf {
        self.cache().join(format!("host-{session}.log"))
    }
}

/// Set by `-q`: no warning about a home others may read.
static QUIET: AtomicBool = AtomicBool::new(false);

/// No notes on stderr from the home (`-q`).
pub fn quiet() {
    QUIET.store(true, Ordering::Relaxed);
}

/// A home that cannot be created: a configuration error (exit 2) when the path is wrong for
/// one — a file, a directory not ours, a read-only place — else the failure as it is.
fn unusable_home(home: &Path, dir: &Path, e: std::io::Error) -> anyhow::Error {
    use std::io::ErrorKind::*;
    let message = format!("cannot create {}: {e}", dir.display());
    if matches!(
        e.kind(),
        AlreadyExists | NotADirectory | PermissionDenied | ReadOnlyFilesystem | InvalidInput
    ) {
        fail(
            Code::Usage,
            format!(
                "{message}; the hermes home {} must be a directory hermes may create or write (set HERMES_HOME)",
                home.display()
            ),
        )
    } else {
        anyhow::Error::new(e).context(message)
    }
}

/// One line on stderr when others may read the home (a directory hermes did not create: it is
/// left as it is).
fn warn_if_shared(dir: &Path) {
    if let Ok(meta) = std::fs::metadata(dir)
        && meta.permissions().mode() & 0o077 != 0
    {
        eprintln!(
            "hermes: warning: {} is readable by other users (mode {:o}); results are stored there in plain text: chmod 700 it",
            dir.display(),
            meta.permissions().mode() & 0o777
        );
    }
}

/// Tightens a file of hermes' own that an older hermes (or a looser mask) left readable by
/// others.
fn make_private(file: &Path) {
    if let Ok(meta) = std::fs::metadata(file)
        && meta.permissions().mode() & 0o077 != 0
    {
        let _ = std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600));
    }
}

/// Now.
pub fn now() -> Timestamp {
    SystemClock.now()
}

/// The render context: now, and the local offset from UTC.
pub fn render_context() -> hermes_formatter::RenderContext {
    let now = now();
    hermes_formatter::RenderContext {
        now,
        utc_offset_seconds: local_offset_seconds(now),
    }
}

fn local_offset_seconds(now: Timestamp) -> i32 {
    let secs = libc::time_t::try_from(now.0 / 1000).unwrap_or(0);
    // SAFETY: `localtime_r` writes into the `tm` we own and reads `secs`; both outlive the call.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    if ok {
        i32::try_from(tm.tm_gmtoff).unwrap_or(0)
    } else {
        0
    }
}

/// The runtime a long-lived command (a host, a worker, `-z`, `mcp`, the interactive session)
/// runs its registry host on: two worker threads, everything enabled.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}
