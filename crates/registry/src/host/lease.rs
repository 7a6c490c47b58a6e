//! The housekeeping loop: lease renewal and self-fencing, the recovery sweep, progress and
//! interrupt polling.

use std::sync::Arc;

use ledger::{HostKind, LedgerError, Timestamp};

use crate::config::millis;
use crate::error::RegistryError;

use super::inner::Inner;

/// The host's housekeeping loop.
pub(super) async fn maintain(inner: Arc<Inner>) {
    let mut stop = inner.stop.subscribe();
    let config = inner.ctx.config.clone();
    let registered = inner.ctx.clock.now();
    let (mut last_renewal, mut renewed) = (registered, registered);
    let mut last_progress = Timestamp(0);
    let mut last_sweep = Timestamp(0);
    let reaper = crate::reaper::OsReaper::new();
    loop {
        let now = inner.ctx.clock.now();
        if now.ms_since(last_renewal) >= millis(config.heartbeat_interval) {
            last_renewal = now;
            let (me, host_id, lease) = (inner.me, inner.host_id, millis(config.lease));
            match inner
                .call(move |l| l.renew_host(me, host_id, lease, now))
                .await
            {
                Ok(_) => renewed = now,
                Err(RegistryError::Ledger(LedgerError::LeaseLost(_))) => {
                    crate::counts::lease_renewal_failed();
                    inner.fence("another process judged this host dead and recovered its units");
                    return;
                }
                Err(e) => {
                    crate::counts::lease_renewal_failed();
                    tracing::warn!(error = %e, "cannot renew the host's lease");
                }
            }
        }
        if now.ms_since(renewed) >= millis(config.self_fence_after) {
            inner.fence("the lease could not be renewed in time");
            return;
        }
        if now.ms_since(last_sweep) >= millis(config.recovery_interval) {
            last_sweep = now;
            let (reaper, config) = (reaper.clone(), config.clone());
            let swept = inner
                .call(move |l| crate::housekeeping::sweep(l, &reaper, &config, now, false))
                .await;
            if let Err(e) = swept {
                tracing::warn!(error = %e, "recovery sweep failed");
            }
        }
        if now.ms_since(last_progress) >= millis(config.progress_interval) {
            last_progress = now;
            inner.persist_progress().await;
        }
        inner.poll_interrupts().await;
        if inner.options.kind != HostKind::Inline {
            inner.pick_up().await;
        }
        tokio::select! {
            () = tokio::time::sleep(config.sweep_interval) => {}
            () = inner.wake.notified() => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}
