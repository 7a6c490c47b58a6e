use std::time::Duration;

use super::*;

fn load(text: &str, env: &[(&str, &str)]) -> Result<Settings, SettingsError> {
    Settings::load(Some(("/h/config.toml", text)), env.iter().copied())
}

#[test]
fn defaults_follow_the_spec() {
    let s = Settings::default();
    assert_eq!(s.delegation.max_concurrent_children, 3);
    assert_eq!(s.delegation.max_queued, 100);
    assert_eq!(s.delegation.stall_idle, Duration::from_secs(450));
    assert_eq!(s.delegation.stall_in_tool, Duration::from_secs(1200));
    assert_eq!(s.delegation.stall_grace, Duration::from_secs(120));
    assert_eq!(s.delegation.child_timeout, None);
    assert_eq!(s.delegation.kill_grace, Duration::from_secs(5));
    assert_eq!(s.delegation.result_max_bytes, 65_536);
    assert_eq!(
        s.delegation.transcript_retention,
        Duration::from_secs(7 * 86_400)
    );
    assert_eq!(s.delegation.transcript_max_bytes, 64 << 20);
    assert_eq!(s.delivery.claim_lease, Duration::from_secs(300));
    assert_eq!(s.delivery.heartbeat, Duration::from_secs(60));
    assert_eq!(s.delivery.max_attempts, 8);
    assert_eq!(s.delivery.replay_max_age, Duration::from_secs(48 * 3_600));
    assert_eq!(s.delivery.retention, Duration::from_secs(7 * 86_400));
    assert_eq!(s.host.sweep_interval, Duration::from_millis(1000));
    assert_eq!(s.host.idle_exit, Duration::from_secs(60));
    assert_eq!(s.host.heartbeat, Duration::from_secs(5));
    assert_eq!(s.host.lease, Duration::from_secs(30));
    assert_eq!(s.host.self_fence_after(), Duration::from_secs(25));
    assert_eq!(s.host.recovery_interval, Duration::from_secs(3));
    assert_eq!(load("", &[]).expect("loads"), s);
}

#[test]
fn an_agents_exit_detaches_unless_the_user_wants_the_old_end() {
    use crate::AgentExit;
    assert_eq!(
        load("", &[]).expect("loads").session.on_agent_exit,
        AgentExit::Detach
    );
    let s = load("[session]\non_agent_exit = \"end\"\n", &[]).expect("loads");
    assert_eq!(s.session.on_agent_exit, AgentExit::End);
    let s = load("", &[("HERMES_SESSION_ON_AGENT_EXIT", "end")]).expect("loads");
    assert_eq!(s.session.on_agent_exit, AgentExit::End);
    assert!(load("[session]\non_agent_exit = \"kill\"\n", &[]).is_err());
}

#[test]
fn the_sandbox_policy_is_read_and_checked() {
    let s = load("", &[]).expect("loads");
    assert_eq!(
        (s.sandbox.default, s.sandbox.mcp_default, s.sandbox.mcp_max),
        ("full", "workspace-write", "workspace-write")
    );
    assert!(s.sandbox.network_commands && s.sandbox.network_agents);
    assert_eq!(s.mcp_commands, crate::McpCommands::Any);
    let text = "[sandbox]\ndefault = \"read-only\"\nmcp_max = \"full\"\nnetwork_commands = \"off\"\n\
                [mcp]\ncommands = [\"pytest\", \"cargo\"]\n";
    let s = load(text, &[]).expect("loads");
    assert_eq!(
        (s.sandbox.default, s.sandbox.mcp_max),
        ("read-only", "full")
    );
    assert!(!s.sandbox.network_commands && s.sandbox.network_agents);
    assert!(s.mcp_commands.allows("/usr/bin/pytest") && !s.mcp_commands.allows("sh"));
    let s = load(
        "",
        &[
            ("HERMES_MCP_COMMANDS", "none"),
            ("HERMES_SANDBOX_DEFAULT", "workspace-write"),
        ],
    )
    .expect("loads");
    assert!(!s.mcp_commands.allows("true"));
    assert_eq!(s.sandbox.default, "workspace-write");
    assert!(load("[sandbox]\ndefault = \"open\"\n", &[]).is_err());
    assert!(load("[sandbox]\nnetwork_agents = \"yes\"\n", &[]).is_err());
    assert!(load("[mcp]\ncommands = []\n", &[]).is_err());
    assert!(load("[mcp]\ncommands = [\"/bin/sh\"]\n", &[]).is_err());
}

#[test]
fn the_default_workspace_is_read_and_checked() {
    assert_eq!(load("", &[]).expect("loads").delegation.workspace, "none");
    let s = load("[delegation]\nworkspace = \"worktree\"\n", &[]).expect("loads");
    assert_eq!(s.delegation.workspace, "worktree");
    let s = load("", &[("HERMES_DELEGATION_WORKSPACE", "worktree")]).expect("loads");
    assert_eq!(s.delegation.workspace, "worktree");
    assert!(load("[delegation]\nworkspace = \"copy\"\n", &[]).is_err());
}

#[test]
fn every_default_is_within_its_own_bounds() {
    for key in KEYS {
        assert!(key.bounds.admits(key.default), "{key:?}");
        assert!(SECTIONS.contains(&key.section), "{key:?}");
    }
}

#[test]
fn file_then_environment() {
    let s = load(
        "[delegation]\nstall_idle_seconds = 10\nmax_concurrent_children = 5\n",
        &[("HERMES_DELEGATION_STALL_IDLE_SECONDS", "2.5")],
    )
    .expect("loads");
    assert_eq!(s.delegation.stall_idle, Duration::from_millis(2500));
    assert_eq!(s.delegation.max_concurrent_children, 5);
}

#[test]
fn zero_turns_the_timeout_off() {
    let s = load("[delegation]\nchild_timeout_seconds = 2\n", &[]).expect("loads");
    assert_eq!(s.delegation.child_timeout, Some(Duration::from_secs(2)));
    let s = load("", &[("HERMES_DELEGATION_CHILD_TIMEOUT_SECONDS", "0")]).expect("loads");
    assert_eq!(s.delegation.child_timeout, None);
}

#[test]
fn bad_keys_name_the_file_and_key() {
    let err = load("[delegation]\nstal_idle_seconds = 1\n", &[]).expect_err("refused");
    assert_eq!(
        err.to_string(),
        "config /h/config.toml: unknown key `delegation.stal_idle_seconds`"
    );
    let err = load("[delivery]\nmax_attempts = 1.5\n", &[]).expect_err("refused");
    assert!(err.to_string().contains("delivery.max_attempts"), "{err}");
    let err = load("", &[("HERMES_HOST_IDLE_EXIT_SECONDS", "soon")]).expect_err("refused");
    assert!(
        err.to_string().contains("HERMES_HOST_IDLE_EXIT_SECONDS"),
        "{err}"
    );
    let err = load("delegation = 3\n", &[]).expect_err("refused");
    assert!(matches!(err, SettingsError::NotASection { .. }), "{err}");
    let err = load("[delegation\n", &[]).expect_err("refused");
    assert!(matches!(err, SettingsError::Toml { .. }), "{err}");
}

#[test]
fn values_that_would_stop_the_system_are_refused_naming_the_key() {
    for (text, key) in [
        (
            "[delegation]\nmax_concurrent_children = 0\n",
            "delegation.max_concurrent_children",
        ),
        (
            "[delivery]\nclaim_lease_seconds = 0.0004\n",
            "delivery.claim_lease_seconds",
        ),
        ("[delivery]\nmax_attempts = 0\n", "delivery.max_attempts"),
        ("[host]\nsweep_interval_ms = 0\n", "host.sweep_interval_ms"),
        (
            "[delegation]\nstall_idle_seconds = -1\n",
            "delegation.stall_idle_seconds",
        ),
        (
            "[delegation]\nstall_idle_seconds = 1e300\n",
            "delegation.stall_idle_seconds",
        ),
        (
            "[delegation]\nstall_idle_seconds = nan\n",
            "delegation.stall_idle_seconds",
        ),
        (
            "[delegation]\nmax_queued = \"3\"\n",
            "delegation.max_queued",
        ),
    ] {
        let err = load(text, &[]).expect_err(text);
        assert!(err.to_string().contains(key), "{text}: {err}");
        assert!(
            matches!(err, SettingsError::BadValue { .. }),
            "{text}: {err}"
        );
    }
    let err = load("", &[("HERMES_DELEGATION_MAX_CONCURRENT_CHILDREN", "0")]).expect_err("0");
    assert_eq!(
        err.to_string(),
        "HERMES_DELEGATION_MAX_CONCURRENT_CHILDREN=\"0\" must be a whole number from 1 to 1024"
    );
    let err = load("", &[("HERMES_DELIVERY_CLAIM_LEASE_SECONDS", "1e300")]).expect_err("huge");
    assert!(
        err.to_string()
            .contains("HERMES_DELIVERY_CLAIM_LEASE_SECONDS"),
        "{err}"
    );
}

#[test]
fn unknown_overrides_of_our_sections_are_refused_and_others_left_alone() {
    let err = load("", &[("HERMES_DELEGATION_BOGUS", "1")]).expect_err("refused");
    assert_eq!(
        err,
        SettingsError::UnknownVariable {
            name: "HERMES_DELEGATION_BOGUS".into(),
            section: "delegation".into(),
            key: "bogus".into(),
        }
    );
    assert!(load("", &[("HERMES_LEDGER_BOGUS", "1")]).is_err());
    let fine = load(
        "",
        &[
            ("HERMES_HOME", "/h"),
            ("HERMES_SESSION_ID", "s"),
            ("HERMES_SESSION_TOKEN", "t"),
            ("HERMES_DELEGATION_ID", "deleg_0123456789ab"),
            ("HERMES_TASK_INDEX", "0"),
            ("HERMES_PROGRESS_FD", "3"),
            ("HERMES_PARENT_SESSION_ID", "p"),
            ("HERMESX_DELEGATION_BOGUS", "1"),
            ("PATH", "/bin"),
        ],
    );
    assert_eq!(fine, Ok(Settings::default()));
}

#[test]
fn every_key_has_an_override_that_round_trips() {
    for key in KEYS {
        let raw = key.default.to_string();
        let s = load("", &[(key.variable().as_str(), raw.as_str())]).expect("loads");
        assert_eq!(s, Settings::default(), "{key:?}");
    }
}

#[test]
fn flags_have_bounds_too() {
    assert!(Bounds::WAIT.parse("--wait 1e300", "1e300").is_err());
    assert!(Bounds::WAIT.parse("--wait", "inf").is_err());
    assert_eq!(
        Bounds::WAIT.parse_duration("--wait", "1.5"),
        Ok(Some(Duration::from_millis(1500)))
    );
    let err = Bounds::LEASE
        .parse("--lease 0.0004", "0.0004")
        .expect_err("tiny lease");
    assert_eq!(
        err.to_string(),
        "--lease 0.0004 must be a number from 0.1 to 86400 seconds"
    );
    assert_eq!(Bounds::TIMEOUT.parse_duration("--timeout", "0"), Ok(None));
    assert!(Bounds::TIMEOUT.parse("--timeout", "0.01").is_err());
}

#[test]
fn presented_claims_are_renewed_at_least_twice_per_lease() {
    let mut s = Settings::default();
    assert_eq!(s.delivery.renew_every(), Duration::from_secs(60));
    s.delivery.claim_lease = Duration::from_secs(10);
    assert_eq!(s.delivery.renew_every(), Duration::from_secs(5));
    s.delivery.heartbeat = Duration::from_secs(1);
    assert_eq!(s.delivery.renew_every(), Duration::from_secs(1));
}

#[test]
fn a_heartbeat_longer_than_half_the_lease_is_refused() {
    let err = load(
        "",
        &[
            ("HERMES_HOST_HEARTBEAT_SECONDS", "20"),
            ("HERMES_HOST_LEASE_SECONDS", "30"),
        ],
    )
    .expect_err("refused");
    assert!(err.to_string().contains("host.heartbeat_seconds"), "{err}");
    let ok = load(
        "",
        &[
            ("HERMES_HOST_HEARTBEAT_SECONDS", "0.2"),
            ("HERMES_HOST_LEASE_SECONDS", "1"),
        ],
    )
    .expect("loads");
    assert_eq!(ok.host.self_fence_after(), Duration::from_millis(800));
}

#[test]
fn the_ledger_url_is_a_postgres_url_from_file_or_environment_and_never_shows_its_password() {
    assert_eq!(load("", &[]).expect("defaults").ledger.url, None);
    let file = load("[ledger]\nurl = \"postgres://u:secret@db:5432/h\"\n", &[]).expect("file");
    let url = file.ledger.url.expect("set");
    assert_eq!(url.expose(), "postgres://u:secret@db:5432/h");
    assert_eq!(format!("{url:?}"), "postgres://u:***@db:5432/h");
    assert!(
        !format!(
            "{:?}",
            load("[ledger]\nurl = \"postgres://u:secret@db/h\"\n", &[]).unwrap()
        )
        .contains("secret")
    );
    let env = load(
        "[ledger]\nurl = \"postgres://file@db/h\"\n",
        &[("HERMES_LEDGER_URL", "postgresql://env@db/h")],
    )
    .expect("env wins");
    assert_eq!(
        env.ledger.url.expect("set").expose(),
        "postgresql://env@db/h"
    );
    let unset = load(
        "[ledger]\nurl = \"postgres://file@db/h\"\n",
        &[("HERMES_LEDGER_URL", "")],
    )
    .expect("empty unsets");
    assert_eq!(unset.ledger.url, None);
    let err = load("", &[("HERMES_LEDGER_URL", "mysql://x")]).expect_err("refused");
    assert!(err.to_string().contains("postgres://"), "{err}");
    let err = load("[ledger]\nurl = 5\n", &[]).expect_err("refused");
    assert!(err.to_string().contains("ledger.url"), "{err}");
    assert_eq!(redacted("postgres://u@h/d"), "postgres://u@h/d");
    assert_eq!(
        redacted("postgres://u:p@h/d?sslmode=require"),
        "postgres://u:***@h/d?sslmode=require"
    );
}

#[test]
fn agent_profiles_depth_and_the_default_agent_are_read() {
    let s = Settings::default();
    assert_eq!(s.delegation.max_depth, 2);
    assert_eq!(s.delegation.default_agent, None);
    assert!(s.agents.is_empty());
    let text = "[delegation]\nmax_depth = 3\ndefault_agent = \"reviewer\"\n\n\
                [agents.aider]\ncommand = [\"aider\", \"--message\", \"{prompt}\"]\nadapter = \"plain\"\n";
    let s = load(text, &[]).expect("loads");
    assert_eq!(s.delegation.max_depth, 3);
    assert_eq!(s.delegation.default_agent.as_deref(), Some("reviewer"));
    assert_eq!(
        s.agents,
        [crate::AgentOverride {
            name: "aider".into(),
            command: vec!["aider".into(), "--message".into(), "{prompt}".into()],
            adapter: Some("plain".into()),
        }]
    );
    let s = load("", &[("HERMES_DELEGATION_DEFAULT_AGENT", "builder")]).expect("loads");
    assert_eq!(s.delegation.default_agent.as_deref(), Some("builder"));
}

#[test]
fn bad_agent_profiles_are_refused_naming_the_key() {
    let cases = [
        ("[agents.x]\ncommand = []\n", "agents.x.command"),
        ("[agents.x]\ncommand = [\"x\"]\n", "{prompt}"),
        ("[agents.x]\nadapter = \"plain\"\n", "agents.x.command"),
        (
            "[agents.x]\ncommand = [\"x\", \"{prompt}\"]\nflags = 1\n",
            "agents.x.flags",
        ),
        ("[agents]\nx = 1\n", "agents.x"),
        ("[delegation]\nmax_depth = 0\n", "max_depth"),
    ];
    for (text, named) in cases {
        let err = load(text, &[]).expect_err(text);
        assert!(err.to_string().contains(named), "{text}: {err}");
    }
}

#[test]
fn the_ledger_namespace_defaults_to_hermes_and_is_a_checked_identifier_from_file_or_environment() {
    let defaults = load("", &[]).expect("defaults");
    assert_eq!(defaults.ledger.namespace.as_str(), "hermes");
    assert!(defaults.ledger.namespace.is_default());
    let file = load("[ledger]\nnamespace = \"team_a\"\n", &[]).expect("file");
    assert_eq!(file.ledger.namespace.as_str(), "team_a");
    assert!(!file.ledger.namespace.is_default());
    let env = load(
        "[ledger]\nnamespace = \"team_a\"\n",
        &[("HERMES_LEDGER_NAMESPACE", "team_b")],
    )
    .expect("env wins");
    assert_eq!(env.ledger.namespace.as_str(), "team_b");
    let unset = load(
        "[ledger]\nnamespace = \"team_a\"\n",
        &[("HERMES_LEDGER_NAMESPACE", "")],
    )
    .expect("empty unsets");
    assert!(unset.ledger.namespace.is_default());
    let long = "n".repeat(49);
    for bad in [
        "Team",
        "1st",
        "a-b",
        "a b",
        "a\"b",
        "pg_x",
        "x;drop",
        "é",
        long.as_str(),
    ] {
        let err = load("", &[("HERMES_LEDGER_NAMESPACE", bad)]).expect_err(bad);
        assert!(
            err.to_string().contains("HERMES_LEDGER_NAMESPACE"),
            "{bad}: {err}"
        );
    }
    let err = load("[ledger]\nnamespace = 5\n", &[]).expect_err("refused");
    assert!(err.to_string().contains("ledger.namespace"), "{err}");
    assert!(load("", &[("HERMES_LEDGER_NAMESPACE", &"n".repeat(48))]).is_ok());
}

#[test]
fn ledger_listen_url_comes_from_the_file_or_the_environment_and_must_be_postgres() {
    let file = load(
        "[ledger]\nurl = \"postgres://u@bouncer:6432/h\"\nlisten_url = \"postgres://u@db:5432/h\"\n",
        &[],
    )
    .expect("loads");
    assert_eq!(
        file.ledger.listen_url.expect("set").expose(),
        "postgres://u@db:5432/h"
    );
    let env = load("", &[("HERMES_LEDGER_LISTEN_URL", "postgresql://e@db/h")]).expect("loads");
    assert_eq!(
        env.ledger.listen_url.expect("set").expose(),
        "postgresql://e@db/h"
    );
    let unset = load(
        "[ledger]\nlisten_url = \"postgres://u@db/h\"\n",
        &[("HERMES_LEDGER_LISTEN_URL", "")],
    )
    .expect("empty unsets");
    assert_eq!(unset.ledger.listen_url, None);
    let err = load("", &[("HERMES_LEDGER_LISTEN_URL", "db:5432")]).expect_err("refused");
    assert!(
        err.to_string().contains("HERMES_LEDGER_LISTEN_URL"),
        "{err}"
    );
}

#[test]
fn a_password_in_the_query_is_masked_too() {
    assert_eq!(
        redacted("postgres://u@h/d?password=secret&sslmode=require"),
        "postgres://u@h/d?password=***&sslmode=require"
    );
}

#[test]
fn every_setting_says_where_it_came_from() {
    let (_, sources) = Settings::load_with_sources(
        Some((
            "/h/config.toml",
            "[delegation]\nmax_queued = 7\n[ledger]\nurl = \"postgres://u:secret@db/h\"\n\
             [agents.aider]\ncommand = [\"aider\", \"{prompt}\"]\n",
        )),
        [("HERMES_HOST_LEASE_SECONDS", "40"), ("HERMES_HOME", "/x")],
    )
    .expect("loads");
    let all = sources.effective();
    let find = |key: &str| {
        all.iter()
            .find(|e| e.key == key)
            .unwrap_or_else(|| panic!("{key} listed"))
            .clone()
    };
    let file = Source::File("/h/config.toml".into());
    assert_eq!(find("delegation.max_queued").value, Value::Number(7.0));
    assert_eq!(find("delegation.max_queued").source, file);
    assert_eq!(
        find("ledger.url").value,
        Value::Text("postgres://u:***@db/h".into())
    );
    assert_eq!(
        find("host.lease_seconds").source,
        Source::Environment("HERMES_HOST_LEASE_SECONDS".into())
    );
    assert_eq!(find("host.lease_seconds").value, Value::Number(40.0));
    assert_eq!(find("delegation.max_depth").source, Source::Default);
    assert_eq!(find("delegation.max_depth").value, Value::Number(2.0));
    assert_eq!(find("ledger.listen_url").value, Value::Unset);
    assert_eq!(find("ledger.namespace").value, Value::Text("hermes".into()));
    assert_eq!(find("agents.aider.command").source, file);
    // Every known key once, then the agents.
    assert_eq!(all.len(), known_keys().len() + 1);
}

/// The commented example in `docs/config.example.toml`.
const EXAMPLE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../docs/config.example.toml"
));

/// The `section.key` names a TOML text sets, `[agents]` aside.
fn keys_of(text: &str) -> Vec<String> {
    let table: toml::Table = toml::from_str(text).expect("the example is TOML");
    let mut keys = Vec::new();
    for (section, body) in &table {
        if section == "agents" {
            continue;
        }
        for name in body.as_table().expect("a section").keys() {
            keys.push(format!("{section}.{name}"));
        }
    }
    keys.sort();
    keys
}

#[test]
fn the_example_config_loads_to_the_defaults_and_names_every_key_once() {
    // As written: the keys set are at their defaults.
    assert_eq!(load(EXAMPLE, &[]).expect("loads"), Settings::default());
    // Uncommenting every `# key = value` line sets every known key exactly once.
    let uncommented: String = EXAMPLE
        .lines()
        .map(|line| match line.strip_prefix("# ") {
            Some(rest)
                if rest.starts_with(|c: char| c.is_ascii_lowercase() || c == '[')
                    && (rest.contains(" = ") || rest.starts_with('[')) =>
            {
                rest
            }
            _ => line,
        })
        .fold(String::new(), |mut text, line| {
            text.push_str(line);
            text.push('\n');
            text
        });
    load(&uncommented, &[]).expect("the uncommented example loads");
    let mut known: Vec<String> = known_keys().into_iter().map(|(k, _)| k).collect();
    known.sort();
    assert_eq!(keys_of(&uncommented), known);
    // Every default written in it is the key's default.
    for (key, default) in known_keys() {
        if let Value::Number(n) = default {
            let (section, name) = key.split_once('.').expect("section.key");
            let needle = format!("\n{name} = {n}");
            assert!(
                EXAMPLE.contains(&needle) || EXAMPLE.contains(&format!("\n# {name} = {n}")),
                "{key}: the example does not give its default {n} ({section})"
            );
        }
    }
}
