//! Reading a conversation's results: `delegation_list`, `delegation_results` (claimed, fitted
//! and acknowledged through `consume::present`, the one protocol hooks use too) and
//! `delegation_result` (a stored result in full, page by page; it delivers nothing).

use hermes_formatter::Boundary;
use hermes_ledger::{Listing, UnitStatus};
use hermes_router::RouterError;

use super::conversation::Conversation;
use super::params::DelegationResult;
use crate::services::delivery::consume;
use crate::services::exit::{Code, fail};
use crate::services::home::now;

/// Characters kept free in a `delegation_results` answer for the line saying that more results
/// are ready.
const PENDING_LINE: usize = 200;

/// Characters kept free in a `delegation_result` page for its header line.
const PAGE_HEADER: usize = 1_000;

/// The conversation's units: every session it serves (or `wanted`'s), and the
/// `background: false` units it ran or runs.
pub fn listing(
    conversation: &Conversation,
    wanted: Option<&str>,
    limit: usize,
) -> anyhow::Result<Listing> {
    let sessions = match wanted {
        Some(_) => conversation
            .current(wanted)?
            .map(|s| s.all)
            .unwrap_or_default(),
        None => conversation.every_session(),
    };
    let ledger = conversation.ledger();
    let mut listing = Listing::default();
    for session in sessions {
        let part = ledger.list(Some(&session), limit)?;
        listing.running.extend(part.running);
        listing.queued.extend(part.queued);
        listing.recent.extend(part.recent);
        listing.recent_total += part.recent_total;
        listing.recent_more |= part.recent_more;
    }
    for id in conversation.inline_units() {
        let Some(unit) = ledger.delegation(&id)? else {
            continue;
        };
        match unit.status {
            UnitStatus::Running => listing.running.push(unit),
            UnitStatus::Queued => listing.queued.push(unit),
            _ => {
                listing.recent_total += 1;
                listing.recent.push(unit);
            }
        }
    }
    listing.running.sort_by_key(|u| u.dispatched_at);
    listing
        .recent
        .sort_by_key(|u| std::cmp::Reverse(u.dispatched_at));
    listing.recent.truncate(limit);
    Ok(listing)
}

/// Claims what is ready at `boundary` in the conversation's sessions, fits it into one answer,
/// and acknowledges what the answer holds; the rest stays ready and the answer says so.
pub fn take(
    conversation: &Conversation,
    boundary: Boundary,
    wanted: Option<&str>,
) -> anyhow::Result<String> {
    let Some(sessions) = conversation.current(wanted)? else {
        return Ok(String::new());
    };
    let mut taken = Vec::new();
    for (i, session) in sessions.all.iter().enumerate() {
        let router = conversation.router(session);
        match router.take_ready(boundary, now(), consume::render_check) {
            Ok(round) => taken.extend(round.delivered),
            // An adopted session that has ended has nothing to give.
            Err(RouterError::SessionEnded(_)) if i > 0 => {}
            Err(e) => {
                conversation
                    .router(&sessions.current)
                    .give_back(&consume::tokens(&taken));
                return Err(e.into());
            }
        }
    }
    let total = taken.len();
    let router = conversation.router(&sessions.current);
    let mut text = String::new();
    // What fits is acknowledged; the line saying that more is pending must fit too.
    let reader = consume::Reader {
        budget: conversation.answer_budget().saturating_sub(PENDING_LINE),
        // A shortened result names the tool as this server's agent shows it, when known.
        result_tool: conversation
            .profile()
            .map_or(consume::PLAIN_RESULT_TOOL, |agent| agent.result_tool),
    };
    let shown = consume::present(&router, taken, boundary, reader, |t| {
        text = t.to_owned();
        Ok(())
    })?;
    if shown < total {
        text.push_str(&format!(
            "\n\n[{} more result(s) are ready and did not fit in this answer: call delegation_results again]",
            total - shown
        ));
    }
    Ok(text)
}

/// One page of a stored result.
pub fn page(conversation: &Conversation, p: &DelegationResult) -> anyhow::Result<String> {
    let unit = conversation.own_unit(&p.delegation_id)?;
    let count = unit.task_count();
    let task = match (p.task, count) {
        (Some(t), n) if t >= n => {
            return Err(fail(
                Code::NotFound,
                format!("{} has {n} task(s): task is 0 to {}", unit.id, n - 1),
            ));
        }
        (Some(t), _) => t,
        (None, 1) => 0,
        (None, n) => {
            return Err(fail(
                Code::Usage,
                format!(
                    "{} is a batch of {n} children: pass task (0 to {})",
                    unit.id,
                    n - 1
                ),
            ));
        }
    };
    let events = conversation.ledger().events(&unit.id)?;
    let Some(outcome) = events
        .iter()
        .flat_map(|e| e.payload.outcomes())
        .find(|o| o.index == task)
    else {
        return Ok(format!(
            "{} task {task} has not finished yet (status {}); its live transcript is being written",
            unit.id,
            unit.status.as_str()
        ));
    };
    let mut body = outcome.result.clone();
    if let Some(stderr) = &outcome.stderr_tail {
        body.push_str("\n--- STDERR (last lines) ---\n");
        body.push_str(stderr);
    }
    let total = body.chars().count() as u64;
    let offset = p.offset.unwrap_or(0).min(total);
    let slice = page_slice(
        &body,
        offset as usize,
        conversation.answer_budget().saturating_sub(PAGE_HEADER),
    );
    let end = offset + slice.chars().count() as u64;
    let next = if end < total {
        format!("next page: offset {end}")
    } else {
        "this is the end".to_owned()
    };
    Ok(format!(
        "[RESULT OF {} TASK {}/{count} ({}) — characters {offset}–{end} of {total}; {next}; transcript: {}]\n{slice}",
        unit.id,
        task + 1,
        outcome.status.as_str(),
        outcome.transcript,
    ))
}

/// The characters of `body` from `offset` that fit in `size` bytes (an agent may count its
/// budget in bytes, and a page the agent cuts loses lines that the next offset skips): at
/// least one character, so a page always moves on.
fn page_slice(body: &str, offset: usize, size: usize) -> String {
    let mut bytes = 0;
    body.chars()
        .skip(offset)
        .take_while(|c| {
            bytes += c.len_utf8();
            bytes <= size || bytes == c.len_utf8()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::page_slice;

    #[test]
    fn pages_fit_their_size_in_bytes_and_join_back_whole() {
        let body: String = (0..500).map(|i| format!("line {i} │ ünïcode\n")).collect();
        let mut offset = 0;
        let mut joined = String::new();
        while offset < body.chars().count() {
            let page = page_slice(&body, offset, 700);
            assert!(!page.is_empty() && page.len() <= 700, "{}", page.len());
            offset += page.chars().count();
            joined.push_str(&page);
        }
        assert_eq!(joined, body);
        assert_eq!(page_slice("€€", 0, 1), "€", "a page always moves on");
    }
}
