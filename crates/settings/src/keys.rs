//! The table of settings keys and how `config.toml` and the environment are applied to it.

use std::time::Duration;

use crate::bounds::MONTH_SECONDS;
use crate::sources::{Source, Sources, Value};
use crate::{Bounds, Settings, SettingsError, Unit};

/// hermes' sections. `HERMES_<SECTION>_<KEY>` with one of these sections must name a key.
pub const SECTIONS: &[&str] = &[
    "delegation",
    "delivery",
    "host",
    "ledger",
    "session",
    "sandbox",
    "mcp",
];

/// The one text key: where the ledger lives (`ledger.url`, `HERMES_LEDGER_URL`).
pub const LEDGER_URL: (&str, &str) = ("ledger", "url");

/// The variable that sets [`LEDGER_URL`].
pub const LEDGER_URL_VAR: &str = "HERMES_LEDGER_URL";

/// Where a PostgreSQL ledger's listeners connect when `ledger.url` goes through a pooler in
/// transaction mode, which cannot pass notifications on (`ledger.listen_url`,
/// `HERMES_LEDGER_LISTEN_URL`): a direct connection to the same database.
pub const LEDGER_LISTEN_URL: (&str, &str) = ("ledger", "listen_url");

/// The variable that sets [`LEDGER_LISTEN_URL`].
pub const LEDGER_LISTEN_URL_VAR: &str = "HERMES_LEDGER_LISTEN_URL";

/// The deployment's namespace on a shared PostgreSQL database (`ledger.namespace`,
/// `HERMES_LEDGER_NAMESPACE`).
pub const LEDGER_NAMESPACE: (&str, &str) = ("ledger", "namespace");

/// The agent profile a goal without a command runs (`delegation.default_agent`).
pub const DEFAULT_AGENT: (&str, &str) = ("delegation", "default_agent");

/// Where each child works by default (`delegation.workspace`: `none` or `worktree`).
pub const WORKSPACE: (&str, &str) = ("delegation", "workspace");

/// The values [`WORKSPACE`] takes.
pub const WORKSPACES: &[&str] = &["none", "worktree"];

/// What an agent's session end that is not a discard does (`session.on_agent_exit`: `detach`
/// or `end`).
pub const ON_AGENT_EXIT: (&str, &str) = ("session", "on_agent_exit");

/// The sandbox of a dispatch that names none (`sandbox.default`).
pub const SANDBOX_DEFAULT: (&str, &str) = ("sandbox", "default");

/// The sandbox of a `delegate_task` that names none (`sandbox.mcp_default`).
pub const SANDBOX_MCP_DEFAULT: (&str, &str) = ("sandbox", "mcp_default");

/// The widest sandbox a `delegate_task` may ask for (`sandbox.mcp_max`).
pub const SANDBOX_MCP_MAX: (&str, &str) = ("sandbox", "mcp_max");

/// Whether plain command children reach the network (`sandbox.network_commands`).
pub const SANDBOX_NETWORK_COMMANDS: (&str, &str) = ("sandbox", "network_commands");

/// Whether agent children reach the network (`sandbox.network_agents`).
pub const SANDBOX_NETWORK_AGENTS: (&str, &str) = ("sandbox", "network_agents");

/// Which plain commands `delegate_task` may run (`mcp.commands`).
pub const MCP_COMMANDS: (&str, &str) = ("mcp", "commands");

/// The section of agent CLI profiles (`[agents.NAME] command = [...]`).
pub const AGENTS: &str = "agents";

/// A key whose value is a text rather than a number.
#[derive(Clone, Copy, Debug)]
pub struct TextKey {
    /// The section.
    pub section: &'static str,
    /// The key inside the section.
    pub name: &'static str,
    /// The default; `None`: unset.
    pub default: Option<&'static str>,
}

/// Every text key, with its default.
pub const TEXT_KEYS: &[TextKey] = &[
    TextKey {
        section: DEFAULT_AGENT.0,
        name: DEFAULT_AGENT.1,
        default: None,
    },
    TextKey {
        section: WORKSPACE.0,
        name: WORKSPACE.1,
        default: Some("none"),
    },
    TextKey {
        section: ON_AGENT_EXIT.0,
        name: ON_AGENT_EXIT.1,
        default: Some("detach"),
    },
    TextKey {
        section: SANDBOX_DEFAULT.0,
        name: SANDBOX_DEFAULT.1,
        default: Some("full"),
    },
    TextKey {
        section: SANDBOX_MCP_DEFAULT.0,
        name: SANDBOX_MCP_DEFAULT.1,
        default: Some("workspace-write"),
    },
    TextKey {
        section: SANDBOX_MCP_MAX.0,
        name: SANDBOX_MCP_MAX.1,
        default: Some("workspace-write"),
    },
    TextKey {
        section: SANDBOX_NETWORK_COMMANDS.0,
        name: SANDBOX_NETWORK_COMMANDS.1,
        default: Some("on"),
    },
    TextKey {
        section: SANDBOX_NETWORK_AGENTS.0,
        name: SANDBOX_NETWORK_AGENTS.1,
        default: Some("on"),
    },
    TextKey {
        section: MCP_COMMANDS.0,
        name: MCP_COMMANDS.1,
        default: Some("any"),
    },
    TextKey {
        section: LEDGER_URL.0,
        name: LEDGER_URL.1,
        default: None,
    },
    TextKey {
        section: LEDGER_LISTEN_URL.0,
        name: LEDGER_LISTEN_URL.1,
        default: None,
    },
    TextKey {
        section: LEDGER_NAMESPACE.0,
        name: LEDGER_NAMESPACE.1,
        default: Some(crate::Namespace::DEFAULT),
    },
];

/// Variables hermes sets for its own children that happen to start like an override
/// (they are not overrides, and a hermes run inside a child must work).
const CHILD_VARIABLES: &[&str] = &["HERMES_DELEGATION_ID"];

/// Sections whose variables share a prefix with other programs' (`HERMES_SESSION_ID`, Hermes
/// Agent's `HERMES_SESSION_*`): a variable naming no key of them is not hermes' and is left
/// alone instead of refused.
const SHARED_SECTIONS: &[&str] = &["session"];

/// One key: where it lives, its default and bounds, and the field it sets.
#[derive(Clone, Copy)]
pub struct Key {
    /// The section (`delegation`, `delivery`, `host`).
    pub section: &'static str,
    /// The key inside the section.
    pub name: &'static str,
    /// The default, in the key's unit.
    pub default: f64,
    /// The accepted values.
    pub bounds: Bounds,
    set: fn(&mut Settings, Quantity),
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.section, self.name)
    }
}

/// An accepted value of a key, with its bounds, handed to the key's setter.
#[derive(Clone, Copy)]
struct Quantity {
    value: f64,
    bounds: Bounds,
}

impl Quantity {
    /// A count. The bounds keep it within `u32` for the keys that read it this way.
    fn count32(self) -> u32 {
        self.value as u32
    }

    fn count64(self) -> u64 {
        self.value as u64
    }

    fn duration(self) -> Duration {
        self.bounds.duration(self.value).unwrap_or(Duration::ZERO)
    }

    fn optional_duration(self) -> Option<Duration> {
        self.bounds.duration(self.value)
    }
}

const fn key(
    section: &'static str,
    name: &'static str,
    default: f64,
    bounds: Bounds,
    set: fn(&mut Settings, Quantity),
) -> Key {
    Key {
        section,
        name,
        default,
        bounds,
        set,
    }
}

const fn count(min: f64, max: f64) -> Bounds {
    Bounds::new(Unit::Count, min, max)
}

const fn seconds(min: f64, max: f64) -> Bounds {
    Bounds::new(Unit::Seconds, min, max)
}

const MIB: f64 = 1_048_576.0;

/// Every settings key with its default and bounds. The lower bounds keep the system live: no
/// capacity, lease, attempt cap or interval of zero.
pub const KEYS: &[Key] = &[
    key(
        "delegation",
        "max_concurrent_children",
        3.0,
        count(1.0, 1024.0),
        |s, q| s.delegation.max_concurrent_children = q.count32(),
    ),
    key(
        "delegation",
        "max_queued",
        100.0,
        count(0.0, 100_000.0),
        |s, q| s.delegation.max_queued = q.count32(),
    ),
    key(
        "delegation",
        "stall_idle_seconds",
        450.0,
        seconds(0.1, MONTH_SECONDS),
        |s, q| s.delegation.stall_idle = q.duration(),
    ),
    key(
        "delegation",
        "stall_in_tool_seconds",
        1200.0,
        seconds(0.1, MONTH_SECONDS),
        |s, q| s.delegation.stall_in_tool = q.duration(),
    ),
    key(
        "delegation",
        "stall_grace_seconds",
        120.0,
        seconds(0.0, 86_400.0),
        |s, q| s.delegation.stall_grace = q.duration(),
    ),
    key(
        "delegation",
        "child_timeout_seconds",
        0.0,
        Bounds::TIMEOUT,
        |s, q| s.delegation.child_timeout = q.optional_duration(),
    ),
    key(
        "delegation",
        "kill_grace_seconds",
        5.0,
        seconds(0.0, 3_600.0),
        |s, q| s.delegation.kill_grace = q.duration(),
    ),
    key(
        "delegation",
        "result_max_bytes",
        65_536.0,
        count(1_024.0, 16.0 * MIB),
        |s, q| s.delegation.result_max_bytes = q.count64(),
    ),
    key(
        "delegation",
        "transcript_retention_days",
        7.0,
        Bounds::new(Unit::Days, 0.01, 3_650.0),
        |s, q| s.delegation.transcript_retention = q.duration(),
    ),
    key(
        "delegation",
        "transcript_max_bytes",
        64.0 * MIB,
        count(4_096.0, 1_048_576.0 * MIB),
        |s, q| s.delegation.transcript_max_bytes = q.count64(),
    ),
    key("delegation", "max_depth", 2.0, count(1.0, 16.0), |s, q| {
        s.delegation.max_depth = q.count32()
    }),
    key(
        "delivery",
        "claim_lease_seconds",
        300.0,
        Bounds::LEASE,
        |s, q| s.delivery.claim_lease = q.duration(),
    ),
    key(
        "delivery",
        "heartbeat_seconds",
        60.0,
        seconds(0.05, 86_400.0),
        |s, q| s.delivery.heartbeat = q.duration(),
    ),
    key(
        "delivery",
        "max_attempts",
        8.0,
        count(1.0, 1_000.0),
        |s, q| s.delivery.max_attempts = q.count32(),
    ),
    key(
        "delivery",
        "replay_max_age_hours",
        48.0,
        Bounds::new(Unit::Hours, 0.01, 8_760.0),
        |s, q| s.delivery.replay_max_age = q.duration(),
    ),
    key(
        "delivery",
        "retention_days",
        7.0,
        Bounds::new(Unit::Days, 0.01, 3_650.0),
        |s, q| s.delivery.retention = q.duration(),
    ),
    key(
        "host",
        "sweep_interval_ms",
        1_000.0,
        Bounds::new(Unit::Millis, 10.0, 60_000.0),
        |s, q| s.host.sweep_interval = q.duration(),
    ),
    key(
        "host",
        "idle_exit_seconds",
        60.0,
        seconds(0.0, MONTH_SECONDS),
        |s, q| s.host.idle_exit = q.duration(),
    ),
    key(
        "host",
        "heartbeat_seconds",
        5.0,
        seconds(0.05, 3_600.0),
        |s, q| s.host.heartbeat = q.duration(),
    ),
    key(
        "host",
        "lease_seconds",
        30.0,
        seconds(0.1, 86_400.0),
        |s, q| s.host.lease = q.duration(),
    ),
    key(
        "ledger",
        "statement_timeout_seconds",
        30.0,
        seconds(0.1, 86_400.0),
        |s, q| s.ledger.statement_timeout = q.duration(),
    ),
    key(
        "host",
        "recovery_interval_seconds",
        3.0,
        seconds(0.05, 3_600.0),
        |s, q| s.host.recovery_interval = q.duration(),
    ),
];

impl Key {
    /// `HERMES_<SECTION>_<KEY>`.
    pub fn variable(&self) -> String {
        format!("HERMES_{}_{}", self.section, self.name).to_ascii_uppercase()
    }

    pub(crate) fn apply(&self, settings: &mut Settings, value: f64) {
        (self.set)(
            settings,
            Quantity {
                value,
                bounds: self.bounds,
            },
        );
    }
}

fn find(section: &str, name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.section == section && k.name == name)
}

pub(crate) fn apply_file(
    settings: &mut Settings,
    sources: &mut Sources,
    origin: &str,
    text: &str,
) -> Result<(), SettingsError> {
    let table: toml::Table = toml::from_str(text).map_err(|e| SettingsError::Toml {
        origin: origin.to_owned(),
        reason: e
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    })?;
    for (section, body) in &table {
        if section == AGENTS {
            settings.agents = crate::agents::parse(origin, body)?;
            sources.record_agents(settings, origin);
            continue;
        }
        let toml::Value::Table(body) = body else {
            return Err(SettingsError::NotASection {
                origin: origin.to_owned(),
                name: section.clone(),
            });
        };
        for (name, value) in body {
            let source = Source::File(origin.to_owned());
            let key = (section.as_str(), name.as_str());
            if key == MCP_COMMANDS
                && let toml::Value::Array(names) = value
            {
                let what = format!("config {origin}: `{section}.{name}`");
                let list = crate::sandbox::program_list(&what, names)?;
                let shown = set_text(settings, key, &what, Some(&list))?;
                sources.record(section, name, shown, source);
                continue;
            }
            if TEXT_KEYS.iter().any(|k| (k.section, k.name) == key) {
                let text = value.as_str().ok_or_else(|| SettingsError::BadValue {
                    what: format!("config {origin}: `{section}.{name}` = {value}"),
                    expected: "a string".into(),
                })?;
                let what = if key == LEDGER_NAMESPACE {
                    format!("config {origin}: `{section}.{name}` = {value}")
                } else {
                    format!("config {origin}: `{section}.{name}`")
                };
                if (key == LEDGER_URL || key == LEDGER_LISTEN_URL) && text.trim().is_empty() {
                    // In the file, an empty URL is a mistake, not "unset".
                    crate::LedgerUrl::parse(&what, text)?;
                }
                let shown = set_text(settings, key, &what, Some(text))?;
                sources.record(section, name, shown, source);
                continue;
            }
            let key = find(section, name).ok_or_else(|| SettingsError::UnknownKey {
                origin: origin.to_owned(),
                key: format!("{section}.{name}"),
            })?;
            let what = format!("config {origin}: `{section}.{name}` = {value}");
            let number = match value {
                toml::Value::Integer(i) => Some(*i as f64),
                toml::Value::Float(f) => Some(*f),
                _ => None,
            }
            .filter(|v| key.bounds.admits(*v))
            .ok_or_else(|| SettingsError::BadValue {
                what,
                expected: key.bounds.expected(),
            })?;
            key.apply(settings, number);
            sources.record(section, name, Value::Number(number), source);
        }
    }
    Ok(())
}

/// Sets the text key `key` to `raw` (`None` or empty: unset, its default); `what` names where
/// it came from in an error. Returns the value as shown, a password masked.
fn set_text(
    settings: &mut Settings,
    key: (&str, &str),
    what: &str,
    raw: Option<&str>,
) -> Result<Value, SettingsError> {
    let raw = raw.map(str::trim).filter(|r| !r.is_empty());
    let url = |raw: Option<&str>| raw.map(|r| crate::LedgerUrl::parse(what, r)).transpose();
    if key == LEDGER_URL {
        settings.ledger.url = url(raw)?;
    } else if key == LEDGER_LISTEN_URL {
        settings.ledger.listen_url = url(raw)?;
    } else if key == LEDGER_NAMESPACE {
        settings.ledger.namespace = match raw {
            Some(r) => crate::Namespace::parse(what, r)?,
            None => crate::Namespace::default(),
        };
    } else if key == DEFAULT_AGENT {
        settings.delegation.default_agent = raw.and_then(crate::agents::default_agent);
    } else if key.0 == SANDBOX_DEFAULT.0 || key == MCP_COMMANDS {
        crate::sandbox::set(settings, key, what, raw)?;
    } else if key == WORKSPACE {
        settings.delegation.workspace = match raw {
            None => WORKSPACES[0],
            Some(r) => WORKSPACES
                .iter()
                .copied()
                .find(|w| *w == r)
                .ok_or_else(|| SettingsError::BadValue {
                    what: what.to_owned(),
                    expected: "`none` or `worktree`".to_owned(),
                })?,
        };
    } else if key == ON_AGENT_EXIT {
        settings.session.on_agent_exit = match raw {
            None => crate::AgentExit::Detach,
            Some(r) => crate::AgentExit::parse(r).ok_or_else(|| SettingsError::BadValue {
                what: what.to_owned(),
                expected: "`detach` or `end`".to_owned(),
            })?,
        };
    }
    Ok(match raw {
        None if key.0 == SANDBOX_DEFAULT.0 || key == MCP_COMMANDS => {
            let default = TEXT_KEYS.iter().find(|k| (k.section, k.name) == key);
            Value::Text(default.and_then(|k| k.default).unwrap_or("").to_owned())
        }
        None if key == LEDGER_NAMESPACE => Value::Text(crate::Namespace::DEFAULT.to_owned()),
        None if key == WORKSPACE => Value::Text(WORKSPACES[0].to_owned()),
        None if key == ON_AGENT_EXIT => Value::Text(crate::AgentExit::Detach.as_str().to_owned()),
        None => Value::Unset,
        Some(r) if key == LEDGER_URL || key == LEDGER_LISTEN_URL => Value::Text(crate::redacted(r)),
        Some(r) => Value::Text(r.to_owned()),
    })
}

pub(crate) fn apply_variable(
    settings: &mut Settings,
    sources: &mut Sources,
    name: &str,
    raw: &str,
) -> Result<(), SettingsError> {
    let Some(rest) = name.strip_prefix("HERMES_") else {
        return Ok(());
    };
    if CHILD_VARIABLES.contains(&name) {
        return Ok(());
    }
    let lower = rest.to_ascii_lowercase();
    let Some((section, key_name)) = SECTIONS.iter().find_map(|section| {
        lower
            .strip_prefix(section)
            .and_then(|r| r.strip_prefix('_'))
            .map(|key| (*section, key))
    }) else {
        return Ok(());
    };
    let source = Source::Environment(name.to_owned());
    if TEXT_KEYS
        .iter()
        .any(|k| (k.section, k.name) == (section, key_name))
    {
        // An empty value means "unset": the key's default.
        let what = if (section, key_name) == LEDGER_NAMESPACE {
            format!("{name}={raw:?}")
        } else {
            name.to_owned()
        };
        let shown = set_text(settings, (section, key_name), &what, Some(raw))?;
        sources.record(section, key_name, shown, source);
        return Ok(());
    }
    if SHARED_SECTIONS.contains(&section) && find(section, key_name).is_none() {
        return Ok(());
    }
    let key = find(section, key_name).ok_or_else(|| SettingsError::UnknownVariable {
        name: name.to_owned(),
        section: section.to_owned(),
        key: key_name.to_owned(),
    })?;
    let value = key.bounds.parse(&format!("{name}={raw:?}"), raw)?;
    key.apply(settings, value);
    sources.record(section, key_name, Value::Number(value), source);
    Ok(())
}
