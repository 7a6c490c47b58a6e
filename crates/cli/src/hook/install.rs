//! `hermes hook install NAME`: registers `hermes mcp` and the hooks with an agent CLI, merged
//! into the files it reads. The agent's profile ([`Install`]) says which files and what goes in
//! them; [`install`] is the one routine that reads them, merges (`merge.rs`), prints or writes,
//! and says what it did, for every agent.
//!
//! The command written is `hermes` (found on PATH), so a committed settings file works for
//! everyone; `--absolute` (or `--local`, for the uncommitted per-user file) writes this
//! binary's absolute path.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use hermes_formatter::Boundary;

use super::agents::{self, Action, InstallOptions, Profile};
use super::merge::{self, Doc, File, Hook};
use crate::args::HookInstallArgs;
use crate::services::exit::{Code, fail};
use crate::services::output;

pub use super::merge::Layout;

/// The name hermes' MCP server is registered under, with every agent.
const SERVER: &str = "hermes";

/// Runs `hook install`.
pub fn run(args: &HookInstallArgs) -> anyhow::Result<Code> {
    let Some(agent) = agents::find(&args.agent) else {
        let known: Vec<&str> = agents::AGENTS.iter().map(|a| a.name).collect();
        return Err(fail(
            Code::Usage,
            format!(
                "unknown agent {:?}; hermes knows {}",
                args.agent,
                known.join(", ")
            ),
        ));
    };
    if args.local && !agent.install.has_local() {
        return Err(fail(
            Code::Usage,
            format!(
                "--local writes Claude Code's .claude/settings.local.json; {} has no such file (use --user for its user-level configuration)",
                agent.name
            ),
        ));
    }
    let project = match &args.project {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("cannot find the current directory")?,
    };
    if !args.print && !project.is_dir() {
        return Err(fail(
            Code::Usage,
            format!("--project {}: not a directory", project.display()),
        ));
    }
    agent.install(&InstallOptions {
        print: args.print,
        project,
        absolute: args.absolute || args.local,
        local: args.local,
        user: args.user,
        home: std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from),
    })
}

/// The program the written commands start: `hermes`, or this binary's absolute path.
pub fn program(absolute: bool) -> anyhow::Result<String> {
    if !absolute {
        return Ok("hermes".to_owned());
    }
    let exe = std::env::current_exe().context("cannot find the hermes executable")?;
    Ok(exe.display().to_string())
}

/// `program` quoted for a shell command line.
pub fn quoted(program: &str) -> anyhow::Result<String> {
    shlex::try_quote(program)
        .map(std::borrow::Cow::into_owned)
        .map_err(|_| fail(Code::Usage, format!("cannot quote the path {program}")))
}

/// Whether `hermes` on PATH is a program (the default command needs it there).
pub fn on_path() -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| {
            let candidate = dir.join("hermes");
            std::fs::metadata(&candidate).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt as _;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        })
    })
}

/// The hint printed when the written command is `hermes` but no `hermes` is on PATH.
pub fn path_note(absolute: bool) -> &'static str {
    if absolute || on_path() {
        return "";
    }
    "note: `hermes` is not on PATH, so the agent cannot start it: put it there (cargo install --path crates/cli) or install again with --absolute (this binary's path)\n"
}

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
    /// Whether `--local` has a file to write (Claude's uncommitted settings).
    pub fn has_local(&self) -> bool {
        matches!(self.hooks, Hooks::Json { local: Some(_), .. })
    }

    /// Where the MCP server and the hooks go for `options`: the server's file, and the hooks'
    /// file (or directory of scripts). `hermes doctor` looks there.
    pub fn paths(&self, options: &InstallOptions) -> anyhow::Result<(PathBuf, PathBuf)> {
        let server = match &self.server {
            Server::Json { file, .. } | Server::Toml { file } => file.path(options)?,
        };
        let hooks = match &self.hooks {
            Hooks::Json { file, .. } => file.path(options)?,
            Hooks::Scripts { dir, .. } => dir.path(options)?,
        };
        Ok((server, hooks))
    }
}

/// A file (or directory) under the project, or under the home with `--user`.
#[derive(Clone, Copy, Debug)]
pub struct Place {
    /// Its path under the project.
    pub project: &'static [&'static str],
    /// Its path under the home with `--user`; `None`: the project's even then.
    pub user: Option<&'static [&'static str]>,
}

impl Place {
    /// The same path under the project and, with `--user`, under the home.
    pub const fn both(parts: &'static [&'static str]) -> Place {
        Place {
            project: parts,
            user: Some(parts),
        }
    }

    /// Where it is for `options`.
    fn path(&self, options: &InstallOptions) -> anyhow::Result<PathBuf> {
        let (root, parts) = match self.user {
            Some(parts) if options.user => (options.root()?, parts),
            _ => (options.project.clone(), self.project),
        };
        Ok(parts.iter().fold(root, |path, part| path.join(part)))
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
    },
    /// A `[mcp_servers.hermes]` table of a TOML file (Codex's `config.toml`).
    Toml { file: Place },
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
        /// A list of the same file that must name a project's server for it to run (Claude's
        /// `enabledMcpjsonServers`); not written with `--user`.
        enable_server: Option<&'static str>,
    },
    /// One executable script per event, named after it, in a directory.
    Scripts {
        dir: Place,
        /// The agent's name in the script's comment.
        title: &'static str,
    },
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

    fn build(&self, command: &str, subcommand: &str) -> Doc {
        let mut extra = Vec::new();
        if self.named {
            extra.push(("name", Doc::string(format!("hermes-{subcommand}"))));
        }
        if let Some((key, value)) = self.timeout {
            extra.push((key, merge::number(value)));
        }
        if self.typed {
            return merge::command_entry(self.command_key, command, &extra);
        }
        let mut entry = Doc::object();
        entry.set(self.command_key, Doc::string(command));
        for (key, value) in extra {
            entry.set(key, value);
        }
        entry
    }
}

/// The file the server is registered in, read and merged.
enum ServerFile {
    Json(File),
    Toml {
        path: PathBuf,
        was: String,
        text: String,
    },
}

impl ServerFile {
    fn path(&self) -> &Path {
        match self {
            ServerFile::Json(file) => &file.path,
            ServerFile::Toml { path, .. } => path,
        }
    }

    fn text(&self) -> anyhow::Result<String> {
        match self {
            ServerFile::Json(file) => file.text(),
            ServerFile::Toml { text, .. } => Ok(text.clone()),
        }
    }

    fn write(&self) -> anyhow::Result<()> {
        match self {
            ServerFile::Json(file) => file.write(),
            ServerFile::Toml { path, was, text } if text != was => merge::write_text(path, text),
            ServerFile::Toml { .. } => Ok(()),
        }
    }
}

/// Writes (or, with `--print`, prints) `profile`'s MCP server and hooks, merged into the
/// files already there, and says what it did.
pub fn install(profile: &Profile, options: &InstallOptions) -> anyhow::Result<Code> {
    let program = program(options.absolute)?;
    let quoted = quoted(&program)?;
    let spec = &profile.install;
    let mut server = match &spec.server {
        Server::Json {
            file,
            kind,
            all_tools,
        } => {
            let mut file = File::open(&file.path(options)?, options.print)?;
            let servers = merge::object_at(&mut file.doc, "mcpServers", &file.path)?;
            let entry =
                merge::upsert_server(servers, SERVER, &program, &["mcp"], *kind, &file.path)?;
            if *all_tools && entry.get("tools").is_none() {
                entry.set("tools", Doc::Array(vec![Doc::string("*")]));
            }
            ServerFile::Json(file)
        }
        Server::Toml { file } => {
            let path = file.path(options)?;
            let was = if options.print {
                String::new()
            } else {
                merge::read_text(&path)?
            };
            let text = merge::with_toml_server(&was, SERVER, &program, &path)?;
            ServerFile::Toml { path, was, text }
        }
    };
    let names: Vec<&str> = profile.events.iter().map(|e| e.name).collect();
    let mut shown = vec![(server.path().display().to_string(), server.text()?)];
    let (what, place, hooks_file, scripts) = match &spec.hooks {
        Hooks::Json {
            file,
            local,
            layout,
            entry,
            tool_matcher,
            versioned,
            enable_server,
        } => {
            let path = match local {
                Some(parts) if options.local => Place::both(parts).path(options)?,
                _ => file.path(options)?,
            };
            // One file for both (Gemini's settings): the hooks go into the server's document.
            let mut own = match &server {
                ServerFile::Json(f) if f.path == path => None,
                _ => Some(File::open(&path, options.print)?),
            };
            let target = match (&mut own, &mut server) {
                (Some(file), _) | (None, ServerFile::Json(file)) => file,
                (None, ServerFile::Toml { path, .. }) => {
                    anyhow::bail!("internal error: {} is not a JSON file", path.display())
                }
            };
            if let Some(key) = enable_server
                && !options.user
            {
                merge::ensure_listed(&mut target.doc, key, SERVER, &target.path)?;
            }
            if *versioned && target.doc.get("version").is_none() {
                target.doc.set("version", merge::number(1));
            }
            let hooks: Vec<Hook<'_>> = profile
                .events
                .iter()
                .map(|e| {
                    let command = format!("{quoted} hook {} --agent {}", e.command, profile.name);
                    Hook {
                        event: e.name,
                        subcommand: e.command,
                        entry: entry.build(&command, e.command),
                        command,
                        matcher: tool_matcher
                            .filter(|_| matches!(e.action, Action::Deliver(Boundary::Tool))),
                    }
                })
                .collect();
            let hooks_obj = merge::object_at(&mut target.doc, "hooks", &target.path)?;
            merge::upsert_hooks(hooks_obj, &hooks, *layout, entry.command_key, &target.path)?;
            let text = target.text()?;
            match &own {
                Some(_) => shown.push((path.display().to_string(), text)),
                None => shown[0].1 = text,
            }
            ("hooks", path, own, Vec::new())
        }
        Hooks::Scripts { dir, title } => {
            let dir = dir.path(options)?;
            let scripts: Vec<(PathBuf, &str, String)> = profile
                .events
                .iter()
                .map(|e| {
                    let body = format!(
                        "#!/bin/sh\n# Written by `hermes hook install {name}`: hands hermes' background results to {title}.\nexec {quoted} hook {} --agent {name}\n",
                        e.command,
                        name = profile.name,
                    );
                    (dir.join(e.name), e.command, body)
                })
                .collect();
            for (path, _, body) in &scripts {
                shown.push((format!("{} (executable)", path.display()), body.clone()));
            }
            ("hook scripts", dir, None, scripts)
        }
    };
    if options.print {
        let mut text = String::new();
        for (label, snippet) in &shown {
            text.push_str(&format!("# {label}\n{snippet}"));
        }
        text.push_str(&spec.print_note.replace("{quoted}", &quoted));
        output::print(&text)?;
        return Ok(Code::Ok);
    }
    // A script of the user's under one of these names cannot be merged: refuse before
    // writing anything.
    let mut current = Vec::new();
    for (path, subcommand, _) in &scripts {
        let text = merge::read_text(path)?;
        if !text.is_empty() && !merge::is_hermes_script(&text, subcommand) {
            return Err(fail(
                Code::Usage,
                format!(
                    "{}: a hook script of yours is already there; hermes cannot merge into it and wrote nothing (run `hermes hook {subcommand} --agent {name}` from it, or use hermes hook install {name} --print)",
                    path.display(),
                    name = profile.name,
                ),
            ));
        }
        current.push(text);
    }
    server.write()?;
    if let Some(file) = &hooks_file {
        file.write()?;
    }
    for ((path, _, body), text) in scripts.iter().zip(&current) {
        if text != body {
            merge::write_text(path, body)?;
        }
        merge::make_executable(path)?;
    }
    let registered = if hooks_file.is_none() && scripts.is_empty() {
        format!(
            "registered the MCP server `{SERVER}` and the {what} {} in {}",
            names.join(", "),
            place.display()
        )
    } else {
        format!(
            "registered the MCP server `{SERVER}` in {} and the {what} {} in {}",
            server.path().display(),
            names.join(", "),
            place.display()
        )
    };
    let advice = spec
        .advice
        .replace("{project}", &options.project.display().to_string())
        .replace("{quoted}", &quoted);
    let mut text = format!("{registered}\n{advice}\n");
    text.push_str(path_note(options.absolute));
    output::print(&text)?;
    Ok(Code::Ok)
}
