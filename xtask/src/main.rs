//! Project automation.
//!
//! ```text
//! cargo xtask ci              boundaries, fmt --check, clippy -D warnings, every test on redb,
//!                             then the backend suites again on a throwaway PostgreSQL
//! cargo xtask test [ARGS…]    `cargo test ARGS…` with a throwaway PostgreSQL's variables set
//! cargo xtask pg start|stop|env
//!                             a throwaway PostgreSQL for a shell (prints `export` lines)
//! cargo xtask bench [--json] [--rounds-only] [--only HARNESS]…
//!                             run the benchmarks and print their figures (`--rounds-only`: the
//!                             interleaved rounds against the references, not the harnesses;
//!                             `--only bench_cli`: just that harness, on the same server)
//! cargo xtask soak [--minutes N] [--short] [--seed S] [--json]
//!                             exactly-once under random PostgreSQL faults (docs/soak.md); not
//!                             part of ci
//! ```

mod bench;
mod boundaries;
mod pg;
mod shape;
mod soak;

use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// The variable the backend-parameterized tests read: unset → redb, `postgres` → the server at
/// `HERMES_TEST_PG_URL` (they panic if that is unset: no test skips for want of a server).
const BACKEND_VAR: &str = "HERMES_TEST_BACKEND";

/// The packages whose tests are parameterized by `HERMES_TEST_BACKEND`: `cargo xtask ci` runs
/// them a second time with `HERMES_TEST_BACKEND=postgres`. A package that gains such tests joins
/// this list.
const BACKEND_PACKAGES: [&str; 5] = [
    "hermes-ledger",
    "hermes-tests",
    "hermes-cli",
    "hermes-registry",
    "hermes-router",
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("test") => test(&args[1..]),
        Some("pg") => pg::run(&args[1..]),
        Some("bench") => bench::run(bench::Options {
            json: args.iter().any(|a| a == "--json"),
            rounds_only: args.iter().any(|a| a == "--rounds-only"),
            only: args
                .windows(2)
                .filter(|w| w[0] == "--only")
                .map(|w| w[1].clone())
                .collect(),
        }),
        Some("soak") => soak::Options::parse(&args[1..]).and_then(|o| soak::run(&o)),
        _ => {
            eprintln!(
                "usage: cargo xtask ci | cargo xtask test [CARGO TEST ARGS…] | \
                 cargo xtask pg start|stop|env | cargo xtask bench [--json] [--rounds-only] [--only HARNESS]… | \
                 cargo xtask soak [--minutes N] [--short] [--seed S] [--json]"
            );
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
    let mut phases = Phases::default();
    phases.run("boundaries", || {
        boundaries::check(&boundaries::workspace_root())?;
        eprintln!("xtask: crate boundaries hold");
        Ok(())
    })?;
    // Started first, so a machine without the server fails in a second, not after clippy; a
    // failure below drops `cluster`, which stops it.
    let cluster = phases.run("postgres start", pg::start)?;
    phases.run("fmt", || run(cargo(&["fmt", "--all", "--check"])))?;
    phases.run("clippy", || {
        run(cargo(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))
    })?;
    // Both test runs always run; either failing fails ci.
    let on_redb = phases.run("test (redb)", || {
        let mut command = cargo(&["test", "--workspace", "--no-fail-fast"]);
        cluster.export_to(&mut command);
        command.env_remove(BACKEND_VAR);
        run(command)
    });
    let on_postgres = phases.run("test (postgres)", || {
        let mut command = cargo(&["test", "--no-fail-fast"]);
        for package in BACKEND_PACKAGES {
            command.args(["-p", package]);
        }
        // The real agent CLIs' tests (`real::`) ask the same of hermes on either backend and
        // are the slowest of the suite: they run once, on redb.
        command.args(["--", "--skip", "real::"]);
        cluster.export_to(&mut command);
        command.env(BACKEND_VAR, "postgres");
        run(command)
    });
    let stopped = phases.run("postgres stop", || Ok(cluster.stop()?));
    phases.summary();
    on_redb?;
    on_postgres?;
    stopped
}

/// `cargo xtask test ARGS…`: `cargo test ARGS…` against a throwaway cluster; `HERMES_TEST_BACKEND`
/// passes through from the caller.
fn test(args: &[String]) -> Result<()> {
    let cluster = pg::start()?;
    let mut command = cargo(&["test"]);
    command.args(args);
    cluster.export_to(&mut command);
    let tested = run(command);
    let stopped = cluster.stop();
    tested?;
    Ok(stopped?)
}

/// Named steps with their wall time, printed as each ends and together at the end.
#[derive(Default)]
struct Phases {
    done: Vec<(&'static str, f64, bool)>,
}

impl Phases {
    fn run<T>(&mut self, name: &'static str, phase: impl FnOnce() -> Result<T>) -> Result<T> {
        let start = Instant::now();
        let result = phase();
        let seconds = start.elapsed().as_secs_f64();
        let verdict = if result.is_ok() { "ok" } else { "FAILED" };
        eprintln!("xtask: {name}: {verdict} in {seconds:.1} s");
        self.done.push((name, seconds, result.is_ok()));
        result
    }

    fn summary(&self) {
        eprintln!("xtask: wall time per phase:");
        for (name, seconds, ok) in &self.done {
            let verdict = if *ok { "ok" } else { "FAILED" };
            eprintln!("xtask:   {name:18} {seconds:7.1} s  {verdict}");
        }
    }
}

/// A cargo command in the workspace root, without the variables `cargo run` set for xtask.
///
/// Some build scripts (ring's) declare `rerun-if-env-changed` on `CARGO_MANIFEST_DIR`,
/// `CARGO_PKG_NAME` and the like, and cargo compares them with its own environment: a cargo
/// run from inside xtask (`CARGO_MANIFEST_DIR=…/xtask`) and one from inside a bench example
/// (`…/crates/cli`) would each rebuild ring and everything above it, minutes per harness.
pub(crate) fn cargo(args: &[&str]) -> Command {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.args(args).current_dir(boundaries::workspace_root());
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo_run) {
            command.env_remove(name);
        }
    }
    command
}

/// Whether `name` is one of the variables cargo sets for the program it runs (not one a user
/// sets to configure cargo, such as `CARGO_TARGET_DIR` or `CARGO_HOME`).
fn set_by_cargo_run(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_MANIFEST_")
        || matches!(
            name,
            "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE" | "OUT_DIR"
        )
}

/// Runs `command`, failing if it fails.
pub(crate) fn run(mut command: Command) -> Result<()> {
    let program = Path::new(command.get_program());
    let shown = format!(
        "{} {}",
        program
            .file_name()
            .unwrap_or(program.as_os_str())
            .to_string_lossy(),
        command
            .get_args()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    );
    eprintln!("xtask: {shown}");
    let status = command
        .status()
        .with_context(|| format!("running {shown}"))?;
    if !status.success() {
        bail!("{shown} failed ({status})");
    }
    Ok(())
}
