//! `$HERMES_HOME/config.toml` with `HERMES_<SECTION>_<KEY>` overrides, turned into the plain
//! config structs of the ledger and the registry.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::exit::{Code, fail};

/// How a key's value is read.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// A non-negative whole number.
    Count,
    /// A non-negative number, decimals allowed (seconds, hours, days).
    Decimal,
}

/// Every key of SPEC §9: section, key, kind, default.
const KEYS: &[(&str, &str, Kind, f64)] = &[
    ("delegation", "max_concurrent_children", Kind::Count, 3.0),
    ("delegation", "max_queued", Kind::Count, 100.0),
    ("delegation", "stall_idle_seconds", Kind::Decimal, 450.0),
    ("delegation", "stall_in_tool_seconds", Kind::Decimal, 1200.0),
    ("delegation", "stall_grace_seconds", Kind::Decimal, 120.0),
    ("delegation", "child_timeout_seconds", Kind::Decimal, 0.0),
    ("delegation", "kill_grace_seconds", Kind::Decimal, 5.0),
    ("delegation", "result_max_bytes", Kind::Count, 65536.0),
    (
        "delegation",
        "transcript_retention_days",
        Kind::Decimal,
        7.0,
    ),
    (
        "delegation",
        "transcript_max_bytes",
        Kind::Count,
        67_108_864.0,
    ),
    ("delivery", "claim_lease_seconds", Kind::Decimal, 300.0),
    ("delivery", "heartbeat_seconds", Kind::Decimal, 60.0),
    ("delivery", "max_attempts", Kind::Count, 8.0),
    ("delivery", "replay_max_age_hours", Kind::Decimal, 48.0),
    ("delivery", "retention_days", Kind::Decimal, 7.0),
    ("host", "sweep_interval_ms", Kind::Count, 1000.0),
    ("host", "idle_exit_seconds", Kind::Decimal, 60.0),
];

/// The settings in force: every key of SPEC §9, from defaults, the file and the environment.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    values: BTreeMap<(&'static str, &'static str), f64>,
}

impl Settings {
    /// Reads `file` (if it exists) and the `HERMES_*` environment.
    pub fn load(file: &Path, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Settings> {
        let mut values: BTreeMap<(&'static str, &'static str), f64> =
            KEYS.iter().map(|(s, k, _, d)| ((*s, *k), *d)).collect();
        match std::fs::read_to_string(file) {
            Ok(text) => apply_file(&mut values, file, &text)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(fail(
                    Code::Usage,
                    format!("cannot read config {}: {e}", file.display()),
                ));
            }
        }
        for (section, key, kind, _) in KEYS {
            let name = format!(
                "HERMES_{}_{}",
                section.to_ascii_uppercase(),
                key.to_ascii_uppercase()
            );
            if let Some(raw) = env(&name) {
                let value = parse_number(raw.trim(), *kind).ok_or_else(|| {
                    fail(
                        Code::Usage,
                        format!(
                            "environment variable {name}={raw:?} is not {}",
                            kind_name(*kind)
                        ),
                    )
                })?;
                values.insert((section, key), value);
            }
        }
        Ok(Settings { values })
    }

    fn get(&self, section: &str, key: &str) -> f64 {
        self.values
            .iter()
            .find(|((s, k), _)| *s == section && *k == key)
            .map(|(_, v)| *v)
            .unwrap_or(0.0)
    }

    fn count(&self, section: &str, key: &str) -> u64 {
        self.get(section, key) as u64
    }

    fn duration(&self, section: &str, key: &str, unit_seconds: f64) -> Duration {
        Duration::from_secs_f64((self.get(section, key) * unit_seconds).clamp(0.0, 1e12))
    }

    /// `delivery.claim_lease_seconds`.
    pub fn claim_lease(&self) -> Duration {
        self.duration("delivery", "claim_lease_seconds", 1.0)
    }

    /// `delivery.heartbeat_seconds`.
    pub fn heartbeat(&self) -> Duration {
        self.duration("delivery", "heartbeat_seconds", 1.0)
    }

    /// `host.idle_exit_seconds`.
    pub fn idle_exit(&self) -> Duration {
        self.duration("host", "idle_exit_seconds", 1.0)
    }

    /// `host.sweep_interval_ms`.
    pub fn sweep_interval(&self) -> Duration {
        Duration::from_millis(self.count("host", "sweep_interval_ms").max(1))
    }

    /// `delegation.max_concurrent_children`.
    pub fn max_concurrent_children(&self) -> u32 {
        u32::try_from(self.count("delegation", "max_concurrent_children")).unwrap_or(u32::MAX)
    }

    /// The ledger's tunables.
    pub fn ledger(&self) -> ledger::LedgerConfig {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        ledger::LedgerConfig {
            max_attempts: u32::try_from(self.count("delivery", "max_attempts").max(1))
                .unwrap_or(u32::MAX),
            replay_max_age_ms: ms(self.duration("delivery", "replay_max_age_hours", 3600.0)),
            retention_ms: ms(self.duration("delivery", "retention_days", 86_400.0)),
            ..ledger::LedgerConfig::default()
        }
    }

    /// The registry's settings for `home`.
    pub fn registry(&self, home: &Path) -> registry::Config {
        let mut c = registry::Config::new(home);
        c.max_concurrent_children = self.max_concurrent_children();
        c.max_queued = u32::try_from(self.count("delegation", "max_queued")).unwrap_or(u32::MAX);
        c.stall_idle = self.duration("delegation", "stall_idle_seconds", 1.0);
        c.stall_in_tool = self.duration("delegation", "stall_in_tool_seconds", 1.0);
        c.stall_grace = self.duration("delegation", "stall_grace_seconds", 1.0);
        let timeout = self.duration("delegation", "child_timeout_seconds", 1.0);
        c.child_timeout = (!timeout.is_zero()).then_some(timeout);
        c.kill_grace = self.duration("delegation", "kill_grace_seconds", 1.0);
        c.result_max_bytes =
            usize::try_from(self.count("delegation", "result_max_bytes")).unwrap_or(usize::MAX);
        c.transcript_retention = self.duration("delegation", "transcript_retention_days", 86_400.0);
        c.transcript_max_bytes = self.count("delegation", "transcript_max_bytes");
        c.sweep_interval = self.sweep_interval();
        c
    }
}

fn apply_file(
    values: &mut BTreeMap<(&'static str, &'static str), f64>,
    file: &Path,
    text: &str,
) -> anyhow::Result<()> {
    let bad = |what: String| fail(Code::Usage, format!("config {}: {what}", file.display()));
    let table: toml::Table = toml::from_str(text)
        .map_err(|e| bad(format!("not valid TOML: {}", one_line(&e.to_string()))))?;
    for (section, body) in &table {
        let toml::Value::Table(body) = body else {
            return Err(bad(format!("`{section}` must be a [section]")));
        };
        for (key, value) in body {
            let Some((s, k, kind, _)) = KEYS.iter().find(|(s, k, _, _)| s == section && k == key)
            else {
                return Err(bad(format!("unknown key `{section}.{key}`")));
            };
            let number = match value {
                toml::Value::Integer(i) if *i >= 0 => Some(*i as f64),
                toml::Value::Float(f) if *kind == Kind::Decimal && *f >= 0.0 && f.is_finite() => {
                    Some(*f)
                }
                _ => None,
            };
            let number = number
                .ok_or_else(|| bad(format!("`{section}.{key}` must be {}", kind_name(*kind))))?;
            values.insert((s, k), number);
        }
    }
    Ok(())
}

fn parse_number(raw: &str, kind: Kind) -> Option<f64> {
    match kind {
        Kind::Count => raw.parse::<u64>().ok().map(|n| n as f64),
        Kind::Decimal => raw
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite() && *f >= 0.0),
    }
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Count => "a non-negative whole number",
        Kind::Decimal => "a non-negative number",
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `$HERMES_HOME`, else `~/.hermes`.
pub fn home_dir(env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<PathBuf> {
    if let Some(home) = env("HERMES_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(home));
    }
    match env("HOME").filter(|h| !h.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".hermes")),
        None => Err(fail(
            Code::Usage,
            "neither HERMES_HOME nor HOME is set; set HERMES_HOME to a directory hermes may use",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str, env: &[(&str, &str)]) -> anyhow::Result<Settings> {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("config.toml");
        std::fs::write(&file, text).expect("write");
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::load(&file, &move |name| {
            env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn defaults_follow_the_spec() {
        let s = load("", &[]).expect("loads");
        let r = s.registry(Path::new("/h"));
        assert_eq!(r, registry::Config::new(Path::new("/h")));
        assert_eq!(s.ledger(), ledger::LedgerConfig::default());
        assert_eq!(s.claim_lease(), Duration::from_secs(300));
        assert_eq!(s.idle_exit(), Duration::from_secs(60));
    }

    #[test]
    fn file_then_environment() {
        let s = load(
            "[delegation]\nstall_idle_seconds = 10\nmax_concurrent_children = 5\n",
            &[("HERMES_DELEGATION_STALL_IDLE_SECONDS", "2.5")],
        )
        .expect("loads");
        let r = s.registry(Path::new("/h"));
        assert_eq!(r.stall_idle, Duration::from_millis(2500));
        assert_eq!(r.max_concurrent_children, 5);
    }

    #[test]
    fn bad_keys_name_the_file_and_key() {
        let err = load("[delegation]\nstal_idle_seconds = 1\n", &[]).expect_err("refused");
        assert!(
            err.to_string().contains("delegation.stal_idle_seconds"),
            "{err}"
        );
        assert!(err.to_string().contains("config.toml"), "{err}");
        let err = load("[delivery]\nmax_attempts = 1.5\n", &[]).expect_err("refused");
        assert!(err.to_string().contains("delivery.max_attempts"), "{err}");
        let err = load("", &[("HERMES_HOST_IDLE_EXIT_SECONDS", "soon")]).expect_err("refused");
        assert!(
            err.to_string().contains("HERMES_HOST_IDLE_EXIT_SECONDS"),
            "{err}"
        );
    }
}
