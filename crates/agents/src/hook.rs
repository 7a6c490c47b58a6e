//! An agent's hooks: its events and what hermes does at each, how its input names the
//! conversation, how a session start came about, and the shape of an answer. Pure functions of
//! the agent's data and the hook's JSON input.

use serde_json::{Value, json};

use crate::Agent;

/// Where a delivery happens: after a tool call, or at a turn boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookBoundary {
    /// After a tool call, inside the agent's turn.
    Tool,
    /// Between turns (before the next prompt, or when the agent would stop).
    Turn,
}

/// What hermes does at one hook event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// The conversation starts, resumes, is cleared or compacted: bind it.
    Start,
    /// A boundary: hand over what is ready at it as the event's additional context.
    Deliver(HookBoundary),
    /// The agent wants to stop: keep it going with what is ready, once.
    Stop,
    /// The conversation ends: end its session.
    End,
    /// A tool call starts. For an agent whose hook inputs do not say who made a call, the
    /// call of its subagent tool opens a subagent: every tool boundary until that call's own
    /// is the subagent's, and takes nothing.
    EnterSubagent(SubagentTool),
}

/// The tool whose call runs a subagent, as an agent's hook input names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubagentTool {
    /// The input field naming the tool.
    pub field: &'static str,
    /// The tool.
    pub name: &'static str,
}

impl Action {
    /// A tool boundary's delivery.
    pub const TOOL: Action = Action::Deliver(HookBoundary::Tool);
    /// A turn boundary's delivery.
    pub const TURN: Action = Action::Deliver(HookBoundary::Turn);
}

/// One hook event of an agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HookEvent {
    /// The `hermes hook` subcommand the installed hook runs (`post-tool-use`).
    pub command: &'static str,
    /// The agent's own name for the event (`PostToolUse`).
    pub name: &'static str,
    /// What hermes does.
    pub action: Action,
    /// The longest timeout the agent gives this event's hooks, when it is shorter than the
    /// one hermes writes (the agent would shorten it, with a warning at every start).
    pub max_timeout: Option<u64>,
}

impl HookEvent {
    /// The agent's event `name`, whose hook runs `hermes hook COMMAND`, doing `action`.
    pub const fn new(command: &'static str, name: &'static str, action: Action) -> HookEvent {
        HookEvent {
            command,
            name,
            action,
            max_timeout: None,
        }
    }

    /// This event, its hooks' timeout at most `limit` (in the agent's unit).
    pub const fn timeout_at_most(self, limit: u64) -> HookEvent {
        HookEvent {
            max_timeout: Some(limit),
            ..self
        }
    }
}

/// How a session start came about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// A new conversation.
    Fresh,
    /// An earlier conversation comes back under its id.
    Resume,
    /// Anything else (a clear, a compaction): the id says which conversation it is.
    Other,
}

/// How a session start says how it came about: the value of an input field.
#[derive(Clone, Copy, Debug)]
pub struct StartRule {
    /// The field; `None`: every start is [`Start::Fresh`].
    pub field: Option<&'static str>,
    /// The value that means [`Start::Resume`].
    pub resume: &'static str,
    /// The values that mean [`Start::Fresh`] (so does a missing field).
    pub fresh: &'static [&'static str],
    /// What any other value means.
    pub other: Start,
}

impl StartRule {
    /// The `source` field (`startup`, `resume`, `clear`, `compact`) that several agents share.
    pub const SOURCE: StartRule = StartRule {
        field: Some("source"),
        resume: "resume",
        fresh: &["startup"],
        other: Start::Other,
    };
    /// No field: every start is a new conversation.
    pub const ALWAYS_FRESH: StartRule = StartRule {
        field: None,
        resume: "",
        fresh: &[],
        other: Start::Fresh,
    };
}

/// How an agent says that a stop hook already kept it going.
#[derive(Clone, Copy, Debug)]
pub enum StopActive {
    /// It does not say (every stop may be kept going).
    Never,
    /// A boolean field that is `true` then.
    Flag(&'static str),
    /// A counter field of stops kept going in a row, more than zero then.
    Count(&'static str),
}

impl StopActive {
    /// The `stop_hook_active` flag that several agents share.
    pub const STOP_HOOK_ACTIVE: StopActive = StopActive::Flag("stop_hook_active");
}

/// The shape of the answer that hands a text over.
#[derive(Clone, Copy, Debug)]
pub enum Answer {
    /// `hookSpecificOutput.additionalContext` under the event's name; at a stop, as `stop`
    /// says.
    AdditionalContext {
        /// How a stop's answer keeps the agent going.
        stop: StopAnswer,
    },
    /// `{"decision": "block", "reason": text}` at every event.
    Block,
    /// `{"additionalContext": text}` at the top level; at a stop,
    /// `{"decision": "block", "reason": text}`.
    TopLevelContext,
    /// `{"followup_message": text}`, sent as the next user message.
    Followup,
    /// `{"cancel": false, "contextModification": text}`; the agent takes *every* non-zero
    /// exit as "block", so a failing hook answers `{"cancel": false}` and exits 0.
    ContextModification,
    /// `{"context": text}`, appended to the user message (a plugin's or shell hook's answer).
    Context,
}

/// How an agent that reads `additionalContext` is kept going at a stop with a text.
#[derive(Clone, Copy, Debug)]
pub enum StopAnswer {
    /// `{"decision": DECISION, "reason": text}` (`block`, or `deny`).
    Decision(&'static str),
    /// `hookSpecificOutput.additionalContext` under the stop event's name, as at every other
    /// event: for an agent that hands a blocking stop's reason to its model twice, but this
    /// once.
    Context,
}

/// Which of an agent's session ends are an explicit discard of the conversation (a `/clear`, a
/// "new conversation"): the input field giving the reason and its values. Every other session
/// end — a headless run's exit, a quit the person may `--resume` from tomorrow — only detaches
/// the conversation from its process.
#[derive(Clone, Copy, Debug)]
pub struct Discard {
    /// The field; `None`: no session end is a discard.
    pub field: Option<&'static str>,
    /// The values that mean a discard.
    pub reasons: &'static [&'static str],
}

impl Discard {
    /// No session end of the agent discards its conversation.
    pub const NEVER: Discard = Discard {
        field: None,
        reasons: &[],
    };

    /// The session ends whose `field` is one of `reasons`.
    pub const fn when(field: &'static str, reasons: &'static [&'static str]) -> Discard {
        Discard {
            field: Some(field),
            reasons,
        }
    }
}

impl Agent {
    /// Whether the session end whose input is `input` discards the conversation (see
    /// [`Discard`]).
    pub fn discards(&self, input: &Value) -> bool {
        self.discard
            .field
            .and_then(|f| input.get(f))
            .and_then(Value::as_str)
            .is_some_and(|reason| self.discard.reasons.contains(&reason))
    }

    /// How a session start came about.
    pub fn start(&self, input: &Value) -> Start {
        let rule = &self.start;
        match rule
            .field
            .and_then(|f| input.get(f))
            .and_then(Value::as_str)
        {
            None => Start::Fresh,
            Some(value) if value == rule.resume => Start::Resume,
            Some(value) if rule.fresh.contains(&value) => Start::Fresh,
            Some(_) => rule.other,
        }
    }

    /// Whether the agent goes on because a stop hook already kept it going.
    pub fn stop_active(&self, input: &Value) -> bool {
        match self.stop_active {
            StopActive::Never => false,
            StopActive::Flag(field) => input.get(field).and_then(Value::as_bool) == Some(true),
            StopActive::Count(field) => input
                .get(field)
                .and_then(Value::as_u64)
                .is_some_and(|n| n > 0),
        }
    }

    /// The answer handing `text` over at `event`.
    pub fn answer(&self, event: &HookEvent, text: &str) -> Value {
        match self.answer {
            Answer::AdditionalContext {
                stop: StopAnswer::Decision(decision),
            } if event.action == Action::Stop => json!({"decision": decision, "reason": text}),
            Answer::AdditionalContext { .. } => json!({"hookSpecificOutput": {
                    "hookEventName": event.name,
                "additionalContext": text,
            }}),
            Answer::Block => json!({"decision": "block", "reason": text}),
            Answer::TopLevelContext => match event.action {
                Action::Stop => json!({"decision": "block", "reason": text}),
                _ => json!({ "additionalContext": text }),
            },
            Answer::Followup => json!({ "followup_message": text }),
            Answer::ContextModification => {
                json!({"cancel": false, "contextModification": text})
            }
            Answer::Context => json!({ "context": text }),
        }
    }

    /// What a failing hook prints on stdout, exiting 0, for an agent that treats *every*
    /// non-zero exit as "block"; `None`: hermes' failures exit 1, which the agent takes as a
    /// non-blocking error.
    pub fn fail_open(&self) -> Option<Value> {
        match self.answer {
            Answer::ContextModification => Some(json!({"cancel": false})),
            _ => None,
        }
    }

    /// Whether the agent has a tool boundary whose answer the model reads.
    pub fn has_tool_boundary(&self) -> bool {
        self.events.iter().any(|e| e.action == Action::TOOL)
    }

    /// Whether the agent tells hermes when a conversation ends.
    pub fn has_session_end(&self) -> bool {
        self.events.iter().any(|e| e.action == Action::End)
    }

    /// The tool whose call runs a subagent, for an agent whose hooks tell a subagent's calls
    /// apart only by coming inside it.
    pub fn subagent_tool(&self) -> Option<SubagentTool> {
        self.events.iter().find_map(|e| match e.action {
            Action::EnterSubagent(tool) => Some(tool),
            _ => None,
        })
    }

    /// Whether `input` is a hook of the call of the agent's subagent tool itself.
    pub fn calls_subagent_tool(&self, input: &Value) -> bool {
        self.subagent_tool()
            .is_some_and(|tool| input.get(tool.field).and_then(Value::as_str) == Some(tool.name))
    }

    /// The event that the `hermes hook` subcommand `command` runs.
    pub fn event(&self, command: &str) -> Option<HookEvent> {
        self.events.iter().copied().find(|e| e.command == command)
    }
}
