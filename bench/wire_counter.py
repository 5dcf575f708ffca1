"""A counting TCP relay in front of Redis: bytes each way and client round trips.

Redis 7.0 has no per-connection byte or read counters, and ``MONITOR`` shows commands but
not how they were batched on the wire. This relay sits between a set of clients and the
server and counts, over all connections it carries:

- bytes from clients to the server and back;
- round trips: a client's send that follows a reply (or opens the connection) starts one.
  Everything a client writes before the server answers (a pipeline, a MULTI/EXEC block,
  however TCP splits it) is one round trip; a blocking pop is one round trip when it is
  sent, whatever it waits for; pushed messages (pub/sub) start none.

Limit: a client that keeps writing while replies to its earlier commands are already
arriving (pipelining without waiting) is counted once per reply it saw in between.
"""

from __future__ import annotations

import asyncio
import threading
from contextlib import suppress
from dataclasses import dataclass
from typing import Self

CHUNK = 65536


@dataclass
class WireCounts:
    """Totals since the last :meth:`WireCounter.reset`."""

    bytes_in: int = 0  # client -> server
    bytes_out: int = 0  # server -> client
    round_trips: int = 0
    connections: int = 0  # opened since the reset


class WireCounter:
    """Relay ``127.0.0.1:<port>`` to ``upstream_host:upstream_port`` in a background thread."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self._counts = WireCounts()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    def start(self) -> Self:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        self.port = future.result(10)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def snapshot(self) -> WireCounts:
        with self._lock:
            c = self._counts
            return WireCounts(c.bytes_in, c.bytes_out, c.round_trips, c.connections)

    def reset(self) -> None:
        with self._lock:
            self._counts = WireCounts()

    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _close(self) -> None:
        """Stop listening and end every relayed connection (their pumps close both sides)."""
        if self._server is not None:
            self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.close()
            return
        with self._lock:
            self._counts.connections += 1
        # True while the client's latest bytes have not been answered yet
        awaiting_reply = [False]
        pumps = asyncio.gather(
            self._pump(client_r, server_w, awaiting_reply, upstream=True),
            self._pump(server_r, client_w, awaiting_reply, upstream=False),
            return_exceptions=True,
        )
        # Cancelled only by stop(): ending quietly spares asyncio's "exception never
        # retrieved" report for every connection still open then.
        with suppress(asyncio.CancelledError):
            await pumps

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        awaiting_reply: list[bool],
        *,
        upstream: bool,
    ) -> None:
        try:
            while data := await reader.read(CHUNK):
                with self._lock:
                    if upstream:
                        self._counts.bytes_in += len(data)
                        if not awaiting_reply[0]:
                            self._counts.round_trips += 1
                            awaiting_reply[0] = True
                    else:
                        self._counts.bytes_out += len(data)
                        awaiting_reply[0] = False
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()
