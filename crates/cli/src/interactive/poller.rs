//! Idle delivery: while the prompt waits for a line, results that become ready are printed
//! above it within a second. The poller shares the session's router with the post-turn drain,
//! so the two paths can neither both take nor both miss an event.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use hermes_router::{Boundary, Router, RouterError};

use super::console::Console;
use crate::services::delivery::printed;

/// How long one wait for ready results lasts before the poller looks at the console again.
const ROUND_MS: u64 = 500;
/// Pause after a ledger error before trying again.
const ERROR_BACKOFF: Duration = Duration::from_millis(500);

/// Starts the poller thread. It sets `ended` and stops if the session was ended elsewhere.
pub fn spawn(
    router: Arc<Router>,
    console: Arc<Console>,
    ended: Arc<AtomicBool>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("hermes-idle-delivery".into())
        .spawn(move || deliver_while_idle(&router, &console, &ended))
}

/// The poller thread's loop: while the prompt waits, prints the results that become ready
/// above it; stops when the console closes or the session was ended elsewhere.
fn deliver_while_idle(router: &Router, console: &Console, ended: &AtomicBool) {
    while console.enter_round() {
        match printed::wait(router, ROUND_MS) {
            Ok(claimed) => console.finish_round(|printer| match printer {
                Some(printer) => {
                    printed::present(router, claimed, Boundary::Turn, |text| printer.print(text))
                }
                None => printed::give_back(router, claimed),
            }),
            Err(RouterError::SessionEnded(session)) => {
                ended.store(true, Ordering::SeqCst);
                console.finish_round(|printer| {
                    if let Some(printer) = printer {
                        printer.print(&format!(
                            "session {session} was ended by another process; press Enter to leave\n"
                        ));
                    }
                });
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "idle delivery failed; trying again");
                console.finish_round(|_| ());
                std::thread::sleep(ERROR_BACKOFF);
            }
        }
    }
}
