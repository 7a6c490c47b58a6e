//! `hermes drain --session S`: claims the session's ready envelopes at a boundary, prints them,
//! and acks them once the output was written (or, with `--hold`, prints the claim tokens for
//! `hermes delivery`).

use std::sync::Arc;
use std::time::Duration;

use hermes_formatter::{Boundary, DeferredJson, DrainJson, Envelope};

use hermes_router::AfterShown;

use crate::args::{BoundaryArg, DrainArgs};
use crate::services::delivery::consume::{self, Round};
use crate::services::exit::Code;
use crate::services::home::{Home, now, render_context, session_of};
use crate::services::output;

/// Runs `drain`.
pub fn run(args: &DrainArgs) -> anyhow::Result<Code> {
    let session = session_of(args.session.as_deref())?;
    let boundary = match args.boundary {
        BoundaryArg::Turn => Boundary::Turn,
        BoundaryArg::Tool => Boundary::Tool,
    };
    let wait = args.wait.unwrap_or(Duration::ZERO);
    let mut home = Home::load()?;
    if let Some(lease) = args.lease {
        home.settings.delivery.claim_lease = lease;
    }
    let consumer = args
        .consumer
        .clone()
        .unwrap_or_else(|| format!("drain:{}", std::process::id()));
    let deadline = (!wait.is_zero())
        .then(|| now().plus_ms(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)));
    // A drain that waits waits for the server too: one down when it starts is looked for
    // again until the deadline.
    let ledger = match deadline {
        Some(deadline) => home.open_ledger_and_sweep_by(deadline)?,
        None => home.open_ledger_and_sweep()?,
    };
    let take = || {
        consume::take_ready(
            Arc::clone(&ledger),
            &session,
            boundary,
            &consumer,
            &home.settings,
            deadline,
        )
    };
    // A drain that waits is a long-lived process: it sweeps while it waits.
    let (router, round) = match deadline {
        Some(_) => home.sweeping(&ledger, take)?,
        None => take()?,
    };
    // Settling reports a claim lost while it was shown: exit 3.
    let after = if args.hold {
        AfterShown::Hold
    } else {
        AfterShown::Ack
    };
    router.present(&consume::tokens(&round.delivered), after, || {
        present(&round, args, &session, boundary)
    })??;
    Ok(Code::Ok)
}

fn present(
    round: &Round,
    args: &DrainArgs,
    session: &hermes_ledger::SessionId,
    boundary: Boundary,
) -> anyhow::Result<()> {
    let ctx = render_context();
    let envelopes: Vec<Envelope<'_>> = round
        .delivered
        .iter()
        .map(|t| Envelope::new(&t.delegation, &t.events))
        .collect();
    if args.json {
        let json = DrainJson {
            session: session.to_string(),
            boundary,
            envelopes: round
                .delivered
                .iter()
                .zip(&envelopes)
                .map(|(t, e)| {
                    let j = hermes_formatter::envelope_json(e, &ctx);
                    if args.hold { j.with_claim(t.token) } else { j }
                })
                .collect(),
            deferred: round
                .deferred
                .iter()
                .map(|d| DeferredJson::new(&d.delegation_id, &d.keys, d.retry_at))
                .collect(),
            carrier: (boundary == Boundary::Tool && !envelopes.is_empty())
                .then(|| hermes_formatter::TOOL_CARRIER.to_owned()),
        };
        return output::print_json(&json);
    }
    let mut text = hermes_formatter::render_boundary(&envelopes, boundary, &ctx);
    if args.hold {
        for t in &round.delivered {
            let keys: Vec<String> = t.events.iter().map(|e| e.key.to_string()).collect();
            text.push_str(&format!(
                "\n[claim {} — {} {} — settle with: hermes delivery ack {}]\n",
                t.token,
                t.delegation.id,
                keys.join(","),
                t.token
            ));
        }
    }
    output::print(&text)
}
