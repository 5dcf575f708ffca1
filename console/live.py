"""What changed in one session, as server-sent events: step changes, new events and the
session's status, read from the session's Redis hashes and streams (the reads
``planloop watch`` makes). :mod:`console.live_hub` runs one :class:`Follower` per followed
session and fans its messages out to every viewer."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from planloop.console.data import event_view, load_plan, step_view
from planloop.core.errors import SessionNotFoundError
from planloop.planner.plan import Plan
from planloop.producer.client import Producer
from planloop.producer.views import sensitive_params

POLL_S = 0.3
KEEPALIVE_POLLS = 50  # a comment line every ~15 s keeps proxies from closing the stream

Message = tuple[str, dict[str, Any]]


@dataclass
class Follower:
    """What one SSE client has been sent so far."""

    sid: str
    last_event: str = "-"
    plan_version: int = 0
    status: str = ""
    awaiting: str = ""
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    ended: bool = False
    plan: Plan | None = None  # the plan of ``plan_version``: parsed once per version

    def poll(self, producer: Producer) -> list[Message]:
        """The messages for what changed since the last poll."""
        try:
            record = producer.session(self.sid)
        except SessionNotFoundError:
            self.ended = True  # gone from Redis: the page's own fetch reads the SQL record
            return [("end", {"status": self.status or "unknown"})]
        messages: list[Message] = []
        if record.plan_version != self.plan_version or self.plan is None:
            self.plan = load_plan(producer, self.sid, record.plan_version)
        plan = self.plan
        if record.plan_version != self.plan_version:
            self.plan_version = record.plan_version
            messages.append(("plan", {"version": record.plan_version}))
        states = producer.state.steps(self.sid, plan.step_ids if plan else [])
        changed = {
            i: view
            for i, view in ((i, step_view(st)) for i, st in states.items())
            if self.steps.get(i) != view
        }
        if changed:
            self.steps.update(changed)
            messages.append(("steps", changed))
        events = producer.state.events(self.sid, after=self.last_event)
        if events:
            self.last_event = events[-1][0]
            hidden = sensitive_params(producer, plan)
            messages.append(("events", {"events": [event_view(i, e, hidden) for i, e in events]}))
        if (record.status.value, record.awaiting) != (self.status, self.awaiting):
            self.status, self.awaiting = record.status.value, record.awaiting
            messages.append(("session", {"status": self.status, "awaiting": self.awaiting}))
        if record.status.ended and record.report is not None:
            self.ended = True  # the report is written: nothing more will change
            messages.append(("end", {"status": self.status}))
        return messages


def encode(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data, default=str)}\n\n"
