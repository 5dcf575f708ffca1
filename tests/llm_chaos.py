"""A seeded hostile model for :class:`tests.llm_server.ScriptedLLMServer` (issue 21).

``server.chaos = Chaos(seed, rate=0.3, client_timeout_s=1.5)`` makes the server answer every
request itself, without scripts: a plausible good answer for the schema asked for (the
``response_format``'s schema name, else the role), or, at ``rate``, one of :data:`FAULTS`:
empty, partial or invalid JSON, prose around JSON, a refusal, unknown tools or params, a
huge text, 429 (with and without ``Retry-After``), 500, a stream that stalls past the client
timeout or disconnects half-way, a whole answer sent after the client timeout.
``/v1/embeddings`` fails with 429, 500 or a slow answer at the same rate.

Deterministic per seed: each answer is drawn from a generator seeded with the seed, the
request's role and content, and how many times that same request was seen before (a retry
of a 429 draws again, so it may then succeed). Concurrent sessions do not shift each
other's draws: a request's answer depends on its content, not on arrival order.

**Served usage** (what :meth:`ScriptedLLMServer.served_usage` sums) is the ``usage`` the
server wrote, whole, to a connection the client still held: the body of a 200 completion
(or embeddings answer), or a stream's final usage chunk. An HTTP error carries no usage; a
stream cut or stalled before its usage chunk served none; an answer held back past the
client's timeout is not written when the client has gone (the server peeks the socket), so
it served none either. The product records exactly that usage: a call row per answer that
carried usage, with its counts, and nothing for answers that carried none.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import select
import socket
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.llm_server import ScriptedLLMServer

FAULTS = (
    "empty",
    "partial_json",
    "invalid_json",
    "prose_around_json",
    "refusal",
    "unknown_tool",
    "unknown_params",
    "huge_text",
    "cycle",
    "unknown_dependency",
    "answer_off_schema",
    "http_429_retry_after",
    "http_429",
    "http_500",
    "stream_stall",
    "stream_disconnect",
    "slow",
)
EMBEDDING_FAULTS = ("http_429_retry_after", "http_500", "slow")
HUGE_WORDS = 6000  # about 6k tokens of filler in a huge answer
ROLE_SCHEMAS = {
    "planner": "CompactPlan",
    "replanner": "SubGraph",
    "decider": "ReplanDecision",
    "critic": "CriticReply",
    "summarizer": "Answer",
    "compressor": "Notes",
    "react": "ReactTurn",
    "router": "Route",
    "reflector": "Reflection",
}
REFUSAL = "I'm sorry, but I can't help with that request."
ANSWER_DATA = {"result": "ok"}  # fits the property test's answer schema


@dataclass
class Chaos:
    """The seeded hostile model; ``faults`` counts what it served, by kind.

    ``kinds`` narrows the faults drawn (a test of one kind: ``rate=1, kinds=("http_500",)``).
    """

    seed: int
    rate: float = 0.3
    client_timeout_s: float = 1.5
    kinds: tuple[str, ...] = FAULTS
    faults: Counter[str] = field(default_factory=Counter)
    _seen: Counter[str] = field(default_factory=Counter)

    def draw(self, role: str, body: dict[str, Any]) -> random.Random:
        """The generator of one request's answer (see the module docstring)."""
        content = json.dumps(body.get("messages", body.get("input")), sort_keys=True)
        digest = hashlib.sha256(f"{role}\0{content}".encode()).hexdigest()
        self._seen[digest] += 1
        return random.Random(f"{self.seed}:{digest}:{self._seen[digest]}")

    # --- chat completions ---------------------------------------------------------------

    def chat(
        self, server: ScriptedLLMServer, handler: BaseHTTPRequestHandler, body: dict[str, Any]
    ) -> None:
        """Answer one chat-completion request on ``handler``."""
        from tests.llm_server import RecordedRequest, _role_of

        role = _role_of(body)
        with server._lock:
            server.requests.append(RecordedRequest(role=role, body=body))
            rng = self.draw(role, body)
            server._completions += 1
            number = server._completions
        schema = _schema_name(body) or ROLE_SCHEMAS.get(role, "")
        fault = rng.choice(self.kinds) if rng.random() < self.rate else "good"
        self.faults[fault] += 1
        good = good_answer(schema, rng, body)
        streamed = bool(body.get("stream")) and server.streams
        if fault.startswith("http_"):
            status = 429 if fault.startswith("http_429") else 500
            headers = {"Retry-After": "0"} if fault == "http_429_retry_after" else {}
            send_json(handler, status, _error_body(status), headers)
            return
        if fault == "slow":
            self.slow(
                server,
                handler,
                "/v1/chat/completions",
                server_completion(server, body, good, number),
            )
            return
        content = bad_content(fault, good, rng) if fault != "good" else json.dumps(good)
        completion = server_completion(server, body, content, number)
        if fault in ("stream_stall", "stream_disconnect"):
            if streamed:
                self.broken_stream(server, handler, completion, stall=fault == "stream_stall")
            else:
                cut_body(handler, completion)
            return
        if streamed:
            self.stream(server, handler, completion, body)
            return
        server._count_served("/v1/chat/completions", completion["usage"])
        send_json(handler, 200, completion, {})

    def stream(
        self,
        server: ScriptedLLMServer,
        handler: BaseHTTPRequestHandler,
        completion: dict[str, Any],
        body: dict[str, Any],
    ) -> None:
        from tests.llm_server import send_sse, sse_chunks

        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if usage:
            server._count_served("/v1/chat/completions", completion["usage"])
        send_sse(handler, sse_chunks(completion, include_usage=usage), pace_s=server.chunk_s)

    def broken_stream(
        self,
        server: ScriptedLLMServer,
        handler: BaseHTTPRequestHandler,
        completion: dict[str, Any],
        *,
        stall: bool,
    ) -> None:
        """Half the chunks, then a stall past the client's timeout or a cut connection;
        never the usage chunk, so nothing is served."""
        from tests.llm_server import sse_chunks

        chunks = sse_chunks(completion, include_usage=True)[:-1]
        half = chunks[: max(1, len(chunks) // 2)]
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Connection", "close")
        handler.end_headers()
        for chunk in half:
            handler.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        handler.wfile.flush()
        if stall:
            time.sleep(self.client_timeout_s + 1.0)
        handler.close_connection = True
        _hang_up(handler)

    def slow(
        self,
        server: ScriptedLLMServer,
        handler: BaseHTTPRequestHandler,
        path: str,
        payload: dict[str, Any],
    ) -> None:
        """Answer after the client's timeout, and only to a client still there."""
        time.sleep(self.client_timeout_s + 1.0)
        if _client_gone(handler):
            handler.close_connection = True
            return
        server._count_served(path, payload["usage"])
        send_json(handler, 200, payload, {})

    # --- embeddings ---------------------------------------------------------------------

    def embeddings(
        self, server: ScriptedLLMServer, handler: BaseHTTPRequestHandler, body: dict[str, Any]
    ) -> None:
        """Answer one embeddings request on ``handler``."""
        with server._lock:
            rng = self.draw("embedding", body)
        kinds = [k for k in EMBEDDING_FAULTS if k in self.kinds]
        fault = rng.choice(kinds) if kinds and rng.random() < self.rate else "good"
        self.faults[f"embedding_{fault}"] += 1
        if fault.startswith("http_"):
            status = 429 if fault.startswith("http_429") else 500
            send_json(handler, status, _error_body(status), {"Retry-After": "0"})
            return
        status, payload, headers = server._embeddings(body)
        if fault == "slow" and status == 200:
            self.slow(server, handler, "/v1/embeddings", payload)
            return
        if status == 200:
            server._count_served("/v1/embeddings", payload["usage"])
        send_json(handler, status, payload, headers)


# --- answers ------------------------------------------------------------------------------


def good_answer(schema: str, rng: random.Random, body: dict[str, Any]) -> dict[str, Any]:
    """A valid answer for ``schema`` (varied by ``rng``)."""
    if schema in ("CompactPlan", "Plan", "SubGraph", "FullReplan"):
        return _good_plan(schema, rng)
    return _good_judgement(schema, rng, body)


def _good_plan(schema: str, rng: random.Random) -> dict[str, Any]:
    n = rng.randrange(1000)
    if schema in ("CompactPlan", "Plan"):
        steps = [_echo(f"s{i}", f"v{n}-{i}") for i in range(rng.randint(1, 3))]
        if rng.random() < 0.3:
            steps.append(_agent(f"a{n}"))
        return {"goal": "chaos", "steps": steps}
    if schema == "SubGraph":
        return {"steps": [_echo(f"r{n}", f"again-{n}")], "reasoning": "try again"}
    if schema == "FullReplan":
        return {"goal": "chaos", "steps": [_echo(f"f{n}", f"full-{n}")]}
    return {"steps": [_echo(f"r{n}", f"again-{n}")], "reasoning": "try again"}


def _good_judgement(schema: str, rng: random.Random, body: dict[str, Any]) -> dict[str, Any]:
    turns = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
    n = rng.randrange(1000)
    if schema == "ReplanDecision":
        action = rng.choices(
            ["CONTINUE", "REPLAN_REMAINING", "REPLAN_FULL", "ABORT"], [5, 3, 1, 1]
        )[0]
        return {
            "action": action,
            "reasoning": "chaos decides",
            "steps_to_cancel": [],
            "new_context_hints": [],
            "confidence": 0.7,
        }
    if schema == "CriticReply":
        passed = rng.random() < 0.6
        reply: dict[str, Any] = {"passed": passed, "feedback": "" if passed else "more, please"}
        reply["missing"] = [] if passed else ["a detail"]
        if passed:
            reply["answer"] = {"text": "## Answer\nall done", "data": ANSWER_DATA}
        return reply
    if schema == "Answer":
        return {"text": "## Report\nThe steps ran.\n## Advice\nNone.", "data": ANSWER_DATA}
    if schema == "Notes":
        return {"steps": [], "conclusions": ["it ran"], "key_data": [], "open_questions": []}
    if schema == "ReactTurn":
        if turns >= 2 or rng.random() < 0.4:
            return {"thought": "done", "final_answer": ANSWER_DATA}
        return {"thought": "echo", "tool": "bench.echo", "params": {"value": f"t{n}"}}
    if schema == "Route":
        return {"mode": rng.choice(["plan", "react", "answer"]), "reasoning": "chaos"}
    if schema == "Reflection":
        if rng.random() < 0.5:
            return {"lessons": []}
        lesson = {
            "trigger": f"a chaos answer {n} was unusable",
            "lesson": f"Keep bench.echo plans short (chaos {n % 7}).",
            "applies_to": {"toolsets": ["bench"], "tools": ["bench.echo"]},
            "evidence": "the session's record",
        }
        return {"lessons": [lesson]}
    return {"text": "ok"}


def bad_content(fault: str, good: dict[str, Any], rng: random.Random) -> str:
    """The text of a plausible wrong answer of kind ``fault`` built around ``good``."""
    text = json.dumps(good)
    if fault == "empty":
        return ""
    if fault == "partial_json":
        return text[: max(1, len(text) // 2)]
    if fault == "invalid_json":
        return text.replace('"', "'", 3).rstrip("}") + ",}"
    if fault == "prose_around_json":
        return f"Sure! Here is what you asked for:\n```json\n{text}\n```\nHope this helps."
    if fault == "refusal":
        return REFUSAL
    if fault == "unknown_tool":
        return json.dumps(_mutate_tools(good, tool="web.search_everything"))
    if fault == "unknown_params":
        return json.dumps(_mutate_tools(good, params={"no_such_param": rng.randrange(9)}))
    if fault in ("cycle", "unknown_dependency", "answer_off_schema"):
        return json.dumps(_miswired(fault, good))
    if fault == "huge_text":
        filler = " ".join(
            rng.choice(("alpha", "beta", "gamma", "delta")) for _ in range(HUGE_WORDS)
        )
        return json.dumps({**good, "thought": filler, "reasoning": filler, "text": filler})
    return text


def _miswired(fault: str, good: dict[str, Any]) -> dict[str, Any]:
    """``good`` with steps that depend on each other or on no step, or an answer whose data
    does not fit the answer schema; answers without either get a wrong shape."""
    steps = list(good.get("steps") or [])
    if fault == "cycle" and steps:
        first = dict(steps[0], id="loop_a", dependencies=["loop_b"])
        return {**good, "steps": [first, dict(steps[0], id="loop_b", dependencies=["loop_a"])]}
    if fault == "unknown_dependency" and steps:
        return {**good, "steps": [dict(steps[0], dependencies=["no_such_step"]), *steps[1:]]}
    if fault == "answer_off_schema" and ("data" in good or "answer" in good):
        off = {"result": 42, "extra": ["not", "asked"]}
        if "answer" in good:
            return {**good, "answer": {"text": "", "data": off}}
        return {**good, "data": off}
    if "final_answer" in good:
        return {**good, "final_answer": "a bare string, not an object"}
    return {"steps": "none", "action": "MAYBE"}


def _mutate_tools(good: dict[str, Any], **change: Any) -> dict[str, Any]:
    """``good`` with its (first) tool or params changed; other answers get a wrong shape."""
    if good.get("steps"):
        steps = [dict(good["steps"][0], **change), *good["steps"][1:]]
        return {**good, "steps": steps}
    if "tool" in good or "final_answer" in good:
        return {"thought": "try", "tool": "bench.echo", "params": {}, **change}
    return {"unexpected": change}


def _echo(step_id: str, value: str) -> dict[str, Any]:
    return {"id": step_id, "tool": "bench.echo", "params": {"value": value}}


def _agent(step_id: str) -> dict[str, Any]:
    return {
        "id": step_id,
        "tool": "agent.react",
        "instruction": "Echo a value, then report it",
        "params": {"tools": ["bench.echo"], "max_iterations": 3},
    }


def _schema_name(body: dict[str, Any]) -> str | None:
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and isinstance(fmt.get("json_schema"), dict):
        return str(fmt["json_schema"].get("name") or "") or None
    return None


# --- wire ---------------------------------------------------------------------------------


def server_completion(
    server: ScriptedLLMServer, body: dict[str, Any], content: Any, number: int
) -> dict[str, Any]:
    text = content if isinstance(content, str) else json.dumps(content)
    return server._completion(body, text, number)


def send_json(
    handler: BaseHTTPRequestHandler, status: int, payload: dict[str, Any], headers: dict[str, str]
) -> None:
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    for name, value in headers.items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(data)


def cut_body(handler: BaseHTTPRequestHandler, completion: dict[str, Any]) -> None:
    """A whole-JSON answer whose connection drops half-way through its body."""
    data = json.dumps(completion).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data[: len(data) // 2])
    handler.wfile.flush()
    handler.close_connection = True
    _hang_up(handler)


def _error_body(status: int) -> dict[str, Any]:
    kind = "rate_limit_exceeded" if status == 429 else "server_error"
    return {"error": {"code": status, "message": f"chaos {status}", "type": kind}}


def _hang_up(handler: BaseHTTPRequestHandler) -> None:
    with contextlib.suppress(OSError):
        handler.connection.shutdown(socket.SHUT_RDWR)


def _client_gone(handler: BaseHTTPRequestHandler) -> bool:
    """Whether the client closed its end (a readable socket with nothing to read)."""
    conn = handler.connection
    try:
        readable, _, _ = select.select([conn], [], [], 0)
        if not readable:
            return False
        return conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True
