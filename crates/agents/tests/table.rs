//! The table of agents: what each offers. (That every agent's name stays in its own file is
//! checked by `cargo xtask ci`'s shape check, `xtask/src/shape.rs`.)

use hermes_agents::{AGENTS, Action, HookBoundary, Start, inject_falls_back};
use serde_json::json;

#[test]
fn each_agent_offers_the_boundaries_its_documentation_names() {
    let table: Vec<(&str, bool, bool)> = AGENTS
        .iter()
        .map(|a| (a.name, a.has_tool_boundary(), a.has_session_end()))
        .collect();
    assert_eq!(
        table,
        [
            ("claude", true, true),
            ("codex", true, true),
            ("gemini", true, true),
            ("copilot", true, true),
            ("cursor", false, true),
            ("cline", false, false),
            ("hermes-agent", true, true),
        ]
    );
    for agent in AGENTS {
        assert!(
            agent
                .events
                .iter()
                .any(|e| matches!(e.action, Action::Deliver(HookBoundary::Turn) | Action::Stop)),
            "{} delivers at some turn boundary",
            agent.name
        );
        assert!(agent.budget >= 2_000, "{}", agent.name);
    }
    assert!(inject_falls_back("cursor") && inject_falls_back("cline"));
    assert!(!inject_falls_back("copilot"));
    assert!(!inject_falls_back("claude") && !inject_falls_back("nobody"));
}

#[test]
fn names_are_listed_from_the_table() {
    assert_eq!(
        hermes_agents::names("or"),
        "claude, codex, gemini, copilot, cursor, cline or hermes-agent"
    );
    assert_eq!(
        hermes_agents::child_names(""),
        "claude, codex, gemini, hermes-agent"
    );
    assert_eq!(hermes_agents::DEFAULT_HOOK_AGENT, "claude");
}

#[test]
fn hook_inputs_are_read_by_each_agents_fields() {
    let find = |n| hermes_agents::find(n).expect(n);
    let claude = find("claude");
    assert_eq!(claude.start(&json!({"source": "resume"})), Start::Resume);
    assert_eq!(claude.start(&json!({"source": "startup"})), Start::Fresh);
    assert_eq!(claude.start(&json!({"source": "clear"})), Start::Other);
    let copilot = find("copilot");
    assert_eq!(copilot.start(&json!({"source": "new"})), Start::Fresh);
    assert_eq!(copilot.session_field, "sessionId");
    assert!(copilot.stop_active(&json!({"stop_hook_active": true})));
    let tool = copilot.event("post-tool-use").expect("postToolUse");
    assert_eq!(
        copilot.answer(&tool, "r"),
        json!({"additionalContext": "r"})
    );
    let stop = copilot.event("stop").expect("agentStop");
    assert_eq!(
        copilot.answer(&stop, "r"),
        json!({"decision": "block", "reason": "r"})
    );
    let cline = find("cline");
    assert_eq!(
        cline.start(&json!({"hookName": "agent_resume"})),
        Start::Resume
    );
    assert_eq!(
        cline.start(&json!({"hookName": "agent_start"})),
        Start::Fresh
    );
    assert_eq!(cline.fail_open(), Some(json!({"cancel": false})));
    let cursor = find("cursor");
    assert!(cursor.stop_active(&json!({"loop_count": 1})));
    assert!(!cursor.stop_active(&json!({"loop_count": 0})));
    assert_eq!(cursor.session_field, "conversation_id");
    assert!(find("gemini").stop_active(&json!({"stop_hook_active": true})));
    // Hermes Agent: a plugin's (or shell hook's) `{"context": …}`, the 10,000 characters it
    // keeps before spilling to a file, no stop hook.
    let upstream = find("hermes-agent");
    let turn = upstream
        .event("user-prompt-submit")
        .expect("a turn boundary");
    assert_eq!(upstream.answer(&turn, "t"), json!({"context": "t"}));
    assert_eq!(upstream.budget, 10_000);
    assert!(upstream.event("stop").is_none() && !upstream.stop_active(&json!({})));
    let child = upstream.child.as_ref().expect("runs as a child");
    assert_eq!(child.own_home, Some("HERMES_HOME"));
    assert!(child.not_self && child.stream == hermes_agents::StreamFormat::Plain);
}

/// The README's table of boundaries is the profiles': each agent's row names every hook event it
/// installs, says "—" for a stop or a session end exactly when it has none, and gives its
/// answer budget.
#[test]
fn the_readmes_table_of_boundaries_is_the_profiles() {
    let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"));
    let table = readme
        .split("| agent | session start |")
        .nth(1)
        .expect("the README has the table of boundaries");
    for agent in AGENTS {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("| {}", agent.title)))
            .unwrap_or_else(|| panic!("no row for {}", agent.title));
        for event in agent.events {
            assert!(
                row.contains(&format!("`{}`", event.name)),
                "{}: {row}",
                event.name
            );
        }
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let has_stop = agent.events.iter().any(|e| e.action == Action::Stop);
        assert_eq!(
            cells[5].starts_with('—'),
            !has_stop,
            "the stop column: {row}"
        );
        assert_eq!(
            cells[6].starts_with('—'),
            !agent.has_session_end(),
            "the session-end column: {row}"
        );
        let budget = agent.budget.to_string();
        let (thousands, rest) = budget.split_at(budget.len() - 3);
        assert_eq!(cells[7], format!("{thousands},{rest} chars"), "{row}");
    }
}
