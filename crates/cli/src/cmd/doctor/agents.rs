//! The agent checks of `hermes doctor`: each agent CLI hermes knows — the hook-driven agents'
//! profiles, the agent children's profiles and the `[agents.NAME]` of `config.toml` — found on
//! `PATH` with what its `--version` says (under a deadline, so a binary that hangs cannot hang
//! doctor), and where `hermes hook install` wrote hooks.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use super::{Check, Status, path_dirs};

/// How long an agent CLI's `--version` may take.
const VERSION_DEADLINE: Duration = Duration::from_secs(3);

/// One agent CLI to look for.
#[derive(Clone, Debug)]
struct Wanted {
    name: String,
    programs: Vec<String>,
    /// Named in `config.toml`: its absence is a warning, not a note.
    configured: bool,
}

/// The agents from every profile, each once, in table order.
fn wanted(configured: &[hermes_settings::AgentOverride]) -> Vec<Wanted> {
    let mut all: Vec<Wanted> = Vec::new();
    let mut add = |name: &str, programs: Vec<String>, configured: bool| {
        match all.iter_mut().find(|w| w.name == name) {
            // A configured command replaces the built-in program.
            Some(w) if configured => {
                w.programs = programs;
                w.configured = true;
            }
            Some(w) => {
                for p in programs {
                    if !w.programs.contains(&p) {
                        w.programs.push(p);
                    }
                }
            }
            None => all.push(Wanted {
                name: name.to_owned(),
                programs,
                configured,
            }),
        }
    };
    // An agent known by its script markers alone (its executable is named like hermes) has
    // nothing to look for on PATH.
    for agent in hermes_agents::AGENTS
        .iter()
        .filter(|a| !a.executables.is_empty())
    {
        let (name, executables) = (agent.name, agent.executables);
        add(
            name,
            executables.iter().map(|e| (*e).to_owned()).collect(),
            false,
        );
    }
    for (agent, child) in hermes_agents::children().filter(|(_, c)| !c.not_self) {
        add(agent.name, vec![child.program.to_owned()], false);
    }
    for entry in configured {
        add(
            &entry.name,
            entry.command.first().cloned().into_iter().collect(),
            true,
        );
    }
    all
}

/// One line per agent CLI, their `--version`s asked at once.
pub fn agent_clis(configured: &[hermes_settings::AgentOverride]) -> Vec<Check> {
    let path = std::env::join_paths(path_dirs()).ok();
    let found: Vec<(Wanted, Option<PathBuf>)> = wanted(configured)
        .into_iter()
        .map(|w| {
            let at = w
                .programs
                .iter()
                .find_map(|p| hermes_registry::agent::find_program(p, path.as_deref()));
            (w, at)
        })
        .collect();
    let (tx, rx) = mpsc::channel();
    for (i, (_, at)) in found.iter().enumerate() {
        if let Some(at) = at.clone() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let _ = tx.send((i, version(&at)));
            });
        }
    }
    drop(tx);
    let mut versions: Vec<Option<Result<String, String>>> = vec![None; found.len()];
    for (i, v) in rx {
        versions[i] = Some(v);
    }
    found
        .iter()
        .zip(versions)
        .map(|((w, at), v)| {
            let name = format!("agent {}", w.name);
            match (at, v) {
                (None, _) if w.configured => Check::new(
                    Status::Warn,
                    name,
                    format!(
                        "{} (from [agents.{}] of config.toml) is not on PATH",
                        w.programs.join(" or "),
                        w.name
                    ),
                ),
                (None, _) => Check::new(
                    Status::Info,
                    name,
                    format!("not installed ({} not on PATH)", w.programs.join(" or ")),
                ),
                (Some(at), Some(Ok(version))) => {
                    Check::new(Status::Ok, name, format!("{} ({version})", at.display()))
                }
                (Some(at), v) => {
                    let why = match v {
                        Some(Err(why)) => why,
                        _ => "`--version` gave no answer".to_owned(),
                    };
                    Check::new(Status::Warn, name, format!("{}: {why}", at.display()))
                }
            }
        })
        .collect()
}

/// What `program --version` prints first, under [`VERSION_DEADLINE`]; in its own process
/// group, killed whole when it takes longer.
fn version(program: &Path) -> Result<String, String> {
    let output =
        hermes_stdx::output_within(Command::new(program).arg("--version"), VERSION_DEADLINE)
            .map_err(|e| format!("cannot run it: {e}"))?
            .ok_or_else(|| {
                format!(
                    "`--version` did not answer within {} s",
                    VERSION_DEADLINE.as_secs()
                )
            })?;
    let (out, err) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    let first = |text: &str| {
        text.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(|l| {
                hermes_stdx::one_line(l)
                    .chars()
                    .take(100)
                    .collect::<String>()
            })
    };
    match (output.status, first(&out).or_else(|| first(&err))) {
        (s, Some(line)) if s.success() => Ok(line),
        (s, line) => Err(format!(
            "`--version` {} ({})",
            s.code()
                .map_or("was killed".to_owned(), |c| format!("exited {c}")),
            line.unwrap_or_else(|| "no output".to_owned())
        )),
    }
}

/// One line per agent: where hermes' hooks are installed, or that they are not.
pub fn hooks() -> Vec<Check> {
    let project = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let on_path = hermes_on_path();
    crate::services::hook_files::installed(&project, home.as_deref())
        .into_iter()
        .map(|agent| {
            let name = format!("hooks {}", agent.agent);
            if agent.found.is_empty() {
                return Check::new(
                    Status::Info,
                    name,
                    format!(
                        "not installed here or for the user (hermes hook install {})",
                        agent.agent
                    ),
                );
            }
            let places: Vec<String> = agent
                .found
                .iter()
                .map(|f| {
                    let server = if f.server { "" } else { ", no MCP server" };
                    format!(
                        "{} {} ({}/{} events{server})",
                        f.level,
                        f.hooks.display(),
                        f.events,
                        f.of
                    )
                })
                .collect();
            let partial = agent.found.iter().any(|f| f.events < f.of || !f.server);
            let unreachable = agent.found.iter().any(|f| f.bare) && !on_path;
            let (status, note) = match (partial, unreachable) {
                (_, true) => (
                    Status::Warn,
                    "; the hooks run `hermes`, which is not on PATH",
                ),
                (true, false) => (Status::Warn, "; incomplete: run hermes hook install again"),
                (false, false) => (Status::Ok, ""),
            };
            Check::new(status, name, format!("{}{note}", places.join("; ")))
        })
        .collect()
}

fn hermes_on_path() -> bool {
    let path = std::env::join_paths(path_dirs()).ok();
    hermes_registry::agent::find_program("hermes", path.as_deref()).is_some()
}
