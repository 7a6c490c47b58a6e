//! Live progress of an inline unit on stderr: an indicatif line per child on a terminal, plain
//! lines when a child starts or ends otherwise.

use std::io::IsTerminal;
use std::time::Duration;

use hermes_ledger::{ChildStatus, Timestamp};
use hermes_registry::{ChildProgress, UnitProgress};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::sync::watch;

use crate::services::home::now;

/// A line to print once, and that the children still running are being stopped (Ctrl-C).
pub type Note = watch::Receiver<Option<&'static str>>;

/// Follows `progress` until the unit ends. Once `note` carries a line, it is printed (above the
/// bars on a terminal) and the children still running show as `stopping`.
pub async fn show(mut progress: watch::Receiver<UnitProgress>, quiet: bool, mut note: Note) {
    if quiet {
        return;
    }
    if std::io::stderr().is_terminal() {
        bars(&mut progress, &mut note).await;
    } else {
        plain(&mut progress, &mut note).await;
    }
}

fn done(p: &UnitProgress) -> bool {
    p.status.is_terminal()
}

async fn plain(progress: &mut watch::Receiver<UnitProgress>, note: &mut Note) {
    let mut seen: Vec<ChildStatus> = Vec::new();
    let mut note_open = true;
    loop {
        let snapshot = progress.borrow_and_update().clone();
        let total = snapshot.children.len();
        seen.resize(total, ChildStatus::Pending);
        for child in &snapshot.children {
            let i = child.index as usize;
            if seen.get(i) == Some(&child.status) {
                continue;
            }
            seen[i] = child.status;
            let goal = hermes_formatter::one_line(&child.goal, 60);
            match child.status {
                ChildStatus::Pending => {}
                ChildStatus::Running => {
                    eprintln!(
                        "[{}] task {}/{total} started: {goal}",
                        snapshot.delegation_id,
                        i + 1
                    );
                }
                status => eprintln!(
                    "[{}] task {}/{total} {status} after {}: {goal}",
                    snapshot.delegation_id,
                    i + 1,
                    elapsed(child)
                ),
            }
        }
        if done(&snapshot) {
            return;
        }
        tokio::select! {
            changed = progress.changed() => if changed.is_err() { return },
            changed = note.changed(), if note_open => {
                note_open = changed.is_ok();
                if let Some(line) = *note.borrow_and_update() {
                    eprintln!("{line}");
                }
            }
        }
    }
}

async fn bars(progress: &mut watch::Receiver<UnitProgress>, note: &mut Note) {
    let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template("{spinner} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
    let mut bars: Vec<ProgressBar> = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let (mut stopping, mut note_open) = (false, true);
    loop {
        let snapshot = progress.borrow().clone();
        let total = snapshot.children.len();
        while bars.len() < total {
            let bar = multi.add(ProgressBar::new_spinner());
            bar.set_style(style.clone());
            bars.push(bar);
        }
        for (child, bar) in snapshot.children.iter().zip(&bars) {
            bar.set_message(line(child, total, stopping));
            if child.status.is_terminal() {
                if !bar.is_finished() {
                    bar.finish();
                }
            } else {
                bar.tick();
            }
        }
        if done(&snapshot) {
            for bar in &bars {
                bar.finish_and_clear();
            }
            let _ = multi.clear();
            return;
        }
        tokio::select! {
            changed = progress.changed() => if changed.is_err() { return },
            _ = tick.tick() => {}
            changed = note.changed(), if note_open => {
                note_open = changed.is_ok();
                if let Some(text) = *note.borrow_and_update() {
                    stopping = true;
                    let _ = multi.println(text);
                }
            }
        }
    }
}

fn secs_since(t: Option<Timestamp>) -> u64 {
    t.map_or(0, |t| now().ms_since(t) / 1000)
}

/// How long a child has run, or ran once it ended.
fn elapsed(child: &ChildProgress) -> String {
    match (child.started_at, child.ended_at) {
        (Some(started), Some(ended)) => format!("{}s", ended.ms_since(started) / 1000),
        _ => format!("{}s", secs_since(child.started_at)),
    }
}

fn line(child: &ChildProgress, total: usize, stopping: bool) -> String {
    let goal = hermes_formatter::one_line(&child.goal, 50);
    let status = match child.status {
        ChildStatus::Running if stopping => "stopping".to_owned(),
        status => status.to_string(),
    };
    let mut text = format!("task {}/{total} {goal} · {status}", child.index + 1);
    if child.started_at.is_some() && child.status.is_terminal() {
        text.push_str(&format!(
            " · {} · {} calls",
            elapsed(child),
            child.progress.api_calls
        ));
    } else if child.started_at.is_some() {
        let quiet = secs_since(child.progress.last_activity_at.or(child.started_at));
        text.push_str(&format!(
            " · {} · quiet {quiet}s · {} calls",
            elapsed(child),
            child.progress.api_calls
        ));
        if let Some(tool) = &child.progress.current_tool {
            text.push_str(&format!(" · tool {}", hermes_formatter::one_line(tool, 30)));
        }
    }
    text
}
