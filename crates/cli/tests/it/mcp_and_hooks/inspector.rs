//! The MCP Inspector's command line (`npx @modelcontextprotocol/inspector --cli …`) against
//! `hermes mcp`: it reads each argument's type from the tool's schema, so a
//! schema it cannot read sends an array or a boolean as a string. The Inspector is installed
//! with npm, once, into a directory of its own under cargo's target directory; a machine
//! without Node and npm fails this test, it does not skip it.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use super::standin::wait_ready;
use crate::common::Hermes;

/// The Inspector release the test runs.
const INSPECTOR: &str = "@modelcontextprotocol/inspector@0.15.0";

/// The Inspector's CLI, installed on first use.
fn inspector() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mcp-inspector");
        let bin = dir.join("node_modules/.bin/mcp-inspector");
        std::fs::create_dir_all(&dir).expect("inspector dir");
        // Another test process (the PostgreSQL run beside the redb one) may be installing it.
        let lock = std::fs::File::create(dir.join(".install-lock")).expect("lock file");
        lock.lock().expect("lock the inspector dir");
        if !bin.exists() {
            let out = Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--prefix"])
                .arg(&dir)
                .arg(INSPECTOR)
                .output()
                .expect("npm runs (Node 20 and npm are needed for this test)");
            assert!(
                out.status.success() && bin.exists(),
                "npm install {INSPECTOR} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        drop(lock);
        bin
    })
}

/// `mcp-inspector --cli hermes mcp -e …(this home's environment) ARGS`: its JSON answer.
fn call(h: &Hermes, args: &[&str]) -> Value {
    let probe = h.command(&[]);
    let mut c = Command::new(inspector());
    c.arg("--cli").arg(env!("CARGO_BIN_EXE_hermes")).arg("mcp");
    // The Inspector starts the server with a minimal environment: hand it this home's.
    for (k, v) in probe.get_envs() {
        if let (Some(k), Some(v)) = (k.to_str(), v.and_then(|v| v.to_str())) {
            c.arg("-e").arg(format!("{k}={v}"));
        }
    }
    c.arg("-e").arg("HERMES_SESSION_ID=inspector-1").args(args);
    let out = c.output().expect("the inspector runs");
    assert!(
        out.status.success(),
        "inspector {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the inspector prints JSON")
}

fn text(answer: &Value) -> &str {
    assert_eq!(answer["isError"], false, "{answer}");
    answer["content"][0]["text"].as_str().expect("text")
}

#[test]
fn the_inspector_cli_lists_the_tools_and_calls_delegate_task_with_every_argument_shape() {
    let h = Hermes::new();
    let listed = call(&h, &["--method", "tools/list"]);
    let tools = listed["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 6, "{listed}");
    let schemas =
        Value::Array(tools.iter().map(|t| t["inputSchema"].clone()).collect()).to_string();
    for refused in ["$ref", "$defs", "\"type\":[", "\"null\""] {
        assert!(!schemas.contains(refused), "{refused} in {schemas}");
    }
    // An array, as the Inspector sends it.
    let background = call(
        &h,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "delegate_task",
            "--tool-arg",
            "goal=hi",
            "--tool-arg",
            r#"command=["echo","x"]"#,
        ],
    );
    let handle: Value = serde_json::from_str(text(&background)).expect("dispatch JSON");
    let id = handle["delegation_id"].as_str().expect("id");
    wait_ready(&h, id);
    let status = h.json(&["delegation", "status", id, "--json"]);
    assert_eq!(status["status"], "completed", "{status}");
    // A boolean and a number, and a batch given as JSON text.
    let inline = call(
        &h,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "delegate_task",
            "--tool-arg",
            "goal=inline",
            "--tool-arg",
            r#"command=["echo","inline-x"]"#,
            "--tool-arg",
            "background=false",
            "--tool-arg",
            "timeout_seconds=30",
        ],
    );
    assert!(text(&inline).contains("inline-x"), "{inline}");
    let batch = call(
        &h,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "delegate_task",
            "--tool-arg",
            r#"tasks=[{"goal":"one","command":["echo","b1"]},{"goal":"two","command":["echo","b2"]}]"#,
            "--tool-arg",
            "background=false",
        ],
    );
    let t = text(&batch);
    assert!(t.contains("b1") && t.contains("b2"), "{t}");
}
