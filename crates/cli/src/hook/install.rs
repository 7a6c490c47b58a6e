//! `hermes hook install claude`: registers `hermes mcp` and the five hooks with Claude Code, in
//! a project's `.mcp.json` and `.claude/settings.json` (merged with what is there; running it
//! twice changes nothing), or prints both with `--print`.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::{Map, Value, json};

use crate::args::{AgentArg, HookInstallArgs};
use crate::exit::{Code, fail};
use crate::output;

/// Claude Code's hook events and the `hermes hook` subcommand each runs.
const HOOKS: [(&str, &str); 5] = [
    ("SessionStart", "session-start"),
    ("UserPromptSubmit", "user-prompt-submit"),
    ("PostToolUse", "post-tool-use"),
    ("Stop", "stop"),
    ("SessionEnd", "session-end"),
];

/// The name the MCP server is registered under.
const SERVER: &str = "hermes";

/// Runs `hook install`.
pub fn run(args: &HookInstallArgs) -> anyhow::Result<Code> {
    let AgentArg::Claude = args.agent;
    let exe = std::env::current_exe().context("cannot find the hermes executable")?;
    let exe = exe.display().to_string();
    let quoted = shlex::try_quote(&exe)
        .map_err(|_| fail(Code::Usage, format!("cannot quote the path {exe}")))?
        .into_owned();
    if args.print {
        let text = format!(
            "# .mcp.json (or: claude mcp add {SERVER} -- {quoted} mcp)\n{}\n\n# .claude/settings.json\n{}\n",
            pretty(&mcp_json(Value::Object(Map::new()), &exe))?,
            pretty(&settings_json(Value::Object(Map::new()), &quoted))?,
        );
        output::print(&text)?;
        return Ok(Code::Ok);
    }
    let project = match &args.project {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("cannot find the current directory")?,
    };
    if !project.is_dir() {
        return Err(fail(
            Code::Usage,
            format!("--project {}: not a directory", project.display()),
        ));
    }
    let mcp_path = project.join(".mcp.json");
    let settings_path = project.join(".claude").join("settings.json");
    let mcp = mcp_json(read_object(&mcp_path)?, &exe);
    let settings = settings_json(read_object(&settings_path)?, &quoted);
    write(&mcp_path, &mcp)?;
    std::fs::create_dir_all(project.join(".claude"))
        .with_context(|| format!("cannot create {}", project.join(".claude").display()))?;
    write(&settings_path, &settings)?;
    output::print(&format!(
        "registered the MCP server `{SERVER}` in {} and the hooks {} in {}\nstart claude in {} and approve the `{SERVER}` server if asked\n",
        mcp_path.display(),
        HOOKS.map(|(event, _)| event).join(", "),
        settings_path.display(),
        project.display(),
    ))?;
    Ok(Code::Ok)
}

/// `.mcp.json` with the hermes server in `mcpServers`.
fn mcp_json(mut root: Value, exe: &str) -> Value {
    let servers = entry(&mut root, "mcpServers");
    servers.insert(
        SERVER.to_owned(),
        json!({"type": "stdio", "command": exe, "args": ["mcp"]}),
    );
    root
}

/// `.claude/settings.json` with the five hooks (each added once) and the project's hermes
/// server enabled.
fn settings_json(mut root: Value, exe: &str) -> Value {
    entry(&mut root, "hooks");
    if let Value::Object(map) = &mut root {
        let list = map
            .entry("enabledMcpjsonServers")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = list
            && !list.iter().any(|v| v == SERVER)
        {
            list.push(Value::String(SERVER.to_owned()));
        }
    }
    let hooks = entry(&mut root, "hooks");
    for (event, sub) in HOOKS {
        let command = format!("{exe} hook {sub}");
        let groups = hooks
            .entry(event.to_owned())
            .or_insert_with(|| Value::Array(Vec::new()));
        let Value::Array(groups) = groups else {
            continue;
        };
        let present = groups.iter().any(|g| {
            g["hooks"].as_array().is_some_and(|hs| {
                hs.iter().any(|h| {
                    h["command"]
                        .as_str()
                        .is_some_and(|c| c.ends_with(&format!(" hook {sub}")))
                })
            })
        });
        if present {
            continue;
        }
        let mut group = Map::new();
        if event == "PostToolUse" {
            group.insert("matcher".into(), Value::String("*".into()));
        }
        group.insert(
            "hooks".into(),
            json!([{"type": "command", "command": command, "timeout": 10}]),
        );
        groups.push(Value::Object(group));
    }
    root
}

/// The object under `key` of `root` (made an object, created if missing).
fn entry<'a>(root: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !root.is_object() {
        *root = Value::Object(Map::new());
    }
    let Value::Object(map) = root else {
        unreachable!("made an object above")
    };
    let value = map
        .entry(key.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if !value.is_object() {
        *value = Value::Object(Map::new());
    }
    match value {
        Value::Object(inner) => inner,
        _ => unreachable!("made an object above"),
    }
}

fn read_object(path: &Path) -> anyhow::Result<Value> {
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim().is_empty() => Ok(Value::Object(Map::new())),
        Ok(text) => match serde_json::from_str::<Value>(&text) {
            Ok(v @ Value::Object(_)) => Ok(v),
            Ok(_) | Err(_) => Err(fail(
                Code::Usage,
                format!(
                    "{} is not a JSON object; fix it or use hermes hook install claude --print",
                    path.display()
                ),
            )),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Value::Object(Map::new())),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn pretty(value: &Value) -> anyhow::Result<String> {
    serde_json::to_string_pretty(value).context("cannot encode JSON")
}

fn write(path: &PathBuf, value: &Value) -> anyhow::Result<()> {
    let mut text = pretty(value)?;
    text.push('\n');
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installing_twice_adds_each_hook_once_and_keeps_other_settings() {
        let mine = json!({"model": "x", "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "other"}]}]}});
        let once = settings_json(mine, "/bin/hermes");
        let twice = settings_json(once.clone(), "/bin/hermes");
        assert_eq!(once, twice);
        assert_eq!(twice["model"], "x");
        assert_eq!(twice["hooks"]["Stop"].as_array().map(Vec::len), Some(2));
        assert_eq!(
            twice["hooks"]["PostToolUse"][0]["hooks"][0]["command"],
            "/bin/hermes hook post-tool-use"
        );
        assert_eq!(twice["enabledMcpjsonServers"], json!(["hermes"]));
        let mcp = mcp_json(json!({"mcpServers": {"other": {}}}), "/bin/hermes");
        assert_eq!(mcp["mcpServers"]["hermes"]["args"], json!(["mcp"]));
        assert!(mcp["mcpServers"]["other"].is_object());
    }
}
