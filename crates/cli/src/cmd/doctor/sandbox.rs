//! The kernel's sandbox support, as `hermes doctor` reports it: Landlock (its ABI version,
//! asked of `landlock_create_ruleset`; ABI 3 or newer enforces a sandbox), user namespaces
//! (the sysctls that forbid them), and a real try: a child of this binary confined as a
//! `workspace-write` child without network would be (`hermes --version`, so nothing runs in
//! it). Each probe changes nothing in this process; a missing feature is a warning, not a
//! failure: a dispatch that asks for a sandbox this machine cannot enforce is refused, and
//! `full` (the default of the command line) needs none of it.

use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};

use hermes_ledger::SandboxMode;
use hermes_registry::sandbox::{self, MIN_LANDLOCK_ABI, Policy};

use super::{Check, Status};

/// The three sandbox lines.
pub fn checks() -> Vec<Check> {
    vec![landlock(), user_namespaces(), enforced()]
}

fn landlock() -> Check {
    let name = "sandbox landlock";
    match sandbox::landlock_abi() {
        Ok(abi) if abi >= MIN_LANDLOCK_ABI => Check::new(
            Status::Ok,
            name,
            format!("ABI version {abi}: read-only and workspace-write sandboxes are enforced"),
        ),
        Ok(abi) => Check::new(
            Status::Warn,
            name,
            format!(
                "ABI version {abi} (ABI {MIN_LANDLOCK_ABI} or newer needed): read-only and workspace-write are refused here"
            ),
        ),
        Err(why) => Check::new(
            Status::Warn,
            name,
            format!("Landlock {why}: read-only and workspace-write are refused here"),
        ),
    }
}

fn user_namespaces() -> Check {
    match sandbox::user_namespaces() {
        Ok(()) => Check::new(
            Status::Ok,
            "sandbox userns",
            "user namespaces are available: --network off and a read-only .git",
        ),
        Err(why) => Check::new(
            Status::Warn,
            "sandbox userns",
            format!("{why}: --network off and a read-only .git are refused here"),
        ),
    }
}

/// Confines a child of this binary as a `workspace-write` child without network, in a
/// throwaway directory holding a `.git`, and runs `hermes --version` in it.
fn enforced() -> Check {
    let name = "sandbox enforce";
    match try_confined() {
        Ok(()) => Check::new(
            Status::Ok,
            name,
            "a child confined to workspace-write without network starts",
        ),
        Err(e) => Check::new(
            Status::Warn,
            name,
            format!("a confined child cannot start here: {e}"),
        ),
    }
}

fn try_confined() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("hermes-doctor-{}", std::process::id()));
    std::fs::create_dir_all(dir.join(".git"))?;
    let tried = run_confined(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    tried
}

fn run_confined(dir: &std::path::Path) -> anyhow::Result<()> {
    let policy = Policy {
        mode: SandboxMode::WorkspaceWrite,
        network: false,
        writable: Vec::new(),
        read_only: Vec::new(),
    };
    let mut confinement = sandbox::prepare(&policy, dir)?;
    let mut command = Command::new(std::env::current_exe()?);
    command
        .arg("--version")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: runs in the forked child before exec; entering a confinement is system calls
    // only.
    unsafe {
        command.pre_exec(move || match confinement.as_mut() {
            Some(c) => c.enter(),
            None => Ok(()),
        });
    }
    let status = command.status()?;
    anyhow::ensure!(status.success(), "it ended with {status}");
    Ok(())
}
