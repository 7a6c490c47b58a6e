//! `[sandbox]` and `[mcp]`: what children may do by default, the widest the MCP tool may ask
//! for, and which plain commands it may run at all. The modes are names here
//! (`read-only`, `workspace-write`, `full`); the ledger's `SandboxMode` is their typed form.

use crate::{Settings, SettingsError, keys};

/// The sandbox modes, narrowest first.
pub const MODES: &[&str] = &["read-only", "workspace-write", "full"];

/// `[sandbox]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxSettings {
    /// The mode of a dispatch from the command line, a tasks file, cron or a pool that names
    /// none (`sandbox.default`, `full` unless set: what ran before keeps running).
    pub default: &'static str,
    /// The mode of a `delegate_task` that names none (`sandbox.mcp_default`).
    pub mcp_default: &'static str,
    /// The widest mode a `delegate_task` may ask for (`sandbox.mcp_max`).
    pub mcp_max: &'static str,
    /// Whether plain command children reach the network (`sandbox.network_commands`).
    pub network_commands: bool,
    /// Whether agent children reach the network, which their model's API needs
    /// (`sandbox.network_agents`).
    pub network_agents: bool,
}

impl Default for SandboxSettings {
    fn default() -> SandboxSettings {
        SandboxSettings {
            default: "full",
            mcp_default: "workspace-write",
            mcp_max: "workspace-write",
            network_commands: true,
            network_agents: true,
        }
    }
}

/// Which plain commands `delegate_task` may run (`mcp.commands`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum McpCommands {
    /// Any.
    #[default]
    Any,
    /// None: only agents.
    None,
    /// Only programs of these names (the file name of the command's first word).
    Only(Vec<String>),
}

impl McpCommands {
    /// Whether a command whose program is `program` may run.
    pub fn allows(&self, program: &str) -> bool {
        let name = program.rsplit('/').next().unwrap_or(program);
        match self {
            McpCommands::Any => true,
            McpCommands::None => false,
            McpCommands::Only(names) => names.iter().any(|n| n == name),
        }
    }

    /// `any`, `none`, or the names joined by commas.
    pub fn shown(&self) -> String {
        match self {
            McpCommands::Any => "any".to_owned(),
            McpCommands::None => "none".to_owned(),
            McpCommands::Only(names) => names.join(","),
        }
    }

    /// Reads `any`, `none` or a comma-separated list of program names.
    pub(crate) fn parse(what: &str, raw: &str) -> Result<McpCommands, SettingsError> {
        match raw {
            "any" => Ok(McpCommands::Any),
            "none" => Ok(McpCommands::None),
            list => {
                let names: Vec<String> = list
                    .split(',')
                    .map(|n| n.trim().to_owned())
                    .filter(|n| !n.is_empty())
                    .collect();
                if names.is_empty() || names.iter().any(|n| n.contains('/')) {
                    return Err(SettingsError::BadValue {
                        what: what.to_owned(),
                        expected: "`any`, `none` or a list of program names".to_owned(),
                    });
                }
                Ok(McpCommands::Only(names))
            }
        }
    }
}

/// The mode named `raw`, as the table's own name.
pub(crate) fn mode(what: &str, raw: &str) -> Result<&'static str, SettingsError> {
    MODES
        .iter()
        .copied()
        .find(|m| *m == raw)
        .ok_or_else(|| SettingsError::BadValue {
            what: what.to_owned(),
            expected: "`read-only`, `workspace-write` or `full`".to_owned(),
        })
}

/// `on` or `off`.
pub(crate) fn switch(what: &str, raw: &str) -> Result<bool, SettingsError> {
    match raw {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(SettingsError::BadValue {
            what: what.to_owned(),
            expected: "`on` or `off`".to_owned(),
        }),
    }
}

/// Sets a `[sandbox]` key or `mcp.commands` to `raw` (`None`: its default).
pub(crate) fn set(
    settings: &mut Settings,
    key: (&str, &str),
    what: &str,
    raw: Option<&str>,
) -> Result<(), SettingsError> {
    let defaults = crate::SandboxSettings::default();
    let s = &mut settings.sandbox;
    match key {
        keys::SANDBOX_DEFAULT => s.default = raw.map_or(Ok(defaults.default), |r| mode(what, r))?,
        keys::SANDBOX_MCP_DEFAULT => {
            s.mcp_default = raw.map_or(Ok(defaults.mcp_default), |r| mode(what, r))?;
        }
        keys::SANDBOX_MCP_MAX => s.mcp_max = raw.map_or(Ok(defaults.mcp_max), |r| mode(what, r))?,
        keys::SANDBOX_NETWORK_COMMANDS => {
            s.network_commands = raw.map_or(Ok(defaults.network_commands), |r| switch(what, r))?;
        }
        keys::SANDBOX_NETWORK_AGENTS => {
            s.network_agents = raw.map_or(Ok(defaults.network_agents), |r| switch(what, r))?;
        }
        _ => {
            settings.mcp_commands = match raw {
                Some(r) => McpCommands::parse(what, r)?,
                None => McpCommands::default(),
            };
        }
    }
    Ok(())
}

/// A TOML list of program names as one comma-separated text.
pub(crate) fn program_list(what: &str, names: &[toml::Value]) -> Result<String, SettingsError> {
    let bad = || SettingsError::BadValue {
        what: what.to_owned(),
        expected: "`any`, `none` or a list of program names".to_owned(),
    };
    let names: Vec<&str> = names
        .iter()
        .map(|n| n.as_str().filter(|n| !n.contains(',')).ok_or_else(bad))
        .collect::<Result<_, _>>()?;
    if names.is_empty() {
        return Err(bad());
    }
    Ok(names.join(","))
}
