"""Server-sent events of the scripted test servers: a whole chat completion as the chunks a
streaming OpenAI-compatible server sends, written at a decoder's pace."""

from __future__ import annotations

import json
import socket
import time
from http.server import BaseHTTPRequestHandler
from typing import Any


def sse_chunks(completion: dict[str, Any], *, include_usage: bool) -> list[dict[str, Any]]:
    """A whole chat completion as the stream of chunks a streaming server sends for it."""
    choice = completion["choices"][0]
    content = str(choice["message"].get("content") or "")
    base = {
        "id": completion["id"],
        "object": "chat.completion.chunk",
        "created": completion.get("created", 0),
        "model": completion["model"],
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    from tests.llm_server import token_pieces  # the server's tokenizer (imports this module)

    chunks += [chunk({"content": piece}) for piece in token_pieces(content)]
    chunks.append(chunk({}, choice.get("finish_reason") or "stop"))
    if include_usage:
        chunks.append({**base, "choices": [], "usage": completion["usage"]})
    return chunks


def send_sse(
    handler: BaseHTTPRequestHandler, chunks: list[dict[str, Any]], *, pace_s: float = 0.0
) -> None:
    """Write ``chunks`` as server-sent events, each chunk with text ``pace_s`` after the one
    before (a decoder's time per token)."""
    # Small writes a few ms apart: without TCP_NODELAY, Nagle's algorithm holds each one
    # back until the client's (delayed) ACK of the one before.
    handler.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Cache-Control", "no-cache")
    handler.send_header("Connection", "close")
    handler.end_headers()
    due = time.monotonic()
    for chunk in [*chunks, None]:
        if pace_s and chunk is not None and _chunk_text(chunk):
            # On a schedule, not sleep after sleep: oversleeping one token (a busy machine)
            # must not delay every later one, as a decoder's rate does not drift either.
            due += pace_s
            time.sleep(max(0.0, due - time.monotonic()))
        data = "[DONE]" if chunk is None else json.dumps(chunk)
        handler.wfile.write(f"data: {data}\n\n".encode())
        handler.wfile.flush()
    handler.close_connection = True


def _chunk_text(chunk: dict[str, Any]) -> str:
    choices = chunk.get("choices") or [{}]
    return str((choices[0].get("delta") or {}).get("content") or "")
