//! `hermes delegation list|status|stop|log`.

use std::io::{Read, Seek, SeekFrom};
use std::time::Duration;

use anyhow::Context as _;
use hermes_ledger::{Child, DelegationId, InterruptTarget, Ledger, SessionId, Since};
use serde_json::json;

use crate::args::DelegationCommand;
use crate::services::color;
use crate::services::exit::{Code, fail, fail_with};
use crate::services::home::{Home, now};
use crate::services::output;
use crate::services::reports;

/// Recent units `list` shows without `--all` or `--limit`.
const RECENT: usize = 20;
/// Units a page of `list --all` or `list --since` holds without `--limit`: a ledger keeps
/// millions, and a listing reads only what it shows.
const PAGE: usize = 1_000;

/// Runs a `delegation` subcommand.
pub fn run(command: DelegationCommand) -> anyhow::Result<Code> {
    match command {
        DelegationCommand::List {
            session,
            all,
            limit,
            since,
            json,
        } => {
            let default = if all || since.is_some() { PAGE } else { RECENT };
            let limit = limit.map_or(default, |n| n as usize);
            list(session, limit, since.as_deref(), json)
        }
        DelegationCommand::Status { id, json } => status(&id, json),
        DelegationCommand::Stop {
            id,
            session,
            all,
            reason,
            json,
        } => stop(id, session, all, &reason, json),
        DelegationCommand::Log { id, task, follow } => log(&id, task, follow),
    }
}

fn parse_id(id: &str) -> anyhow::Result<DelegationId> {
    DelegationId::new(id).map_err(|e| fail(Code::Usage, e.to_string()))
}

/// An unknown delegation: exit 4, `{"error":"not found","delegation_id":…}` under `--json`.
fn not_found(id: &DelegationId) -> anyhow::Error {
    let mut details = serde_json::Map::new();
    details.insert("error".into(), "not found".into());
    details.insert("delegation_id".into(), id.to_string().into());
    fail_with(
        Code::NotFound,
        format!("delegation {id} not found"),
        details,
    )
}

fn parse_session(s: &str) -> anyhow::Result<SessionId> {
    SessionId::new(s).map_err(|e| fail(Code::Usage, e.to_string()))
}

/// `--since`: a delegation id, or a duration back from now (`90m`, `12h`, `7d`).
fn parse_since(since: &str) -> anyhow::Result<Since> {
    if since.starts_with("deleg_") {
        return parse_id(since).map(Since::Unit);
    }
    let unit_ms = match since.chars().last() {
        Some('s') => 1_000,
        Some('m') => 60_000,
        Some('h') => 3_600_000,
        Some('d') => 86_400_000,
        _ => 0,
    };
    match since[..since.len().saturating_sub(1)].parse::<u64>() {
        Ok(n) if unit_ms > 0 => Ok(Since::Time(now().minus_ms(n.saturating_mul(unit_ms)))),
        _ => Err(fail(
            Code::Usage,
            format!(
                "invalid --since {since:?}: expected a delegation id or a duration such as \
                 90m, 12h or 7d"
            ),
        )),
    }
}

fn list(
    session: Option<String>,
    limit: usize,
    since: Option<&str>,
    json: bool,
) -> anyhow::Result<Code> {
    let session = session.as_deref().map(parse_session).transpose()?;
    let since = since.map(parse_since).transpose()?;
    let home = Home::load()?;
    let ledger = home.open_ledger_and_sweep()?;
    let mut listing = ledger.list(session.as_ref(), if since.is_some() { 0 } else { limit })?;
    // A page of the history: `next` continues it, while the page is full.
    let mut next = None;
    if let Some(since) = &since {
        let page = match (ledger.list_since(session.as_ref(), since, limit)?, since) {
            (Some(page), _) => page,
            (None, Since::Unit(id)) => return Err(not_found(id)),
            (None, Since::Time(_)) => Vec::new(),
        };
        next = page
            .last()
            .filter(|_| page.len() == limit)
            .map(|u| u.id.clone());
        listing.recent = page;
    }
    if json {
        let mut value =
            reports::list_json(&listing, home.settings.delegation.max_concurrent_children);
        if since.is_some()
            && let serde_json::Value::Object(map) = &mut value
        {
            map.insert("next".into(), json!(next.as_ref().map(ToString::to_string)));
        }
        output::print_json(&value)?;
        return Ok(Code::Ok);
    }
    let max = home.settings.delegation.max_concurrent_children;
    output::print(&list_text(&listing, max, since.is_some(), next.as_ref()))?;
    Ok(Code::Ok)
}

/// `delegation list` as a person reads it: `paged` when it shows a page of the history
/// (`--since`), `next` the unit its next page starts after.
fn list_text(
    listing: &hermes_ledger::Listing,
    max_children: u32,
    paged: bool,
    next: Option<&hermes_ledger::DelegationId>,
) -> String {
    let on_workers = listing
        .running
        .iter()
        .filter(|u| u.pool().is_some())
        .count();
    let mut text = format!(
        "running {} (max {}{}) · queued {}\n",
        listing.running.len(),
        max_children,
        if on_workers > 0 {
            format!(" on session hosts; {on_workers} on workers")
        } else {
            String::new()
        },
        listing.queued.len()
    );
    // Past `COUNT_LIMIT` the ledger stops counting.
    let total = format!(
        "{}{}",
        listing.recent_total,
        if listing.recent_more { "+" } else { "" }
    );
    let recent_title = match (paged, next) {
        (true, Some(next)) => format!(
            "since ({} of {total}; --since {next} for the next page)",
            listing.recent.len(),
        ),
        (true, None) => "since".to_owned(),
        (false, _) if listing.recent.len() < listing.recent_total => format!(
            "recent ({} of {total}; --all or --since for more)",
            listing.recent.len(),
        ),
        (false, _) => "recent".to_owned(),
    };
    for (title, units) in [
        ("running", &listing.running),
        ("queued", &listing.queued),
        (recent_title.as_str(), &listing.recent),
    ] {
        if units.is_empty() {
            continue;
        }
        text.push_str(&format!("{title}:\n"));
        for u in units {
            let placement = reports::placement(u);
            text.push_str(&format!(
                "  {}  {} {:>3} task(s)  {:<16} {}{}\n",
                u.id,
                color::status(u.status.as_str(), 11),
                u.task_count(),
                u.session
                    .as_ref()
                    .map_or("-".to_owned(), |s| hermes_formatter::one_line(
                        s.as_str(),
                        16
                    )),
                hermes_formatter::one_line(&u.spec.goal, 60),
                if placement.is_empty() {
                    placement
                } else {
                    format!("  [{placement}]")
                }
            ));
        }
    }
    text
}

fn status(id: &str, json_out: bool) -> anyhow::Result<Code> {
    let id = parse_id(id)?;
    let home = Home::load()?;
    let ledger = home.open_ledger_and_sweep()?;
    let Some(unit) = ledger.delegation(&id)? else {
        return Err(not_found(&id));
    };
    let children = ledger.children(&id)?;
    let events = ledger.events(&id)?;
    let stalls = ledger.stalls(&id)?;
    let value = reports::status_json(&ledger, &unit, &children, now())?;
    if json_out {
        output::print_json(&value)?;
        return Ok(Code::Ok);
    }
    let tasks = value["tasks"].as_array().cloned().unwrap_or_default();
    let mut text = format!(
        "{}  {}  session {}\ngoal: {}\ndispatched: {}",
        unit.id,
        color::status(unit.status.as_str(), 0),
        unit.session
            .as_ref()
            .map_or("-".to_owned(), |s| s.to_string()),
        hermes_formatter::one_line(&unit.spec.goal, 120),
        hermes_formatter::rfc3339(unit.dispatched_at)
    );
    if let Some(end) = unit.ended_at {
        text.push_str(&format!("   ended: {}", hermes_formatter::rfc3339(end)));
    }
    text.push('\n');
    let placement = reports::placement(&unit);
    if !placement.is_empty() {
        text.push_str(&format!("{placement}\n"));
    }
    for (child, task) in children.iter().zip(&tasks) {
        let delivery = task["delivery"]["state"].as_str().unwrap_or("-");
        text.push_str(&format!(
            "  task {}/{}: {} pid {:<7} exit {:<4} calls {:<4} delivery {:<9} {}\n",
            child.index + 1,
            children.len(),
            color::status(reports::shown_status(child, &stalls), 11),
            child.process.map_or("-".to_owned(), |p| p.pid.to_string()),
            child.exit_code.map_or("-".to_owned(), |c| c.to_string()),
            child.progress.api_calls,
            delivery,
            hermes_formatter::one_line(task["goal"].as_str().unwrap_or(""), 60)
        ));
        let found = reports::outcome_of(&events, child.index).map(|(_, o)| o);
        if let Some(words) =
            reports::detail_of(child, found, &stalls).and_then(reports::stall_words)
        {
            text.push_str(&format!("          {words}\n"));
        }
        if let Some(recording) = reports::recording(child) {
            text.push_str(&format!("          recording: {recording}\n"));
        }
        if let Some(t) = &child.transcript {
            text.push_str(&format!("          transcript: {t}\n"));
        }
    }
    output::print(&text)?;
    Ok(Code::Ok)
}

fn stop(
    id: Option<String>,
    session: Option<String>,
    all: bool,
    reason: &str,
    json_out: bool,
) -> anyhow::Result<Code> {
    let target = match (id, session, all) {
        (Some(id), _, _) => InterruptTarget::Delegation(parse_id(&id)?),
        (None, Some(s), _) => InterruptTarget::Session(parse_session(&s)?),
        (None, None, true) => InterruptTarget::All,
        (None, None, false) => return Err(fail(Code::Usage, "give an ID, --session S or --all")),
    };
    let home = Home::load()?;
    let ledger = home.open_ledger_and_sweep()?;
    if let InterruptTarget::Delegation(id) = &target
        && ledger.delegation(id)?.is_none()
    {
        return Err(not_found(id));
    }
    let done = ledger.request_interrupt(&target, reason, now())?;
    if json_out {
        let ids = |ids: &[DelegationId]| ids.iter().map(ToString::to_string).collect::<Vec<_>>();
        output::print_json(&json!({
            "reason": reason,
            "stopping": ids(&done.flagged),
            "cancelled": ids(&done.cancelled),
        }))?;
        return Ok(Code::Ok);
    }
    output::print(&reports::stop_text(
        &done,
        reports::StopWording::WithReason(reason),
    ))?;
    Ok(Code::Ok)
}

fn transcript_paths(
    ledger: &Ledger,
    id: &DelegationId,
    task: Option<u32>,
) -> anyhow::Result<Vec<String>> {
    Ok(chosen_children(ledger, id, task)?
        .iter()
        .filter_map(|c| c.transcript.clone())
        .collect())
}

fn chosen_children(
    ledger: &Ledger,
    id: &DelegationId,
    task: Option<u32>,
) -> anyhow::Result<Vec<Child>> {
    let children = ledger.children(id)?;
    let chosen: Vec<&Child> = match task {
        Some(0) => {
            return Err(fail(
                Code::Usage,
                "--task 0: tasks are numbered from 1, as displayed (TASK 1/N)",
            ));
        }
        Some(n) => vec![children.iter().find(|c| c.index + 1 == n).ok_or_else(|| {
            fail(
                Code::NotFound,
                format!(
                    "delegation {id} has no task {n} (it has {})",
                    children.len()
                ),
            )
        })?],
        None => children.iter().collect(),
    };
    Ok(chosen.into_iter().cloned().collect())
}

/// Transcripts live on the machine that ran the child. Where none of the chosen
/// ones is here (another machine shares this PostgreSQL ledger), prints what the ledger holds
/// of each child's output and names the machine holding the full log. Returns whether it did.
fn print_stored_output(
    ledger: &Ledger,
    id: &DelegationId,
    task: Option<u32>,
) -> anyhow::Result<bool> {
    let children = chosen_children(ledger, id, task)?;
    // A child that has not started has no transcript anywhere yet: follow waits for it here.
    let elsewhere = children.iter().all(|c| {
        c.started_at.is_some()
            && c.transcript
                .as_deref()
                .is_none_or(|t| !std::path::Path::new(t).exists())
    });
    if !elsewhere || children.is_empty() {
        return Ok(false);
    }
    for child in &children {
        let (text, machine) = ledger.stored_output(id, child.index)?;
        let machine = machine.map_or_else(
            || "the machine that ran it".to_owned(),
            |m| format!("machine {m}"),
        );
        let path = child.transcript.as_deref().unwrap_or("(none)");
        output::print(&format!(
            "==> task {} of {id}: the full log is on {machine} at {path}; the ledger's copy of its last output: <==\n",
            child.index + 1
        ))?;
        let text = text.unwrap_or_default();
        output::print(&hermes_formatter::terminal_safe(&text))?;
        if !text.is_empty() && !text.ends_with('\n') {
            output::print("\n")?;
        }
    }
    Ok(true)
}

fn log(id: &str, task: Option<u32>, follow: bool) -> anyhow::Result<Code> {
    let id = parse_id(id)?;
    let home = Home::load()?;
    let ledger = home.open_ledger_and_sweep()?;
    if ledger.delegation(&id)?.is_none() {
        return Err(fail(Code::NotFound, format!("delegation {id} not found")));
    }
    if print_stored_output(&ledger, &id, task)? {
        return Ok(Code::Ok);
    }
    let paths = transcript_paths(&ledger, &id, task)?;
    let headers = paths.len() > 1;
    if !follow || headers {
        for path in &paths {
            if headers {
                output::print(&format!("==> {path} <==\n"))?;
            }
            let text = std::fs::read(path).with_context(|| format!("cannot read {path}"))?;
            output::print(&hermes_formatter::terminal_safe(&String::from_utf8_lossy(
                &text,
            )))?;
        }
        if !follow {
            return Ok(Code::Ok);
        }
        // Several transcripts: follow the first unfinished one is not meaningful; follow all by
        // waiting for the end and printing what was added.
    }
    let mut offsets: Vec<u64> = if headers {
        paths
            .iter()
            .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
            .collect()
    } else {
        vec![0; paths.len()]
    };
    // Following is long-lived: it sweeps while it waits.
    home.sweeping(&ledger, || {
        follow_until_done(&ledger, &id, &paths, &mut offsets)
    })
}

/// Prints what is added to `paths` (from `offsets` on) until the delegation ends.
fn follow_until_done(
    ledger: &Ledger,
    id: &DelegationId,
    paths: &[String],
    offsets: &mut [u64],
) -> anyhow::Result<Code> {
    loop {
        let finished = ledger
            .delegation(id)?
            .is_none_or(|u| u.status.is_terminal());
        for (path, offset) in paths.iter().zip(offsets.iter_mut()) {
            let Ok(mut file) = std::fs::File::open(path) else {
                continue;
            };
            // A capped transcript whose tail rolled got shorter: what it kept was read already.
            if let Ok(meta) = file.metadata()
                && meta.len() < *offset
            {
                *offset = meta.len();
            }
            if file.seek(SeekFrom::Start(*offset)).is_err() {
                continue;
            }
            let mut buf = Vec::new();
            if file.read_to_end(&mut buf).is_ok() && !buf.is_empty() {
                *offset += buf.len() as u64;
                output::print(&hermes_formatter::terminal_safe(&String::from_utf8_lossy(
                    &buf,
                )))?;
            }
        }
        if finished {
            return Ok(Code::Ok);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
