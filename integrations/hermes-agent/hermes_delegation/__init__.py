"""Hermes Agent plugin of hermes (the delegation ledger): results of background work that the
conversation dispatched (`hermes delegate`, or the `mcp__hermes__delegate` tool) are handed to
the model exactly once, at the next safe boundary.

- turn boundary, ``pre_llm_call``: ``hermes drain --hold --json`` claims what is ready; the
  text goes back as ``{"context": ...}``, appended to the user message;
- tool boundary, ``transform_tool_result``: ``inject`` results are claimed the same way and
  appended to the tool's result, behind the tool-boundary carrier line;
- ``pre_api_request``: a claimed text that is in the request upstream sends is acknowledged
  (``hermes delivery ack``); one that is not (a failed turn, an error) is released
  (``hermes delivery release``) at the end of the turn, so it comes back at the next boundary;
- ``on_session_start`` / the first turn of a session binds it (``hermes hook session-start``),
  so the MCP server of this process dispatches into it;
- only ``on_session_reset`` and ``on_session_finalize`` with reason ``session_boundary``
  (``/new``) end the session (``hermes hook session-end``: its running work is interrupted, what
  it never received is dropped); every other end (``on_session_end`` after each turn,
  ``on_session_finalize`` at exit, reason ``shutdown``) only detaches: nothing is interrupted,
  nothing is dropped, and the next ``--resume`` receives it.

Which hermes and which home: ``hermes.json`` beside this file (written by
``hermes hook install hermes-agent``: ``{"program": "/abs/hermes", "home": "/abs/home"}``), or
``$DELEGATION_PLUGIN_PROGRAM`` / ``$DELEGATION_PLUGIN_HOME``. The program's environment holds
no ``HERMES_*`` variable of Hermes Agent's (``HERMES_HOME``, ``HERMES_SESSION_ID``, …: both
projects read that prefix, and hermes refuses a ``HERMES_<SECTION>_<KEY>`` it does not know)
and names hermes' home explicitly.

No dependency beyond Python's standard library and Hermes Agent itself.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
from pathlib import Path

logger = logging.getLogger(__name__)

AGENT = "hermes-agent"
TIMEOUT = 20

_lock = threading.Lock()
# Claimed, not yet settled: token -> (session, text).
_pending: dict[str, tuple[str, str]] = {}
# Sessions bound in this process.
_bound: set[str] = set()


def _settings() -> tuple[str, str | None]:
    program = os.environ.get("DELEGATION_PLUGIN_PROGRAM")
    home = os.environ.get("DELEGATION_PLUGIN_HOME")
    candidates = [Path(__file__).with_name("hermes.json")]
    try:
        from hermes_constants import get_hermes_home

        candidates.append(Path(get_hermes_home()) / "plugins" / "hermes_delegation" / "hermes.json")
    except Exception:  # noqa: BLE001 - outside Hermes Agent
        pass
    for path in candidates:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        program = program or data.get("program")
        home = home or data.get("home")
        break
    return program or "hermes", home


def _run(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess | None:
    program, home = _settings()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    if home:
        env["HERMES_HOME"] = home
    try:
        return subprocess.run(
            [program, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=TIMEOUT,
        )
    except (OSError, subprocess.SubprocessError) as err:
        logger.warning("hermes_delegation: %s %s: %s", program, args[0], err)
        return None


def _bind(session_id: str, source: str = "startup") -> None:
    if not session_id or session_id in _bound:
        return
    _bound.add(session_id)
    _run(
        ["hook", "session-start", "--agent", AGENT],
        json.dumps({"session_id": session_id, "source": source, "hook_event_name": "on_session_start"}),
    )


def _claim(session_id: str, boundary: str) -> str | None:
    """Claims what is ready at `boundary`; the text to hand over, or None."""
    if not session_id:
        return None
    done = _run(["drain", "--session", session_id, "--boundary", boundary, "--hold", "--json"])
    if done is None or done.returncode != 0 or not done.stdout.strip():
        return None
    try:
        drained = json.loads(done.stdout)
    except ValueError:
        return None
    envelopes = drained.get("envelopes") or []
    if not envelopes:
        return None
    parts = []
    with _lock:
        for envelope in envelopes:
            _pending[envelope["claim"]] = (session_id, envelope["text"])
            parts.append(envelope["text"])
    lead = []
    if drained.get("carrier"):
        lead.append(drained["carrier"])
    if len(parts) > 1:
        n = len(parts)
        lead.append(f"[{n} ASYNC DELEGATIONS COMPLETED TOGETHER — read all {n} below, then give one consolidated answer]")
    return "\n".join(lead + [""] if lead else []) + "\n".join(parts)


def _settle(action: str, tokens: list[str]) -> None:
    for token in tokens:
        _run(["delivery", action, token])


def _take(predicate) -> list[str]:
    with _lock:
        tokens = [t for t, (s, text) in _pending.items() if predicate(s, text)]
        for token in tokens:
            del _pending[token]
    return tokens


def pre_llm_call(session_id: str = "", is_first_turn: bool = False, **_kw):
    _bind(session_id, "startup" if is_first_turn else "resume")
    text = _claim(session_id, "turn")
    return {"context": text} if text else None


def transform_tool_result(result=None, session_id: str = "", tool_name: str = "", **_kw):
    if not isinstance(result, str) or tool_name.startswith("mcp__hermes__"):
        return None
    text = _claim(session_id, "tool")
    if not text:
        return None
    return f"{result}\n\n{text}"


def pre_api_request(session_id: str = "", request_messages=None, **_kw):
    """Acknowledges each claimed text that the request upstream is about to send holds, found
    by its first line in the request's new messages (it names the delegation; a text over
    upstream's spill limit is sent as a preview that starts with it)."""
    if not _pending:
        return None
    # What this request adds: the messages after the model's last one (the user message a
    # turn's context went into, or the tool results after its calls). An envelope of the same
    # delegation delivered earlier is further up and does not count.
    messages = list(request_messages or [])
    last = max((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"), default=-1)
    sent = json.dumps(messages[last + 1 :], ensure_ascii=False)

    def sending(s: str, text: str) -> bool:
        first = text.strip().splitlines()[0] if text.strip() else text
        return s == session_id and json.dumps(first, ensure_ascii=False)[1:-1] in sent

    _settle("ack", _take(sending))
    return None


def _release_session(session_id: str) -> None:
    _settle("release", _take(lambda s, _text: s == session_id))


def on_session_end(session_id: str = "", **_kw):
    """After every turn: what was claimed and never sent goes back. Nothing ends."""
    _release_session(session_id)


def on_session_finalize(session_id: str = "", reason: str = "", **_kw):
    _release_session(session_id)
    if reason == "session_boundary" and session_id:
        _end(session_id, "on_session_finalize", reason)
    # `shutdown`: the process exits; the session stays, and `--resume` gets its results.
    _bound.discard(session_id)


def on_session_reset(session_id: str = "", **_kw):
    _release_session(session_id)
    if session_id:
        _end(session_id, "on_session_reset", "reset")


def _end(session_id: str, event: str, reason: str) -> None:
    """A discard: hermes ends the session for the reasons its profile names (`reset`,
    `session_boundary`); any other session end only detaches it."""
    _bound.discard(session_id)
    _run(
        ["hook", "session-end", "--agent", AGENT],
        json.dumps({"session_id": session_id, "hook_event_name": event, "reason": reason}),
    )


def register(ctx) -> None:
    ctx.register_hook("pre_llm_call", pre_llm_call)
    ctx.register_hook("pre_api_request", pre_api_request)
    ctx.register_hook("transform_tool_result", transform_tool_result)
    ctx.register_hook("on_session_end", on_session_end)
    ctx.register_hook("on_session_finalize", on_session_finalize)
    ctx.register_hook("on_session_reset", on_session_reset)
