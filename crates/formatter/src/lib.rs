//! What the parent reads when a delegated child's result is delivered: the single-child
//! completion block, the batch envelope, the leading line for several envelopes at one boundary,
//! the tool-boundary carrier, and the same envelopes as JSON.
//!
//! A result may arrive long after the parent dispatched it, so every block is self-contained: it
//! says what was dispatched, when, and what came of it. Rendering reads event data alone, so a
//! consumer formats an envelope *before* it claims it and a formatting failure can never burn a
//! delivery attempt.
//!
//! This crate must never do I/O or read a clock: the current time and the local UTC offset come in
//! as a [`RenderContext`], output is a `String` or goes to a caller's `fmt::Write`/`io::Write`. It
//! knows the ledger's data types and nothing else of hermes.
//!
//! # Untrusted text cannot forge structure
//!
//! Goals, contexts, reasons, model names and everything a child printed come from outside. The one
//! rule, applied everywhere (see [`text`]):
//!
//! - every line hermes writes itself starts at column 0;
//! - untrusted multi-line text (results, stderr and transcript tails, contexts) is written line
//!   by line behind [`QUOTE_PREFIX`] (`"  │ "`), where every line break ends a line, `\r` and
//!   the Unicode line separators included;
//! - untrusted single-line fields (goals, reasons, model, toolsets, paths) only ever follow a fixed
//!   label on a line hermes wrote, with line breaks, tabs and control characters shown as visible
//!   escapes (`\n`, `\u{1b}`); goals are cut at [`GOAL_MAX_CHARS`] (120) and every other field
//!   at [`EXCERPT_MAX_CHARS`] (400) characters, `…` included, never inside a character;
//! - control characters (ANSI escapes included) and bidirectional overrides are escaped in both.
//!
//! So no untrusted text can begin a line, and a line that looks like a header
//! (`[ASYNC DELEGATION …]`, `--- RESULT ---`, `--- ✓ TASK …`) at column 0 was written by hermes.

mod batch;
mod block;
mod body;
pub mod boundary;
mod changes;
pub mod envelope;
pub mod fit;
pub mod json;
mod reminder;
mod sandbox;
pub mod text;
pub mod time;

pub use batch::BATCH_HEADER;
pub use block::{RESULT_RULE, SINGLE_HEADER};
pub use boundary::{Boundary, TOOL_CARRIER, render_boundary, write_boundary, write_boundary_io};
pub use changes::{CHANGES_RULE, COMMITS_SHOWN};
pub use envelope::{Envelope, render_envelope, write_envelope};
pub use fit::{Fitted, fit_boundary, shorten};
pub use json::{
    DeferredJson, DetailJson, DrainJson, EnvelopeJson, RunJson, TaskJson, WorkspaceJson,
    envelope_json, run_json, task_json,
};
pub use text::{
    CONTEXT_MAX_CHARS, EXCERPT_MAX_CHARS, GOAL_MAX_CHARS, QUOTE_PREFIX, one_line, terminal_safe,
    truncate, write_quoted,
};
pub use time::{RenderContext, human_age, human_duration, local_time, rfc3339, seconds};
