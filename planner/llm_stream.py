"""Reading one streamed chat completion: its text piece by piece, and the usage it reported.

What is recorded of a stream is what the endpoint reported in it. A stream cut or stalled
before its end (no ``finish_reason``, or the connection broke) reported no usage unless its
usage chunk came first: it is recorded as nothing, as the endpoint counted it (one token per
piece received would be tokens it never reported). A stream that ended without a usage chunk
(a server that knows no ``stream_options``) is counted one token per piece, the only
estimate. A server that ignored ``stream=True`` answered one whole JSON completion; one cut
half-way is read as nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

import openai
from openai import Stream
from openai.types.chat import ChatCompletion, ChatCompletionChunk

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamedAnswer:
    """One streamed answer's text, its usage as reported, and whether it was reported."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    model: str
    reported: bool


def read_stream(
    stream: Stream[ChatCompletionChunk],
    on_text: Callable[[str], None],
    *,
    model: str,
    role: str,
    base_url: str,
) -> StreamedAnswer:
    """Read ``stream`` to its end, each piece of text handed to ``on_text`` as it arrives."""
    with stream:
        kind = stream.response.headers.get("content-type", "")
        if "text/event-stream" not in kind:  # the server ignored stream=True
            return _whole(stream, on_text, model=model, role=role, base_url=base_url)
        pieces: list[str] = []
        counted = None
        served = model
        finished = False
        try:
            for chunk in stream:
                served = chunk.model or served
                if chunk.usage is not None:
                    counted = chunk.usage
                if chunk.choices and chunk.choices[0].finish_reason:
                    finished = True
                piece = chunk.choices[0].delta.content if chunk.choices else None
                if piece:
                    pieces.append(piece)
                    on_text(piece)
        except openai.APIError as exc:  # the SDK wraps a broken or stalled stream
            finished = False
            logger.warning(
                "the %s answer's stream from %s broke after %d piece(s): %s",
                role,
                base_url,
                len(pieces),
                exc,
            )
    text = "".join(pieces)
    if counted is not None:
        return StreamedAnswer(text, counted.prompt_tokens, counted.completion_tokens, served, True)
    if not finished:
        logger.warning(
            "the %s answer's stream from %s stopped before its end: no usage reported",
            role,
            base_url,
        )
        return StreamedAnswer(text, 0, 0, served, False)
    return StreamedAnswer(text, 0, len(pieces), served, True)


def _whole(
    stream: Stream[ChatCompletionChunk],
    on_text: Callable[[str], None],
    *,
    model: str,
    role: str,
    base_url: str,
) -> StreamedAnswer:
    try:
        whole = ChatCompletion.model_validate(json.loads(stream.response.read()))
    except Exception as exc:  # read outside the SDK's wrapping: its HTTP
        # library's own errors (httpx, or httpx2 for openai 3), or a body that is no JSON
        logger.warning("the %s answer from %s was cut: %s", role, base_url, exc)
        return StreamedAnswer("", 0, 0, model, False)
    text = (whole.choices[0].message.content if whole.choices else None) or ""
    on_text(text)
    counted = whole.usage
    return StreamedAnswer(
        text,
        counted.prompt_tokens if counted else 0,
        counted.completion_tokens if counted else 0,
        whole.model or model,
        True,
    )
