//! The heartbeat schedule of two-phase delivery: while a claimed envelope is being presented,
//! its lease is renewed every `heartbeat` (`delivery.heartbeat_seconds`, 60 s), so a
//! slow presentation is never mistaken for a dead consumer.
//!
//! This is only the schedule; the driver's `Router::renew_if_due` and `Router::keep_alive` do
//! the renewing.

use hermes_ledger::Timestamp;

/// When the next renewal of one claim is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    every_ms: u64,
    next_at: Timestamp,
}

impl Heartbeat {
    /// A schedule for a claim taken (or last renewed) at `since`, renewing every `every_ms`
    /// milliseconds (at least 1).
    pub fn new(since: Timestamp, every_ms: u64) -> Heartbeat {
        let every_ms = every_ms.max(1);
        Heartbeat {
            every_ms,
            next_at: since.plus_ms(every_ms),
        }
    }

    /// When the next renewal is due.
    pub fn next_at(&self) -> Timestamp {
        self.next_at
    }

    /// Whether a renewal is due at `now`.
    pub fn is_due(&self, now: Timestamp) -> bool {
        now >= self.next_at
    }

    /// Records a renewal made at `now`.
    pub fn renewed(&mut self, now: Timestamp) {
        self.next_at = now.plus_ms(self.every_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_every_interval_from_the_last_renewal() {
        let mut beat = Heartbeat::new(Timestamp(1_000), 60_000);
        assert!(!beat.is_due(Timestamp(60_999)));
        assert!(beat.is_due(Timestamp(61_000)));
        // A late renewal counts from when it happened.
        beat.renewed(Timestamp(65_000));
        assert_eq!(beat.next_at(), Timestamp(125_000));
        assert_eq!(Heartbeat::new(Timestamp(5), 0).next_at(), Timestamp(6));
    }
}
