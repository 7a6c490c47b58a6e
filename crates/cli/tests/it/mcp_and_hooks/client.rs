//! Talking to `hermes mcp`: through rmcp's client, and raw JSON-RPC lines for what a
//! well-behaved client never sends.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt as _};
use serde_json::Value;

use crate::common::Hermes;

/// An MCP client session with a `hermes mcp` child.
pub struct Mcp {
    pub client: RunningService<RoleClient, ()>,
}

/// A tool's answer.
#[derive(Debug)]
pub struct Answer {
    pub is_error: bool,
    pub text: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
}

impl From<CallToolResult> for Answer {
    fn from(r: CallToolResult) -> Answer {
        Answer {
            is_error: r.is_error.unwrap_or(false),
            text: r
                .content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// The `hermes mcp` command for `h`, with `env` on top.
pub fn mcp_command(h: &Hermes, env: &[(&str, &str)]) -> Command {
    let mut c = h.command(&["mcp"]);
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// Where the servers of `h` log (stderr), for a failing test to show.
pub fn stderr_log(h: &Hermes) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(h.path().join("mcp-stderr.log"))
        .expect("stderr log")
}

impl Mcp {
    /// Starts `hermes mcp` and initializes the session.
    pub async fn start(h: &Hermes, env: &[(&str, &str)]) -> Mcp {
        let command = tokio::process::Command::from(mcp_command(h, env));
        let transport = TokioChildProcess::builder(command)
            .stderr(stderr_log(h))
            .spawn()
            .expect("hermes mcp starts")
            .0;
        let client = ().serve(transport).await.expect("initialize");
        Mcp { client }
    }

    /// Calls a tool; a protocol error panics.
    pub async fn call(&self, tool: &str, args: Value) -> Answer {
        let Value::Object(args) = args else {
            panic!("arguments must be an object")
        };
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args);
        self.client
            .call_tool(params)
            .await
            .unwrap_or_else(|e| panic!("{tool} failed at the protocol level: {e}"))
            .into()
    }
}

/// Raw JSON-RPC lines to and from a `hermes mcp` child.
pub struct Raw {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Raw {
    pub fn start(h: &Hermes, env: &[(&str, &str)]) -> Raw {
        let mut child = mcp_command(h, env)
            .stderr(stderr_log(h))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("hermes mcp starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        let mut raw = Raw {
            child,
            stdin,
            lines,
        };
        raw.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#);
        let init = raw.response(0);
        assert_eq!(init["result"]["serverInfo"]["name"], "hermes", "{init}");
        raw.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        raw
    }

    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write to hermes mcp");
        stdin.flush().expect("flush");
    }

    /// The response with `id` (other lines are skipped).
    pub fn response(&mut self, id: i64) -> Value {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("no response {id} from hermes mcp"));
            let value: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
                panic!("hermes mcp wrote a line that is not JSON ({e}): {line}")
            });
            if value["id"] == id {
                return value;
            }
        }
    }

    /// The next line the server writes, as JSON.
    pub fn line(&mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no line from hermes mcp"));
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("hermes mcp wrote a line that is not JSON ({e}): {line}"))
    }

    /// Closes stdin: the client has gone away.
    pub fn close(&mut self) {
        self.stdin = None;
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
