//! Fencing and interrupts: a host that lost its lease kills its children and stops writing;
//! interrupts asked for by other processes are found and acted on.

use std::sync::atomic::Ordering;

use hermes_ledger::{DelegationId, SessionId};

use super::inner::Inner;

impl Inner {
    /// Fences the host: kills every child it runs (their whole process groups, at once) and
    /// stops all ledger access, because another process may now recover its units.
    pub(super) fn fence(&self, why: &str) {
        if self.fenced.swap(true, Ordering::SeqCst) {
            return;
        }
        tracing::error!(host = %self.host_id, why, "host fenced: stopping its children and writing nothing more");
        let units = self.lock();
        for entry in units.running.values() {
            for child in &entry.children {
                if let Some(process) = child.process() {
                    crate::procs::signal_group(process, nix::sys::signal::Signal::SIGKILL);
                }
            }
        }
        drop(units);
        self.stop.send_replace(true);
    }

    pub(super) fn interrupt_local(
        &self,
        matches: impl Fn(&DelegationId, Option<&SessionId>) -> bool,
        reason: &str,
    ) {
        let units = self.lock();
        for (id, entry) in &units.running {
            if matches(id, entry.session.as_ref()) {
                entry.interrupt.send_if_modified(|current| {
                    if current.is_some() {
                        return false;
                    }
                    *current = Some(reason.to_owned());
                    true
                });
            }
        }
    }

    /// Interrupts the children other processes asked to interrupt (an inline host's pass; a
    /// host that picks up work reads them in its pass, [`Inner::pick_up`]). Returns whether the
    /// requests could be read.
    pub(super) async fn poll_interrupts(&self) -> bool {
        let me = self.me;
        match self.call(move |l| l.interrupt_requests(me)).await {
            Ok(requests) => {
                self.act_on_interrupts(requests);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read interrupt requests");
                false
            }
        }
    }

    /// Interrupts the local units of `requests` (id, reason).
    pub(super) fn act_on_interrupts(&self, requests: Vec<(DelegationId, String)>) {
        for (id, reason) in requests {
            self.interrupt_local(|d, _| *d == id, &reason);
        }
    }
}
