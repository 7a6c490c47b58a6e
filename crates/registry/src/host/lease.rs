//! The housekeeping loop (lease renewal, the recovery sweep, interrupt polling)
//! and self-fencing, which runs on a clock of its own: a ledger call that never
//! answers (a partition that black-holes traffic) blocks the housekeeping loop, never the
//! fence.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hermes_ledger::{HostKind, LedgerError, Timestamp};

use crate::config::millis;
use crate::error::RegistryError;

use super::inner::Inner;

/// The host's housekeeping loop.
pub(super) async fn housekeeping_loop(inner: Arc<Inner>) {
    let mut stop = inner.stop.subscribe();
    let config = inner.ctx.config.clone();
    let mut last_renewal = inner.ctx.clock.now();
    let mut last_sweep = Timestamp(0);
    // The change stamp at the start of the last clean pass over interrupts and pick-up.
    let mut state_read: Option<(u64, Timestamp)> = None;
    // Whether something woke the loop (a dispatch, an interrupt, a finished child): then the
    // pass runs whatever the stamp says.
    let mut woken = true;
    let reaper = crate::reaper::OsReaper::new();
    loop {
        let now = inner.ctx.clock.now();
        if now.ms_since(last_renewal) >= millis(config.host.heartbeat) {
            last_renewal = now;
            let (me, host_id, lease) = (inner.me, inner.host_id, millis(config.host.lease));
            let before = inner.ledger.change_stamp();
            let gate = inner.renewal_gate.lock().await;
            if inner.left.load(Ordering::SeqCst) {
                return;
            }
            let renewed = inner
                .call(move |l| l.renew_host(me, host_id, lease, now))
                .await;
            drop(gate);
            match renewed {
                Ok(_) => {
                    // The lease runs from when the renewal was asked for.
                    inner.renewed_at.store(now.0, Ordering::SeqCst);
                    // This host's own renewal changes nothing a pass reads: a clean pass that
                    // was current just before it stays current (what another process records
                    // meanwhile for a host bumps the activity counter, whose wake forces a
                    // pass; anything else waits at most `STATE_RECHECK` sweeps).
                    if let Some((seen, at)) = state_read
                        && Some(seen) == before
                    {
                        state_read = inner.ledger.change_stamp().map(|s| (s, at));
                    }
                }
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
        if now.ms_since(last_sweep) >= millis(config.host.recovery_interval) {
            last_sweep = now;
            sweep(&inner, &reaper, &config, now).await;
        }
        // Interrupt requests and work to pick up are ledger state alone: while the state
        // stamp says nothing was committed (redb) or notified (PostgreSQL) since a pass that
        // read them cleanly, that pass still holds (every dispatch, interrupt and finished
        // child is a commit that notifies). A pass runs anyway after `STATE_RECHECK` sweeps,
        // and always where there is no stamp (a listener that failed).
        let stamp = inner.state_stamp();
        let current = !woken
            && matches!(
                (stamp, state_read),
                (Some(stamp), Some((seen, at)))
                    if stamp == seen && now.ms_since(at) < STATE_RECHECK * millis(config.host.sweep_interval)
            );
        if !current {
            // One read a pass: a host that picks up work reads its interrupts with it.
            let clean = if inner.options.kind == HostKind::Inline {
                inner.poll_interrupts().await
            } else {
                inner.pick_up().await
            };
            state_read = if clean { stamp.map(|s| (s, now)) } else { None };
        }
        woken = tokio::select! {
            () = tokio::time::sleep(config.host.sweep_interval) => false,
            () = inner.wake.notified() => true,
            _ = stop.changed() => return,
        };
        if *stop.borrow() {
            return;
        }
    }
}

/// The recovery sweep, as of the host's state stamp (read before it: a change while it runs
/// makes the next one read).
async fn sweep(
    inner: &Arc<Inner>,
    reaper: &crate::reaper::OsReaper,
    config: &crate::config::Config,
    now: Timestamp,
) {
    let (reaper, config) = (reaper.clone(), config.clone());
    let stamp = inner.state_stamp();
    let swept = inner
        .call(move |l| {
            crate::housekeeping::sweep_as_of(
                l,
                &reaper,
                &config,
                now,
                hermes_ledger::Sweep::IfDue,
                stamp,
            )
        })
        .await;
    if let Err(e) = swept {
        tracing::warn!(error = %e, "recovery sweep failed");
    }
}

/// After how many sweep intervals interrupts and pick-up are read again even though the
/// ledger's change stamp stood still.
const STATE_RECHECK: u64 = 10;

/// How often, at most, the fence looks at the clock.
const FENCE_TICK: Duration = Duration::from_millis(100);
/// How long, at most, the fence sleeps between looks (a clock that jumps is noticed by then).
const FENCE_NAP: Duration = Duration::from_secs(1);

/// Self-fencing: once the last renewal that got through is `self_fence_after` old, the host
/// stops its children and writes nothing more, whatever the housekeeping loop is blocked on.
/// It reads only the clock and [`Inner::renewed_at`], never the ledger.
pub(super) async fn fence_on_time(inner: Arc<Inner>) {
    let mut stop = inner.stop.subscribe();
    let limit = millis(inner.ctx.config.self_fence_after());
    let tick = inner.ctx.config.host.sweep_interval.min(FENCE_TICK);
    loop {
        let renewed = Timestamp(inner.renewed_at.load(Ordering::SeqCst));
        let since = inner.ctx.clock.now().ms_since(renewed);
        if since >= limit {
            inner.fence("the lease could not be renewed in time");
            return;
        }
        // Asleep until the moment the lease would run out (a renewal meanwhile moves it), and
        // never longer than a nap: an idle host wakes about once a second, not ten times.
        let nap = Duration::from_millis(limit - since).clamp(tick, FENCE_NAP.max(tick));
        tokio::select! {
            () = tokio::time::sleep(nap) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}
