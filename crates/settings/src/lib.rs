//! hermes' settings: every key — its section, name, default and bounds — in one
//! table, read into one typed [`Settings`] value from which each crate builds its own config
//! (`hermes_ledger::LedgerConfig`, `hermes_registry::Config`, `hermes_router::RouterConfig`). No other crate writes a
//! default down, and the rules derived from several keys (how often a presented claim is
//! renewed) live here too.
//!
//! This crate does no I/O and knows no command line: the caller hands in the text of
//! `config.toml` and the environment, and gets back settings or an error naming the key or
//! variable at fault.

mod agents;
mod bounds;
mod keys;
mod sandbox;
mod sources;

use std::time::Duration;

pub use agents::AgentOverride;
pub use bounds::{Bounds, Unit};
pub use keys::{KEYS, Key, LEDGER_LISTEN_URL_VAR, LEDGER_URL_VAR, SECTIONS, TEXT_KEYS, TextKey};
pub use sandbox::{McpCommands, SandboxSettings};
pub use sources::{Effective, Source, Sources, Value, known_keys};

/// Everything that can be wrong with the settings. Each message names the file and key, or the
/// environment variable, at fault.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum SettingsError {
    /// `config.toml` is not TOML.
    #[error("config {origin}: not valid TOML: {reason}")]
    Toml {
        /// The file.
        origin: String,
        /// What the parser said, on one line.
        reason: String,
    },
    /// A top-level entry of `config.toml` that is not a `[section]`.
    #[error("config {origin}: `{name}` must be a [section]")]
    NotASection {
        /// The file.
        origin: String,
        /// The entry.
        name: String,
    },
    /// A key hermes does not have, in `config.toml`.
    #[error("config {origin}: unknown key `{key}`")]
    UnknownKey {
        /// The file.
        origin: String,
        /// `section.key`.
        key: String,
    },
    /// A `HERMES_<SECTION>_<KEY>` variable whose section is hermes' but whose key is not.
    #[error("unknown setting {name} in the environment (no key `{section}.{key}`); unset it")]
    UnknownVariable {
        /// The variable.
        name: String,
        /// Its section, lowercased.
        section: String,
        /// Its key, lowercased.
        key: String,
    },
    /// A value of the wrong kind or outside its bounds.
    #[error("{what} must be {expected}")]
    BadValue {
        /// Where the value came from: "config F: `section.key` = V", "HERMES_X=V", "--flag V".
        what: String,
        /// What it must be, with its bounds.
        expected: String,
    },
}

/// The settings in force: every key.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// `[delegation]`: how children run.
    pub delegation: DelegationSettings,
    /// `[delivery]`: how results are claimed and delivered.
    pub delivery: DeliverySettings,
    /// `[host]`: how host processes behave.
    pub host: HostSettings,
    /// `[ledger]`: where the ledger lives.
    pub ledger: LedgerSettings,
    /// `[session]`: what an agent's exit does to its conversation.
    pub session: SessionSettings,
    /// `[sandbox]`: what children may do.
    pub sandbox: SandboxSettings,
    /// `mcp.commands`: which plain commands `delegate_task` may run.
    pub mcp_commands: McpCommands,
    /// `[agents.NAME]`: agent CLIs added to the built-in profiles, or overriding them, in
    /// name order.
    pub agents: Vec<AgentOverride>,
}

/// `[session]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionSettings {
    /// `session.on_agent_exit`: what a session end of an agent that is not an explicit discard
    /// does.
    pub on_agent_exit: AgentExit,
}

/// What an agent's session end that is not an explicit discard (its process exits: a headless
/// run, a quit) does to the conversation's session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AgentExit {
    /// The session stays: its children run on and its results wait for the conversation's
    /// next process (`--resume`).
    #[default]
    Detach,
    /// The session ends as at a discard: running children interrupted, results dropped.
    End,
}

impl AgentExit {
    /// The value named `text` (`detach`, `end`).
    pub fn parse(text: &str) -> Option<AgentExit> {
        match text {
            "detach" => Some(AgentExit::Detach),
            "end" => Some(AgentExit::End),
            _ => None,
        }
    }

    /// Its name in `config.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentExit::Detach => "detach",
            AgentExit::End => "end",
        }
    }
}

/// `[ledger]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LedgerSettings {
    /// `ledger.url`: unset → the home's embedded redb file; a `postgres://` or
    /// `postgresql://` URL → a PostgreSQL database shared by any number of machines.
    pub url: Option<LedgerUrl>,
    /// `ledger.listen_url`: where listeners connect when `url` goes through a pooler in
    /// transaction mode (a direct connection to the same database); unset → `url`.
    pub listen_url: Option<LedgerUrl>,
    /// `ledger.namespace`: the deployment's PostgreSQL schema (default `hermes`, the tables
    /// hermes has always used). Ignored by the embedded ledger: one home is one deployment.
    pub namespace: Namespace,
    /// `ledger.statement_timeout_seconds`: PostgreSQL ends a statement that runs longer (set
    /// per session, unless the URL's `options` set it), and a call that hears nothing from the
    /// server for that long and a margin fails as a broken connection.
    pub statement_timeout: Duration,
}

/// A deployment's namespace on a shared PostgreSQL database (`ledger.namespace`,
/// `HERMES_LEDGER_NAMESPACE`): a lowercase identifier, `[a-z_][a-z0-9_]*`, at most
/// [`Namespace::MAX_LEN`] bytes, not `pg_…` (PostgreSQL keeps those for itself). So it needs no
/// case folding and quotes trivially, and its notification channels (`NAME_activity`,
/// `NAME_events`) stay within PostgreSQL's 63-byte identifiers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Namespace(String);

impl Namespace {
    /// The default: the `hermes_*` tables in the connection's `search_path` (normally
    /// `public`), where every hermes before namespaces put them.
    pub const DEFAULT: &'static str = "hermes";
    /// The longest name accepted.
    pub const MAX_LEN: usize = 48;

    /// Accepts a namespace; `what` names where it came from in the error.
    pub fn parse(what: &str, raw: &str) -> Result<Namespace, SettingsError> {
        let name = raw.trim();
        let mut bytes = name.bytes();
        let valid = bytes
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
            && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && name.len() <= Namespace::MAX_LEN
            && !name.starts_with("pg_");
        if valid {
            Ok(Namespace(name.to_owned()))
        } else {
            Err(SettingsError::BadValue {
                what: what.to_owned(),
                expected: format!(
                    "a lowercase identifier of at most {} bytes ([a-z_][a-z0-9_]*, not pg_…)",
                    Namespace::MAX_LEN
                ),
            })
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the default namespace (the tables where hermes always kept them).
    pub fn is_default(&self) -> bool {
        self.0 == Namespace::DEFAULT
    }
}

impl Default for Namespace {
    fn default() -> Namespace {
        Namespace(Namespace::DEFAULT.to_owned())
    }
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A ledger URL. It may hold a password, so `Debug` shows it without one.
#[derive(Clone, PartialEq, Eq)]
pub struct LedgerUrl(String);

impl LedgerUrl {
    /// Accepts a `postgres://` or `postgresql://` URL.
    pub fn parse(what: &str, raw: &str) -> Result<LedgerUrl, SettingsError> {
        let raw = raw.trim();
        if raw.starts_with("postgres://") || raw.starts_with("postgresql://") {
            Ok(LedgerUrl(raw.to_owned()))
        } else {
            Err(SettingsError::BadValue {
                what: what.to_owned(),
                expected: "a postgres:// or postgresql:// URL (unset: the embedded ledger)".into(),
            })
        }
    }

    /// The URL, password included: for connecting, never for printing.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for LedgerUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redacted(&self.0))
    }
}

/// `url` with any password replaced by `***`: the one before `@`, and a `password=` parameter.
pub fn redacted(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let authority_end = url[scheme_end..]
        .find(['/', '?'])
        .map_or(url.len(), |i| scheme_end + i);
    let authority = &url[scheme_end..authority_end];
    let url = match authority.rfind('@') {
        Some(at) => match authority[..at].split_once(':') {
            Some((user, _)) => format!(
                "{}{user}:***{}",
                &url[..scheme_end],
                &url[scheme_end + at..]
            ),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    };
    match url.split_once('?') {
        Some((base, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((name, _)) if name == "password" => format!("{name}=***"),
                    _ => p.to_owned(),
                })
                .collect();
            format!("{base}?{}", params.join("&"))
        }
        None => url,
    }
}

/// `[delegation]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelegationSettings {
    /// Running background units per machine, and the parallelism inside one batch.
    pub max_concurrent_children: u32,
    /// Queued units at most before dispatch is refused.
    pub max_queued: u32,
    /// Quiet time after which a child outside any tool is stalling.
    pub stall_idle: Duration,
    /// Quiet time after which a child inside a tool is stalling.
    pub stall_in_tool: Duration,
    /// Time between SIGTERM and SIGKILL for a stalling child.
    pub stall_grace: Duration,
    /// Wall-clock limit per child when the dispatch names none (`None` = off).
    pub child_timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL for a timeout or an interrupt.
    pub kill_grace: Duration,
    /// Bytes of result kept in an event.
    pub result_max_bytes: u64,
    /// Transcript directories older than this are pruned.
    pub transcript_retention: Duration,
    /// Bytes of one transcript file at most; beyond it the head and a rolling tail are kept.
    pub transcript_max_bytes: u64,
    /// How deep a chain of agent children may go: an `orchestrator` child at a lower depth may
    /// delegate, none at this depth may.
    pub max_depth: u32,
    /// The agent profile a goal without a command runs (`delegation.default_agent`; unset:
    /// such a dispatch is refused).
    pub default_agent: Option<String>,
    /// Where each child works unless its dispatch says (`delegation.workspace`): `none` (in
    /// the dispatch's directory) or `worktree` (in its own git worktree).
    pub workspace: &'static str,
}

/// `[delivery]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliverySettings {
    /// Lease of a claim.
    pub claim_lease: Duration,
    /// How often a consumer renews the claims it presents (see [`DeliverySettings::renew_every`]).
    pub heartbeat: Duration,
    /// Claims after which a released event is dropped.
    pub max_attempts: u32,
    /// Pending events older than this are dropped as `replay_expired`.
    pub replay_max_age: Duration,
    /// Terminal units older than this are purged.
    pub retention: Duration,
}

/// `[host]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSettings {
    /// How often a host's monitor looks at its children at the latest.
    pub sweep_interval: Duration,
    /// A headless host with nothing to do exits after this long.
    pub idle_exit: Duration,
    /// How often a host renews its lease.
    pub heartbeat: Duration,
    /// How long a host's lease lasts: unrenewed past it, the host is dead wherever it runs.
    pub lease: Duration,
    /// The recovery sweep runs at most this often.
    pub recovery_interval: Duration,
}

impl Default for Settings {
    /// The defaults, from the key table.
    fn default() -> Settings {
        let mut settings = Settings::zeroed();
        for key in KEYS {
            key.apply(&mut settings, key.default);
        }
        settings
    }
}

impl Settings {
    /// Every field zero, before the key table's defaults are applied.
    fn zeroed() -> Settings {
        Settings {
            delegation: DelegationSettings {
                max_concurrent_children: 0,
                max_queued: 0,
                stall_idle: Duration::ZERO,
                stall_in_tool: Duration::ZERO,
                stall_grace: Duration::ZERO,
                child_timeout: None,
                kill_grace: Duration::ZERO,
                result_max_bytes: 0,
                transcript_retention: Duration::ZERO,
                transcript_max_bytes: 0,
                max_depth: 0,
                default_agent: None,
                workspace: "none",
            },
            delivery: DeliverySettings {
                claim_lease: Duration::ZERO,
                heartbeat: Duration::ZERO,
                max_attempts: 0,
                replay_max_age: Duration::ZERO,
                retention: Duration::ZERO,
            },
            host: HostSettings {
                sweep_interval: Duration::ZERO,
                idle_exit: Duration::ZERO,
                heartbeat: Duration::ZERO,
                lease: Duration::ZERO,
                recovery_interval: Duration::ZERO,
            },
            ledger: LedgerSettings::default(),
            session: SessionSettings::default(),
            sandbox: SandboxSettings::default(),
            mcp_commands: McpCommands::default(),
            agents: Vec::new(),
        }
    }

    /// The defaults, then `config` (the text of `config.toml` and where it came from, if the
    /// file exists), then every `HERMES_<SECTION>_<KEY>` of `env`.
    ///
    /// Unknown keys in the file, and unknown keys of hermes' sections in the environment, are
    /// refused; so is every value outside its key's bounds. Environment variables of no section
    /// of hermes' (`HERMES_HOME`, `HERMES_SESSION_ID`, …) and the variables hermes sets for its
    /// own children are left alone.
    pub fn load<I, K, V>(config: Option<(&str, &str)>, env: I) -> Result<Settings, SettingsError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        Settings::load_with_sources(config, env).map(|(settings, _)| settings)
    }

    /// [`Settings::load`], and where each setting came from (`hermes config show`).
    pub fn load_with_sources<I, K, V>(
        config: Option<(&str, &str)>,
        env: I,
    ) -> Result<(Settings, Sources), SettingsError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut settings = Settings::default();
        let mut sources = Sources::default();
        if let Some((origin, text)) = config {
            keys::apply_file(&mut settings, &mut sources, origin, text)?;
        }
        let mut env: Vec<(K, V)> = env.into_iter().collect();
        // Deterministic: the first bad variable in name order is the one reported.
        env.sort_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
        for (name, value) in &env {
            keys::apply_variable(&mut settings, &mut sources, name.as_ref(), value.as_ref())?;
        }
        settings.host.check()?;
        Ok((settings, sources))
    }
}

impl HostSettings {
    /// The lease rule: a host renews at least twice per lease, so one slow renewal never costs
    /// it its lease.
    fn check(&self) -> Result<(), SettingsError> {
        if self.heartbeat.saturating_mul(2) > self.lease {
            return Err(SettingsError::BadValue {
                what: format!(
                    "host.heartbeat_seconds ({}) with host.lease_seconds ({})",
                    self.heartbeat.as_secs_f64(),
                    self.lease.as_secs_f64()
                ),
                expected: "at most half the lease".into(),
            });
        }
        Ok(())
    }

    /// How long a host may go without renewing before it fences itself (stops its children
    /// and stops writing): `lease − heartbeat`, so it has stopped before anyone may judge its
    /// lease expired.
    pub fn self_fence_after(&self) -> Duration {
        self.lease.saturating_sub(self.heartbeat)
    }
}

impl DeliverySettings {
    /// How often a consumer renews the claims it presents: `heartbeat_seconds`, but never less
    /// often than twice per lease, so a presented claim cannot lapse between two renewals.
    pub fn renew_every(&self) -> Duration {
        self.heartbeat
            .min(self.claim_lease / 2)
            .max(Duration::from_millis(1))
    }
}

#[cfg(test)]
mod tests;
