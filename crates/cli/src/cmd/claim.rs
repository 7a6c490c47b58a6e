//! `hermes delivery ack|release|defer|renew|drop CLAIM`: settling a held claim.

use hermes_ledger::{ClaimToken, DropReason};
use serde_json::json;

use crate::args::{DeliveryAction, DeliveryCmd};
use crate::services::exit::{Code, fail};
use crate::services::home::{Home, now};
use crate::services::output;

/// Runs `delivery`.
pub fn run(args: &DeliveryCmd) -> anyhow::Result<Code> {
    refuse_meaningless(args)?;
    let token: ClaimToken = args
        .claim
        .parse()
        .map_err(|e: hermes_ledger::IdError| fail(Code::Usage, e.to_string()))?;
    let home = Home::load()?;
    let ledger = home.open_ledger_and_sweep()?;
    let at = now();
    // A token that acked already — an earlier `delivery ack` whose answer was lost (exit 6), or
    // any ack in any process while the unit is kept — acks again as a no-op that says so
    // (`"repeated": true`, exit 0) rather than reporting the claim lost.
    let mut repeated = false;
    let (action, transitions, expires) = match args.action {
        DeliveryAction::Ack => {
            let acked = ledger.ack_outcome(token, at)?;
            repeated = acked.repeated;
            ("ack", acked.transitions, None)
        }
        DeliveryAction::Release => ("release", ledger.release(token, at)?, None),
        DeliveryAction::Defer => ("defer", ledger.defer(token)?, None),
        DeliveryAction::Drop => {
            let reason = DropReason::parse(args.reason.as_deref().unwrap_or("dropped_by_consumer"));
            ("drop", ledger.drop_claim(token, reason, at)?, None)
        }
        DeliveryAction::Renew => {
            let lease = args.lease.unwrap_or(home.settings.delivery.claim_lease);
            let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
            (
                "renew",
                Vec::new(),
                Some(ledger.renew(token, lease_ms, at)?),
            )
        }
    };
    if args.json {
        output::print_json(&json!({
            "claim": token.to_string(),
            "action": action,
            "repeated": repeated,
            "lease_expires_at": output::time(expires),
            "transitions": transitions.iter().map(|t| json!({
                "delegation_id": t.event.delegation_id.to_string(),
                "event_key": t.event.key.to_string(),
                "from": t.from.as_str(),
                "to": t.to.as_str(),
                "drop_reason": t.drop_reason.as_ref().map(|r| r.as_str().to_owned()),
            })).collect::<Vec<_>>(),
        }))?;
    } else {
        let mut text = String::new();
        if repeated {
            text.push_str(&format!(
                "claim {token} was already acked by this token; nothing changed. Its ack did:\n"
            ));
        }
        if let Some(at) = expires {
            text.push_str(&format!(
                "claim {token} renewed until {}\n",
                hermes_formatter::rfc3339(at)
            ));
        }
        for t in &transitions {
            text.push_str(&format!(
                "{}: {} → {}",
                t.event,
                t.from.as_str(),
                t.to.as_str()
            ));
            if let Some(r) = &t.drop_reason {
                text.push_str(&format!(" ({r})"));
            }
            text.push('\n');
        }
        output::print(&text)?;
    }
    Ok(Code::Ok)
}

/// `--lease` is only `renew`'s and `--reason` only `drop`'s: refused elsewhere, never ignored.
fn refuse_meaningless(args: &DeliveryCmd) -> anyhow::Result<()> {
    let action = args.action;
    if args.lease.is_some() && !matches!(action, DeliveryAction::Renew) {
        return Err(fail(
            Code::Usage,
            "--lease is for delivery renew only (see hermes delivery --help)",
        ));
    }
    if args.reason.is_some() && !matches!(action, DeliveryAction::Drop) {
        return Err(fail(
            Code::Usage,
            "--reason is for delivery drop only (see hermes delivery --help)",
        ));
    }
    Ok(())
}
