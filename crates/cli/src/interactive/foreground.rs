//! `run -- CMD…`: a foreground tool call. The command runs in its own process group with the
//! session's terminal as its stdout and stderr; Ctrl-C (SIGINT to hermes) is passed on to its
//! group, a second one kills the group. The session itself never dies of Ctrl-C.

use std::process::Stdio;
use std::time::Instant;

use anyhow::Context as _;
use hermes_ledger::SessionId;
use tokio::runtime::Runtime;
use tokio::sync::watch;

/// Counts SIGINTs received by this process. Once this is installed, SIGINT no longer ends it.
pub fn watch_interrupts(runtime: &Runtime) -> anyhow::Result<watch::Sender<u64>> {
    let (tx, _) = watch::channel(0u64);
    let mut signals = {
        let _enter = runtime.enter();
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .context("cannot watch SIGINT")?
    };
    let counter = tx.clone();
    runtime.spawn(async move {
        while signals.recv().await.is_some() {
            counter.send_modify(|n| *n += 1);
        }
    });
    Ok(tx)
}

/// Runs `command` in the foreground; the line that sums up how it ended.
pub fn run(
    runtime: &Runtime,
    command: &[String],
    session: &SessionId,
    interrupts: &watch::Sender<u64>,
) -> anyhow::Result<String> {
    let Some((program, args)) = command.split_first() else {
        return Ok("nothing to run".into());
    };
    let started = Instant::now();
    runtime.block_on(async {
        // Subscribing now marks every earlier Ctrl-C as seen.
        let mut interrupted = interrupts.subscribe();
        let mut command = std::process::Command::new(program);
        crate::services::home::with_user_umask(&mut command);
        let mut child = match tokio::process::Command::from(command)
            .args(args)
            .stdin(Stdio::null())
            .env("HERMES_SESSION_ID", session.as_str())
            .process_group(0)
            .spawn()
        {
            Ok(child) => child,
            Err(e) => return Ok(format!("[run] cannot start {program}: {e}")),
        };
        let group = child.id().and_then(|pid| i32::try_from(pid).ok());
        let mut sent = 0u32;
        let status = loop {
            tokio::select! {
                status = child.wait() => break status.context("cannot wait for the command")?,
                changed = interrupted.changed() => {
                    if changed.is_err() {
                        break child.wait().await.context("cannot wait for the command")?;
                    }
                    sent += 1;
                    if let Some(group) = group {
                        let signal = if sent == 1 { libc::SIGINT } else { libc::SIGKILL };
                        // SAFETY: kill(2) with a negative pid signals the process group the
                        // child leads; it touches no memory of ours.
                        unsafe { libc::kill(-group, signal) };
                    }
                }
            }
        };
        let secs = started.elapsed().as_secs_f64();
        use std::os::unix::process::ExitStatusExt as _;
        Ok(match (status.code(), status.signal()) {
            (Some(code), _) => format!("[run] exit {code} after {secs:.1}s"),
            (None, Some(signal)) if sent > 0 => {
                format!("[run] interrupted (signal {signal}) after {secs:.1}s")
            }
            (None, Some(signal)) => format!("[run] killed by signal {signal} after {secs:.1}s"),
            (None, None) => format!("[run] ended after {secs:.1}s"),
        })
    })
}
