//! Where each setting in force came from (`hermes config show`): its default, `config.toml`, or
//! a `HERMES_<SECTION>_<KEY>` variable. Recorded while the settings are read, never worked out
//! again afterwards, and holding no secret: a ledger URL is kept with its password masked.

use std::collections::BTreeMap;

use crate::keys::{KEYS, TEXT_KEYS};
use crate::{SECTIONS, Settings};

/// Where a setting's value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Nothing set it: the built-in default.
    Default,
    /// `config.toml`, at this path.
    File(String),
    /// This environment variable.
    Environment(String),
}

impl Source {
    /// `default`, `file` or `environment`.
    pub fn kind(&self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::File(_) => "file",
            Source::Environment(_) => "environment",
        }
    }
}

/// A setting's value as written, a password masked.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Not set (a ledger URL left to the embedded ledger, no default agent).
    Unset,
    /// A number, in the key's own unit.
    Number(f64),
    /// A text.
    Text(String),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Unset => f.write_str("(unset)"),
            Value::Number(n) => write!(f, "{n}"),
            Value::Text(t) => write!(f, "{t:?}"),
        }
    }
}

/// One setting in force.
#[derive(Clone, Debug, PartialEq)]
pub struct Effective {
    /// `section.key` (`agents.NAME.command` for an agent entry).
    pub key: String,
    /// Its value.
    pub value: Value,
    /// Where it came from.
    pub source: Source,
}

/// What set each key, filled in while the settings are read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sources {
    set: BTreeMap<String, (Value, Source)>,
    agents: Vec<Effective>,
}

impl Sources {
    /// Records that `source` set `section.name` to `value`.
    pub(crate) fn record(&mut self, section: &str, name: &str, value: Value, source: Source) {
        self.set
            .insert(format!("{section}.{name}"), (value, source));
    }

    /// Records the `[agents.NAME]` entries of the file at `origin`.
    pub(crate) fn record_agents(&mut self, settings: &Settings, origin: &str) {
        self.agents.clear();
        for agent in &settings.agents {
            let source = Source::File(origin.to_owned());
            self.agents.push(Effective {
                key: format!("agents.{}.command", agent.name),
                value: Value::Text(agent.command.join(" ")),
                source: source.clone(),
            });
            if let Some(adapter) = &agent.adapter {
                self.agents.push(Effective {
                    key: format!("agents.{}.adapter", agent.name),
                    value: Value::Text(adapter.clone()),
                    source,
                });
            }
        }
    }

    /// Every key of [`known_keys`] with its value and source, section by section, then the
    /// `[agents.NAME]` entries.
    pub fn effective(&self) -> Vec<Effective> {
        let mut all: Vec<Effective> = known_keys()
            .into_iter()
            .map(|(key, default)| match self.set.get(&key) {
                Some((value, source)) => Effective {
                    key,
                    value: value.clone(),
                    source: source.clone(),
                },
                None => Effective {
                    key,
                    value: default,
                    source: Source::Default,
                },
            })
            .collect();
        all.extend(self.agents.iter().cloned());
        all
    }
}

/// Every key hermes reads (`section.key`) with its default, section by section in
/// [`SECTIONS`] order: the numeric keys of the key table, then the text keys. `[agents.NAME]`
/// entries are the user's own, not keys.
pub fn known_keys() -> Vec<(String, Value)> {
    let mut keys = Vec::new();
    for section in SECTIONS {
        for key in KEYS.iter().filter(|k| k.section == *section) {
            keys.push((
                format!("{}.{}", key.section, key.name),
                Value::Number(key.default),
            ));
        }
        for key in TEXT_KEYS.iter().filter(|k| k.section == *section) {
            let default = key
                .default
                .map_or(Value::Unset, |d| Value::Text(d.to_owned()));
            keys.push((format!("{}.{}", key.section, key.name), default));
        }
    }
    keys
}
