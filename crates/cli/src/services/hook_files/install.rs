//! `hermes hook install NAME`: registers `hermes mcp` and the hooks with an agent CLI, merged
//! into the files it reads. The agent's profile ([`Install`], in `hermes_agents`) says which
//! files and what goes in them; [`install`] is the one routine that reads them, merges
//! (`merge.rs`), prints or writes, and says what it did, for every agent.
//!
//! The command written is `hermes` (found on PATH), so a committed settings file works for
//! everyone; `--absolute` (or `--local`, for the uncommitted per-user file) writes this
//! binary's absolute path.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use hermes_agents::{Action, Entry, HookBoundary, HookEvent, Place};

use hermes_agents::{self as agents, Agent};

use super::merge::{self, Doc, File, Hook, Share};
use crate::args::HookInstallArgs;
use crate::services::exit::{Code, fail};
use crate::services::output;

/// What `hermes hook install NAME` was asked.
#[derive(Clone, Debug)]
pub struct InstallOptions {
    /// Print the snippets instead of writing them.
    pub print: bool,
    /// The project directory.
    pub project: std::path::PathBuf,
    /// Write the absolute path of this hermes rather than `hermes` (found on PATH).
    pub absolute: bool,
    /// Write into the agent's uncommitted, per-user project settings.
    pub local: bool,
    /// Write the agent's user-level configuration (under `home`) instead of the project's.
    pub user: bool,
    /// The user's home directory (`$HOME`), for `user`.
    pub home: Option<std::path::PathBuf>,
    /// Reads an environment variable that moves an agent's home files ([`Place::moved_by`]):
    /// `std::env::var_os`, or none in tests of other homes.
    pub env: fn(&str) -> Option<std::ffi::OsString>,
}

impl InstallOptions {
    /// Who the files written are for: the project's are committed and read by everyone
    /// working on it; the home's sit beside the agent's own private files.
    pub fn share(&self) -> Share {
        if self.user {
            Share::Private
        } else {
            Share::Project
        }
    }

    /// The home that `--user` places (and those an agent reads from the home only) are
    /// under.
    pub fn home_root(&self) -> anyhow::Result<std::path::PathBuf> {
        self.home.clone().ok_or_else(|| {
            fail(
                Code::Usage,
                "HOME is not set, so hermes cannot find your home directory",
            )
        })
    }
}

pub use hermes_agents::{Hooks, Install, Server};

/// The name hermes' MCP server is registered under, with every agent.
const SERVER: &str = "hermes";

/// Runs `hook install`.
pub fn run(args: &HookInstallArgs) -> anyhow::Result<Code> {
    let agent = known(&args.agent)?;
    if super::plugin::is_plugin(agent) {
        let home = super::plugin::agent_home(args.agent_home.as_deref())?;
        return super::plugin::install(agent, &home, args.print);
    }
    install(agent, &options(agent, args)?)
}

/// What `args` ask of `agent`'s files, checked.
fn options(agent: &Agent, args: &HookInstallArgs) -> anyhow::Result<InstallOptions> {
    if args.local && !agent.install.has_local() {
        return Err(fail(
            Code::Usage,
            format!(
                "--local writes {}; {} has no such file (use --user for its user-level configuration)",
                local_files(),
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
    Ok(InstallOptions {
        print: args.print,
        project,
        absolute: args.absolute || args.local,
        local: args.local,
        user: args.user,
        home: std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from),
        env: |name| std::env::var_os(name),
    })
}

/// Runs `hook uninstall`.
pub fn uninstall(args: &HookInstallArgs) -> anyhow::Result<Code> {
    let agent = known(&args.agent)?;
    if super::plugin::is_plugin(agent) {
        let home = super::plugin::agent_home(args.agent_home.as_deref())?;
        return super::plugin::uninstall(agent, &home);
    }
    if args.print {
        return Err(fail(
            Code::Usage,
            "--print: hook uninstall writes nothing it could print; run it without --print",
        ));
    }
    super::uninstall::uninstall(agent, &options(agent, args)?)
}

/// The agent called `name`, or a usage error listing the known ones.
fn known(name: &str) -> anyhow::Result<&'static Agent> {
    agents::find(name).ok_or_else(|| {
        fail(
            Code::Usage,
            format!(
                "unknown agent {name:?}; hermes knows {}",
                hermes_agents::names("")
            ),
        )
    })
}

/// The files `--local` writes, for prose (`Title's path`, for each agent that has one).
pub fn local_files() -> String {
    hermes_agents::listed(
        agents::AGENTS
            .iter()
            .filter_map(|a| Some((a.title, a.install.local()?)))
            .map(|(title, parts)| format!("{title}'s {}", parts.join("/")))
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str),
        "or",
    )
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

/// Where the MCP server and the hooks go for `options`: the server's file, and the hooks'
/// file (or directory of scripts). `hermes doctor` looks there.
pub fn paths(install: &Install, options: &InstallOptions) -> anyhow::Result<(PathBuf, PathBuf)> {
    // An agent configured in a home of its own: that home (its default, under `$HOME`).
    if matches!(install.server, Server::Yaml { .. }) {
        let home = options
            .home
            .as_ref()
            .ok_or_else(|| fail(Code::Usage, "HOME is not set"))?;
        return Ok(super::plugin::paths(install, &home.join(".hermes")));
    }
    let server = match &install.server {
        Server::Json { file, .. } | Server::Toml { file, .. } | Server::Yaml { file } => {
            place_path(file, options)?
        }
    };
    let hooks = match &install.hooks {
        Hooks::Json { file, .. } => place_path(file, options)?,
        Hooks::Scripts { dir, .. } | Hooks::Plugin { dir, .. } => place_path(dir, options)?,
    };
    Ok((server, hooks))
}

/// Where `place` is for `options`: in the home, where the agent's own variables (`moved_by`)
/// put it when one is set, as the agent will look there.
pub(super) fn place_path(place: &Place, options: &InstallOptions) -> anyhow::Result<PathBuf> {
    let (root, parts) = match place.user {
        Some(parts) if options.user || place.home_only() => {
            let moved = place.moved_by.iter().find_map(|var| {
                Some((set_path((options.env)(var.name)?)?, parts.get(var.parts..)?))
            });
            match moved {
                Some(moved) => moved,
                None => (options.home_root()?, parts),
            }
        }
        _ => (options.project.clone(), place.project),
    };
    Ok(parts.iter().fold(root, |path, part| path.join(part)))
}

/// The path an environment variable's `value` names, unless it is blank (which the agents
/// ignore too).
fn set_path(value: std::ffi::OsString) -> Option<PathBuf> {
    let path = match value.to_str() {
        Some(text) => PathBuf::from(text.trim()),
        None => PathBuf::from(value),
    };
    (!path.as_os_str().is_empty()).then_some(path)
}

/// The hook entry `entry` describes for `event`, running `command` (its `hermes hook
/// SUBCOMMAND`).
fn build_entry(entry: &Entry, command: &str, event: &HookEvent) -> Doc {
    let mut extra = Vec::new();
    if entry.named {
        extra.push(("name", Doc::string(format!("hermes-{}", event.command))));
    }
    if let Some((key, value)) = entry.timeout {
        let value = event.max_timeout.map_or(value, |max| value.min(max));
        extra.push((key, merge::number(value)));
    }
    if entry.typed {
        return merge::command_entry(entry.command_key, command, &extra);
    }
    let mut doc = Doc::object();
    doc.set(entry.command_key, Doc::string(command));
    for (key, value) in extra {
        doc.set(key, value);
    }
    doc
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
    /// Reads the server's file of `server` for `options` and merges the entry running
    /// `program mcp` into it.
    fn open(server: &Server, options: &InstallOptions, program: &str) -> anyhow::Result<Self> {
        Ok(match server {
            Server::Json {
                file,
                kind,
                all_tools,
                pass_env,
            } => {
                let mut file = File::open(&place_path(file, options)?, options.print)?;
                let servers = merge::object_at(&mut file.doc, "mcpServers", &file.path)?;
                let entry =
                    merge::upsert_server(servers, SERVER, program, &["mcp"], *kind, &file.path)?;
                if *all_tools && entry.get("tools").is_none() {
                    entry.set("tools", Doc::Array(vec![Doc::string("*")]));
                }
                if let Some(keys) = pass_env {
                    merge::ensure_listed_at(
                        &mut file.doc,
                        keys,
                        &super::own_variables(),
                        &file.path,
                    )?;
                }
                ServerFile::Json(file)
            }
            Server::Yaml { .. } => {
                anyhow::bail!("internal error: a YAML server installs with its plugin")
            }
            Server::Toml {
                file,
                env_list,
                settings,
            } => {
                let path = place_path(file, options)?;
                let was = if options.print {
                    String::new()
                } else {
                    merge::read_text(&path)?
                };
                let entry = merge::TomlServer {
                    program,
                    env_list: env_list.map(|key| (key, super::own_variables())),
                    settings,
                };
                let text = merge::with_toml_server(&was, SERVER, &entry, &path)?;
                ServerFile::Toml { path, was, text }
            }
        })
    }

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

    /// Writes it if it changed; returns whether it did.
    fn write(&self, share: Share) -> anyhow::Result<bool> {
        match self {
            ServerFile::Json(file) => file.write(share),
            ServerFile::Toml { path, was, text } if text != was => {
                merge::write_text(path, text, share)?;
                Ok(true)
            }
            ServerFile::Toml { .. } => Ok(false),
        }
    }
}

/// What an install is about to write besides the server's file.
struct Planned {
    /// `hooks` or `hook scripts`, for the report.
    what: &'static str,
    /// The hooks' file or the scripts' directory.
    place: PathBuf,
    /// The hooks' own file, when it is not the server's.
    file: Option<File>,
    /// Each script: its path, its subcommand, its text.
    scripts: Vec<(PathBuf, &'static str, String)>,
    /// What `--print` shows: a label and a text, the server's file first.
    shown: Vec<(String, String)>,
}

/// Writes (or, with `--print`, prints) `agent`'s MCP server and hooks, merged into the
/// files already there, and says what it did.
pub fn install(agent: &Agent, options: &InstallOptions) -> anyhow::Result<Code> {
    let program = program(options.absolute)?;
    let quoted = quoted(&program)?;
    let spec = &agent.install;
    let mut server = ServerFile::open(&spec.server, options, &program)?;
    let planned = match &spec.hooks {
        Hooks::Json { .. } => plan_json_hooks(agent, options, &quoted, &mut server)?,
        Hooks::Scripts { dir, title } => {
            plan_scripts(agent, &place_path(dir, options)?, title, &quoted, &server)?
        }
        Hooks::Plugin { .. } => anyhow::bail!("internal error: a plugin installs by itself"),
    };
    if options.print {
        let mut text = String::new();
        for (label, snippet) in &planned.shown {
            text.push_str(&format!("# {label}\n{snippet}"));
        }
        text.push_str(&spec.print_note.replace("{quoted}", &quoted));
        output::print(&text)?;
        return Ok(Code::Ok);
    }
    let changed = write(agent, &server, &planned, options.share())?;
    report(agent, options, &quoted, &server, &planned, changed)
}

/// Merges `agent`'s hooks into their JSON file (the server's, when it is the same file).
fn plan_json_hooks(
    agent: &Agent,
    options: &InstallOptions,
    quoted: &str,
    server: &mut ServerFile,
) -> anyhow::Result<Planned> {
    let Hooks::Json {
        file,
        local,
        layout,
        entry,
        tool_matcher,
        versioned,
        enable_server,
    } = &agent.install.hooks
    else {
        anyhow::bail!("internal error: {} has no JSON hooks", agent.name);
    };
    let mut shown = vec![(server.path().display().to_string(), server.text()?)];
    let path = match local {
        Some(parts) if options.local => place_path(&Place::both(parts), options)?,
        _ => place_path(file, options)?,
    };
    // One file for both (an agent's settings holding its servers): the hooks go into the
    // server's document.
    let mut own = match &*server {
        ServerFile::Json(f) if f.path == path => None,
        _ => Some(File::open(&path, options.print)?),
    };
    let target = match (&mut own, server) {
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
    let hooks: Vec<Hook<'_>> = agent
        .events
        .iter()
        .map(|e| {
            let command = format!("{quoted} hook {} --agent {}", e.command, agent.name);
            Hook {
                event: e.name,
                subcommand: e.command,
                entry: build_entry(entry, &command, e),
                command,
                matcher: match e.action {
                    Action::Deliver(HookBoundary::Tool) => *tool_matcher,
                    // Only the call that starts a subagent.
                    Action::EnterSubagent(tool) => Some(tool.name),
                    _ => None,
                },
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
    Ok(Planned {
        what: "hooks",
        place: path,
        file: own,
        scripts: Vec::new(),
        shown,
    })
}

/// One executable script per event of `agent`, in `dir`.
fn plan_scripts(
    agent: &Agent,
    dir: &Path,
    title: &str,
    quoted: &str,
    server: &ServerFile,
) -> anyhow::Result<Planned> {
    let mut shown = vec![(server.path().display().to_string(), server.text()?)];
    let scripts: Vec<(PathBuf, &'static str, String)> = agent
        .events
        .iter()
        .map(|e| {
            let body = format!(
                "#!/bin/sh\n# Written by `hermes hook install {name}`: hands hermes' background results to {title}.\nexec {quoted} hook {} --agent {name}\n",
                e.command,
                name = agent.name,
            );
            (dir.join(e.name), e.command, body)
        })
        .collect();
    for (path, _, body) in &scripts {
        shown.push((format!("{} (executable)", path.display()), body.clone()));
    }
    Ok(Planned {
        what: "hook scripts",
        place: dir.to_owned(),
        file: None,
        scripts,
        shown,
    })
}

/// Writes what was planned; returns whether any file changed. A script of the user's under
/// one of the scripts' names cannot be merged: refuses before writing anything.
fn write(
    agent: &Agent,
    server: &ServerFile,
    planned: &Planned,
    share: Share,
) -> anyhow::Result<bool> {
    let mut current = Vec::new();
    for (path, subcommand, _) in &planned.scripts {
        let text = merge::read_text(path)?;
        if !text.is_empty() && !merge::is_hermes_script(&text, subcommand) {
            return Err(fail(
                Code::Usage,
                format!(
                    "{}: a hook script of yours is already there; hermes cannot merge into it and wrote nothing (run `hermes hook {subcommand} --agent {name}` from it, or use hermes hook install {name} --print)",
                    path.display(),
                    name = agent.name,
                ),
            ));
        }
        current.push(text);
    }
    let mut changed = server.write(share)?;
    if let Some(file) = &planned.file {
        changed |= file.write(share)?;
    }
    for ((path, _, body), text) in planned.scripts.iter().zip(&current) {
        if text != body {
            merge::write_text(path, body, share)?;
            changed = true;
        }
        changed |= merge::make_executable(path)?;
    }
    Ok(changed)
}

/// Says what was written, and what the user does next.
fn report(
    agent: &Agent,
    options: &InstallOptions,
    quoted: &str,
    server: &ServerFile,
    planned: &Planned,
    changed: bool,
) -> anyhow::Result<Code> {
    let names: Vec<&str> = agent.events.iter().map(|e| e.name).collect();
    let what = planned.what;
    let verb = if changed {
        "registered"
    } else {
        "unchanged: already registered"
    };
    let registered = if planned.file.is_none() && planned.scripts.is_empty() {
        format!(
            "{verb} the MCP server `{SERVER}` and the {what} {} in {}",
            names.join(", "),
            planned.place.display()
        )
    } else {
        format!(
            "{verb} the MCP server `{SERVER}` in {} and the {what} {} in {}",
            server.path().display(),
            names.join(", "),
            planned.place.display()
        )
    };
    let advice = agent
        .install
        .advice
        .replace("{project}", &options.project.display().to_string())
        .replace("{quoted}", quoted);
    let mut text = format!("{registered}\n{advice}\n");
    text.push_str(path_note(options.absolute));
    output::print(&text)?;
    Ok(Code::Ok)
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::{Path, PathBuf};

    use hermes_agents::{HomeVar, Place};

    use super::{InstallOptions, place_path};

    const PLACE: Place = Place::new(&["proj", "f.json"], &[".agent", "data", "f.json"])
        .moved_by(&[HomeVar::path("AGENT_FILE", 3), HomeVar::dir("AGENT_DIR")]);

    fn options(user: bool, env: fn(&str) -> Option<OsString>) -> InstallOptions {
        InstallOptions {
            print: true,
            project: "/project".into(),
            absolute: false,
            local: false,
            user,
            home: Some("/home/me".into()),
            env,
        }
    }

    fn at(user: bool, env: fn(&str) -> Option<OsString>) -> PathBuf {
        place_path(&PLACE, &options(user, env)).expect("a path")
    }

    /// The first variable set moves the home's path (for what it stands for); a blank one is
    /// unset; the project's path never moves.
    #[test]
    fn the_first_variable_set_moves_the_home_path() {
        let home = Path::new("/home/me/.agent/data/f.json");
        assert_eq!(at(true, |_| None), home);
        assert_eq!(
            at(true, |n| (n == "AGENT_DIR").then(|| " /moved ".into())),
            Path::new("/moved/data/f.json")
        );
        assert_eq!(
            at(true, |n| Some(format!("/{n}").into())),
            Path::new("/AGENT_FILE")
        );
        assert_eq!(
            at(true, |n| Some(
                if n == "AGENT_FILE" { "  " } else { "/d" }.into()
            )),
            Path::new("/d/data/f.json")
        );
        assert_eq!(
            at(false, |_| Some("/moved".into())),
            Path::new("/project/proj/f.json")
        );
    }
}
