//! The reminder of what was dispatched, for a parent that reads a result cold: when, the goal, the
//! context it gave, the toolsets, the role and the model.

use std::fmt;

use hermes_ledger::{ChildOutcome, Role, UnitRecord};

use crate::text::{
    CONTEXT_MAX_CHARS, EXCERPT_MAX_CHARS, GOAL_MAX_CHARS, has_content, one_line, truncate,
    write_quoted,
};
use crate::time::{RenderContext, human_age, local_time};

/// What the parent asked for, as the block repeats it.
pub(crate) struct Reminder<'a> {
    goal: &'a str,
    context: Option<&'a str>,
    toolsets: &'a [String],
    role: Role,
    model: Option<&'a str>,
}

impl<'a> Reminder<'a> {
    /// The unit as a whole (a batch): its own goal, context, toolsets, role and model.
    pub(crate) fn of_unit(delegation: &'a UnitRecord) -> Reminder<'a> {
        let spec = &delegation.spec;
        Reminder {
            goal: &spec.goal,
            context: spec.context.as_deref(),
            toolsets: &spec.toolsets,
            role: spec.role,
            model: spec.model.as_deref(),
        }
    }

    /// A one-child unit: the child's own settings where it has them, else the unit's.
    pub(crate) fn of_single(delegation: &'a UnitRecord, outcome: &'a ChildOutcome) -> Reminder<'a> {
        let spec = &delegation.spec;
        let Some(task) = spec.tasks.first() else {
            let goal = if has_content(&spec.goal) {
                &spec.goal
            } else {
                &outcome.goal
            };
            return Reminder {
                goal,
                ..Reminder::of_unit(delegation)
            };
        };
        let goal = [&spec.goal, &task.goal, &outcome.goal]
            .into_iter()
            .find(|g| has_content(g))
            .map_or("", |g| g.as_str());
        Reminder {
            goal,
            context: task.context.as_deref().or(spec.context.as_deref()),
            toolsets: if task.toolsets.is_empty() {
                &spec.toolsets
            } else {
                &task.toolsets
            },
            role: task.role,
            // The model an agent child's stream named is the one it really ran.
            model: outcome
                .model
                .as_deref()
                .or(task.model.as_deref())
                .or(spec.model.as_deref()),
        }
    }
}

/// Writes `Dispatched: <local time> (<age> ago)`.
pub(crate) fn write_dispatched<W: fmt::Write + ?Sized>(
    w: &mut W,
    delegation: &UnitRecord,
    ctx: &RenderContext,
) -> fmt::Result {
    writeln!(
        w,
        "Dispatched: {} ({} ago)",
        local_time(delegation.dispatched_at, ctx.utc_offset_seconds),
        human_age(ctx.now.ms_since(delegation.dispatched_at))
    )
}

/// Writes `Original goal:`, `Context you provided:` (only if set), `Toolsets:` (only if any) and
/// `Role: …   Model: …`.
pub(crate) fn write_reminder<W: fmt::Write + ?Sized>(
    w: &mut W,
    reminder: &Reminder<'_>,
) -> fmt::Result {
    let goal = one_line(reminder.goal, GOAL_MAX_CHARS);
    writeln!(
        w,
        "Original goal: {}",
        if goal.is_empty() {
            "(none given)"
        } else {
            &goal
        }
    )?;
    if let Some(context) = reminder.context.filter(|c| has_content(c)) {
        writeln!(w, "Context you provided:")?;
        write_quoted(w, &truncate(context, CONTEXT_MAX_CHARS))?;
    }
    let toolsets: Vec<&str> = reminder
        .toolsets
        .iter()
        .map(String::as_str)
        .filter(|t| has_content(t))
        .collect();
    if !toolsets.is_empty() {
        writeln!(
            w,
            "Toolsets: {}",
            one_line(&toolsets.join(", "), EXCERPT_MAX_CHARS)
        )?;
    }
    let model = reminder
        .model
        .filter(|m| has_content(m))
        .map_or_else(|| "?".to_owned(), |m| one_line(m, EXCERPT_MAX_CHARS));
    writeln!(w, "Role: {}   Model: {model}", reminder.role.as_str())
}
