"""A turn's events: read the session's stream (until one arrives or the next timer is due;
with none due, parked until an event), apply each to the state (an outcome, a command, a
change to deliberate on), and take over events stuck with a former owner."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from planloop.core.models import Event, EventType
from planloop.supervisor.io.store_port import Entry
from planloop.supervisor.session.commands import Commands
from planloop.supervisor.session.deliberate import Deliberation
from planloop.supervisor.session.outcomes import OUTCOME_STATUS, Outcomes
from planloop.supervisor.session.ports import SessionIO, describe_error, read_event
from planloop.supervisor.session.waiting import wait_ms

log = logging.getLogger(__name__)

USER_CHANGES = (EventType.NEW_CONSTRAINT, EventType.EXTERNAL_SIGNAL)
IDLE_CLAIM_INTERVAL_S = 2.0  # without the event hub; with it, its sweep says when
BUSY_WAIT_MS = 1_000  # the wait after a turn that did something (see SessionEvents.wait)


LookAt = Callable[[float], float | None]


class SessionEvents:
    """Reads and applies one session's events; remembers the one being applied."""

    def __init__(
        self,
        io: SessionIO,
        outcomes: Outcomes,
        commands: Commands,
        deliberation: Deliberation,
        *,
        look_at: LookAt | None = None,
    ) -> None:
        self.io = io
        # When the watchdog or the no-consumer watch needs a turn (session/waiting.py);
        # None: attempts in flight are looked at every second.
        self.look_at = look_at
        self.state = io.state
        self.outcomes = outcomes
        self.commands = commands
        self.deliberation = deliberation
        self.applying: Entry | None = None  # named as the cause if the loop crashes
        self._next_idle_claim = time.monotonic() + IDLE_CLAIM_INTERVAL_S
        self._busy = True  # the last turn did something: the next wait is a short one

    async def wait(self) -> list[Entry]:
        """The session's next events: wait until one arrives or the next timer is due.

        A session parks only after a quiet turn: a turn that applied events or ran on its
        own timer may have left work for the next one (a failure to decide, a decision to
        carry out) that no event will announce, so the wait after it is at most
        ``BUSY_WAIT_MS``; one that comes back empty from that short wait parks."""
        settings, now = self.io.settings, time.time()
        timed = wait_ms(
            self.state,
            now,
            default_deadline_s=settings.session_deadline_s,
            look_at=None if self.look_at is None else self.look_at(now),
            watched=self.look_at is not None,
        )
        shortened = self._busy and (timed is None or timed > BUSY_WAIT_MS)
        block_ms = BUSY_WAIT_MS if shortened else timed
        entries = await self.io.read_events(count=settings.event_batch, block_ms=block_ms)
        self._busy = bool(entries) or (not shortened and timed is not None)
        return entries

    async def apply(self, entries: list[Entry]) -> None:
        """Apply ``entries`` in order (acknowledged with the next checkpoint); an unreadable
        one goes to the dead letters."""
        sid, store = self.state.sid, self.io.store
        for entry_id, fields in entries:
            self.state.acks.append(entry_id)
            try:
                event = read_event(fields)
            except (ValueError, KeyError) as exc:
                cause = f"unreadable event: {describe_error(exc)}"
                log.error("session=%s event %s dead-lettered: %s", sid, entry_id, cause)
                await store.dead_letter(sid, [(entry_id, fields)], cause=cause)
                continue
            self.state.batch.events.append((entry_id, event))
            self.applying = (entry_id, fields)
            await self._on_event(event)
            self.applying = None

    async def reclaim_idle(self) -> None:
        """Take events stuck in another consumer's pending list (a former owner that woke
        up and read them before it noticed it had lost the lease).

        With the event hub, only when its sweep found such entries (an idle session costs
        nothing); without it, every ``IDLE_CLAIM_INTERVAL_S``.
        """
        hub = self.io.events
        if hub is not None:
            if not hub.claim_due(self.state.sid):
                return
        else:
            now = time.monotonic()
            if now < self._next_idle_claim:
                return
            self._next_idle_claim = now + IDLE_CLAIM_INTERVAL_S
        idle_ms = int(IDLE_CLAIM_INTERVAL_S * 1000)
        store = self.io.store
        await self.apply(
            await store.claim_pending(self.state.sid, self.io.consumer, min_idle_ms=idle_ms)
        )

    async def _on_event(self, event: Event) -> None:
        if event.type in OUTCOME_STATUS:
            await self.outcomes.on_outcome(event)
        elif await self.commands.apply(event):
            return
        elif event.payload.get("notice"):
            return  # the supervisor's own notice (no worker consumes): shown, never deliberated
        elif event.type in USER_CHANGES:
            self.deliberation.note(event)
