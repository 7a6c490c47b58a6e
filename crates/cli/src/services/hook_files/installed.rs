//! Where `hermes hook install` wrote hermes' hooks, found again (`hermes doctor`): for every
//! agent profile, at the project level (a directory), with `--local` (an agent's uncommitted
//! settings) and at the user level (the home directory), how many of its events run a
//! `hermes hook` command and whether the MCP server `hermes` is registered. It reads the same
//! places the install writes ([`paths`]) and writes nothing.

use std::path::{Path, PathBuf};

use serde_json::Value;

use hermes_agents::{AGENTS, Agent};

use super::install::{Hooks, Install, InstallOptions, Server, paths};
use super::merge::{is_hermes_hook, is_hermes_script};

/// One place an agent's hooks may be installed, as found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// `project`, `local` or `user`.
    pub level: &'static str,
    /// The hooks' file, or directory of scripts.
    pub hooks: PathBuf,
    /// How many of the agent's events run a `hermes hook` command there.
    pub events: usize,
    /// How many events the agent has.
    pub of: usize,
    /// Whether the MCP server `hermes` is registered in the server's file of that level.
    pub server: bool,
    /// Whether a hook found runs plain `hermes` (found on PATH) rather than a path.
    pub bare: bool,
}

/// An agent and the places where some of its hooks or its server were found.
#[derive(Clone, Debug)]
pub struct AgentHooks {
    /// The agent's name.
    pub agent: &'static str,
    /// Where something of hermes' is installed (empty: nowhere).
    pub found: Vec<Found>,
}

/// Every agent's installed hooks, under `project` and under the user's `home`.
pub fn installed(project: &Path, home: Option<&Path>) -> Vec<AgentHooks> {
    AGENTS
        .iter()
        .map(|profile| AgentHooks {
            agent: profile.name,
            found: levels(profile, project, home)
                .into_iter()
                // `--local` writes only hooks: its server is the project's.
                .filter(|f| f.events > 0 || (f.server && f.level != "local"))
                .collect(),
        })
        .collect()
}

fn levels(profile: &Agent, project: &Path, home: Option<&Path>) -> Vec<Found> {
    let options = |user: bool, local: bool| InstallOptions {
        print: true,
        project: project.to_owned(),
        absolute: false,
        local,
        user,
        home: home.map(Path::to_owned),
        env: |name| std::env::var_os(name),
    };
    let mut found = Vec::new();
    let install = &profile.install;
    // An agent configured in its own home has one level: that home, under the user's.
    if matches!(install.server, Server::Yaml { .. }) {
        return paths(install, &options(true, false))
            .map(|(server, hooks)| vec![look(profile, "user", &server, &hooks)])
            .unwrap_or_default();
    }
    if let Ok((server, hooks)) = paths(install, &options(false, false)) {
        found.push(look(profile, "project", &server, &hooks));
    }
    if let Hooks::Json {
        local: Some(parts), ..
    } = &install.hooks
    {
        let hooks = parts
            .iter()
            .fold(project.to_owned(), |p, part| p.join(part));
        if let Ok((server, _)) = paths(install, &options(false, true)) {
            found.push(look(profile, "local", &server, &hooks));
        }
    }
    if home.is_some()
        && let Ok((server, hooks)) = paths(install, &options(true, false))
    {
        // An agent with no user-level file writes the project's even with `--user`.
        if !found.iter().any(|f| f.hooks == hooks) {
            found.push(look(profile, "user", &server, &hooks));
        }
    }
    // A server the agent reads from the home only is found at every level: it counts where
    // hooks are (or, with none anywhere, in the home).
    if let Server::Json { file, .. } | Server::Toml { file, .. } = &install.server
        && file.home_only()
    {
        let hooked = found.iter().any(|f| f.events > 0);
        found.retain(|f| {
            if hooked {
                f.events > 0
            } else {
                f.level == "user"
            }
        });
    }
    found
}

fn look(profile: &Agent, level: &'static str, server: &Path, hooks: &Path) -> Found {
    let mut commands = Vec::new();
    match &profile.install.hooks {
        Hooks::Json { .. } => {
            if let Some(doc) = read_json(hooks) {
                strings(&doc, &mut commands);
            }
        }
        // The plugin runs hermes by the absolute path its `hermes.json` names, at every event.
        Hooks::Plugin { .. } => {
            if let Some(text) = read_json(&hooks.join("hermes.json"))
                .and_then(|v| v.get("program")?.as_str().map(str::to_owned))
            {
                commands.extend(
                    profile
                        .events
                        .iter()
                        .map(|e| format!("{text} hook {}", e.command)),
                );
            }
        }
        Hooks::Scripts { .. } => {
            for event in profile.events {
                if let Ok(text) = std::fs::read_to_string(hooks.join(event.name))
                    && is_hermes_script(&text, event.command)
                {
                    commands.extend(text.lines().map(|l| {
                        l.trim()
                            .strip_prefix("exec ")
                            .unwrap_or(l.trim())
                            .to_owned()
                    }));
                }
            }
        }
    }
    let hooked: Vec<&String> = commands
        .iter()
        .filter(|c| profile.events.iter().any(|e| is_hermes_hook(c, e.command)))
        .collect();
    Found {
        level,
        hooks: hooks.to_owned(),
        events: profile
            .events
            .iter()
            .filter(|e| commands.iter().any(|c| is_hermes_hook(c, e.command)))
            .count(),
        of: profile.events.len(),
        server: has_server(&profile.install, server),
        bare: hooked.iter().any(|c| c.starts_with("hermes ")),
    }
}

fn read_json(path: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&super::jsonc::blank_comments(&text).unwrap_or(text)).ok()
}

/// Every string inside `doc`.
fn strings(doc: &Value, out: &mut Vec<String>) {
    match doc {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// Whether `path` registers the MCP server `hermes`.
fn has_server(install: &Install, path: &Path) -> bool {
    match &install.server {
        Server::Json { .. } => read_json(path).is_some_and(|doc| {
            doc.get("mcpServers")
                .and_then(|s| s.get("hermes"))
                .is_some()
        }),
        Server::Yaml { .. } => std::fs::read_to_string(path).is_ok_and(|text| {
            text.lines().any(|l| {
                l.trim_start().starts_with("hermes:") && l.contains("# hermes hook install")
            })
        }),
        Server::Toml { .. } => std::fs::read_to_string(path)
            .ok()
            .and_then(|text| text.parse::<toml_edit::DocumentMut>().ok())
            .is_some_and(|doc| {
                doc.get("mcp_servers")
                    .and_then(|s| s.get("hermes"))
                    .is_some()
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_install_writes_is_found_again_and_nothing_else() {
        let project = tempfile::tempdir().expect("project");
        let home = tempfile::tempdir().expect("home");
        let before = installed(project.path(), Some(home.path()));
        assert!(before.iter().all(|a| a.found.is_empty()), "{before:?}");
        // One agent of each shape: hooks beside an enabled JSON server, a TOML server, scripts.
        let picked: Vec<&Agent> = [
            AGENTS.iter().find(|a| a.install.has_local()),
            AGENTS
                .iter()
                .find(|a| matches!(a.install.server, Server::Toml { .. })),
            AGENTS
                .iter()
                .find(|a| matches!(a.install.hooks, Hooks::Scripts { .. })),
        ]
        .into_iter()
        .flatten()
        .copied()
        .collect();
        assert_eq!(picked.len(), 3);
        for profile in &picked {
            let options = InstallOptions {
                print: false,
                project: project.path().to_owned(),
                absolute: false,
                local: false,
                user: false,
                home: Some(home.path().to_owned()),
                env: |_| None,
            };
            crate::services::hook_files::install::install(profile, &options).expect("installs");
        }
        let after = installed(project.path(), Some(home.path()));
        for agent in &after {
            let installed_here = picked.iter().any(|a| a.name == agent.agent);
            assert_eq!(!agent.found.is_empty(), installed_here, "{agent:?}");
            for found in &agent.found {
                assert_eq!(found.level, "project", "{found:?}");
                assert_eq!(found.events, found.of, "{found:?}");
                assert!(found.server && found.bare, "{found:?}");
            }
        }
    }
}
