"""The daemon threads tool calls run on, reused from call to call (a step's and an agent
step's calls alike)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any


class ToolThreads:
    """Daemon threads that run tool calls, reused from call to call.

    A daemon thread per call keeps a hung tool from holding the worker up at exit; reusing
    them saves starting a thread (and waiting for it to start) on every step. A call that
    outlives its timeout keeps its thread until it returns; the next call gets another one.
    """

    def __init__(self) -> None:
        self._idle: list[_ToolThread] = []  # list.append/pop are atomic: no lock needed

    def submit(self, call: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            thread = self._idle.pop()
        except IndexError:
            thread = _ToolThread(self._idle)
            thread.start()
        thread.inbox.put((call, future))
        return future


class _ToolThread(threading.Thread):
    def __init__(self, idle: list[_ToolThread]) -> None:
        super().__init__(name="planloop-tool", daemon=True)
        self.idle = idle
        self.inbox: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()

    def run(self) -> None:
        while True:
            call, future = self.inbox.get()
            failure: BaseException | None = None
            try:
                output = call()
            except BaseException as exc:  # handed back to the executor, never lost
                failure, output = exc, None
            self.idle.append(self)  # before waking the caller: its next call reuses us
            if failure is None:
                future.set_result(output)
            else:
                future.set_exception(failure)
            del call, future, failure, output  # hold nothing of a finished call while idle
