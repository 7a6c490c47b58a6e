//! Everything delivered at one boundary: the tool-boundary carrier, the leading line for several
//! envelopes, and the envelopes themselves.

use std::{fmt, io};

use crate::envelope::{Envelope, write_envelope};
use crate::time::RenderContext;

pub use hermes_ledger::Boundary;

/// The line that opens what is delivered at a tool boundary, so the parent does not take a result
/// arriving in the middle of its turn for a new request.
pub const TOOL_CARRIER: &str = "[DELEGATION RESULT READY — background evidence for the current task; not a new user \
     request]";

/// Writes what is delivered at `boundary`: at a tool boundary the [`TOOL_CARRIER`] first; for
/// several envelopes a leading line saying they completed together; then every envelope, with a
/// blank line between. Nothing at all for no envelopes.
pub fn write_boundary<W: fmt::Write + ?Sized>(
    w: &mut W,
    envelopes: &[Envelope<'_>],
    boundary: Boundary,
    ctx: &RenderContext,
) -> fmt::Result {
    if envelopes.is_empty() {
        return Ok(());
    }
    if boundary == Boundary::Tool {
        writeln!(w, "{TOOL_CARRIER}")?;
    }
    if envelopes.len() > 1 {
        let n = envelopes.len();
        writeln!(
            w,
            "[{n} ASYNC DELEGATIONS COMPLETED TOGETHER — read all {n} below, then give one \
             consolidated answer]"
        )?;
    }
    for (i, envelope) in envelopes.iter().enumerate() {
        if i > 0 || boundary == Boundary::Tool || envelopes.len() > 1 {
            writeln!(w)?;
        }
        write_envelope(w, envelope, ctx)?;
    }
    Ok(())
}

/// What is delivered at `boundary`, as text (see [`write_boundary`]).
pub fn render_boundary(
    envelopes: &[Envelope<'_>],
    boundary: Boundary,
    ctx: &RenderContext,
) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = write_boundary(&mut out, envelopes, boundary, ctx);
    out
}

/// Writes what is delivered at `boundary` to a byte sink. The text is rendered whole before the
/// first byte is written, so rendering can never fail half-way through the output.
pub fn write_boundary_io<W: io::Write + ?Sized>(
    w: &mut W,
    envelopes: &[Envelope<'_>],
    boundary: Boundary,
    ctx: &RenderContext,
) -> io::Result<()> {
    w.write_all(render_boundary(envelopes, boundary, ctx).as_bytes())
}
