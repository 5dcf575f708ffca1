"""A scripted OpenAI-compatible model that takes as long as a real one to write its reply.

Each chat completion sleeps ``CALL_S + TOKEN_S * completion_tokens`` before answering
(tokens counted with tiktoken's cl100k_base, as tests/llm_server.py does), so a long
reply costs more than a short one, as with a hosted model decoding at ~50 tokens/s.
Prompt length costs nothing (prefill is ignored); the benchmark reports prompt tokens.

A request with ``stream: true`` is answered as server-sent events, one chunk per token: the
first after ``CALL_S``, each next one ``TOKEN_S`` later (the same total), so a client that
reads the reply while it streams (Planloop's early dispatch of plan steps) gets each piece
when a real decoder would have written it.

Replies are chosen by the ``ROLE: <role>`` line of the first system message and the
question tag ``[qNN]`` in the prompt (bench/qa_questions.py):

- ``planner``: the question's plan;
- ``react``: the next Thought/Action (by the number of ``Observation:`` turns so far), or
  the final answer;
- ``summarizer``: the final answer (``{"text": ...}``), the plan side's joiner call;
- ``critic``: a passing verdict (sessions that run critique rounds), with the final answer
  when the prompt asks for it (a round that looks complete).

JSON replies are compact (no spaces after ``,`` and ``:``), as models constrained to a JSON
schema write them; the plan reply is compact too.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from bench.qa_questions import Question
from tests.llm_server import count_prompt_tokens, count_tokens, send_sse, sse_chunks

CALL_S = 0.2  # per request: network round trip and time to first token
TOKEN_S = 0.02  # per output token: ~50 tokens/s decoding

_ROLE = re.compile(r"^\s*ROLE:\s*(\S+)\s*$", re.MULTILINE)
_TAG = re.compile(r"\[(q\d+)\]")


def reply_latency_s(
    completion_tokens: int, call_s: float = CALL_S, token_s: float = TOKEN_S
) -> float:
    """How long the model takes to answer with ``completion_tokens`` tokens."""
    return call_s + token_s * completion_tokens


@dataclass
class Meter:
    """Calls and tokens the server has answered (read before and after a question)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    sleep_s: float = 0.0
    summarizer_calls: int = 0

    def copy(self) -> Meter:
        return Meter(**vars(self))

    def minus(self, other: Meter) -> Meter:
        return Meter(**{k: v - getattr(other, k) for k, v in vars(self).items()})


def compact(value: Any) -> str:
    """JSON as a structured-output decoder writes it (and the planner's plan): no spaces."""
    return json.dumps(value, separators=(",", ":"))


def reply_for(role: str, question: Question, messages: list[dict[str, Any]]) -> str:
    """The scripted reply of ``role`` to ``question`` at this point of the chat."""
    if role == "planner":
        return question.plan_reply()
    if role == "react":
        observations = sum(
            1
            for m in messages
            if m.get("role") == "user" and str(m.get("content", "")).startswith("Observation:")
        )
        return question.react_reply(observations)
    if role == "summarizer":
        return compact({"text": question.joiner_reply()})
    if role == "critic":
        # A passing verdict in the short form the critic prompt asks for.
        verdict: dict[str, Any] = {"passed": True, "confidence": 1.0}
        asked = str(messages[-1].get("content", "")) if messages else ""
        if "also write the final answer" in asked:
            text = question.joiner_reply()
            # The text alone, unless an answer schema asks for data too.
            verdict["answer"] = (
                {"text": text, "data": None} if "must fit this JSON schema" in asked else text
            )
        return compact(verdict)
    raise LookupError(f"the bench model has no reply for role {role!r}")


class TokenLatencyLLM:
    """The server: ``with TokenLatencyLLM(questions) as llm: llm.base_url ...``."""

    def __init__(
        self, questions: dict[str, Question], call_s: float = CALL_S, token_s: float = TOKEN_S
    ) -> None:
        self.questions = questions
        self.call_s, self.token_s = call_s, token_s
        self.meter = Meter()
        self._lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"owner": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def snapshot(self) -> Meter:
        with self._lock:
            return self.meter.copy()

    def __enter__(self) -> TokenLatencyLLM:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def answer(self, body: dict[str, Any], *, sleep: bool = True) -> tuple[int, dict[str, Any]]:
        messages: list[dict[str, Any]] = list(body.get("messages", []))
        system: dict[str, Any] = next((m for m in messages if m.get("role") == "system"), {})
        role_match = _ROLE.search(str(system.get("content", "")))
        role = role_match.group(1).lower() if role_match else "*"
        text = "\n".join(str(m.get("content", "")) for m in messages)
        tag = _TAG.search(text)
        if tag is None or tag.group(1) not in self.questions:
            return 500, {"error": {"message": f"no question tag in the {role} prompt"}}
        try:
            content = reply_for(role, self.questions[tag.group(1)], messages)
        except LookupError as exc:
            return 500, {"error": {"message": str(exc)}}
        prompt_tokens = count_prompt_tokens(messages)
        completion_tokens = count_tokens(content)
        delay = reply_latency_s(completion_tokens, self.call_s, self.token_s)
        if sleep:
            time.sleep(delay)
        with self._lock:
            self.meter.calls += 1
            self.meter.prompt_tokens += prompt_tokens
            self.meter.completion_tokens += completion_tokens
            self.meter.sleep_s += delay
            self.meter.summarizer_calls += role == "summarizer"
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": "stop",
        }
        return 200, {
            "id": f"chatcmpl-bench-{time.monotonic_ns()}",
            "object": "chat.completion",
            "created": 0,
            "model": str(body.get("model", "bench-model")),
            "choices": [choice],
            "usage": usage,
        }


class _Handler(BaseHTTPRequestHandler):
    owner: TokenLatencyLLM

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        body = json.loads(raw)
        if not body.get("stream"):
            self._send(*self.owner.answer(body))
            return
        status, payload = self.owner.answer(body, sleep=False)
        if status != 200:
            self._send(status, payload)
            return
        time.sleep(self.owner.call_s)  # time to first token; then one token per TOKEN_S
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        send_sse(self, sse_chunks(payload, include_usage=usage), pace_s=self.owner.token_s)

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""
