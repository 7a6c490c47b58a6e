//! The one trait an agent CLI implements, the table of them, and how a dispatch by agent
//! becomes an argv and an adapter: a built-in profile, or an `[agents.NAME]` command with its
//! `{prompt}` and `{model}` placeholders filled in.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::event::Event;
use super::prompt::{subagent_prompt, tools_for};
use hermes_ledger::Role;

/// What an adapter remembers between two lines of one stream.
#[derive(Debug, Default)]
pub struct ReadState {
    /// The id of the latest model message (one model call may span several lines).
    pub message_id: Option<String>,
    /// Whether the model's current response was counted already (reset when a tool ends).
    pub in_model_turn: bool,
    /// Usage summed over turns, for agents that report it per turn.
    pub usage: hermes_ledger::Usage,
}

impl ReadState {
    /// The model produced output: one call, unless this response was counted already.
    pub fn model_output(&mut self, out: &mut Vec<Event>) {
        if !self.in_model_turn {
            self.in_model_turn = true;
            out.push(Event::ModelCall);
        }
    }
}

/// One agent CLI: how to run it headless with a structured stream, and how to read that
/// stream. Implementations are stateless; what a stream needs remembered is a [`ReadState`].
pub trait AgentCli: Sync + std::fmt::Debug {
    /// The profile's name (`--agent NAME`), which is also its adapter's (`--adapter NAME`).
    fn name(&self) -> &'static str;
    /// The executable: the profile's name unless the agent says otherwise.
    fn program(&self) -> &'static str {
        self.name()
    }
    /// The argv that runs `prompt` headless, streaming JSON, with `model` and the allowed
    /// `tools` (empty: the agent's defaults) where the agent has such flags.
    fn argv(&self, prompt: &str, model: Option<&str>, tools: &[String]) -> Vec<String>;
    /// Whether `args` (what follows the program in a command given as is) ask for the
    /// structured stream this adapter reads.
    fn streams(&self, args: &[String]) -> bool;
    /// The agent's tools for a toolset name (`terminal`, `file`, `web`); empty if unknown.
    fn toolset(&self, name: &str) -> &'static [&'static str];
    /// Reads one line of the stream (without its newline) into events; `false` if it is not
    /// a line of this stream (not a JSON object of its shape), which is then shown as it is.
    fn read(&self, line: &[u8], state: &mut ReadState, out: &mut Vec<Event>) -> bool;
}

/// Every built-in agent CLI, one line each.
pub static AGENTS: &[&dyn AgentCli] = &[
    &super::claude::Claude,
    &super::codex::Codex,
    &super::gemini::Gemini,
];

/// The adapter named `name`: `Ok(None)` for `plain`, `Err` naming the choices for an unknown
/// name.
pub fn adapter_by_name(name: &str) -> Result<Option<&'static dyn AgentCli>, AgentError> {
    if name == "plain" {
        return Ok(None);
    }
    AGENTS
        .iter()
        .copied()
        .find(|a| a.name() == name)
        .map(Some)
        .ok_or_else(|| AgentError::UnknownAdapter {
            name: name.to_owned(),
        })
}

/// The adapter that reads a child's stdout: the one `forced` names, else the built-in whose
/// program `argv` runs with its structured stream flags, else none (plain output).
pub fn adapter_for(forced: Option<&str>, argv: &[String]) -> Option<&'static dyn AgentCli> {
    if let Some(name) = forced {
        return adapter_by_name(name).ok().flatten();
    }
    let (program, args) = argv.split_first()?;
    let base = Path::new(program).file_name()?.to_str()?;
    AGENTS
        .iter()
        .copied()
        .find(|a| a.program() == base && a.streams(args))
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
    #[error("unknown adapter {name:?}: use plain, claude, codex or gemini")]
    UnknownAdapter {
        /// The name.
        name: String,
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
}

/// An agent child ready to dispatch: its argv and the adapter that reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentCommand {
    /// The argv.
    pub argv: Vec<String>,
    /// The adapter's name (`plain`, `claude`, …).
    pub adapter: String,
}

/// Builds the argv of `request` from the `[agents.NAME]` entries of config (which win) or the
/// built-in profiles, and checks its program is on `path` (the `PATH` to search).
pub fn command_for(
    request: &AgentRequest<'_>,
    configured: &[hermes_settings::AgentCommand],
    path: Option<&OsStr>,
) -> Result<AgentCommand, AgentError> {
    let builtin = AGENTS.iter().copied().find(|a| a.name() == request.agent);
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
                    .or_else(|| adapter_for(None, &argv))
                    .map_or("plain", |a| a.name())
                    .to_owned(),
            };
            AgentCommand { argv, adapter }
        }
        None => {
            let cli = builtin.ok_or_else(|| AgentError::Unknown {
                name: request.agent.to_owned(),
                known: known_names(configured),
            })?;
            let tools = tools_for(cli, request.toolsets);
            AgentCommand {
                argv: cli.argv(&prompt, request.model, &tools),
                adapter: cli.name().to_owned(),
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

fn known_names(configured: &[hermes_settings::AgentCommand]) -> String {
    let mut names: Vec<&str> = AGENTS.iter().map(|a| a.name()).collect();
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
pub fn find_program(program: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    crate::spawn::resolve_program(program, path, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(agent: &str) -> AgentRequest<'_> {
        AgentRequest {
            agent,
            goal: "review the diff",
            context: None,
            toolsets: &[],
            role: Role::Leaf,
            model: Some("m1"),
            depth: 1,
            max_depth: 2,
        }
    }

    fn bin_dir(names: &[&str]) -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        for name in names {
            let p = dir.path().join(name);
            std::fs::write(&p, "#!/bin/sh\n").expect("write");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        dir
    }

    #[test]
    fn builtin_profiles_build_their_headless_streaming_argv() {
        let bin = bin_dir(&["claude", "codex", "gemini"]);
        let path = Some(bin.path().as_os_str());
        let claude = command_for(&request("claude"), &[], path).expect("claude");
        assert_eq!(claude.adapter, "claude");
        assert_eq!(claude.argv[..2], ["claude", "-p"]);
        assert!(claude.argv[2].contains("GOAL:\nreview the diff"));
        assert_eq!(
            claude.argv[3..],
            [
                "--output-format",
                "stream-json",
                "--verbose",
                "--model",
                "m1"
            ]
        );
        let codex = command_for(&request("codex"), &[], path).expect("codex");
        assert_eq!(codex.argv[..5], ["codex", "exec", "--json", "-m", "m1"]);
        let gemini = command_for(&request("gemini"), &[], path).expect("gemini");
        assert_eq!(
            gemini.argv[3..],
            ["--output-format", "stream-json", "-m", "m1"]
        );
        for c in [&claude, &codex, &gemini] {
            assert_eq!(
                adapter_for(None, &c.argv).map(|a| a.name()),
                Some(c.adapter.as_str())
            );
        }
    }

    #[test]
    fn configured_commands_fill_placeholders_and_win_over_builtins() {
        let bin = bin_dir(&["aider", "claude"]);
        let path = Some(bin.path().as_os_str());
        let configured = [
            hermes_settings::AgentCommand {
                name: "aider".into(),
                command: vec![
                    "aider".into(),
                    "--message".into(),
                    "{prompt}".into(),
                    "--model".into(),
                    "{model}".into(),
                ],
                adapter: None,
            },
            hermes_settings::AgentCommand {
                name: "claude".into(),
                command: vec![
                    "claude".into(),
                    "-p".into(),
                    "{prompt}".into(),
                    "--max-turns".into(),
                    "3".into(),
                ],
                adapter: None,
            },
        ];
        let aider = command_for(&request("aider"), &configured, path).expect("aider");
        assert_eq!(aider.argv[3..], ["--model", "m1"]);
        assert_eq!(aider.adapter, "plain");
        let no_model = AgentRequest {
            model: None,
            ..request("aider")
        };
        let aider = command_for(&no_model, &configured, path).expect("aider");
        assert_eq!(aider.argv.len(), 3, "{:?}", aider.argv);
        let claude = command_for(&request("claude"), &configured, path).expect("claude");
        assert_eq!(claude.argv[3..], ["--max-turns", "3"]);
        assert_eq!(
            claude.adapter, "claude",
            "a pinned built-in keeps its adapter"
        );
    }

    #[test]
    fn unknown_agents_and_missing_programs_are_named() {
        let empty = tempfile::tempdir().expect("tempdir");
        let err = command_for(&request("claude"), &[], Some(empty.path().as_os_str()))
            .expect_err("not installed");
        assert!(
            err.to_string().contains("\"claude\" is not installed"),
            "{err}"
        );
        let err = command_for(&request("nope"), &[], None).expect_err("unknown");
        assert!(err.to_string().contains("claude, codex, gemini"), "{err}");
        assert!(adapter_by_name("jsonx").is_err());
        assert!(adapter_by_name("plain").expect("plain").is_none());
    }

    #[test]
    fn commands_given_as_is_are_recognised_only_with_their_stream_flags() {
        let argv = |words: &[&str]| words.iter().map(|w| w.to_string()).collect::<Vec<_>>();
        let name = |words: &[&str]| adapter_for(None, &argv(words)).map(|a| a.name());
        assert_eq!(
            name(&["/usr/bin/claude", "-p", "x", "--output-format=stream-json"]),
            Some("claude")
        );
        assert_eq!(name(&["claude", "-p", "x"]), None);
        assert_eq!(name(&["codex", "exec", "--json", "x"]), Some("codex"));
        assert_eq!(name(&["codex", "exec", "x"]), None);
        assert_eq!(
            name(&["gemini", "-p", "x", "-o", "stream-json"]),
            Some("gemini")
        );
        assert_eq!(name(&["echo", "--json"]), None);
        assert_eq!(
            adapter_for(Some("codex"), &argv(&["sh"])).map(|a| a.name()),
            Some("codex")
        );
        assert!(
            adapter_for(
                Some("plain"),
                &argv(&["claude", "--output-format", "stream-json"])
            )
            .is_none()
        );
    }
}
