"""Step messages between their receipt by a worker and their ack, in kombu's unacked layout.

kombu's Redis transport emulates late acks with an "unacked" hash (delivery tag -> JSON of
``[message, exchange, routing_key]``) and an index (a sorted set of tags, scored by the time
of receipt); a worker that dies leaves its entries there, and kombu puts them back on their
queue after the visibility timeout. For ``planloop.step`` messages the attempt's own scripts
write the entry (the claim) and delete it (the outcome), so the outcome and the ack happen
together or not at all (the transport's side: ``planloop.workers.transport``).

This module holds the layout and the worker's bookkeeping only, without kombu: the hot state
(core/hot_state.py) passes receipts to its scripts, and every process imports the core.
kombu's names and format are a seam (core/seams.py) with contract tests of their own.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

# kombu's default names of its unacked hash and index (``kombu.transport.redis.Channel``;
# transport options can change them, and a receipt carries the names its channel used).
KOMBU_UNACKED = "unacked"
KOMBU_UNACKED_INDEX = "unacked_index"
# The delivery tags of step messages whose unacked entry the dispatch already wrote, with the
# message, from the same bytes it queued (supervisor/io/step_message.py): the claim only
# indexes it, so the message crosses the wire once each way instead of going in twice.
HELD_TAG_PREFIX = "plheld-"


@dataclass(frozen=True)
class Receipt:
    """A received step message, as kombu's unacked entry that the attempt's scripts hold.

    The claim script writes ``entry`` under ``tag`` (hash ``unacked_key``, index
    ``index_key``, scored by time, as kombu does), or only the index when the dispatch
    wrote the entry (:attr:`held`); the outcome script deletes both.
    """

    tag: str
    unacked_key: str
    index_key: str
    message: dict[str, Any]
    exchange: str
    routing_key: str

    @property
    def held(self) -> bool:
        """Whether the dispatch wrote the entry already: the claim indexes it, no more.

        The dispatch writes it under kombu's default name only, so a channel configured
        with another writes its own."""
        return self.tag.startswith(HELD_TAG_PREFIX) and self.unacked_key == KOMBU_UNACKED

    @property
    def entry(self) -> str:
        """kombu's unacked format: JSON of [message, exchange, routing key]."""
        return json.dumps([self.message, self.exchange, self.routing_key])


class Receipts:
    """The worker's step messages between receipt and ack, by delivery tag.

    Written by the consumer's thread and read by the task threads; each operation is a
    single dict or set call, and a lock keeps them whole across interpreters without a GIL.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parked: dict[str, Receipt] = {}  # received; the claim has not written the entry
        self._settled: set[str] = set()  # the outcome script deleted the entry

    def park(self, receipt: Receipt) -> None:
        with self._lock:
            self._parked[receipt.tag] = receipt

    def parked(self, tag: str) -> Receipt | None:
        """The receipt the claim should write, or None (not a parked step message)."""
        with self._lock:
            return self._parked.get(tag)

    def held(self, tag: str) -> None:
        """The claim script wrote the entry: the broker holds the message again."""
        with self._lock:
            self._parked.pop(tag, None)

    def settle(self, tag: str) -> None:
        """The outcome script deleted the entry: the coming ack has nothing left to delete."""
        with self._lock:
            self._settled.add(tag)

    def on_ack(self, tag: str) -> bool:
        """Forget ``tag``; True when the ack's deletion was already done by a script."""
        with self._lock:
            self._parked.pop(tag, None)
            if tag in self._settled:
                self._settled.discard(tag)
                return True
            return False

    def unpark(self, tags: list[str]) -> list[Receipt]:
        """Take the parked receipts among ``tags`` (to write them back before a restore)."""
        with self._lock:
            return [r for r in (self._parked.pop(t, None) for t in tags) if r is not None]


receipts = Receipts()
"""This process's receipts: one worker process consumes through one transport."""
