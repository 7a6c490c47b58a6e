//! The hermes home: `$HERMES_HOME` (created 0700) with `ledger.redb`, `config.toml` and
//! `cache/`, the settings in force, and the ledger opened and swept.

use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use ledger::{Ledger, OsReaper, Timestamp};
use registry::{Clock, SystemClock};

use crate::config::{Settings, home_dir};

/// Everything a command needs from its surroundings.
#[derive(Debug)]
pub struct Home {
    /// The home directory.
    pub dir: PathBuf,
    /// The settings in force.
    pub settings: Settings,
}

/// The process environment, as a lookup function.
pub fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
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
                .with_context(|| format!("cannot create {}", d.display()))?;
        }
        let settings = Settings::load(&dir.join("config.toml"), &env_var)?;
        Ok(Home { dir, settings })
    }

    /// `cache/`.
    pub fn cache(&self) -> PathBuf {
        self.dir.join("cache")
    }

    /// Opens the ledger and runs the (rate-limited) recovery sweep.
    pub fn ledger(&self) -> anyhow::Result<Arc<Ledger>> {
        let path = self.dir.join("ledger.redb");
        let ledger = Ledger::open(&path, self.settings.ledger())?;
        let report = ledger.recover(&OsReaper, now(), false)?;
        if !report.finalized.is_empty() {
            tracing::info!(finalized = ?report.finalized, "recovered units of dead hosts");
        }
        registry::housekeeping::after_recovery(&ledger, &self.registry(), &report);
        Ok(Arc::new(ledger))
    }

    /// The registry's settings.
    pub fn registry(&self) -> registry::Config {
        self.settings.registry(&self.dir)
    }

    /// Where the headless host of `session` logs.
    pub fn host_log(&self, session: &str) -> PathBuf {
        self.cache().join(format!("host-{session}.log"))
    }
}

/// Now.
pub fn now() -> Timestamp {
    SystemClock.now()
}

/// The render context: now, and the local offset from UTC.
pub fn render_context() -> formatter::RenderContext {
    let now = now();
    formatter::RenderContext {
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
