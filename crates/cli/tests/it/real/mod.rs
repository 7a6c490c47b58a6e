//! The real agent CLIs with hermes, end to end: each installed from npm at the version pinned in
//! `tests/agents/package.json` (once per target directory, `hermes_testkit::agent_bin`), run
//! with a home of its own against a scripted model server on 127.0.0.1
//! (`hermes_testkit::model`) that records every request. What the tests assert is read from
//! those requests (what the agent sent its model) and from hermes' ledger.
//!
//! One module per agent; this one holds what they share: the installed CLIs, and a person's
//! machine for one test ([`Machine`]): a home for the agent, a project directory, hermes' own
//! home, and the environment that ties them together.

mod claude;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::Hermes;

mod cline;
mod codex;
mod copilot;
mod detach;
mod gemini;
mod sandboxed;
mod worktree;

/// The installed CLIs' `node_modules/.bin`.
pub fn agent_bin() -> &'static Path {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory");
    hermes_testkit::agent_bin(target)
}

/// The versions pinned in `tests/agents/package.json`, by package.
pub fn pinned_version(package: &str) -> String {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/agents/package.json");
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(manifest).expect("package.json"))
            .expect("package.json is JSON");
    manifest["dependencies"][package]
        .as_str()
        .unwrap_or_else(|| panic!("{package} is not pinned"))
        .to_owned()
}

/// A person's machine for one test: the agent's home (`HOME`), a project directory (a git
/// repository, as most projects are) and hermes' home, with the installed agent CLIs and
/// hermes' binary directory on `PATH`.
pub struct Machine {
    pub hermes: Hermes,
    pub home: tempfile::TempDir,
    pub project: tempfile::TempDir,
}

impl Machine {
    pub fn new() -> Machine {
        Machine::in_temp(&std::env::temp_dir())
    }

    /// A machine whose agent home and project are under `root` (an agent may refuse some of
    /// its work under the system's temporary directory).
    pub fn in_temp(root: &Path) -> Machine {
        let machine = Machine {
            hermes: Hermes::new(),
            home: tempfile::tempdir_in(root).expect("the agent's home"),
            project: tempfile::tempdir_in(root).expect("the project"),
        };
        let git = Command::new("git")
            .args(["init", "-q", "-b", "main"])
            .current_dir(machine.project.path())
            .status()
            .expect("git runs");
        assert!(git.success(), "git init");
        machine
    }

    /// The agent's home.
    pub fn home(&self) -> &Path {
        self.home.path()
    }

    /// The project directory.
    pub fn project(&self) -> &Path {
        self.project.path()
    }

    /// `PATH`: the agent CLIs, hermes' binary, and the system's.
    pub fn path_var() -> String {
        let hermes = Path::new(env!("CARGO_BIN_EXE_hermes"))
            .parent()
            .expect("the binary's directory")
            .to_owned();
        let system = std::env::var("PATH").unwrap_or_default();
        format!("{}:{}:{system}", agent_bin().display(), hermes.display())
    }

    /// `program` (an installed agent CLI, or any program on [`Machine::path_var`]) run in the
    /// project with this machine's environment: the agent's home, hermes' home and timings,
    /// no telemetry variables from the machine running the tests.
    pub fn command(&self, program: &str) -> Command {
        let resolved: PathBuf = {
            let installed = agent_bin().join(program);
            if installed.exists() {
                installed
            } else {
                program.into()
            }
        };
        let mut c = Command::new(resolved);
        self.hermes.environment(&mut c);
        c.current_dir(self.project())
            .env("HOME", self.home())
            .env("PATH", Machine::path_var())
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_DATA_HOME")
            .env_remove("XDG_STATE_HOME")
            .env_remove("XDG_CACHE_HOME")
            .env("NO_COLOR", "1")
            .env("CI", "true");
        c
    }
}

impl Machine {
    /// `hermes hook install AGENT EXTRA…` in the project, as a person types it, with `env`
    /// added; what it printed (it must succeed).
    pub fn hook_install(&self, agent: &str, extra: &[&str], env: &[(&str, &Path)]) -> String {
        let out = self
            .command("hermes")
            .envs(env.iter().copied())
            .args(["hook", "install", agent])
            .args(extra)
            .output()
            .expect("hermes runs");
        let printed = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{printed}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        printed
    }
}

/// Every pinned CLI installs and reports its pinned version: the harness itself works, and a
/// bumped pin really runs the new version.
#[test]
fn each_pinned_cli_runs_at_its_pinned_version() {
    let machine = Machine::new();
    for (program, package) in [
        ("claude", "@anthropic-ai/claude-code"),
        ("codex", "@openai/codex"),
        ("gemini", "@google/gemini-cli"),
        ("copilot", "@github/copilot"),
        ("cline", "cline"),
    ] {
        let out = machine
            .command(program)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("{program} runs: {e}"));
        let printed = String::from_utf8_lossy(&out.stdout);
        let version = pinned_version(package);
        assert!(
            out.status.success() && printed.contains(&version),
            "{program} --version printed {printed:?} (stderr {:?}), not {version}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
