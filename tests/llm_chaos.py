"""A seeded hostile model for :class:`tests.llm_server.ScriptedLLMServer`.

``server.chaos = Chaos(seed, rate=0.3, client_timeout_s=1.5)`` makes the server answer every
request itself, without scripts: a plausible good answer for the schema asked for (the
``response_format``'s schema name, else the role), or, at ``rate``, one of :data:`FAULTS`:
empty, partial or invalid JSON, prose around JSON, a refusal, unknown tools or params, a
plan with a cycle or an unknown dependency, an answer off the answer schema, a huge text,
429 (with and without ``Retry-After``), 500, a stream that stalls past the client timeout or
disconnects half-way, a whole answer sent after the client timeout. ``/v1/embeddings`` fails
with 429, 500 or a slow answer at the same rate. Good answers vary too (plans with or
without an agent step, every decider action, passing and failing critiques, reflections with
and without a lesson); tests/llm_chaos_answers.py writes them.

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

from tests.llm_chaos_answers import bad_content, good_answer, schema_name

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
        schema = schema_name(body) or ROLE_SCHEMAS.get(role, "")
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
        from tests.llm_sse import send_sse, sse_chunks

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
        from tests.llm_sse import sse_chunks

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
