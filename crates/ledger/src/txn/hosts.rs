//! Host records inside a transaction: recording one (refusing to overwrite another locality's
//! live host) and removing one with its hold on its session.

use crate::error::{LedgerError, Result};
use crate::model::{HostRecord, Locality, ProcessId};
use crate::store::Writer;

/// Records `host` inside `w` (see [`Ledger::register_host`]).
pub(crate) fn register_in(w: &Writer<'_>, host: &HostRecord) -> Result<()> {
    if let Some(existing) = w.host(host.process)?
        && existing.host_id != host.host_id
        && existing.locality != host.locality
        && existing.locality != Locality::default()
    {
        let live = existing.lease_expires_at > host.registered_at;
        let owns_units = w
            .active_units()?
            .iter()
            .any(|u| u.host == Some(host.process));
        if live || owns_units {
            return Err(LedgerError::HostCollision {
                process: host.process,
                machine: existing.locality.hostname.clone(),
            });
        }
    }
    w.put_host(host)
}

/// Removes a host's record and clears its session's host if it is this one.
pub(crate) fn release_host(w: &Writer<'_>, process: ProcessId) -> Result<()> {
    if let Some(host) = w.host(process)?
        && let Some(id) = &host.session
        && let Some(mut session) = w.session(id)?
        && session.host == Some(process)
    {
        session.host = None;
        w.put_session(&session)?;
    }
    w.remove_host(process)
}
