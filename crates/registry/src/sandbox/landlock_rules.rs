//! The Landlock half of a sandbox: read and execute everywhere, write beneath the writable
//! roots, and `/dev/null` writable as a file (children redirect there all the time).
//!
//! The ruleset asks for ABI 3 as a hard requirement (without truncation control a read-only
//! file could still be emptied) and for the rights of later ABIs (device ioctls) where the
//! kernel has them, as the `landlock` crate's compatibility levels allow.

use std::io;
use std::path::PathBuf;

use hermes_ledger::SandboxMode;
use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, RulesetAttr, RulesetCreated,
    RulesetCreatedAttr, RulesetStatus, path_beneath_rules,
};

use super::{MIN_LANDLOCK_ABI, SandboxError};

/// The newest ABI whose rights a sandbox asks for (ABI 5 added device ioctls; ABI 6 and 7 add
/// scopes and logging, which a sandbox does not use).
const TARGET: ABI = ABI::V5;

/// The Landlock ABI this kernel offers: a version number, or the reason there is none (the
/// error of the version query: not built in, or disabled at boot).
pub fn landlock_abi() -> Result<i32, String> {
    // SAFETY: the documented version query: a null attribute, size 0 and the VERSION flag.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    if abi < 0 {
        return Err(match io::Error::last_os_error().raw_os_error() {
            Some(libc::ENOSYS) => "is not built into this kernel".to_owned(),
            Some(libc::EOPNOTSUPP) => "is disabled at boot (add landlock to lsm=)".to_owned(),
            _ => format!("is unavailable: {}", io::Error::last_os_error()),
        });
    }
    Ok(abi as i32)
}

/// The ruleset of a child under `mode` that may write beneath `roots`.
pub(super) fn ruleset(
    mode: SandboxMode,
    roots: &[PathBuf],
) -> Result<RulesetCreated, SandboxError> {
    match landlock_abi() {
        Ok(abi) if abi >= MIN_LANDLOCK_ABI => {}
        Ok(abi) => {
            return Err(SandboxError::NoLandlock {
                mode,
                found: format!("ABI {abi}"),
            });
        }
        Err(reason) => {
            return Err(SandboxError::NoLandlock {
                mode,
                found: reason,
            });
        }
    }
    let error = |e: landlock::RulesetError| SandboxError::Landlock(e.to_string());
    landlock::Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V3))
        .map_err(error)?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(TARGET))
        .map_err(error)?
        .create()
        .map_err(error)?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(TARGET)))
        .map_err(error)?
        .add_rules(path_beneath_rules(
            ["/dev/null"],
            AccessFs::WriteFile | AccessFs::Truncate,
        ))
        .map_err(error)?
        .add_rules(path_beneath_rules(roots, AccessFs::from_all(TARGET)))
        .map_err(error)
}

/// Applies `ruleset` to the calling process (in the forked child): from here on, and for every
/// process it starts, only the ruleset's rights remain.
pub(super) fn restrict(ruleset: RulesetCreated) -> io::Result<()> {
    let status = ruleset
        .restrict_self()
        .map_err(|_| io::Error::from_raw_os_error(libc::EPERM))?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err(io::Error::from_raw_os_error(libc::ENOSYS));
    }
    Ok(())
}
