//! `hermes -z` and `hermes cron run`: one unit run inline in this process, its result printed,
//! its events settled as delivered by the commit that ends it, so nothing is left pending.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use hermes_ledger::{DelegationId, DeliveryMode, HostKind, SessionId};
use hermes_registry::{DispatchRequest, Host, HostOptions, SystemClock, UnitReport};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::watch;

use super::progress_view;
use crate::args::RunArgs;
use crate::services::dispatch::draft::Draft;
use crate::services::exit::{Code, fail};
use crate::services::home::{Home, env_var, now};
use crate::services::inline;
use crate::services::output;

/// The interrupt reason Ctrl-C records.
const INTERRUPTED_BY_USER: &str = "interrupted_by_user";

/// `hermes -z`: children learn the caller's session (if any) from `HERMES_PARENT_SESSION_ID`.
pub fn oneshot(args: &RunArgs, quiet: bool) -> anyhow::Result<Code> {
    let parent = env_var("HERMES_SESSION_ID").and_then(|s| SessionId::new(s).ok());
    inline(args, quiet, parent, "oneshot")
}

/// `hermes cron run`: never reads `HERMES_SESSION_*`, and keeps them from its children.
pub fn cron(name: Option<String>, args: &RunArgs, quiet: bool) -> anyhow::Result<Code> {
    if let Some(name) = &name {
        tracing::info!(job = %name, "cron run");
    }
    inline(args, quiet, None, "cron")
}

fn inline(
    args: &RunArgs,
    quiet: bool,
    parent: Option<SessionId>,
    kind: &str,
) -> anyhow::Result<Code> {
    let spec = Draft::from_args(&args.dispatch)?.build()?;
    refuse_meaningless(&spec)?;
    tracing::debug!(kind, "inline run");
    let home = Home::load()?;
    let ledger = home.open_ledger_and_sweep()?;
    let runtime = crate::services::home::runtime()?;
    let request = DispatchRequest::inline(spec, parent);
    let (host, report, interrupted) =
        runtime.block_on(run_unit(&ledger, home.registry(), request, quiet))?;
    let me = host.process();
    let finished = report.and_then(|report| {
        let finished = inline::finish(&ledger, &report, args.json)?;
        Ok((report.delegation_id, finished))
    });
    let (id, finished) = match finished {
        Ok(done) => done,
        Err(e) => {
            // Nothing was shown: the host leaves (if it has not), its unit's events stay as
            // they are.
            if !host.left()
                && let Err(left) = ledger.unregister_host(me)
            {
                tracing::warn!(error = %left, "cannot unregister the host");
            }
            return Err(e);
        }
    };
    let printed = output::print(&finished.text);
    // The caller has the result (or nobody is reading): either way nothing waits for delivery.
    // The host left with its unit's last finish, or leaves now in the settling commit.
    if !host.left() {
        ledger.settle_inline_leaving(&id, me, now())?;
    }
    // Its results are delivered: the worktrees of its children go (their branches stay).
    hermes_registry::workspace::release_settled(&ledger, &home.registry().workspace_root);
    let failure = if interrupted {
        Some(fail(
            Code::Interrupted,
            format!("{id} interrupted by Ctrl-C"),
        ))
    } else {
        finished.failure
    };
    // A failed job exits 1 whatever happened to stdout; a successful one reports a failed write
    // (a closed pipe is not a failure: `report` maps it to 0).
    match (failure, printed) {
        (Some(failed), _) => Err(failed),
        (None, Err(write)) => Err(write),
        (None, Ok(())) => Ok(Code::Ok),
    }
}

/// Options a one-shot run cannot honour, refused before anything runs: a pool (nobody would
/// receive its result) and `inject` delivery (the result is printed here, at no boundary).
fn refuse_meaningless(spec: &hermes_ledger::DispatchSpec) -> anyhow::Result<()> {
    if let Some(pool) = &spec.pool {
        return Err(fail(
            Code::Usage,
            format!(
                "--pool {pool}: a one-shot run has no session for a pool's result; use hermes delegate --pool {pool} and hermes drain --wait, or leave --pool out to run here"
            ),
        ));
    }
    if spec.delivery == DeliveryMode::Inject {
        return Err(fail(
            Code::Usage,
            "delivery inject: a one-shot run prints its result when it ends, at no tool boundary; leave it out, or use hermes delegate --delivery inject",
        ));
    }
    Ok(())
}

/// Runs the unit on a host of its own and waits for its report; the flag says whether Ctrl-C
/// stopped it.
async fn run_unit(
    ledger: &Arc<hermes_ledger::Ledger>,
    config: hermes_registry::Config,
    request: DispatchRequest,
    quiet: bool,
) -> anyhow::Result<(Host, anyhow::Result<UnitReport>, bool)> {
    // Watched before anything runs, so that no Ctrl-C finds the default action (an exit that
    // would leave the children running).
    let mut interrupts = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    // The host registers in its unit's dispatch commit and leaves in the commit of the finish
    // that ends the unit, which also settles the unit's events as delivered: a one-shot run of
    // one child makes two commits (the dispatch, the finish), none for the host alone, and
    // the result it prints was durable before it was shown. A unit force-finalized instead
    // (its outcomes could not be published one by one) is settled after it was printed.
    let options = HostOptions {
        kind: HostKind::Inline,
        session: None,
        worker: None,
    };
    let (host, dispatched) = Host::start_dispatching(
        ledger.clone(),
        config,
        Arc::new(SystemClock),
        options,
        request,
    )
    .await?;
    let id = dispatched.delegation.id.clone();
    let (note, noted) = watch::channel(None);
    let view = dispatched
        .progress
        .map(|p| tokio::spawn(progress_view::show(p, quiet, noted)));
    // The view prints the note above its bars; without one, it goes to stderr from here.
    let tell = |line: &'static str| {
        if quiet || view.is_none() {
            eprintln!("{line}");
        } else {
            note.send_replace(Some(line));
        }
    };
    let (report, interrupted) = tokio::select! {
        report = host.wait(&id) => (report, false),
        _ = interrupts.recv() => (stop_on_ctrl_c(&host, &id, &mut interrupts, tell).await, true),
    };
    if let Some(view) = view {
        let _ = tokio::time::timeout(Duration::from_secs(1), view).await;
    }
    host.stop("done").await;
    let report = report.ok_or_else(|| anyhow::anyhow!("{id} ended without a report"));
    Ok((host, report, interrupted))
}

/// Ctrl-C during an inline run: says so (`tell`), stops the children (SIGTERM, SIGKILL after
/// `delegation.kill_grace_seconds`) and waits for the unit's report; a second Ctrl-C kills
/// them at once. Either way the unit is recorded `interrupted`.
async fn stop_on_ctrl_c(
    host: &Host,
    id: &DelegationId,
    interrupts: &mut Signal,
    tell: impl FnOnce(&'static str),
) -> Option<UnitReport> {
    tell("hermes: interrupted: stopping the children (press Ctrl-C again to kill them now)");
    let stopping = async {
        host.stop(INTERRUPTED_BY_USER).await;
        host.wait(id).await
    };
    tokio::pin!(stopping);
    tokio::select! {
        report = &mut stopping => report,
        _ = interrupts.recv() => {
            host.hurry();
            stopping.await
        }
    }
}
