//! The JSON a hook-driven agent CLI sends a hook on stdin. Only the fields hermes reads are
//! named; the agents add fields freely, so unknown ones are ignored.

use std::io::Read as _;

use serde::Deserialize;

use crate::exit::{Code, fail};

/// One hook invocation's input.
#[derive(Debug, Default, Deserialize)]
pub struct HookInput {
    /// The agent's conversation id.
    #[serde(default)]
    pub session_id: Option<String>,
    /// `SessionStart`, `PostToolUse`, … (informational: the command line names the event).
    #[serde(default)]
    pub hook_event_name: Option<String>,
    /// The conversation's working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// `Stop`: the agent is already going on because a stop hook blocked it.
    #[serde(default)]
    pub stop_hook_active: bool,
    /// `PostToolUse`: the tool that ran.
    #[serde(default)]
    pub tool_name: Option<String>,
}

/// Reads and parses stdin. Anything but a JSON object is bad input (exit 2); nothing has been
/// consumed yet when this fails.
pub fn read_stdin() -> anyhow::Result<HookInput> {
    let mut text = Vec::new();
    std::io::stdin().read_to_end(&mut text).map_err(|e| {
        fail(
            Code::Usage,
            format!("cannot read the hook's JSON on stdin: {e}"),
        )
    })?;
    parse(&text)
}

/// Parses a hook's input.
pub fn parse(text: &[u8]) -> anyhow::Result<HookInput> {
    serde_json::from_slice(text).map_err(|e| {
        fail(
            Code::Usage,
            format!("the hook's input on stdin is not the JSON object agents send: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_payloads_parse_and_extra_fields_are_ignored() {
        let input = parse(
            br#"{"session_id":"abc-1","transcript_path":"/t.jsonl","cwd":"/w","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"ls"},"tool_response":{"stdout":""}}"#,
        )
        .expect("parses");
        assert_eq!(input.session_id.as_deref(), Some("abc-1"));
        assert_eq!(input.tool_name.as_deref(), Some("Bash"));
        assert!(!input.stop_hook_active);
        let stop = parse(br#"{"session_id":"s","stop_hook_active":true}"#).expect("parses");
        assert!(stop.stop_hook_active);
    }

    #[test]
    fn anything_else_is_bad_input() {
        for text in [&b""[..], b"{", b"[1]", b"\"x\"", b"{\"session_id\":3}"] {
            let err = parse(text).expect_err("refused");
            assert_eq!(crate::exit::code_of(&err), Code::Usage);
        }
    }
}
