//! `hermes hook install|uninstall NAME` for an agent whose hooks are a plugin of its own
//! ([`Hooks::Plugin`]) and whose MCP servers are a YAML file in its home ([`Server::Yaml`]):
//! the plugin's files are copied into the agent's home, with a `hermes.json` naming this
//! binary and hermes' home by absolute path, and the YAML file gets `mcp_servers.hermes` and
//! the plugin's name under `plugins.enabled`.
//!
//! The YAML is edited as text, so the person's comments, order and other entries stay: every
//! line hermes adds ends with [`MARK`], a line it had to change ends with `MARK, was: LINE`.
//! The file as it was before the first install is kept beside the plugin; uninstalling puts it
//! back byte for byte when the file is still what the install wrote, and otherwise removes the
//! marked lines (restoring changed ones), keeping what the person or the agent changed since.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use hermes_agents::{Agent, Hooks, Install, Server};

use super::merge::{self, Share};
use crate::services::exit::{Code, fail};
use crate::services::home::Home;
use crate::services::output;

/// The comment ending every line an install adds.
const MARK: &str = "# hermes hook install";
/// The plugin's files, as this repository holds them (`integrations/hermes-agent/`).
const FILES: &[(&str, &str)] = &[
    (
        "__init__.py",
        include_str!("../../../../../integrations/hermes-agent/hermes_delegation/__init__.py"),
    ),
    (
        "plugin.yaml",
        include_str!("../../../../../integrations/hermes-agent/hermes_delegation/plugin.yaml"),
    ),
];
/// The config as it was before the first install (`absent` when there was none).
const BEFORE: &str = "config.yaml.before-hermes";
/// The config as the install left it.
const AFTER: &str = "config.yaml.after-hermes";

/// Whether `agent` installs as a plugin.
pub fn is_plugin(agent: &Agent) -> bool {
    matches!(agent.install.hooks, Hooks::Plugin { .. })
}

/// The agent's home: `--agent-home`, else `~/.hermes` (the agent's default; hermes' own
/// `HERMES_HOME` is not the agent's).
pub fn agent_home(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(dir) = flag {
        return Ok(std::path::absolute(dir)?);
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .ok_or_else(|| fail(Code::Usage, "HOME is not set: pass --agent-home DIR"))?;
    Ok(PathBuf::from(home).join(".hermes"))
}

/// Where the YAML file and the plugin's directory are under `home`.
pub fn paths(install: &Install, home: &Path) -> (PathBuf, PathBuf) {
    let join = |parts: &[&str]| parts.iter().fold(home.to_owned(), |p, part| p.join(part));
    let file = match &install.server {
        Server::Yaml { file } => join(file.project),
        _ => join(&["config.yaml"]),
    };
    let dir = match &install.hooks {
        Hooks::Plugin { dir, .. } => join(dir.project),
        _ => join(&["plugins"]),
    };
    (file, dir)
}

fn plugin_name(agent: &Agent) -> &'static str {
    match agent.install.hooks {
        Hooks::Plugin { name, .. } => name,
        _ => "",
    }
}

/// Installs `agent`'s plugin and MCP server into its home `home`.
pub fn install(agent: &Agent, home: &Path, print: bool) -> anyhow::Result<Code> {
    let program = std::env::current_exe().context("cannot find the hermes executable")?;
    let ours = Home::load()?.dir;
    let ours = std::path::absolute(&ours).unwrap_or(ours);
    let shared = if same_dir(home, &ours) {
        format!(
            "note: hermes and {} share the home {} (an older hermes made its home there): run `hermes home migrate` to move hermes' files to a home of its own, then install again\n",
            agent.title,
            home.display()
        )
    } else {
        String::new()
    };
    let (file, dir) = paths(&agent.install, home);
    let was = merge::read_text(&file)?;
    let existed = file.exists();
    let clean = strip(&was);
    let text = with_entries(
        &clean,
        &program.display().to_string(),
        &ours.display().to_string(),
        plugin_name(agent),
    )
    .map_err(|why| fail(Code::Usage, format!("{}: {why}", file.display())))?;
    let settings = serde_json::to_string_pretty(&serde_json::json!({
        "program": program.display().to_string(),
        "home": ours.display().to_string(),
    }))? + "\n";
    if print {
        output::print(&format!(
            "# {}\n{text}# {} (hermes.json)\n{settings}",
            file.display(),
            dir.display()
        ))?;
        return Ok(Code::Ok);
    }
    for (name, body) in FILES {
        merge::write_text(&dir.join(name), body, Share::Private)?;
    }
    merge::write_text(&dir.join("hermes.json"), &settings, Share::Private)?;
    if !dir.join(BEFORE).exists() {
        let before = if existed { was.clone() } else { String::new() };
        merge::write_text(&dir.join(BEFORE), &before, Share::Private)?;
        if !existed {
            merge::write_text(&dir.join("config.yaml.absent"), "", Share::Private)?;
        }
    }
    if text != was {
        merge::write_text(&file, &text, Share::Private)?;
    }
    merge::write_text(&dir.join(AFTER), &text, Share::Private)?;
    output::print(&format!(
        "registered the MCP server `hermes` and enabled the plugin `{}` in {}, the plugin in {}\n{}\n{shared}",
        plugin_name(agent),
        file.display(),
        dir.display(),
        agent.install.advice
    ))?;
    Ok(Code::Ok)
}

/// Removes what [`install`] wrote: the YAML file as it was, the plugin's directory gone.
pub fn uninstall(agent: &Agent, home: &Path) -> anyhow::Result<Code> {
    let (file, dir) = paths(&agent.install, home);
    let now = merge::read_text(&file)?;
    let after = std::fs::read_to_string(dir.join(AFTER)).ok();
    let before = std::fs::read_to_string(dir.join(BEFORE)).ok();
    match (after, before) {
        (Some(after), Some(before)) if after == now => {
            if dir.join("config.yaml.absent").exists() {
                std::fs::remove_file(&file)
                    .with_context(|| format!("cannot remove {}", file.display()))?;
            } else {
                merge::write_text(&file, &before, Share::Private)?;
            }
        }
        _ if now.contains(MARK) => merge::write_text(&file, &strip(&now), Share::Private)?,
        _ => {}
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir)
            .with_context(|| format!("cannot remove {}", dir.display()))?;
    }
    output::print(&format!(
        "removed the MCP server `hermes` and the plugin `{}` from {}\n",
        plugin_name(agent),
        file.display()
    ))?;
    Ok(Code::Ok)
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// `text` without the lines an install added, the lines it changed as they were.
pub fn strip(text: &str) -> String {
    let was = format!("{MARK}, was: ");
    let mut out = String::new();
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        if let Some(at) = body.find(&was) {
            let indent = &body[..body.len() - body.trim_start().len()];
            out.push_str(indent);
            out.push_str(&body[at + was.len()..]);
            if line.ends_with('\n') {
                out.push('\n');
            }
        } else if !body.trim_end().ends_with(MARK) {
            out.push_str(line);
        }
    }
    out
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

fn is_content(line: &str) -> bool {
    let t = line.trim();
    !t.is_empty() && !t.starts_with('#')
}

/// The value after `key:` on a top-level (`indent`) line, if `line` is that key's.
fn value_of<'a>(line: &'a str, key: &str, indent: usize) -> Option<&'a str> {
    if indent_of(line) != indent {
        return None;
    }
    let rest = line.trim_start().strip_prefix(key)?.strip_prefix(':')?;
    let rest = match rest.find(" #") {
        Some(at) => &rest[..at],
        None => rest,
    };
    Some(rest.trim())
}

fn empty_value(v: &str) -> bool {
    matches!(v, "" | "{}" | "null" | "~")
}

/// `text` with `mcp_servers.hermes` and `plugins.enabled` listing `plugin`.
pub fn with_entries(text: &str, program: &str, home: &str, plugin: &str) -> Result<String, String> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    add_server(&mut lines, program, home)?;
    enable_plugin(&mut lines, plugin)?;
    let mut out = lines.join("\n");
    out.push('\n');
    Ok(out)
}

/// A top-level key's line and its value; a line it changed keeps the original.
fn open_key(lines: &mut [String], key: &str) -> Result<Option<usize>, String> {
    let Some(at) = lines.iter().position(|l| value_of(l, key, 0).is_some()) else {
        return Ok(None);
    };
    let value = value_of(&lines[at], key, 0).unwrap_or_default();
    if !empty_value(value) {
        return Err(format!(
            "{key} is written inline; write it as a block to install"
        ));
    }
    if !value.is_empty() {
        let orig = lines[at].clone();
        lines[at] = format!("{key}:  {MARK}, was: {orig}");
    }
    Ok(Some(at))
}

/// Adds `mcp_servers.hermes`, running `program mcp` with `home` as its `HERMES_HOME`.
fn add_server(lines: &mut Vec<String>, program: &str, home: &str) -> Result<(), String> {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let server = |pad: &str| {
        vec![
            format!("{pad}hermes:  {MARK}"),
            format!("{pad}  command: {}  {MARK}", q(program)),
            format!("{pad}  args: [\"mcp\"]  {MARK}"),
            format!("{pad}  env:  {MARK}"),
            format!("{pad}    HERMES_HOME: {}  {MARK}", q(home)),
            format!("{pad}  enabled: true  {MARK}"),
        ]
    };
    match open_key(lines, "mcp_servers")? {
        Some(at) => {
            let pad = lines[at + 1..]
                .iter()
                .find(|l| is_content(l))
                .map(|l| indent_of(l))
                .filter(|n| *n > 0)
                .unwrap_or(2);
            lines.splice(at + 1..at + 1, server(&" ".repeat(pad)));
        }
        None => {
            lines.push(format!("mcp_servers:  {MARK}"));
            lines.extend(server("  "));
        }
    }
    Ok(())
}

/// Lists `plugin` under `plugins.enabled`.
fn enable_plugin(lines: &mut Vec<String>, plugin: &str) -> Result<(), String> {
    let item = |pad: usize| format!("{}- {plugin}  {MARK}", " ".repeat(pad));
    let Some(at) = open_key(lines, "plugins")? else {
        lines.push(format!("plugins:  {MARK}"));
        lines.push(format!("  enabled:  {MARK}"));
        lines.push(item(4));
        return Ok(());
    };
    let end = lines[at + 1..]
        .iter()
        .position(|l| is_content(l) && indent_of(l) == 0)
        .map_or(lines.len(), |n| at + 1 + n);
    let child = lines[at + 1..end]
        .iter()
        .find(|l| is_content(l))
        .map_or(2, |l| indent_of(l));
    let pad = " ".repeat(child);
    let Some(e) = (at + 1..end).find(|i| value_of(&lines[*i], "enabled", child).is_some()) else {
        lines.splice(
            at + 1..at + 1,
            [format!("{pad}enabled:  {MARK}"), item(child + 2)],
        );
        return Ok(());
    };
    let value = value_of(&lines[e], "enabled", child)
        .unwrap_or_default()
        .to_owned();
    let orig = lines[e].trim_start().to_owned();
    if value.is_empty() {
        let listed = lines[e + 1..end]
            .iter()
            .any(|l| l.trim().strip_prefix('-').map(str::trim) == Some(plugin));
        if !listed {
            let at_pad = lines[e + 1..end]
                .iter()
                .find(|l| is_content(l))
                .filter(|l| l.trim_start().starts_with('-'))
                .map_or(child + 2, |l| indent_of(l));
            lines.insert(e + 1, item(at_pad));
        }
    } else if empty_value(&value) || value == "[]" {
        lines[e] = format!("{pad}enabled:  {MARK}, was: {orig}");
        lines.insert(e + 1, item(child + 2));
    } else if let Some(inner) = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
        if !inner.split(',').any(|w| w.trim() == plugin) {
            lines[e] = format!("{pad}enabled: [{inner}, {plugin}]  {MARK}, was: {orig}");
        }
    } else {
        return Err("plugins.enabled is not a list".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "/opt/hermes";
    const H: &str = "/home/me/.hermes";

    #[test]
    fn entries_go_into_the_persons_file_and_come_out_byte_for_byte() {
        for text in [
            "",
            "# mine\nmodel:\n  default: x\n",
            "mcp_servers:\n  other:\n    command: x  # keep\nplugins:\n  enabled:\n  - a\n",
            "mcp_servers: {}\nplugins:\n  disabled: [b]\n  enabled: []\n",
            "plugins:\n    enabled: [a, b]\nmodel: m\n",
            "plugins: {}\n",
        ] {
            let with = with_entries(text, P, H, "hermes_delegation").expect(text);
            assert!(with.contains("    command: \"/opt/hermes\""), "{with}");
            assert!(with.contains("hermes_delegation"), "{with}");
            assert_eq!(
                strip(&with),
                if text.is_empty() { "" } else { text },
                "{with}"
            );
            // Idempotent: a second install over the stripped text writes the same.
            let again = with_entries(&strip(&with), P, H, "hermes_delegation").expect(text);
            assert_eq!(again, with);
        }
        assert!(with_entries("mcp_servers: {a: 1}\n", P, H, "x").is_err());
    }
}
