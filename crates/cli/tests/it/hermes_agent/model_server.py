"""A scripted OpenAI-compatible chat-completions server for the Hermes Agent tests.

Usage: model_server.py LOG PORTFILE. Listens on 127.0.0.1 (a free port, written to PORTFILE),
appends every request body as one JSON line to LOG, and answers from a script read from the
conversation itself, so turns of several conversations may overlap:

- the last message is a tool result: the text `done`;
- the last user message holds `CALL <tool> <json arguments>` (one line; the last
  such line): a call of that tool
  (the first tool whose name ends with <tool>);
- the last user message holds `SAY <text>` (one line): that text;
- anything else: the text `ok`.

Streams (SSE) when the request asks for it. Standard library only.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG, PORTFILE = sys.argv[1], sys.argv[2]
lock = threading.Lock()
counter = [0]


def text_of(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def decide(body):
    messages = body.get("messages") or []
    if messages and messages[-1].get("role") == "tool":
        return {"content": "done"}
    users = [m for m in messages if m.get("role") == "user"]
    last = text_of(users[-1].get("content")) if users else ""
    for line in reversed(last.splitlines()):
        if line.startswith("SAY "):
            return {"content": line[4:]}
        if line.startswith("CALL "):
            _, tool, args = line.split(" ", 2)
            names = [t["function"]["name"] for t in body.get("tools") or []]
            name = next((n for n in names if n.endswith(tool)), tool)
            with lock:
                counter[0] += 1
                call_id = f"call_{counter[0]}"
            return {"tool_calls": [{"id": call_id, "type": "function",
                                    "function": {"name": name, "arguments": args}}]}
    return {"content": "ok"}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self.reply({"object": "list", "data": [{"id": "test-model", "object": "model"}]})

    def reply(self, obj):
        data = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        with lock:
            with open(LOG, "a") as f:
                f.write(json.dumps(body) + "\n")
        if "messages" not in body:
            return self.reply({})
        answer = decide(body)
        finish = "tool_calls" if "tool_calls" in answer else "stop"
        usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
        if not body.get("stream"):
            message = {"role": "assistant", "content": answer.get("content")}
            if "tool_calls" in answer:
                message["tool_calls"] = answer["tool_calls"]
            return self.reply({"id": "cmpl", "object": "chat.completion", "created": 0,
                               "model": body.get("model", "test-model"),
                               "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                               "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        delta = {"role": "assistant"}
        if "tool_calls" in answer:
            delta["tool_calls"] = [dict(c, index=i) for i, c in enumerate(answer["tool_calls"])]
        else:
            delta["content"] = answer["content"]
        base = {"id": "cmpl", "object": "chat.completion.chunk", "created": 0,
                "model": body.get("model", "test-model")}
        for chunk in (
            dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": None}]),
            dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": finish}]),
            dict(base, choices=[], usage=usage),
        ):
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORTFILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os
os.replace(PORTFILE + ".tmp", PORTFILE)
server.serve_forever()
