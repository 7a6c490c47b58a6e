//! The one trait an agent CLI implements, the table of them, and how a dispatch by agent
//! becomes an argv and an adapter: a built-in profile, or an `[agents.NAME]` command with its
//! `{prompt}` and `{model}` placeholders filled in.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use hermes_agents::{Agent, StreamFormat};
use hermes_ledger::Role;

use super::event::StreamEvent;
use super::prompt::{subagent_prompt, tools_for};

/// What an adapter remembers between two lines of one stream.
#[derive(Debug, Default)]
pub struct ReadState {
    /// The agent's name, for messages.
    pub agent: &'static str,
    /// The id of the latest model message (one model call may span several lines).
    pub message_id: Option<String>,
    /// Whether the model's current response was counted already (reset when a tool ends).
    pub in_model_turn: bool,
    /// Whether the current response's message ended: more text or reasoning after it is
    /// another response (a stop hook kept the agent going), a tool call is the same one.
    pub message_done: bool,
    /// Usage summed over turns, for agents that report it per turn.
    pub usage: hermes_ledger::Usage,
    /// The latest tool calls, `(id, "name: detail")`, for streams whose result of a call names
    /// only its id: a refused one is named by its call.
    pub calls: Vec<(String, String)>,
}

/// At most this many calls are remembered by [`ReadState::called`].
const CALLS_MAX: usize = 64;

impl ReadState {
    /// Remembers call `id` as `named`.
    pub fn called(&mut self, id: &str, named: String) {
        if self.calls.len() == CALLS_MAX {
            self.calls.remove(0);
        }
        self.calls.push((id.to_owned(), named));
    }

    /// The call `id` as [`ReadState::called`] named it, forgotten from here on.
    pub fn take_call(&mut self, id: &str) -> Option<String> {
        let at = self.calls.iter().rposition(|(i, _)| i == id)?;
        Some(self.calls.remove(at).1)
    }

    /// The model produced output: one call, unless this response was counted already.
    pub fn model_output(&mut self, out: &mut Vec<StreamEvent>) {
        if !self.in_model_turn {
            self.in_model_turn = true;
            out.push(StreamEvent::ModelCall);
        }
    }
}

/// An adapter: the agent whose structured stream a child's stdout is read as (an agent of
/// `hermes_agents` with a child profile).
pub type Adapter = &'static Agent;

/// Reads one line of `adapter`'s stream (without its newline) into events; `false` if it is
/// not a line of that stream (not a JSON object of its shape), which is then shown as it is.
pub fn read_line(
    adapter: Adapter,
    line: &[u8],
    state: &mut ReadState,
    out: &mut Vec<StreamEvent>,
) -> bool {
    let Some(child) = &adapter.child else {
        return false;
    };
    match child.stream {
        StreamFormat::SdkMessages => super::sdk_messages::read(line, state, out),
        StreamFormat::ThreadItems => super::thread_items::read(line, state, out),
        StreamFormat::HeadlessEvents => super::headless_events::read(line, state, out),
        StreamFormat::Plain => false,
    }
}

/// The adapter named `name`: `Ok(None)` for `plain`, `Err` naming the choices for an unknown
/// name.
pub fn adapter_by_name(name: &str) -> Result<Option<Adapter>, AgentError> {
    if name == "plain" {
        return Ok(None);
    }
    hermes_agents::child(name)
        .map(|(agent, _)| Some(agent))
        .ok_or_else(|| AgentError::UnknownAdapter {
            name: name.to_owned(),
            known: hermes_agents::listed(
                std::iter::once("plain").chain(hermes_agents::children().map(|(a, _)| a.name)),
                "or",
            ),
        })
}

/// The adapter that reads a child's stdout: the one `forced` names, else the built-in whose
/// program `argv` runs with its structured stream flags, else none (plain output).
pub fn adapter_for(forced: Option<&str>, argv: &[String]) -> Option<Adapter> {
    if let Some(name) = forced {
        return adapter_by_name(name).ok().flatten();
    }
    let (program, args) = argv.split_first()?;
    let base = Path::new(program).file_name()?.to_str()?;
    hermes_agents::children()
        .find(|(_, child)| child.program == base && (child.streams)(args))
        .map(|(agent, _)| agent)
}

/// Why a dispatch by agent cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AgentError {
    /// No built-in profile and no `[agents.NAME]` of that name.
    #[error(
        "unknown agent {name:?}: known agents are {known}; add others as [agents.NAME] command = [...] in config.toml"
    )]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names there are.
        known: String,
    },
    /// The agent's program is not on `PATH`.
    #[error(
        "agent {agent}: its program {program:?} is not installed (not found on PATH); install it or set [agents.{agent}] command in config.toml"
    )]
    NotInstalled {
        /// The agent.
        agent: String,
        /// Its program.
        program: String,
    },
    /// An adapter name that does not exist.
    #[error("unknown adapter {name:?}: use {known}")]
    UnknownAdapter {
        /// The name.
        name: String,
        /// The adapters there are.
        known: String,
    },
}

/// A dispatch by agent, before it is an argv.
#[derive(Clone, Copy, Debug)]
pub struct AgentRequest<'a> {
    /// The profile.
    pub agent: &'a str,
    /// The goal.
    pub goal: &'a str,
    /// The parent's context.
    pub context: Option<&'a str>,
    /// Toolsets, mapped onto the agent's tool allow-list.
    pub toolsets: &'a [String],
    /// Its role.
    pub role: Role,
    /// The model, if one was asked for.
    pub model: Option<&'a str>,
    /// The depth its unit runs at (1: dispatched from outside any child).
    pub depth: u32,
    /// `delegation.max_depth`.
    pub max_depth: u32,
    /// Its sandbox: a built-in profile's permission flags follow it.
    pub sandbox: hermes_ledger::SandboxMode,
}

/// An agent child ready to dispatch: its argv and the adapter that reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentCommand {
    /// The argv.
    pub argv: Vec<String>,
    /// The adapter's name (`plain`, or an agent's).
    pub adapter: String,
}

/// Builds the argv of `request` from the `[agents.NAME]` entries of config (which win) or the
/// built-in profiles, and checks its program is on `path` (the `PATH` to search).
pub fn command_for(
    request: &AgentRequest<'_>,
    configured: &[hermes_settings::AgentOverride],
    path: Option<&OsStr>,
) -> Result<AgentCommand, AgentError> {
    let builtin = hermes_agents::child(request.agent);
    let prompt = subagent_prompt(
        request.goal,
        request.context,
        request.role,
        request.depth,
        request.max_depth,
    );
    let command = match configured.iter().find(|c| c.name == request.agent) {
        Some(entry) => {
            let argv = fill(&entry.command, &prompt, request.model);
            let adapter = match &entry.adapter {
                Some(name) => {
                    adapter_by_name(name)?;
                    name.clone()
                }
                None => builtin
                    .map(|(agent, _)| agent)
                    .or_else(|| adapter_for(None, &argv))
                    .map_or("plain", |a| a.name)
                    .to_owned(),
            };
            AgentCommand { argv, adapter }
        }
        None => {
            let (agent, child) = builtin.ok_or_else(|| AgentError::Unknown {
                name: request.agent.to_owned(),
                known: known_names(configured),
            })?;
            let permissions = (child.permissions)(agent_sandbox(request.sandbox));
            let tools = if request.toolsets.is_empty() {
                permissions.tools.iter().map(|t| (*t).to_owned()).collect()
            } else {
                tools_for(child, request.toolsets)
            };
            let mut argv = (child.argv)(&prompt, request.model, &tools);
            argv.extend(permissions.flags.iter().map(|f| (*f).to_owned()));
            if child.not_self
                && let Some(first) = argv.first_mut()
            {
                // Named like hermes: the first of that name on PATH that is not this hermes.
                *first = not_self(first, path)
                    .map(|p| p.display().to_string())
                    .ok_or_else(|| AgentError::NotInstalled {
                        agent: request.agent.to_owned(),
                        program: first.clone(),
                    })?;
            }
            AgentCommand {
                argv,
                adapter: if child.stream == StreamFormat::Plain {
                    "plain".to_owned()
                } else {
                    agent.name.to_owned()
                },
            }
        }
    };
    let program = command.argv.first().cloned().unwrap_or_default();
    if find_program(&program, path).is_none() {
        return Err(AgentError::NotInstalled {
            agent: request.agent.to_owned(),
            program,
        });
    }
    Ok(command)
}

/// A sandbox as the agents' permission flags are chosen for it.
fn agent_sandbox(mode: hermes_ledger::SandboxMode) -> hermes_agents::Sandbox {
    match mode {
        hermes_ledger::SandboxMode::ReadOnly => hermes_agents::Sandbox::ReadOnly,
        hermes_ledger::SandboxMode::WorkspaceWrite => hermes_agents::Sandbox::WorkspaceWrite,
        hermes_ledger::SandboxMode::Full => hermes_agents::Sandbox::Full,
    }
}

fn known_names(configured: &[hermes_settings::AgentOverride]) -> String {
    let mut names: Vec<&str> = hermes_agents::children().map(|(a, _)| a.name).collect();
    for c in configured {
        if !names.contains(&c.name.as_str()) {
            names.push(&c.name);
        }
    }
    names.join(", ")
}

/// Fills `{prompt}` and `{model}` in. Without a model, a word holding `{model}` goes, with the
/// flag before it (`--model {model}`).
fn fill(command: &[String], prompt: &str, model: Option<&str>) -> Vec<String> {
    let mut argv: Vec<String> = Vec::with_capacity(command.len());
    for word in command {
        if word.contains("{model}") {
            match model {
                Some(m) => argv.push(word.replace("{model}", m).replace("{prompt}", prompt)),
                None => {
                    if argv.len() > 1 && argv.last().is_some_and(|w| w.starts_with('-')) {
                        argv.pop();
                    }
                }
            }
            continue;
        }
        argv.push(word.replace("{prompt}", prompt));
    }
    argv
}

/// Where `program` is: itself if it names a path, else the first executable file of that name
/// in `path` (the lookup of [`crate::spawn::resolve_program`], from this process's directory).
/// The first `program` on `path` that is not this process's executable.
fn not_self(program: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    let me = std::env::current_exe().and_then(|p| p.canonicalize()).ok();
    std::env::split_paths(path?)
        .filter_map(|dir| find_program(&dir.join(program).display().to_string(), None))
        .find(|p| p.canonicalize().ok() != me)
}

pub fn find_program(program: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    crate::spawn::resolve_program(program, path, None)
}
