//! What the command-line benchmarks share: the release binary they time.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail};

/// Builds the release `hermes` binary (a no-op when it is fresh) and returns its path.
pub fn release_binary() -> Result<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let exe = target.join("release").join("hermes");
    let mut build = Command::new(env!("CARGO"));
    // Built beside this example, as `cargo run --example` resolved its features: a build of
    // the binary alone resolves them without the dev-dependencies and relinks it each time.
    build
        .args(["build", "--release", "-p", "hermes-cli", "--bin", "hermes"])
        .args(["--example", env!("CARGO_CRATE_NAME")])
        .stdout(Stdio::null());
    // Without what `cargo run` set for this example: ring's build script reruns when
    // `CARGO_MANIFEST_DIR` or `CARGO_PKG_*` differ from the last build's, and the build that
    // ran this example (from `cargo xtask bench` or a shell) had none of this example's.
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(|name| {
            name.starts_with("CARGO_PKG_")
                || name.starts_with("CARGO_MANIFEST_")
                || matches!(
                    name,
                    "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE" | "OUT_DIR"
                )
        }) {
            build.env_remove(name);
        }
    }
    let status = build.status().context("cargo build")?;
    if !status.success() || !exe.exists() {
        bail!("cannot build {}", exe.display());
    }
    Ok(exe)
}

/// A private temporary home (0700, as hermes creates its own; a shared one is warned about).
pub fn private_home() -> Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt as _;
    let home = tempfile::tempdir().context("temp home")?;
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700))
        .context("chmod the temp home")?;
    Ok(home)
}
