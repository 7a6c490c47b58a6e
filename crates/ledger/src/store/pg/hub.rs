//! What the listeners of one process subscribed to, and what they heard: the notifications
//! that arrive on the shared connection (`pool.rs`) are handed to every listener whose
//! channels they name, whichever call or wait received them.

use std::collections::BTreeSet;
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use hermes_stdx::lock;

/// What a listener heard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Heard {
    /// A notification on one of its channels.
    Note { channel: String, payload: String },
    /// A new connection took over: notifications may have gone unheard meanwhile.
    Reconnected,
}

struct Sub {
    id: u64,
    channels: BTreeSet<String>,
    queue: Vec<Heard>,
}

#[derive(Default)]
struct State {
    subs: Vec<Sub>,
    next: u64,
    /// Moves whenever something was heard or a connection was given back, so that a waiting
    /// listener looks again.
    generation: u64,
}

/// The subscriptions of one process's listeners.
#[derive(Default)]
pub(super) struct Hub {
    state: Mutex<State>,
    moved: Condvar,
}

impl Hub {
    pub(super) fn new() -> Hub {
        Hub::default()
    }

    /// A new subscriber to `channels`; its id.
    pub(super) fn subscribe(&self, channels: &[String]) -> u64 {
        let mut state = lock(&self.state);
        state.next += 1;
        let id = state.next;
        state.subs.push(Sub {
            id,
            channels: channels.iter().cloned().collect(),
            queue: Vec::new(),
        });
        id
    }

    pub(super) fn unsubscribe(&self, id: u64) {
        lock(&self.state).subs.retain(|s| s.id != id);
    }

    pub(super) fn has_subscribers(&self) -> bool {
        !lock(&self.state).subs.is_empty()
    }

    /// Every channel some subscriber listens on.
    pub(super) fn channels(&self) -> BTreeSet<String> {
        let state = lock(&self.state);
        state
            .subs
            .iter()
            .flat_map(|s| s.channels.iter().cloned())
            .collect()
    }

    /// Hands `notifications` to the subscribers of their channels.
    pub(super) fn publish(&self, notifications: &[postgres::Notification]) {
        if notifications.is_empty() {
            return;
        }
        let mut state = lock(&self.state);
        for sub in &mut state.subs {
            for n in notifications {
                if sub.channels.contains(n.channel()) {
                    sub.queue.push(Heard::Note {
                        channel: n.channel().to_owned(),
                        payload: n.payload().to_owned(),
                    });
                }
            }
        }
        state.generation += 1;
        self.moved.notify_all();
    }

    /// Tells every subscriber that a new connection took over.
    pub(super) fn reconnected(&self) {
        let mut state = lock(&self.state);
        for sub in &mut state.subs {
            sub.queue.push(Heard::Reconnected);
        }
        state.generation += 1;
        self.moved.notify_all();
    }

    /// Wakes the waiting subscribers to look again (a connection was given back).
    pub(super) fn wake(&self) {
        lock(&self.state).generation += 1;
        self.moved.notify_all();
    }

    /// What subscriber `id` heard since it last asked, and the generation now.
    pub(super) fn take(&self, id: u64) -> (Vec<Heard>, u64) {
        let mut state = lock(&self.state);
        let generation = state.generation;
        let heard = state
            .subs
            .iter_mut()
            .find(|s| s.id == id)
            .map(|s| std::mem::take(&mut s.queue))
            .unwrap_or_default();
        (heard, generation)
    }

    /// Waits until something moved since `generation`, or `until`.
    pub(super) fn wait(&self, generation: u64, until: Instant) {
        let mut state = lock(&self.state);
        while state.generation == generation {
            let now = Instant::now();
            if now >= until {
                return;
            }
            state = match self.moved.wait_timeout(state, until - now) {
                Ok((state, _)) => state,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }
}
