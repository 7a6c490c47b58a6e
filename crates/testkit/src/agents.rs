//! The real agent CLIs, installed from npm at the versions pinned in `tests/agents/`
//! (`package.json` and its lockfile): once per target directory and lockfile, under a file
//! lock (several test processes may ask at once), and kept between runs, so a warm run does
//! not download again. Bumping a version is editing `package.json`, running
//! `npm install` there, and running the suite (`tests/agents/README.md`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The directory holding `package.json` and `package-lock.json`.
fn pinned() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/agents")
}

/// The installed CLIs' `node_modules/.bin`, installing them first if this target directory
/// does not have this lockfile's install yet. `target` is the test's target directory (the
/// parent of `CARGO_TARGET_TMPDIR`). Panics, saying what failed, when npm cannot install them:
/// a test that needs a real agent fails without it, never skips.
pub fn agent_bin(target: &Path) -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| install(target).unwrap_or_else(|why| panic!("{why}")))
}

fn install(target: &Path) -> Result<PathBuf, String> {
    let pinned = pinned();
    let lockfile = std::fs::read(pinned.join("package-lock.json"))
        .map_err(|e| format!("reading tests/agents/package-lock.json: {e}"))?;
    let manifest = std::fs::read(pinned.join("package.json"))
        .map_err(|e| format!("reading tests/agents/package.json: {e}"))?;
    let dir = target.join("agent-clis");
    std::fs::create_dir_all(target).map_err(|e| format!("creating {}: {e}", target.display()))?;
    let lock = std::fs::File::create(target.join("agent-clis.lock"))
        .map_err(|e| format!("the agent CLIs' lock file: {e}"))?;
    lock.lock()
        .map_err(|e| format!("locking the agent CLIs: {e}"))?;
    let ready = dir.join(format!(
        ".ready-{:016x}",
        hermes_stdx::fnv1a(&[manifest.as_slice(), lockfile.as_slice()].concat())
    ));
    if !ready.exists() {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        std::fs::write(dir.join("package.json"), &manifest).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("package-lock.json"), &lockfile).map_err(|e| e.to_string())?;
        let out = Command::new("npm")
            // Not `npm ci`: it refuses a lockfile without the other platforms' optional
            // binaries (`@cline/cli-darwin-arm64`, …), which the registry this project can reach
            // does not serve; `install` keeps the locked versions of everything it installs.
            .args([
                "install",
                "--no-save",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
            ])
            .current_dir(&dir)
            .output()
            .map_err(|e| format!("npm could not be run (is Node.js with npm installed?): {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "npm install of tests/agents failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        std::fs::write(&ready, "").map_err(|e| e.to_string())?;
    }
    Ok(dir.join("node_modules/.bin"))
}
