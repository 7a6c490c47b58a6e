//! A scripted model server for the real agent CLIs: an HTTP server on 127.0.0.1 (a free port)
//! that speaks one model API's wire protocol ([`Wire`]), records every request it gets, and
//! answers each from a script. The script sees the conversation as the agent sent it (the
//! last user text, whether the agent is answering a tool call, the tools it offered) and
//! chooses a [`Reply`]: text, a tool call, or an API error.
//!
//! The default script, [`by_prompt`], reads the scenario from the conversation itself, so
//! several conversations (an agent and its subagents, two turns) may share one server:
//!
//! - the agent is answering a tool call (the last message is a tool result): the text `done`;
//! - the last user text holds a line `CALL <tool> <json arguments>` (the last such line): a
//!   call of the first offered tool whose name ends with `<tool>`;
//! - a line `SAY <text>`: that text;
//! - a line `FAIL <status> <message>`: that API error;
//! - anything else: the text `ok`.
//!
//! What the tests assert is read from [`ModelServer::requests`]: what the agent sent its
//! model. [`occurrences`] counts a text in one request's strings (each request carries the
//! whole conversation, so the last one shows everything the model was given).

mod anthropic;
mod chat;
mod gemini;
mod responses;

pub use gemini::model_of as gemini_model_of;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// The model APIs the agents speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// OpenAI chat completions (`POST …/chat/completions`, SSE when `stream` is set): GitHub
    /// Copilot CLI with a provider of its own, Cline, upstream Hermes Agent.
    Chat,
    /// Anthropic Messages (`POST …/v1/messages`, SSE when `stream` is set): Claude Code.
    Anthropic,
    /// The Gemini API (`POST /v1beta/models/MODEL:streamGenerateContent?alt=sse`,
    /// `:generateContent`, `:countTokens`): Gemini CLI.
    Gemini,
    /// OpenAI Responses (`POST …/responses`, server-sent events): Codex CLI.
    Responses,
}

/// One request the server got.
#[derive(Clone, Debug)]
pub struct Logged {
    pub method: String,
    /// The path and query (`/v1/chat/completions`).
    pub path: String,
    /// The body, parsed (`Value::Null` when it was empty or not JSON).
    pub body: Value,
}

/// The conversation of one model request, as the script sees it.
#[derive(Debug)]
pub struct Turn<'a> {
    /// The request.
    pub request: &'a Logged,
    /// The text of the last user message.
    pub last_user: String,
    /// Whether the last message is a tool's result (the agent is answering a tool call).
    pub after_tool: bool,
    /// The names of the tools offered.
    pub tools: Vec<String>,
}

/// What the model answers.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// A text answer.
    Text(String),
    /// A call of the tool `tool` with `args`.
    Call { tool: String, args: Value },
    /// An API error: the HTTP status and the provider's message.
    Error { status: u16, message: String },
}

/// The usage every answer reports: tests check that hermes counts what the agent reports.
pub const USAGE_INPUT_TOKENS: u64 = 120;
/// See [`USAGE_INPUT_TOKENS`].
pub const USAGE_OUTPUT_TOKENS: u64 = 7;

/// A script: the answer to one turn.
pub type Script = Arc<dyn Fn(&Turn<'_>) -> Reply + Send + Sync>;

/// The default script (see the module's documentation).
pub fn by_prompt(turn: &Turn<'_>) -> Reply {
    if turn.after_tool {
        return Reply::Text("done".to_owned());
    }
    for line in turn.last_user.lines().rev() {
        if let Some(text) = line.strip_prefix("SAY ") {
            return Reply::Text(text.to_owned());
        }
        if let Some(rest) = line.strip_prefix("FAIL ") {
            let (status, message) = rest.split_once(' ').unwrap_or((rest, "scripted failure"));
            return Reply::Error {
                status: status.parse().unwrap_or(500),
                message: message.to_owned(),
            };
        }
        if let Some(rest) = line.strip_prefix("CALL ") {
            let (tool, args) = rest.split_once(' ').unwrap_or((rest, "{}"));
            let tool = turn
                .tools
                .iter()
                .find(|name| name.ends_with(tool))
                .cloned()
                .unwrap_or_else(|| tool.to_owned());
            let args = serde_json::from_str(args).unwrap_or(Value::Null);
            return Reply::Call { tool, args };
        }
    }
    Reply::Text("ok".to_owned())
}

/// What a wire makes of one request.
enum Read {
    /// A model turn, for the script to answer.
    Turn {
        last_user: String,
        after_tool: bool,
        tools: Vec<String>,
    },
    /// Not a turn (a model list, a token count): this status and body.
    Answer(u16, Value),
}

/// An HTTP answer: status, content type, body.
struct Answer {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
}

impl Answer {
    fn json(status: u16, body: &Value) -> Answer {
        Answer {
            status,
            content_type: "application/json",
            body: body.to_string().into_bytes(),
        }
    }

    /// Server-sent events: each `(event name, data)` pair, in order.
    fn sse<'a>(events: impl IntoIterator<Item = (Option<&'a str>, Value)>) -> Answer {
        let mut body = String::new();
        for (name, data) in events {
            if let Some(name) = name {
                body.push_str(&format!("event: {name}\n"));
            }
            body.push_str(&format!("data: {data}\n\n"));
        }
        Answer {
            status: 200,
            content_type: "text/event-stream",
            body: body.into_bytes(),
        }
    }
}

impl Wire {
    fn read(self, request: &Logged) -> Read {
        match self {
            Wire::Chat => chat::read(request),
            Wire::Anthropic => anthropic::read(request),
            Wire::Gemini => gemini::read(request),
            Wire::Responses => responses::read(request),
        }
    }

    fn answer(self, request: &Logged, reply: &Reply, id: u64) -> Answer {
        match self {
            Wire::Chat => chat::answer(request, reply, id),
            Wire::Anthropic => anthropic::answer(request, reply, id),
            Wire::Gemini => gemini::answer(request, reply, id),
            Wire::Responses => responses::answer(request, reply, id),
        }
    }
}

/// The server; it stops when dropped.
pub struct ModelServer {
    server: Arc<tiny_http::Server>,
    port: u16,
    log: Arc<Mutex<Vec<Logged>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ModelServer {
    /// A server speaking `wire`, answering with the default script [`by_prompt`].
    pub fn start(wire: Wire) -> ModelServer {
        ModelServer::with_script(wire, Arc::new(by_prompt))
    }

    /// A server speaking `wire`, answering with `script`.
    pub fn with_script(wire: Wire, script: Script) -> ModelServer {
        let server = Arc::new(
            tiny_http::Server::http("127.0.0.1:0").expect("the model server binds 127.0.0.1"),
        );
        let port = server.server_addr().to_ip().expect("an IP address").port();
        let log = Arc::new(Mutex::new(Vec::new()));
        let thread = std::thread::spawn({
            let server = Arc::clone(&server);
            let log = Arc::clone(&log);
            move || serve(&server, wire, &script, &log)
        });
        ModelServer {
            server,
            port,
            log,
            thread: Some(thread),
        }
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request so far, in the order they came.
    pub fn requests(&self) -> Vec<Logged> {
        self.log.lock().expect("the log").clone()
    }

    /// The requests that were model turns (for the script), in order.
    pub fn turns(&self) -> Vec<Logged> {
        self.requests()
            .into_iter()
            .filter(|r| r.body.is_object() && r.method == "POST")
            .collect()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(server: &tiny_http::Server, wire: Wire, script: &Script, log: &Mutex<Vec<Logged>>) {
    let ids = AtomicU64::new(1);
    for mut request in server.incoming_requests() {
        let mut raw = Vec::new();
        let _ = request.as_reader().read_to_end(&mut raw);
        let logged = Logged {
            method: request.method().to_string(),
            path: request.url().to_owned(),
            body: serde_json::from_slice(&raw).unwrap_or(Value::Null),
        };
        log.lock().expect("the log").push(logged.clone());
        let answer = match wire.read(&logged) {
            Read::Answer(status, body) => Answer::json(status, &body),
            Read::Turn {
                last_user,
                after_tool,
                tools,
            } => {
                let turn = Turn {
                    request: &logged,
                    last_user,
                    after_tool,
                    tools,
                };
                let reply = script(&turn);
                wire.answer(&logged, &reply, ids.fetch_add(1, Ordering::Relaxed))
            }
        };
        let header = tiny_http::Header::from_bytes("Content-Type", answer.content_type)
            .expect("a valid header");
        let response = tiny_http::Response::from_data(answer.body)
            .with_status_code(answer.status)
            .with_header(header);
        let _ = request.respond(response);
    }
}

/// How many times `needle` occurs in the strings of `value` (every string, at any depth; keys
/// are not counted).
pub fn occurrences(value: &Value, needle: &str) -> usize {
    match value {
        Value::String(s) => s.matches(needle).count(),
        Value::Array(items) => items.iter().map(|v| occurrences(v, needle)).sum(),
        Value::Object(map) => map.values().map(|v| occurrences(v, needle)).sum(),
        _ => 0,
    }
}

/// The text of a message's `content`: a string, or the `text` of its parts.
pub fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}
