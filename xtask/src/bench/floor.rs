//! The plain-SQL PostgreSQL floor of `cargo xtask bench` (`shared/bench/pg_floor_ref.py`): its
//! virtual environment, and its one-client and contended runs beside the ledger's figures.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};

use super::{
    PRODUCT_DRAINS, PRODUCT_TASKS, PRODUCT_UNITS, json_of, round, shared_script,
    statements_per_event, worker_says,
};
use crate::boundaries::target_dir;

/// The plain-SQL PostgreSQL floor, beside the reference.
const FLOOR: &str = "pg_floor_ref.py";
/// The floor's one-client cycle runs this long: the window of `bench_ledger`'s `pg_cycle_per_s`.
const FLOOR_CYCLE_SECONDS: &str = "3";

/// The plain-SQL floor (`shared/bench/pg_floor_ref.py`, psycopg), run by the Python of a
/// virtual environment of the bench's own (`target/bench-venv`, made once and reused), each
/// run on a fresh, empty database of the run's server, its statements counted like the
/// ledger's.
pub(super) struct Floor {
    python: PathBuf,
    script: PathBuf,
}

impl Floor {
    /// Finds the script and makes the virtual environment if it has no psycopg yet.
    pub(super) fn prepare() -> Result<Floor> {
        let script = shared_script(FLOOR)?;
        let venv = target_dir().join("bench-venv");
        let python = venv.join("bin/python");
        let has_psycopg = |python: &Path| {
            Command::new(python)
                .args(["-c", "import psycopg"])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !has_psycopg(&python) {
            eprintln!(
                "xtask: making {} with psycopg for the PostgreSQL floor",
                venv.display()
            );
            let made = Command::new("python3")
                .args(["-m", "venv"])
                .arg(&venv)
                .status()
                .context("running python3 -m venv (the PostgreSQL floor needs it)")?;
            if !made.success() {
                bail!(
                    "python3 -m venv {} failed; Debian needs python3-venv",
                    venv.display()
                );
            }
            let installed = Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet", "psycopg[binary]"])
                .status()
                .context("running pip in the bench's virtual environment")?;
            if !installed.success() || !has_psycopg(&python) {
                bail!(
                    "pip could not install psycopg[binary] into {} (it comes from PyPI)",
                    venv.display()
                );
            }
        }
        Ok(Floor { python, script })
    }

    /// The floor's one-client cycle for `FLOOR_CYCLE_SECONDS`, as `pg_cycle_per_s` runs.
    pub(super) fn cycle(
        &self,
        worker: &Path,
        pg_url: &str,
        figures: &mut Map<String, Value>,
    ) -> Result<()> {
        let (out, statements) = self.measure(worker, pg_url, "cycle", &[FLOOR_CYCLE_SECONDS])?;
        figures.insert(
            "pg_floor_cycle_per_s".into(),
            out["floor_cycle_per_s"].clone(),
        );
        figures.insert(
            "pg_floor_round_trips_per_event_cycle".into(),
            json!(statements),
        );
        Ok(())
    }

    /// The floor's contended run: one producer process and `PRODUCT_DRAINS` consumer
    /// processes, `PRODUCT_UNITS × PRODUCT_TASKS` events, as `pg_contended_events_per_s` runs.
    pub(super) fn contended(
        &self,
        worker: &Path,
        pg_url: &str,
        figures: &mut Map<String, Value>,
    ) -> Result<()> {
        let events = (PRODUCT_UNITS * PRODUCT_TASKS).to_string();
        let consumers = PRODUCT_DRAINS.to_string();
        let (out, statements) =
            self.measure(worker, pg_url, "contended", &[&events, &consumers])?;
        figures.insert(
            "pg_floor_contended_events_per_s".into(),
            out["floor_contended_events_per_s"].clone(),
        );
        figures.insert(
            "pg_floor_round_trips_per_event_contended".into(),
            json!(statements),
        );
        Ok(())
    }

    /// `setup`, then `MODE DB ARGS` on a fresh database with its statements counted: the JSON
    /// it printed and the statements per job it reported.
    fn measure(
        &self,
        worker: &Path,
        pg_url: &str,
        mode: &str,
        args: &[&str],
    ) -> Result<(Value, f64)> {
        let database = worker_says(worker, &["fresh-empty-database", pg_url])?;
        self.script(&["setup", &database])?;
        worker_says(worker, &["reset-statements", pg_url, &database])?;
        let mut full = vec![mode, &database];
        full.extend_from_slice(args);
        let out = self.script(&full)?;
        let jobs = out["jobs"]
            .as_f64()
            .with_context(|| format!("{FLOOR} {mode} printed no jobs"))?;
        let statements = statements_per_event(worker, pg_url, &database, jobs)?;
        Ok((out, round(statements)))
    }

    fn script(&self, args: &[&str]) -> Result<Value> {
        eprintln!("xtask: bench the PostgreSQL floor ({FLOOR} {})", args[0]);
        let out = Command::new(&self.python)
            .arg(&self.script)
            .args(args)
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("running {FLOOR} {}", args[0]))?;
        if !out.status.success() {
            bail!("{FLOOR} {} failed ({})", args[0], out.status);
        }
        json_of(FLOOR, &out.stdout)
    }
}
