//! `hermes hook uninstall NAME`: takes out of an agent's files what `hook install` put there,
//! for every agent, from the same places (`--user`, `--local` as for the install):
//!
//! - only hermes' entries go: the server named `hermes`, hooks whose command runs
//!   `hermes hook …` (wherever the binary is), `hermes` in a list that enables project servers,
//!   hermes' hook scripts, hermes' variables in a list of those the agent passes to its
//!   servers; everything else stays as it was, in its order;
//! - a list or object that only hermes' entries filled, left empty, goes with them, and a file
//!   left with nothing in it (a directory of scripts left empty) is removed;
//! - a file that holds nothing of hermes' is not touched at all.
//!
//! An agent whose hooks are a plugin of its own is uninstalled by `plugin.rs`.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use hermes_agents::{Agent, Hooks, Layout, Place, Server};

use super::hermes_variables;
use super::install::{InstallOptions, place_path};
use super::merge::{self, Doc, File};
use crate::services::exit::Code;
use crate::services::output;

/// The name hermes' MCP server is registered under.
const SERVER: &str = "hermes";

/// Removes `agent`'s MCP server and hooks from the files `options` names, and says what it did.
pub fn uninstall(agent: &Agent, options: &InstallOptions) -> anyhow::Result<Code> {
    let share = options.share();
    // Directories left empty are removed up to here, never above.
    let root = if options.user {
        options.home_root()?
    } else {
        options.project.clone()
    };
    let mut touched: Vec<PathBuf> = Vec::new();
    let mut note = |path: &Path, changed: bool| {
        if changed && !touched.iter().any(|p| p == path) {
            touched.push(path.to_owned());
        }
    };
    let hooks_path = match &agent.install.hooks {
        Hooks::Json { file, local, .. } => match local {
            Some(parts) if options.local => place_path(&Place::both(parts), options)?,
            _ => place_path(file, options)?,
        },
        Hooks::Scripts { dir, .. } => place_path(dir, options)?,
        Hooks::Plugin { .. } => anyhow::bail!("internal error: a plugin uninstalls by itself"),
    };
    // The hooks first: for agents whose hooks share the server's file, one read and one write.
    match &agent.install.hooks {
        Hooks::Json {
            layout,
            entry,
            enable_server,
            versioned,
            ..
        } => {
            let mut file = File::read(&hooks_path)?;
            let mut removed = remove_hooks(&mut file.doc, agent, *layout, entry.command_key);
            // The `version` install adds belongs to the hooks: it goes when they all went.
            if removed && *versioned && file.doc.get("hooks").is_none() {
                remove_key(&mut file.doc, "version");
            }
            if let Some(key) = enable_server {
                removed |= unlist(&mut file.doc, key, SERVER);
            }
            if same_file(&agent.install.server, options, &hooks_path)? {
                removed |= remove_json_server(&mut file.doc, &agent.install.server);
            }
            if removed {
                note(&hooks_path, settle(&file, share, &root)?);
            }
        }
        Hooks::Scripts { .. } => note(&hooks_path, remove_scripts(agent, &hooks_path, &root)?),
        Hooks::Plugin { .. } => {}
    }
    if !options.local {
        match &agent.install.server {
            Server::Json { file, .. } => {
                let path = place_path(file, options)?;
                if path != hooks_path {
                    let mut file = File::read(&path)?;
                    if remove_json_server(&mut file.doc, &agent.install.server) {
                        note(&path, settle(&file, share, &root)?);
                    }
                }
            }
            // The table goes whole, with the keys install put in it.
            Server::Toml { file, .. } => {
                let path = place_path(file, options)?;
                note(&path, remove_toml_server(&path, share, &root)?);
            }
            Server::Yaml { .. } => {}
        }
    }
    let text = if touched.is_empty() {
        format!(
            "unchanged: nothing of hermes' is registered for {}\n",
            agent.name
        )
    } else {
        let places: Vec<String> = touched.iter().map(|p| p.display().to_string()).collect();
        format!(
            "removed the MCP server `{SERVER}` and the hooks of {} from {}\n",
            agent.name,
            hermes_agents::listed(places.iter().map(String::as_str), "and")
        )
    };
    output::print(&text)?;
    Ok(Code::Ok)
}

/// Whether the server of `server` lives in the file `path` (an agent whose settings hold both).
fn same_file(server: &Server, options: &InstallOptions, path: &Path) -> anyhow::Result<bool> {
    Ok(match server {
        Server::Json { file, .. } => !options.local && place_path(file, options)? == path,
        Server::Toml { .. } | Server::Yaml { .. } => false,
    })
}

/// Writes `file` back if it changed, or removes it when nothing is left in it (and its
/// directories below `root` left empty); returns whether it changed.
fn settle(file: &File, share: merge::Share, root: &Path) -> anyhow::Result<bool> {
    if !file.changed()? {
        return Ok(false);
    }
    if file.is_empty() {
        std::fs::remove_file(&file.path)
            .with_context(|| format!("cannot remove {}", file.path.display()))?;
        remove_empty_dirs(&file.path, root);
        return Ok(true);
    }
    file.write(share)
}

/// Removes the directory of `path` and its parents below `root` (the project, or the home)
/// that are left empty: the ones `install` made. `root` itself always stays.
fn remove_empty_dirs(path: &Path, root: &Path) {
    for dir in path.ancestors().skip(1) {
        // `remove_dir` refuses a directory that is not empty, which ends the walk.
        if !dir.starts_with(root) || dir == root || std::fs::remove_dir(dir).is_err() {
            break;
        }
    }
}

/// `mcpServers.hermes` removed (and `mcpServers` with it when it is left empty), and hermes'
/// variables from the list of those the agent passes (`pass_env`); returns whether there was
/// any of it.
fn remove_json_server(doc: &mut Doc, server: &Server) -> bool {
    let mut removed = false;
    if let Some(servers) = doc.get_mut("mcpServers") {
        removed = remove_key(servers, SERVER);
        if removed && is_empty_object(servers) {
            remove_key(doc, "mcpServers");
        }
    }
    if let Server::Json {
        pass_env: Some(keys),
        ..
    } = server
    {
        let ours: Vec<String> = hermes_variables().collect();
        removed |= unlist_at(doc, keys, &ours);
    }
    removed
}

/// Every one of `items` removed from the list at the object path `keys` of `doc`; a list or
/// an object left empty by that goes too. Returns whether any was listed.
fn unlist_at(doc: &mut Doc, keys: &[&str], items: &[String]) -> bool {
    let Some((key, rest)) = keys.split_first() else {
        return false;
    };
    let Some(inner) = doc.get_mut(key) else {
        return false;
    };
    let removed = match (rest.is_empty(), &mut *inner) {
        (true, Doc::Array(list)) => {
            let before = list.len();
            list.retain(|i| !i.as_str().is_some_and(|s| items.iter().any(|o| o == s)));
            list.len() != before
        }
        (true, _) => false,
        (false, _) => unlist_at(inner, rest, items),
    };
    let emptied = is_empty_object(inner) || matches!(inner, Doc::Array(list) if list.is_empty());
    if removed && emptied {
        remove_key(doc, key);
    }
    removed
}

/// `item` removed from the list at `key` (and the key when the list is left empty); returns
/// whether it was listed.
fn unlist(doc: &mut Doc, key: &str, item: &str) -> bool {
    let Some(Doc::Array(items)) = doc.get_mut(key) else {
        return false;
    };
    let before = items.len();
    items.retain(|i| i.as_str() != Some(item));
    let removed = items.len() != before;
    if removed && items.is_empty() {
        remove_key(doc, key);
    }
    removed
}

/// Every hook of hermes' removed from `hooks` of `doc`: an entry running `hermes hook
/// SUBCOMMAND` for one of the agent's events; a group, an event or `hooks` itself left empty
/// by that goes too. Returns whether there was any.
fn remove_hooks(doc: &mut Doc, agent: &Agent, layout: Layout, command_key: &str) -> bool {
    let Some(hooks) = doc.get_mut("hooks") else {
        return false;
    };
    let ours = |entry: &Doc| {
        entry
            .get(command_key)
            .and_then(Doc::as_str)
            .is_some_and(|c| {
                agent
                    .events
                    .iter()
                    .any(|e| merge::is_hermes_hook(c, e.command))
            })
    };
    let mut emptied = Vec::new();
    let mut removed = false;
    for event in agent.events {
        let Some(Doc::Array(items)) = hooks.get_mut(event.name) else {
            continue;
        };
        let before = items.len();
        match layout {
            Layout::Flat => items.retain(|e| !ours(e)),
            Layout::Groups => items.retain_mut(|group| {
                let Some(Doc::Array(list)) = group.get_mut("hooks") else {
                    return true;
                };
                let had = list.len();
                list.retain(|e| !ours(e));
                removed |= list.len() != had;
                !(list.is_empty() && had > 0)
            }),
        }
        removed |= items.len() != before;
        if items.is_empty() && before > 0 {
            emptied.push(event.name);
        }
    }
    for event in emptied {
        remove_key(hooks, event);
    }
    if removed && is_empty_object(hooks) {
        remove_key(doc, "hooks");
    }
    removed
}

/// Removes `key` from the object `doc`; returns whether it was there.
fn remove_key(doc: &mut Doc, key: &str) -> bool {
    let Doc::Object(entries) = doc else {
        return false;
    };
    let before = entries.len();
    entries.retain(|(k, _)| k != key);
    entries.len() != before
}

fn is_empty_object(doc: &Doc) -> bool {
    matches!(doc, Doc::Object(entries) if entries.is_empty())
}

/// `[mcp_servers.hermes]` removed from the TOML file at `path` (comments and layout of the
/// rest kept); the file removed when nothing is left. Returns whether it changed.
fn remove_toml_server(path: &Path, share: merge::Share, root: &Path) -> anyhow::Result<bool> {
    let was = merge::read_text(path)?;
    let Ok(mut doc) = was.parse::<toml_edit::DocumentMut>() else {
        return Err(merge::refuse(path, "the file", "is not TOML"));
    };
    let Some(servers) = doc
        .get_mut("mcp_servers")
        .and_then(toml_edit::Item::as_table_like_mut)
    else {
        return Ok(false);
    };
    if servers.remove(SERVER).is_none() {
        return Ok(false);
    }
    if servers.is_empty() {
        doc.remove("mcp_servers");
    }
    let text = doc.to_string();
    if text.trim().is_empty() {
        std::fs::remove_file(path).with_context(|| format!("cannot remove {}", path.display()))?;
        remove_empty_dirs(path, root);
    } else {
        merge::write_text(path, &text, share)?;
    }
    Ok(true)
}

/// Removes hermes' hook scripts from `dir` (a script of the user's under the same name stays),
/// and the directory when it is left empty. Returns whether anything was removed.
fn remove_scripts(agent: &Agent, dir: &Path, root: &Path) -> anyhow::Result<bool> {
    let mut removed = false;
    for event in agent.events {
        let path = dir.join(event.name);
        let text = merge::read_text(&path)?;
        if !text.is_empty() && merge::is_hermes_script(&text, event.command) {
            std::fs::remove_file(&path)
                .with_context(|| format!("cannot remove {}", path.display()))?;
            removed = true;
        }
    }
    if removed {
        remove_empty_dirs(&dir.join("-"), root);
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &[&str] = &["security", "redaction", "allowed"];

    fn doc(text: &str) -> Doc {
        serde_json::from_str(text).expect("JSON")
    }

    #[test]
    fn hermes_variables_leave_the_list_and_the_users_stay() {
        let ours: Vec<String> = hermes_variables().collect();
        let mut mine = doc(r#"{"security": {"redaction": {"allowed": ["MINE", "HERMES_HOME"]}}}"#);
        assert!(unlist_at(&mut mine, PATH, &ours));
        assert_eq!(
            mine,
            doc(r#"{"security": {"redaction": {"allowed": ["MINE"]}}}"#)
        );
        assert!(
            !unlist_at(&mut mine, PATH, &ours),
            "nothing of hermes' left"
        );
    }

    #[test]
    fn what_only_hermes_variables_filled_goes_with_them() {
        let ours: Vec<String> = hermes_variables().collect();
        let mut only = doc(
            r#"{"a": 1, "security": {"redaction": {"allowed": ["HERMES_HOME", "HERMES_HOST_IDLE_EXIT_SECONDS"]}}}"#,
        );
        assert!(unlist_at(&mut only, PATH, &ours));
        assert_eq!(only, doc(r#"{"a": 1}"#));
        let mut other =
            doc(r#"{"security": {"redaction": {"enabled": true, "allowed": ["HERMES_HOME"]}}}"#);
        assert!(unlist_at(&mut other, PATH, &ours));
        assert_eq!(
            other,
            doc(r#"{"security": {"redaction": {"enabled": true}}}"#)
        );
    }
}
