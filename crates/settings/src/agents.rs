//! `[agents.NAME]`: agent CLIs as children. Each entry is a command with `{prompt}`
//! (and optionally `{model}`) placeholders, and optionally the stream adapter that reads it:
//!
//! ```toml
//! [agents.aider]
//! command = ["aider", "--yes", "--message", "{prompt}", "--model", "{model}"]
//! adapter = "plain"
//!
//! [agents.NAME]              # named after a built-in profile: pins its flags
//! command = ["NAME", "-p", "{prompt}", "--max-turns", "30"]
//! ```
//!
//! Which adapters exist and how a profile runs is the registry's business; this module only
//! reads the table.

use crate::SettingsError;

/// One `[agents.NAME]` entry: a command of the user's own, or an override of a built-in
/// profile's (the built-in profiles are `hermes_agents`').
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentOverride {
    /// Its name, as `--agent NAME` gives it.
    pub name: String,
    /// The argv, with `{prompt}` and `{model}` placeholders.
    pub command: Vec<String>,
    /// The stream adapter that reads its stdout (`plain`, or an agent's name); `None`: the
    /// built-in profile's of the same name, else recognised from the command.
    pub adapter: Option<String>,
}

/// A profile name: what `--agent` accepts.
fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// `delegation.default_agent`: empty means unset.
pub(crate) fn default_agent(raw: &str) -> Option<String> {
    let raw = raw.trim();
    (!raw.is_empty()).then(|| raw.to_owned())
}

/// Reads the `[agents]` section of `config.toml` (from `origin`).
pub(crate) fn parse(origin: &str, body: &toml::Value) -> Result<Vec<AgentOverride>, SettingsError> {
    let bad = |what: String, expected: &str| SettingsError::BadValue {
        what: format!("config {origin}: {what}"),
        expected: expected.to_owned(),
    };
    let toml::Value::Table(entries) = body else {
        return Err(SettingsError::NotASection {
            origin: origin.to_owned(),
            name: "agents".into(),
        });
    };
    let mut agents = Vec::new();
    for (name, entry) in entries {
        let key = |k: &str| format!("`agents.{name}.{k}`");
        if !is_name(name) {
            return Err(bad(
                format!("`agents.{name}`"),
                "named with 1 to 64 of A-Z a-z 0-9 - _ .",
            ));
        }
        let toml::Value::Table(entry) = entry else {
            return Err(bad(
                format!("`agents.{name}`"),
                "a table: [agents.NAME] with command = [...]",
            ));
        };
        let mut command = None;
        let mut adapter = None;
        for (field, value) in entry {
            match field.as_str() {
                "command" => {
                    let words = value
                        .as_array()
                        .and_then(|a| {
                            a.iter()
                                .map(|w| w.as_str().map(str::to_owned))
                                .collect::<Option<Vec<String>>>()
                        })
                        .filter(|w| w.first().is_some_and(|p| !p.is_empty()))
                        .ok_or_else(|| {
                            bad(
                                key("command"),
                                "a non-empty array of strings, the program first",
                            )
                        })?;
                    if !words.iter().any(|w| w.contains("{prompt}")) {
                        return Err(bad(
                            key("command"),
                            "an argv with a {prompt} placeholder where the prompt goes",
                        ));
                    }
                    command = Some(words);
                }
                "adapter" => {
                    let text = value
                        .as_str()
                        .ok_or_else(|| bad(key("adapter"), "a string"))?;
                    adapter = Some(text.to_owned());
                }
                _ => {
                    return Err(SettingsError::UnknownKey {
                        origin: origin.to_owned(),
                        key: format!("agents.{name}.{field}"),
                    });
                }
            }
        }
        let command = command
            .ok_or_else(|| bad(key("command"), "set: command = [\"prog\", \"{prompt}\"]"))?;
        agents.push(AgentOverride {
            name: name.clone(),
            command,
            adapter,
        });
    }
    Ok(agents)
}
