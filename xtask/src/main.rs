//! Project automation.
//!
//! ```text
//! cargo xtask ci            fmt --check, clippy -D warnings, every test (boundaries included)
//! cargo xtask bench [--json] run the benchmarks and print their figures
//! ```

mod bench;
mod boundaries;

use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("bench") => bench::run(args.iter().any(|a| a == "--json")),
        _ => {
            eprintln!("usage: cargo xtask ci | cargo xtask bench [--json]");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn ci() -> Result<()> {
    boundaries::check(&boundaries::workspace_root())?;
    eprintln!("xtask: crate boundaries hold");
    cargo(&["fmt", "--all", "--check"])?;
    cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    cargo(&["test", "--workspace", "--no-fail-fast"])?;
    Ok(())
}

/// Runs cargo with `args` in the workspace root, failing if it fails.
pub(crate) fn cargo(args: &[&str]) -> Result<()> {
    eprintln!("xtask: cargo {}", args.join(" "));
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(args)
        .current_dir(boundaries::workspace_root())
        .status()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}
