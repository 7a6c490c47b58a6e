//! Live progress notes: one line above the prompt when a unit starts without the person having
//! just seen it dispatched (it left the queue, or came from `hermes delegate` in another
//! terminal), and when a child enters or leaves a tool. The full picture
//! (goal, elapsed, quiet time, calls, current tool) is the `agents` view.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hermes_ledger::{ChildStatus, DelegationId};
use hermes_registry::{Host, UnitProgress};
use hermes_router::Router;
use tokio::sync::watch;

use super::console::Console;

/// How often the watcher looks for units that started.
const LOOK: Duration = Duration::from_millis(300);

/// Units whose start the person already saw (dispatched from this prompt and running at once).
pub type Announced = Arc<Mutex<HashSet<DelegationId>>>;

/// Follows every unit running on `host`, queueing notes on `console` until `stop` changes.
pub async fn watch_units(
    host: Host,
    console: Arc<Console>,
    router: Arc<Router>,
    announced: Announced,
    mut stop: watch::Receiver<bool>,
) {
    let mut followed: HashMap<DelegationId, Follow> = HashMap::new();
    loop {
        let running: HashSet<DelegationId> = host.running().into_iter().collect();
        for id in &running {
            if followed.contains_key(id) {
                continue;
            }
            let Some(progress) = host.progress(id) else {
                continue;
            };
            let seen = announced
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(id);
            let snapshot = progress.borrow().clone();
            if !seen {
                note(&console, &router, started(&snapshot));
            }
            followed.insert(id.clone(), Follow::new(progress, &snapshot));
        }
        for follow in followed.values_mut() {
            for line in follow.changes() {
                note(&console, &router, line);
            }
        }
        followed.retain(|_, f| !f.done);
        tokio::select! {
            () = tokio::time::sleep(LOOK) => {}
            _ = stop.changed() => return,
        }
    }
}

fn note(console: &Console, router: &Router, line: String) {
    console.note(line);
    // The idle poller prints notes when its wait ends: end it now.
    router.interrupt_waits();
}

fn started(p: &UnitProgress) -> String {
    let total = p.children.len();
    let goal = p
        .children
        .first()
        .map(|c| hermes_formatter::one_line(&c.goal, 60))
        .unwrap_or_default();
    if total == 1 {
        format!("▸ {} started: {goal}", p.delegation_id)
    } else {
        format!("▸ {} started: {total} tasks ({goal}, …)", p.delegation_id)
    }
}

/// One unit's progress, and what was last said about each child.
struct Follow {
    progress: watch::Receiver<UnitProgress>,
    said: Vec<(ChildStatus, Option<String>)>,
    done: bool,
}

impl Follow {
    fn new(progress: watch::Receiver<UnitProgress>, snapshot: &UnitProgress) -> Follow {
        Follow {
            progress,
            said: snapshot
                .children
                .iter()
                .map(|c| (c.status, c.progress.current_tool.clone()))
                .collect(),
            done: false,
        }
    }

    /// Notes for what changed since last time.
    fn changes(&mut self) -> Vec<String> {
        let closed = self.progress.has_changed().is_err();
        if !closed && !self.progress.has_changed().unwrap_or(true) {
            return Vec::new();
        }
        let p = self.progress.borrow_and_update().clone();
        let total = p.children.len();
        self.said.resize(total, (ChildStatus::Pending, None));
        let mut lines = Vec::new();
        for (child, said) in p.children.iter().zip(self.said.iter_mut()) {
            let task = if total == 1 {
                String::new()
            } else {
                format!(" task {}/{total}", child.index + 1)
            };
            let tool = child.progress.current_tool.clone();
            // A child's end needs no note: its result block follows.
            if child.status == ChildStatus::Running && tool != said.1 {
                match &tool {
                    Some(name) => lines.push(format!(
                        "· {}{task} in tool {}",
                        p.delegation_id,
                        hermes_formatter::one_line(name, 40)
                    )),
                    None => lines.push(format!("· {}{task} out of its tool", p.delegation_id)),
                }
            }
            *said = (child.status, tool);
        }
        if p.status.is_terminal() || closed {
            self.done = true;
        }
        lines
    }
}
