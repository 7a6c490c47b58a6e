//! The merging under `hermes hook install`, the same for every agent:
//!
//! - hermes' own entries are recognized wherever they point (a hook whose command is
//!   `…/hermes hook EVENT …`, the server named `hermes`, a script that runs such a command) and
//!   updated in place, so moving the binary and installing again leaves no hook on the old
//!   path; a user's other keys in them (an `env`, a `timeout`) are kept;
//! - everything else is left as it was, in the order it was written (JSON through `doc.rs`, an
//!   order-keeping value; TOML through `toml_edit`, comments included); a UTF-8 byte-order mark
//!   is accepted and kept; a JSON file with comments (which some agents read) keeps them and
//!   the layout of every line hermes does not change (`jsonc.rs`);
//! - what cannot be merged (a `hooks` that is not an object, an event whose value is not a
//!   list, a user's script under a hook's name) is refused with one line naming the key or
//!   file, and nothing is written;
//! - running it twice changes nothing: a file whose text would not change is not written;
//! - a file written keeps its mode; a new one is created as [`Share`] says: a project's files
//!   (meant to be committed) as the user's other files are, a home's files private.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

pub use super::doc::Doc;
use super::jsonc;
use crate::services::exit::{Code, fail};

/// A settings file as read: its document and whether it began with a byte-order mark.
#[derive(Debug)]
pub struct File {
    /// Where it lives.
    pub path: PathBuf,
    /// Its content (an empty object when it does not exist).
    pub doc: Doc,
    bom: bool,
    /// Its text as read (empty when it did not exist).
    was: String,
    /// A file with comments as it was read, to splice the changes into.
    commented: Option<Commented>,
}

/// A file with comments: its text, the same with comments blanked, and what it held.
#[derive(Debug)]
struct Commented {
    text: String,
    blanked: String,
    doc: Doc,
}

impl File {
    /// A file with nothing in it yet.
    pub fn empty(path: &Path) -> File {
        File {
            path: path.to_owned(),
            doc: Doc::object(),
            bom: false,
            was: String::new(),
            commented: None,
        }
    }

    /// Reads `path`, or, with `print`, starts it empty: `--print` shows the snippets alone,
    /// merged into nothing.
    pub fn open(path: &Path, print: bool) -> anyhow::Result<File> {
        if print {
            Ok(File::empty(path))
        } else {
            File::read(path)
        }
    }

    /// Reads `path`: a JSON object, empty, or missing. Anything else is refused, naming it.
    pub fn read(path: &Path) -> anyhow::Result<File> {
        let text = read_text(path)?;
        let (bom, body) = match text.strip_prefix('\u{feff}') {
            Some(rest) => (true, rest),
            None => (false, text.as_str()),
        };
        let blanked = jsonc::blank_comments(body);
        let json = blanked.as_deref().unwrap_or(body);
        let doc = if json.trim().is_empty() {
            Doc::object()
        } else {
            match serde_json::from_str::<Doc>(json) {
                Ok(doc) if doc.is_object() => doc,
                Ok(_) => return Err(refuse(path, "the file", "is not a JSON object")),
                Err(e) => return Err(refuse(path, "the file", &format!("is not JSON ({e})"))),
            }
        };
        let commented = blanked
            .filter(|b| !b.trim().is_empty())
            .map(|blanked| Commented {
                text: body.to_owned(),
                blanked,
                doc: doc.clone(),
            });
        Ok(File {
            path: path.to_owned(),
            doc,
            bom,
            was: text,
            commented,
        })
    }

    /// The file's new text.
    pub fn text(&self) -> anyhow::Result<String> {
        let mut text = String::new();
        if self.bom {
            text.push('\u{feff}');
        }
        if let Some(c) = &self.commented
            && let Some(spliced) = jsonc::splice(&c.text, &c.blanked, &c.doc, &self.doc)
        {
            text.push_str(&spliced);
            return Ok(text);
        }
        text.push_str(&serde_json::to_string_pretty(&self.doc).context("cannot encode JSON")?);
        text.push('\n');
        Ok(text)
    }

    /// Whether its new text differs from what was read.
    pub fn changed(&self) -> anyhow::Result<bool> {
        Ok(self.text()? != self.was)
    }

    /// Whether nothing is left in it (an empty object, or only the `version` hermes adds).
    pub fn is_empty(&self) -> bool {
        match &self.doc {
            Doc::Object(entries) => entries.iter().all(|(k, _)| k == "version"),
            _ => false,
        }
    }

    /// Writes it when its text changed (see [`write_text`]); returns whether it did.
    pub fn write(&self, share: Share) -> anyhow::Result<bool> {
        if !self.changed()? {
            return Ok(false);
        }
        write_text(&self.path, &self.text()?, share)?;
        Ok(true)
    }
}

/// Who a file hermes writes into an agent's settings is for: what a new one's mode is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// A project's file, meant to be committed and read by everyone working on it: created
    /// with the mode the user's other files get (the mask hermes was started with; 0644 and
    /// 0755 for directories under the usual `022`).
    Project,
    /// A file in the user's home, beside the agent's own (which may hold tokens): 0600, its
    /// new directories 0700.
    Private,
}

impl Share {
    /// The permission bits of a new file (`dir`: a new directory).
    fn mode(self, dir: bool) -> u32 {
        let full = if dir { 0o777 } else { 0o666 };
        match self {
            Share::Project => full & !crate::services::home::user_umask().unwrap_or(0o022) & 0o777,
            Share::Private => full & 0o700,
        }
    }
}

/// Writes `text` to `path` (creating its directory), atomically: a temporary file renamed
/// into place. A file that exists keeps its mode; a new one gets `share`'s.
pub fn write_text(path: &Path, text: &str, share: Share) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    if let Some(dir) = path.parent() {
        create_dirs(dir, share)?;
    }
    let mode = match std::fs::metadata(path) {
        Ok(meta) => meta.permissions().mode() & 0o7777,
        Err(_) => share.mode(false),
    };
    let tmp = path.with_extension("hermes-tmp");
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot set the mode of {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

/// Creates `dir` and its missing parents, each with `share`'s mode (hermes' own mask would
/// make them private).
fn create_dirs(dir: &Path, share: Share) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dirs(parent, share)?;
    }
    match std::fs::create_dir(dir) {
        Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(share.mode(true)))
            .with_context(|| format!("cannot set the mode of {}", dir.display())),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot create {}", dir.display())),
    }
}

/// The text of `path`; empty when it does not exist.
pub fn read_text(path: &Path) -> anyhow::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// One line refusing to merge into `path` because of `key`.
pub fn refuse(path: &Path, key: &str, why: &str) -> anyhow::Error {
    fail(
        Code::Usage,
        format!(
            "{}: {key} {why}; hermes cannot merge into it and wrote nothing (fix it, or use hermes hook install --print)",
            path.display()
        ),
    )
}

/// The object at `key` of `doc` (created when missing); refused when it is something else.
pub fn object_at<'a>(doc: &'a mut Doc, key: &str, path: &Path) -> anyhow::Result<&'a mut Doc> {
    let value = doc
        .entry(key, Doc::object)
        .ok_or_else(|| refuse(path, "the file", "is not a JSON object"))?;
    if !value.is_object() {
        return Err(refuse(path, &format!("\"{key}\""), "is not an object"));
    }
    Ok(value)
}

/// Registers the MCP server `name` in the object `servers`: its `type` (`kind`, for agents
/// whose entries have one), `command` and `args` are hermes'; any other key the user put in the
/// entry stays. Returns the entry, for keys an agent adds.
pub fn upsert_server<'a>(
    servers: &'a mut Doc,
    name: &str,
    command: &str,
    args: &[&str],
    kind: Option<&str>,
    path: &Path,
) -> anyhow::Result<&'a mut Doc> {
    let entry = servers
        .entry(name, Doc::object)
        .ok_or_else(|| refuse(path, "the servers", "are not an object"))?;
    if !entry.is_object() {
        return Err(refuse(
            path,
            &format!("the server \"{name}\""),
            "is not an object",
        ));
    }
    if let Some(kind) = kind {
        entry.set("type", Doc::string(kind));
    }
    entry.set("command", Doc::string(command));
    entry.set(
        "args",
        Doc::Array(args.iter().map(|a| Doc::string(*a)).collect()),
    );
    Ok(entry)
}

/// Adds `item` to the list at `key` (created when missing); refused when it is no list.
pub fn ensure_listed(doc: &mut Doc, key: &str, item: &str, path: &Path) -> anyhow::Result<()> {
    let list = doc
        .entry(key, || Doc::Array(Vec::new()))
        .ok_or_else(|| refuse(path, "the file", "is not a JSON object"))?;
    let Doc::Array(items) = list else {
        return Err(refuse(path, &format!("\"{key}\""), "is not a list"));
    };
    if !items.iter().any(|i| i.as_str() == Some(item)) {
        items.push(Doc::string(item));
    }
    Ok(())
}

/// Adds each of `items` to the list at the object path `keys` (objects and list created when
/// missing); refused when something on the way is not what it must be.
pub fn ensure_listed_at(
    doc: &mut Doc,
    keys: &[&str],
    items: &[String],
    path: &Path,
) -> anyhow::Result<()> {
    let Some((last, parents)) = keys.split_last() else {
        return Ok(());
    };
    let mut object = doc;
    for key in parents {
        object = object_at(object, key, path)?;
    }
    for item in items {
        ensure_listed(object, last, item, path)?;
    }
    Ok(())
}

/// One hook to register: under the agent's event `event`, the command `command` (which runs
/// `hermes hook SUBCOMMAND`), with `matcher` when the event takes one; `entry` is the whole
/// hook entry written when hermes has none there yet (the command and the timeout, in the
/// agent's own keys and units).
#[derive(Clone, Debug)]
pub struct Hook<'a> {
    pub event: &'a str,
    pub subcommand: &'a str,
    pub command: String,
    pub matcher: Option<&'a str>,
    pub entry: Doc,
}

/// A hook entry: `type: "command"`, the command under `command_key`, and `extra` keys (a
/// timeout in the agent's unit, a name).
pub fn command_entry(command_key: &str, command: &str, extra: &[(&str, Doc)]) -> Doc {
    let mut entry = Doc::object();
    entry.set("type", Doc::string("command"));
    entry.set(command_key, Doc::string(command));
    for (key, value) in extra {
        entry.set(key, value.clone());
    }
    entry
}

/// A number, for a timeout.
pub fn number(n: u64) -> Doc {
    Doc::Number(n.into())
}

pub use hermes_agents::Layout;

/// Registers `hooks` in the object `hooks_obj`, laid out as `layout`, each entry's command
/// under `command_key`. A hook of hermes for the same subcommand, wherever it points, is
/// updated in place (its other keys kept); otherwise one is added.
pub fn upsert_hooks(
    hooks_obj: &mut Doc,
    hooks: &[Hook<'_>],
    layout: Layout,
    command_key: &str,
    path: &Path,
) -> anyhow::Result<()> {
    // Check every event first, so a refusal writes nothing.
    for hook in hooks {
        if let Some(value) = hooks_obj.get(hook.event)
            && !matches!(value, Doc::Array(_))
        {
            return Err(refuse(
                path,
                &format!("\"hooks\".\"{}\"", hook.event),
                "is not a list",
            ));
        }
    }
    for hook in hooks {
        let Some(Doc::Array(items)) = hooks_obj.entry(hook.event, || Doc::Array(Vec::new())) else {
            continue;
        };
        let mut found = false;
        let mut update = |h: &mut Doc| {
            if h.get(command_key)
                .and_then(Doc::as_str)
                .is_some_and(|c| is_hermes_hook(c, hook.subcommand))
            {
                h.set(command_key, Doc::string(hook.command.clone()));
                found = true;
            }
        };
        match layout {
            Layout::Groups => {
                for group in items.iter_mut() {
                    if let Some(Doc::Array(list)) = group.get_mut("hooks") {
                        list.iter_mut().for_each(&mut update);
                    }
                }
            }
            Layout::Flat => items.iter_mut().for_each(&mut update),
        }
        if found {
            continue;
        }
        match layout {
            Layout::Groups => {
                let mut group = Doc::object();
                if let Some(matcher) = hook.matcher {
                    group.set("matcher", Doc::string(matcher));
                }
                group.set("hooks", Doc::Array(vec![hook.entry.clone()]));
                items.push(group);
            }
            Layout::Flat => items.push(hook.entry.clone()),
        }
    }
    Ok(())
}

/// Whether `command` runs hermes' hook `subcommand`: its program is called `hermes` (at any
/// path), followed by `hook SUBCOMMAND`.
pub fn is_hermes_hook(command: &str, subcommand: &str) -> bool {
    let Some(words) = shlex::split(command) else {
        return false;
    };
    let program = words.first().map(|w| w.rsplit('/').next().unwrap_or(w));
    program == Some("hermes")
        && words.get(1).map(String::as_str) == Some("hook")
        && words.get(2).map(String::as_str) == Some(subcommand)
}

/// `text` (a `config.toml`) with `[mcp_servers.NAME]` running `program mcp`; everything
/// else, comments and layout included, as it was.
/// What a `[mcp_servers.NAME]` table holds besides `args = ["mcp"]`.
pub struct TomlServer<'a> {
    /// The command.
    pub program: &'a str,
    /// The key listing variables to pass, and the variables that must be in it (kept with
    /// the user's own).
    pub env_list: Option<(&'a str, Vec<String>)>,
    /// Other keys, with their string values.
    pub settings: &'a [(&'a str, &'a str)],
}

pub fn with_toml_server(
    text: &str,
    name: &str,
    server: &TomlServer<'_>,
    path: &Path,
) -> anyhow::Result<String> {
    let program = server.program;
    let refuse = |key: &str, why: &str| refuse(path, key, why);
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
        refuse("the file", &format!("is not TOML ({})", e.message()))
    })?;
    let servers = doc
        .entry("mcp_servers")
        .or_insert_with(|| {
            let mut t = toml_edit::Table::new();
            t.set_implicit(true);
            toml_edit::Item::Table(t)
        })
        .as_table_like_mut()
        .ok_or_else(|| refuse("mcp_servers", "is not a table"))?;
    let entry = servers
        .entry(name)
        .or_insert(toml_edit::Item::Table(toml_edit::Table::new()))
        .as_table_like_mut()
        .ok_or_else(|| refuse(&format!("mcp_servers.{name}"), "is not a table"))?;
    let same_command = entry.get("command").and_then(|v| v.as_str()) == Some(program);
    if !same_command {
        entry.insert("command", toml_edit::value(program));
    }
    let same_args = entry
        .get("args")
        .and_then(|v| v.as_array())
        .is_some_and(|a| a.len() == 1 && a.get(0).and_then(|v| v.as_str()) == Some("mcp"));
    if !same_args {
        let mut args = toml_edit::Array::new();
        args.push("mcp");
        entry.insert("args", toml_edit::value(args));
    }
    for (key, value) in server.settings {
        if entry.get(key).and_then(|v| v.as_str()) != Some(*value) {
            entry.insert(key, toml_edit::value(*value));
        }
    }
    if let Some((key, wanted)) = &server.env_list {
        let mut list = match entry.get(key) {
            None => toml_edit::Array::new(),
            Some(item) => item
                .as_array()
                .cloned()
                .ok_or_else(|| refuse(&format!("mcp_servers.{name}.{key}"), "is not a list"))?,
        };
        let missing: Vec<&String> = wanted
            .iter()
            .filter(|var| !list.iter().any(|v| v.as_str() == Some(var.as_str())))
            .collect();
        if !missing.is_empty() || entry.get(key).is_none() {
            for var in missing {
                list.push(var.as_str());
            }
            entry.insert(key, toml_edit::value(list));
        }
    }
    Ok(doc.to_string())
}

/// Whether the script `text` is hermes' hook for `subcommand` (a line running it).
pub fn is_hermes_script(text: &str, subcommand: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim();
        let line = line.strip_prefix("exec ").unwrap_or(line);
        is_hermes_hook(line, subcommand)
    })
}

/// Makes the script at `path` executable.
/// Returns whether its mode changed.
pub fn make_executable(path: &Path) -> anyhow::Result<bool> {
    use std::os::unix::fs::PermissionsExt as _;
    let was = std::fs::metadata(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .permissions()
        .mode()
        & 0o7777;
    if was == 0o755 {
        return Ok(false);
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot make {} executable", path.display()))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> Doc {
        serde_json::from_str(text).expect("JSON")
    }

    fn hook(command: &str) -> Hook<'static> {
        Hook {
            event: "PostToolUse",
            subcommand: "post-tool-use",
            command: command.to_owned(),
            matcher: Some("*"),
            entry: command_entry("command", command, &[("timeout", number(10))]),
        }
    }

    #[test]
    fn hermes_hooks_are_recognized_wherever_they_point() {
        assert!(is_hermes_hook("hermes hook stop", "stop"));
        assert!(is_hermes_hook(
            "/old/bin/hermes hook stop --agent some-agent",
            "stop"
        ));
        assert!(is_hermes_hook("'/a b/hermes' hook stop", "stop"));
        assert!(!is_hermes_hook("hermes hook stop-x", "stop"));
        assert!(!is_hermes_hook("/bin/not-hermes hook stop", "stop"));
        assert!(!is_hermes_hook("echo hermes hook stop", "stop"));
    }

    #[test]
    fn a_moved_binary_updates_its_hook_in_place_and_keeps_the_users_keys() {
        let path = Path::new("/p/settings.json");
        let mut hooks = doc(
            r#"{"PostToolUse":[{"matcher":"*","hooks":[{"type":"command","command":"/old/hermes hook post-tool-use","timeout":30}]}]}"#,
        );
        upsert_hooks(
            &mut hooks,
            &[hook("hermes hook post-tool-use --agent some-agent")],
            Layout::Groups,
            "command",
            path,
        )
        .expect("merges");
        assert_eq!(
            serde_json::to_string(&hooks).expect("JSON"),
            r#"{"PostToolUse":[{"matcher":"*","hooks":[{"type":"command","command":"hermes hook post-tool-use --agent some-agent","timeout":30}]}]}"#
        );
    }

    #[test]
    fn what_cannot_be_merged_is_refused_naming_the_key() {
        let path = Path::new("/p/settings.json");
        let mut hooks = doc(r#"{"PostToolUse":{"matcher":"*"}}"#);
        let err = upsert_hooks(
            &mut hooks,
            &[hook("hermes hook post-tool-use")],
            Layout::Groups,
            "command",
            path,
        )
        .expect_err("refused");
        assert!(
            format!("{err}").contains("\"hooks\".\"PostToolUse\""),
            "{err}"
        );
        let mut root = doc(r#"{"enabledMcpjsonServers":"hermes"}"#);
        let err =
            ensure_listed(&mut root, "enabledMcpjsonServers", "hermes", path).expect_err("refused");
        assert!(format!("{err}").contains("enabledMcpjsonServers"), "{err}");
        let mut root = doc(r#"{"hooks":[]}"#);
        let err = object_at(&mut root, "hooks", path).expect_err("refused");
        assert!(format!("{err}").contains("\"hooks\""), "{err}");
    }

    #[test]
    fn a_servers_entry_keeps_the_users_env() {
        let path = Path::new("/p/.mcp.json");
        let mut servers = doc(
            r#"{"hermes":{"command":"/old/hermes","args":["mcp"],"env":{"HERMES_HOME":"/h"}}}"#,
        );
        upsert_server(
            &mut servers,
            "hermes",
            "hermes",
            &["mcp"],
            Some("stdio"),
            path,
        )
        .expect("merges");
        assert_eq!(
            serde_json::to_string(&servers).expect("JSON"),
            r#"{"hermes":{"command":"hermes","args":["mcp"],"env":{"HERMES_HOME":"/h"},"type":"stdio"}}"#
        );
    }

    #[test]
    fn a_byte_order_mark_is_read_and_kept() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("s.json");
        std::fs::write(&path, "\u{feff}{\"b\":1,\"a\":2}").expect("write");
        let file = File::read(&path).expect("reads");
        assert!(
            file.text()
                .expect("text")
                .starts_with("\u{feff}{\n  \"b\": 1,")
        );
    }

    #[test]
    fn the_server_table_is_added_once_and_the_users_config_stays() {
        let path = std::path::Path::new("/p/.agent/config.toml");
        let with_server = |text: &str, program: &str, path: &Path| {
            let entry = TomlServer {
                program,
                env_list: None,
                settings: &[],
            };
            with_toml_server(text, "hermes", &entry, path)
        };
        let user = "# mine\nmodel = \"o3\"\n\n[mcp_servers.docs]\ncommand = \"docs-mcp\"\n";
        let once = with_server(user, "hermes", path).expect("merges");
        assert!(once.starts_with(user), "{once}");
        assert!(
            once.contains("[mcp_servers.hermes]\ncommand = \"hermes\"\nargs = [\"mcp\"]"),
            "{once}"
        );
        assert_eq!(with_server(&once, "hermes", path).expect("merges"), once);
        let moved = with_server(&once, "/new/hermes", path).expect("merges");
        assert!(moved.contains("command = \"/new/hermes\""), "{moved}");
        assert!(with_server("mcp_servers = 3", "hermes", path).is_err());
        assert!(with_server("[[x", "hermes", path).is_err());
    }

    #[test]
    fn the_variables_list_keeps_the_users_and_the_settings_are_set_once() {
        let path = std::path::Path::new("/p/.agent/config.toml");
        let entry = TomlServer {
            program: "hermes",
            env_list: Some((
                "env_vars",
                vec!["HERMES_HOME".to_owned(), "HERMES_LEDGER_URL".to_owned()],
            )),
            settings: &[("default_tools_approval_mode", "approve")],
        };
        let user =
            "[mcp_servers.hermes]\ncommand = \"hermes\"\nenv_vars = [\"MINE\", \"HERMES_HOME\"]\n";
        let once = with_toml_server(user, "hermes", &entry, path).expect("merges");
        assert!(
            once.contains("env_vars = [\"MINE\", \"HERMES_HOME\", \"HERMES_LEDGER_URL\"]"),
            "{once}"
        );
        assert!(
            once.contains("default_tools_approval_mode = \"approve\""),
            "{once}"
        );
        assert_eq!(
            with_toml_server(&once, "hermes", &entry, path).expect("merges"),
            once
        );
        let bad = "[mcp_servers.hermes]\nenv_vars = \"HERMES_HOME\"\n";
        assert!(with_toml_server(bad, "hermes", &entry, path).is_err());
    }
}
