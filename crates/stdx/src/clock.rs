//! The one clock: what time it is, and how to sleep until a time unless woken first.
//!
//! Decisions never read the system's clock themselves: they are handed a [`Clock`] —
//! [`SystemClock`] in production, [`ManualClock`] in tests, which only moves when told to (or
//! jumps to the time a sleeper asked for) — so stall, lease and scheduler tests are
//! deterministic and take milliseconds.

use std::fmt;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::sync::lock;
use crate::time::Timestamp;

/// Where time comes from, and how a thread sleeps. Async code sleeps with its runtime's timers
/// and uses only [`Clock::now`].
pub trait Clock: Send + Sync + fmt::Debug {
    /// Now, in milliseconds since the Unix epoch.
    fn now(&self) -> Timestamp;

    /// Sleeps until `until`, or until `watch` is signalled (then it returns at once).
    fn sleep_until(&self, until: Timestamp, watch: &Watch<'_>);
}

/// The system's real-time clock (leases are compared across processes, so it must be the
/// system's time, not a monotonic one).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        )
    }

    fn sleep_until(&self, until: Timestamp, watch: &Watch<'_>) {
        let target = UNIX_EPOCH + Duration::from_millis(until.as_millis());
        loop {
            let left = match target.duration_since(SystemTime::now()) {
                Ok(left) if !left.is_zero() => left,
                _ => return,
            };
            if watch.wait(left) {
                return;
            }
        }
    }
}

type SleepHook = Box<dyn FnMut(Timestamp) + Send>;

/// A clock that only moves when told to, for deterministic tests: sleeping jumps straight to the
/// wake-up time and records it.
pub struct ManualClock {
    now: Mutex<Timestamp>,
    sleeps: Mutex<Vec<Timestamp>>,
    hook: Mutex<Option<SleepHook>>,
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("now", &self.now())
            .field("sleeps", &self.sleeps())
            .finish_non_exhaustive()
    }
}

impl Default for ManualClock {
    fn default() -> ManualClock {
        ManualClock::new(Timestamp::default())
    }
}

impl ManualClock {
    /// A clock reading `start`.
    pub fn new(start: Timestamp) -> ManualClock {
        ManualClock {
            now: Mutex::new(start),
            sleeps: Mutex::new(Vec::new()),
            hook: Mutex::new(None),
        }
    }

    /// Sets the time.
    pub fn set(&self, now: Timestamp) {
        *lock(&self.now) = now;
    }

    /// Moves the time on by `ms` milliseconds.
    pub fn advance(&self, ms: u64) {
        let mut now = lock(&self.now);
        *now = now.plus_ms(ms);
    }

    /// Every time a sleeper asked to be woken at, in order.
    pub fn sleeps(&self) -> Vec<Timestamp> {
        lock(&self.sleeps).clone()
    }

    /// Runs `hook` with the wake-up time each time someone sleeps, after the clock has jumped
    /// there (so a test can make other consumers act "while" this one sleeps).
    pub fn on_sleep(&self, hook: impl FnMut(Timestamp) + Send + 'static) {
        *lock(&self.hook) = Some(Box::new(hook));
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *lock(&self.now)
    }

    fn sleep_until(&self, until: Timestamp, watch: &Watch<'_>) {
        if watch.signalled() {
            return;
        }
        lock(&self.sleeps).push(until);
        {
            let mut now = lock(&self.now);
            *now = (*now).max(until);
        }
        // The hook runs outside the lock, so it may use this clock itself.
        let hook = lock(&self.hook).take();
        if let Some(mut hook) = hook {
            hook(until);
            lock(&self.hook).get_or_insert(hook);
        }
    }
}

/// How often a [`Signal`] was interrupted and nudged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Generations {
    /// Interrupts so far: an interrupt ends a wait.
    pub interrupt: u64,
    /// Nudges so far: a nudge makes a waiter look again.
    pub nudge: u64,
}

/// Wakes sleepers: an *interrupt* ends a wait, a *nudge* makes it look again.
#[derive(Debug, Default)]
pub struct Signal {
    generations: Mutex<Generations>,
    changed: Condvar,
}

impl Signal {
    /// How often it was interrupted and nudged so far.
    pub fn current(&self) -> Generations {
        *lock(&self.generations)
    }

    /// Interrupts every watch of it.
    pub fn interrupt(&self) {
        lock(&self.generations).interrupt += 1;
        self.changed.notify_all();
    }

    /// Nudges every watch of it, returning the new nudge generation.
    pub fn nudge(&self) -> u64 {
        let generation = {
            let mut generations = lock(&self.generations);
            generations.nudge += 1;
            generations.nudge
        };
        self.changed.notify_all();
        generation
    }

    /// A watch of this signal that counts what happens after `seen`.
    pub fn watch(&self, seen: Generations) -> Watch<'_> {
        Watch { signal: self, seen }
    }
}

/// What a sleeping [`Clock`] watches: it must return early once this is signalled.
#[derive(Debug)]
pub struct Watch<'a> {
    signal: &'a Signal,
    seen: Generations,
}

impl Watch<'_> {
    /// Whether the sleeper was interrupted or nudged since the watch began.
    pub fn signalled(&self) -> bool {
        self.signal.current() != self.seen
    }

    /// Whether the sleeper was interrupted (not merely nudged) since the watch began.
    pub fn interrupted(&self) -> bool {
        self.signal.current().interrupt != self.seen.interrupt
    }

    /// Blocks for at most `timeout`; true if it returned because it was signalled.
    pub fn wait(&self, timeout: Duration) -> bool {
        let guard = lock(&self.signal.generations);
        let (guard, _) = self
            .signal
            .changed
            .wait_timeout_while(guard, timeout, |now| *now == self.seen)
            .unwrap_or_else(PoisonError::into_inner);
        *guard != self.seen
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::thread;

    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let c = ManualClock::new(Timestamp(1_000));
        assert_eq!(c.now(), Timestamp(1_000));
        c.advance(500);
        assert_eq!(c.now(), Timestamp(1_500));
        c.set(Timestamp(7));
        assert_eq!(c.now(), Timestamp(7));
    }

    #[test]
    fn the_system_clock_is_after_2020() {
        assert!(SystemClock.now().0 > 1_577_836_800_000);
    }

    #[test]
    fn a_manual_clock_jumps_to_each_wake_up_and_records_it() {
        let clock = ManualClock::new(Timestamp(10));
        let signal = Signal::default();
        let watch = signal.watch(signal.current());
        clock.sleep_until(Timestamp(50), &watch);
        clock.sleep_until(Timestamp(40), &watch);
        assert_eq!(clock.now(), Timestamp(50), "time never goes back");
        assert_eq!(clock.sleeps(), vec![Timestamp(50), Timestamp(40)]);
        signal.nudge();
        clock.sleep_until(Timestamp(90), &watch);
        assert_eq!(
            clock.now(),
            Timestamp(50),
            "a signalled sleeper does not sleep"
        );
    }

    #[test]
    fn a_signal_cuts_a_real_sleep_short() {
        let signal = Arc::new(Signal::default());
        let seen = signal.current();
        let sleeper = {
            let signal = Arc::clone(&signal);
            thread::spawn(move || {
                let watch = signal.watch(seen);
                SystemClock.sleep_until(SystemClock.now().plus_ms(60_000), &watch);
                watch.interrupted()
            })
        };
        while !sleeper.is_finished() {
            signal.interrupt();
            thread::sleep(Duration::from_millis(5));
        }
        assert!(sleeper.join().expect("sleeper"));
    }

    #[test]
    fn clocks_are_shared_between_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<ManualClock>();
        shareable::<SystemClock>();
    }
}
