"""The fence of one attempt's effects: once its timeout passes, the attempt applies no more.

A tool call runs on a thread that cannot be killed (workers/tool_threads.py): when its
timeout passes, the executor gives up on it, reports the attempt interrupted, and the next
attempt may run elsewhere. Without a fence the abandoned call would go on and commit its
write later, unaccounted: the step is not completed, so cancel and failure compensation
would not undo it.

Each attempt (and each tool call of an agent step) gets an :class:`AttemptFence`, carried
by its :class:`core.tools.ToolContext`. The effect ledger (core/effects.py) passes through
it twice for an effect it has not seen:

1. :meth:`AttemptFence.admit` before it asks the ledger: a call whose fence is closed is
   refused with :class:`LateEffectRefused` and recorded as a late effect (a warning, the
   audit file, a metric); it applied nothing, so the next attempt applies the write once.
2. :meth:`AttemptFence.applying` around the effect itself and its commit, once the key is
   claimed. Closing the fence and entering this section take one lock, so each effect is
   either refused (the claim rolls back, nothing applied) or already applying when the
   timeout passes.

An effect already applying cannot be stopped halfway: it is let through and commits under
the step's own idempotency key, its row naming the step and attempt. That keeps "each
write applied once": the next attempt of the step finds the receipt instead of writing
again, and a session that ends before another attempt compensates the step from that row
like a completed write (supervisor/session/agent_undo.py). So that the row is there before the
attempt's outcome is (an ending compensates from what the ledger holds then),
:meth:`AttemptFence.close` waits a bounded while for an effect applying to finish, and says
whether one is still on its way, so the executor can log it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from planloop.core.errors import LateEffectRefused


class AttemptFence:
    """Open while the attempt may still apply effects; closed by its timeout."""

    def __init__(self, step_id: str = "", attempt: int = 0) -> None:
        self.step_id = step_id
        self.attempt = attempt
        self._lock = threading.Condition()
        self._closed = False
        self._applying = 0  # effects between their claim and their commit

    @property
    def closed(self) -> bool:
        return self._closed

    def admit(self, idempotency_key: str) -> None:
        """Raise :class:`LateEffectRefused` when the attempt's timeout has passed."""
        if self._closed:
            raise LateEffectRefused(idempotency_key, self.step_id, self.attempt)

    @contextmanager
    def applying(self, idempotency_key: str) -> Iterator[None]:
        """Hold the fence open around one effect and its commit (refused once closed)."""
        with self._lock:
            self.admit(idempotency_key)
            self._applying += 1
        try:
            yield
        finally:
            with self._lock:
                self._applying -= 1
                self._lock.notify_all()

    def close(self, wait_s: float = 0.0) -> bool:
        """Refuse every effect not yet applying, and wait up to ``wait_s`` seconds for one
        applying to commit or fail; True when one is still applying (it lands late,
        recorded against the step)."""
        with self._lock:
            self._closed = True
            self._lock.wait_for(lambda: self._applying == 0, timeout=wait_s)
            return self._applying > 0
