//! The crate boundaries of SPEC §2, checked from the manifests and sources (and run as a plain
//! `#[test]`, so `cargo test` enforces them too).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The workspace root (the parent of `xtask/`).
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_owned)
}

/// Dependencies of a crate, normal and dev (build-dependencies are not used here).
fn dependencies(root: &Path, krate: &str) -> Result<Vec<String>> {
    let path = root.join("crates").join(krate).join("Cargo.toml");
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let manifest: toml::Table = text
        .parse()
        .with_context(|| format!("parsing {}", path.display()))?;
    let mut names = Vec::new();
    for section in ["dependencies", "dev-dependencies"] {
        if let Some(table) = manifest.get(section).and_then(toml::Value::as_table) {
            names.extend(table.keys().cloned());
        }
    }
    Ok(names)
}

/// Every `.rs` file under `dir`, with its text.
fn sources(dir: &Path) -> Result<Vec<(PathBuf, String)>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = fs::read_to_string(&path)?;
                out.push((path, text));
            }
        }
    }
    Ok(out)
}

/// The crates under `crates/` whose boundaries are checked.
const CRATES: [&str; 6] = [
    "ledger",
    "registry",
    "router",
    "formatter",
    "settings",
    "cli",
];

/// Checks every boundary; the error lists every violation.
pub(crate) fn check(root: &Path) -> Result<()> {
    let mut problems = Vec::new();
    for krate in CRATES {
        let deps = dependencies(root, krate)?;
        let has = |name: &str| deps.iter().any(|d| d == name);
        if krate != "ledger" && has("redb") {
            problems.push(format!("{krate} depends on redb; only ledger may"));
        }
        if krate != "cli" {
            for ui in ["clap", "indicatif", "rustyline", "anyhow"] {
                if has(ui) {
                    problems.push(format!("{krate} depends on {ui}; only cli may"));
                }
            }
        }
        if matches!(krate, "router" | "formatter" | "settings") && has("tokio") {
            problems.push(format!("{krate} depends on tokio; it must do no I/O"));
        }
    }
    // `router`, `formatter` and `settings` read no clock, no environment and do no I/O; the
    // router's thin driver (`driver.rs`) is the one place allowed to call the ledger and sleep.
    let forbidden = [
        "std::env",
        "std::fs",
        "std::net",
        "std::process",
        "SystemTime::now",
        "Instant::now",
        "std::io::stdin",
        "std::io::stdout",
        "std::io::stderr",
        "println!",
        "eprintln!",
    ];
    for krate in ["router", "formatter", "settings"] {
        for (path, text) in sources(&root.join("crates").join(krate).join("src"))? {
            if path.file_name().is_some_and(|n| n == "driver.rs") {
                continue;
            }
            for needle in forbidden {
                if text.contains(needle) {
                    problems.push(format!(
                        "{} uses {needle}; {krate} does no I/O",
                        path.display()
                    ));
                }
            }
        }
    }
    // Only the ledger names redb in code.
    for krate in ["registry", "router", "formatter", "settings", "cli"] {
        for (path, text) in sources(&root.join("crates").join(krate).join("src"))? {
            if text.contains("redb::") {
                problems.push(format!("{} names redb; only ledger may", path.display()));
            }
        }
    }
    if !problems.is_empty() {
        bail!("crate boundaries violated:\n  {}", problems.join("\n  "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crate_boundaries_hold() {
        check(&workspace_root()).unwrap();
    }

    #[test]
    fn a_violation_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        for krate in CRATES {
            let src = dir.path().join("crates").join(krate).join("src");
            fs::create_dir_all(&src).unwrap();
            let deps = if krate == "router" {
                "[dependencies]\nredb = \"4\"\n"
            } else {
                ""
            };
            fs::write(
                dir.path().join("crates").join(krate).join("Cargo.toml"),
                deps,
            )
            .unwrap();
            let code = if krate == "formatter" {
                "fn f() { let _ = std::fs::read(\"x\"); }"
            } else {
                ""
            };
            fs::write(src.join("lib.rs"), code).unwrap();
        }
        let err = check(dir.path()).unwrap_err().to_string();
        assert!(err.contains("router depends on redb"), "{err}");
        assert!(err.contains("uses std::fs"), "{err}");
    }
}
