//! The agent integration's figures, with the release `hermes` binary; prints one
//! JSON object on stdout. Run with `cargo run --release -p hermes-cli --example bench_agent` (what
//! `cargo xtask bench` does).
//!
//! - `hook_nothing_ready_ms_p50`: a whole `hermes hook post-tool-use` process (the hook that
//!   runs after every tool call) for a bound conversation with nothing ready. Target ≤ 5 ms.
//! - `mcp_delegate_background_ms_p50`: a background `delegate_task` call to a running `hermes
//!   mcp` whose conversation the hooks bound (so the unit goes to the session's headless
//!   host), from writing the request line to reading its response. Target ≤ 10 ms.
//! - `hook_deliver_ms_p50`: a whole `hermes hook user-prompt-submit` process that finds one
//!   ready result, prints it and acknowledges it. Target ≤ 10 ms.

mod support;

use support::release_binary;

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};

/// A hook's input as hook-driven agent CLIs send it after a tool call.
const PAYLOAD: &str = r#"{"session_id":"bench-conv","transcript_path":"/tmp/bench-conv.jsonl","cwd":"/tmp","permission_mode":"default","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"ls"},"tool_response":{"stdout":"Cargo.toml\nsrc\n","stderr":"","interrupted":false},"tool_use_id":"toolu_01"}"#;

fn main() -> Result<()> {
    let exe = release_binary()?;
    let home = support::private_home()?;
    let mut figures = serde_json::Map::new();

    // The conversation is bound (this process is its agent) and has delivered everything.
    hook(&exe, home.path(), "session-start")?;
    let samples = (0..40)
        .map(|_| {
            let start = Instant::now();
            let out = hook(&exe, home.path(), "post-tool-use")?;
            let ms = start.elapsed().as_secs_f64() * 1000.0;
            if !out.is_empty() {
                bail!("the hook printed something with nothing ready: {out}");
            }
            Ok(ms)
        })
        .collect::<Result<Vec<_>>>()?;
    figures.insert("hook_nothing_ready_ms_p50".into(), median(samples));

    let mut server = Server::start(&exe, home.path())?;
    // The first dispatch records the session and its host; the figure is the steady state.
    let mut ids = vec![server.delegate(0)?];
    let samples = (1..=30)
        .map(|i| {
            let start = Instant::now();
            ids.push(server.delegate(i)?);
            Ok(start.elapsed().as_secs_f64() * 1000.0)
        })
        .collect::<Result<Vec<_>>>()?;
    figures.insert("mcp_delegate_background_ms_p50".into(), median(samples));

    // Take what those dispatches produced, so each sample below finds exactly one result.
    for id in &ids {
        wait_ready(&exe, home.path(), id)?;
    }
    let drained = command(&exe, home.path(), &["drain", "--session", "bench-conv"])
        .output()
        .context("drain")?;
    if !drained.status.success() {
        bail!("drain failed: {}", String::from_utf8_lossy(&drained.stderr));
    }

    let samples = (100..120)
        .map(|i| {
            let id = server.delegate(i)?;
            wait_ready(&exe, home.path(), &id)?;
            let start = Instant::now();
            let out = hook(&exe, home.path(), "user-prompt-submit")?;
            let ms = start.elapsed().as_secs_f64() * 1000.0;
            if !out.contains(&id) {
                bail!("the hook did not deliver {id}: {out}");
            }
            Ok(ms)
        })
        .collect::<Result<Vec<_>>>()?;
    figures.insert("hook_deliver_ms_p50".into(), median(samples));
    drop(server);
    println!("{}", Value::Object(figures));
    Ok(())
}

fn command(exe: &Path, home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(exe);
    c.args(args)
        .env("HERMES_HOME", home)
        .env("HERMES_DELEGATION_MAX_CONCURRENT_CHILDREN", "16")
        .env_remove("HERMES_SESSION_ID")
        .env_remove("RUST_LOG");
    c
}

/// Runs one hook with the payload; returns its stdout.
fn hook(exe: &Path, home: &Path, event: &str) -> Result<String> {
    let mut child = command(exe, home, &["hook", event])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running hermes hook")?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(PAYLOAD.as_bytes())
        .context("writing the payload")?;
    let out = child.wait_with_output().context("waiting for the hook")?;
    if !out.status.success() {
        bail!(
            "hermes hook {event} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A `hermes mcp` child spoken to in JSON-RPC lines.
struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Server {
    fn start(exe: &Path, home: &Path) -> Result<Server> {
        let mut child = command(exe, home, &["mcp"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting hermes mcp")?;
        let mut server = Server {
            stdin: child.stdin.take().context("stdin")?,
            stdout: BufReader::new(child.stdout.take().context("stdout")?),
            child,
        };
        server.request(
            json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "bench_agent", "version": "1"}}}),
        )?;
        server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(server)
    }

    fn send(&mut self, message: &Value) -> Result<()> {
        writeln!(self.stdin, "{message}").context("writing to hermes mcp")?;
        self.stdin.flush().context("flushing")
    }

    fn request(&mut self, message: Value) -> Result<Value> {
        let id = message["id"].clone();
        self.send(&message)?;
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line).context("reading")? == 0 {
                bail!("hermes mcp closed its output");
            }
            let value: Value = serde_json::from_str(&line).context("a JSON-RPC line")?;
            if value["id"] == id {
                return Ok(value);
            }
        }
    }

    /// Dispatches `true` in the background; returns the delegation id.
    fn delegate(&mut self, i: usize) -> Result<String> {
        let answer = self.request(json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
            "params": {"name": "delegate_task", "arguments": {"goal": format!("bench {i}"), "command": ["true"]}}}))?;
        if answer["result"]["isError"] != false {
            bail!("delegate_task failed: {answer}");
        }
        let text = answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("");
        let handle: Value = serde_json::from_str(text).context("the dispatch JSON")?;
        if handle["session"] != "bench-conv" || handle.get("warning").is_some() {
            bail!("the dispatch did not land in the bound conversation: {handle}");
        }
        Ok(handle["delegation_id"].as_str().unwrap_or("").to_owned())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (up to 20 s) until the delegation's result is published.
fn wait_ready(exe: &Path, home: &Path, id: &str) -> Result<()> {
    let deadline = Instant::now() + std::time::Duration::from_secs(20);
    while Instant::now() < deadline {
        let out = command(exe, home, &["delegation", "status", id, "--json"])
            .output()
            .context("delegation status")?;
        let status: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if status["events"].as_array().is_some_and(|e| !e.is_empty()) {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    bail!("{id} was not ready within 20 s")
}

fn median(mut samples: Vec<f64>) -> Value {
    samples.sort_by(f64::total_cmp);
    let m = samples.get(samples.len() / 2).copied().unwrap_or(0.0);
    json!((m * 100.0).round() / 100.0)
}
