//! What `hermes hook install NAME` writes for an agent: where its MCP server is registered and
//! how, where its hooks go and in which shape. Data only: the command that reads, merges and
//! writes those files is the cli's.

/// What `hermes hook install NAME` writes for one agent.
#[derive(Debug)]
pub struct Install {
    /// Where the MCP server is registered, and how.
    pub server: Server,
    /// Where the hooks go, and how.
    pub hooks: Hooks,
    /// Printed after `--print`'s snippets (`{quoted}` is the program, quoted for a shell).
    pub print_note: &'static str,
    /// The line after "registered …": what the user does next (`{project}` is the project
    /// directory, `{quoted}` the program).
    pub advice: &'static str,
}

impl Install {
    /// The file `--local` writes (uncommitted, per-user project settings), if the agent has one.
    pub fn local(&self) -> Option<&'static [&'static str]> {
        match self.hooks {
            Hooks::Json { local, .. } => local,
            Hooks::Scripts { .. } | Hooks::Plugin { .. } => None,
        }
    }

    /// Whether `--local` has a file to write.
    pub fn has_local(&self) -> bool {
        self.local().is_some()
    }
}

/// A file (or directory) under the project, or under the home with `--user`.
#[derive(Clone, Copy, Debug)]
pub struct Place {
    /// Its path under the project; empty: the agent reads no project file, so the home's
    /// (`user`) is written with or without `--user`.
    pub project: &'static [&'static str],
    /// Its path under the home with `--user`; `None`: the project's even then.
    pub user: Option<&'static [&'static str]>,
    /// The agent's environment variables that move the home's path, the first one set (and
    /// not blank) winning, as the agent itself reads them.
    pub moved_by: &'static [HomeVar],
}

/// An environment variable of an agent's that moves a path of the home elsewhere: its value
/// stands for the first `parts` parts of [`Place::user`] (1: the agent's directory, as
/// `COPILOT_HOME` stands for `~/.copilot`; all of them: the file itself).
#[derive(Clone, Copy, Debug)]
pub struct HomeVar {
    pub name: &'static str,
    pub parts: usize,
}

impl HomeVar {
    /// A variable naming the agent's directory, the first part of the home's path.
    pub const fn dir(name: &'static str) -> HomeVar {
        HomeVar { name, parts: 1 }
    }

    /// A variable naming the path of the first `parts` parts.
    pub const fn path(name: &'static str, parts: usize) -> HomeVar {
        HomeVar { name, parts }
    }
}

impl Place {
    /// The same path under the project and, with `--user`, under the home.
    pub const fn both(parts: &'static [&'static str]) -> Place {
        Place {
            project: parts,
            user: Some(parts),
            moved_by: &[],
        }
    }

    /// A file the agent reads from the home only, for every project.
    pub const fn home(parts: &'static [&'static str]) -> Place {
        Place {
            project: &[],
            user: Some(parts),
            moved_by: &[],
        }
    }

    /// The project's path, and the home's with `--user` (not moved).
    pub const fn new(project: &'static [&'static str], user: &'static [&'static str]) -> Place {
        Place {
            project,
            user: Some(user),
            moved_by: &[],
        }
    }

    /// The same place, its home's path moved by `vars` (the first one set wins).
    pub const fn moved_by(self, vars: &'static [HomeVar]) -> Place {
        Place {
            moved_by: vars,
            ..self
        }
    }

    /// Whether the agent reads it from the home only.
    pub fn home_only(&self) -> bool {
        self.project.is_empty()
    }
}

/// Where and how the MCP server `hermes` (running `hermes mcp`) is registered.
#[derive(Debug)]
pub enum Server {
    /// Under `mcpServers` of a JSON file.
    Json {
        file: Place,
        /// The entry's `type`, for agents whose entries have one.
        kind: Option<&'static str>,
        /// Whether the entry lists its tools, all of them (`tools: ["*"]`).
        all_tools: bool,
        /// The path (keys from the file's top) of a list naming the variables the agent
        /// passes to its MCP servers and hooks through its own filter; hermes' own variables
        /// that are set go there.
        pass_env: Option<&'static [&'static str]>,
    },
    /// A `[mcp_servers.hermes]` table of a TOML file.
    Toml {
        file: Place,
        /// The key listing the variables the agent passes to its MCP servers (it passes
        /// only a fixed few otherwise): hermes' own variables that are set go there.
        env_list: Option<&'static str>,
        /// Other keys of the table, with their string values.
        settings: &'static [(&'static str, &'static str)],
    },
    /// `mcp_servers.hermes` of a YAML file in the agent's own home (`Place::project` is under
    /// it), with the absolute path of this hermes and its home in `env`.
    Yaml { file: Place },
}

/// Where and how the hooks are registered.
#[derive(Debug)]
pub enum Hooks {
    /// Under `hooks` of a JSON file: event → entries.
    Json {
        file: Place,
        /// The file `--local` writes instead (under the same root).
        local: Option<&'static [&'static str]>,
        layout: Layout,
        entry: Entry,
        /// The matcher of a tool event's group, if the agent's groups take one.
        tool_matcher: Option<&'static str>,
        /// Whether the file starts with `"version": 1`.
        versioned: bool,
        /// A list of the same file that must name a project's server for it to run; not
        /// written with `--user`.
        enable_server: Option<&'static str>,
    },
    /// One executable script per event, named after it, in a directory.
    Scripts {
        dir: Place,
        /// The agent's name in the script's comment.
        title: &'static str,
    },
    /// A plugin of the agent's, copied into a directory of its home (`Place::project` is under
    /// it) and enabled under `plugins.enabled` of the server's YAML file.
    Plugin {
        dir: Place,
        /// The plugin's name, as `plugins.enabled` lists it.
        name: &'static str,
    },
}

/// How an agent lists the hooks of one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// A list of groups, each with an optional `matcher` and a `hooks` list of entries.
    Groups,
    /// A flat list of entries.
    Flat,
}

/// The hook entry hermes writes when it has none for an event yet.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// Whether it starts with `"type": "command"`.
    pub typed: bool,
    /// The key the command goes under.
    pub command_key: &'static str,
    /// Whether it carries `"name": "hermes-SUBCOMMAND"`.
    pub named: bool,
    /// Its timeout's key and value, in the agent's unit.
    pub timeout: Option<(&'static str, u64)>,
}

impl Entry {
    /// `"type": "command"`, the command under `command_key`, and `timeout` (its key and value).
    pub const fn typed(command_key: &'static str, timeout: Option<(&'static str, u64)>) -> Entry {
        Entry {
            typed: true,
            command_key,
            named: false,
            timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{AGENTS, Hooks, Place, Server};

    /// Every variable that moves a home's path stands for some of that path's parts, never
    /// more than it has (a file's own variable: all of them).
    #[test]
    fn each_home_variable_stands_for_parts_of_its_path() {
        for agent in AGENTS {
            let server = match &agent.install.server {
                Server::Json { file, .. } | Server::Toml { file, .. } | Server::Yaml { file } => {
                    file
                }
            };
            let hooks = match &agent.install.hooks {
                Hooks::Json { file, .. } => file,
                Hooks::Scripts { dir, .. } | Hooks::Plugin { dir, .. } => dir,
            };
            for place in [server, hooks] {
                let Place { user, moved_by, .. } = place;
                for var in *moved_by {
                    let parts = user.map_or(0, <[_]>::len);
                    assert!(
                        (1..=parts).contains(&var.parts),
                        "{}: {} stands for {} of {parts} parts",
                        agent.name,
                        var.name,
                        var.parts
                    );
                }
            }
        }
    }
}
