"""A decision about a session's context changes, with where it came from."""

from __future__ import annotations

from dataclasses import dataclass, field

from planloop.core.models import Event
from planloop.planner.decision import ReplanDecision
from planloop.planner.llm import Usage


@dataclass
class Verdict:
    """A decision with where it came from; the session loop carries it out."""

    choice: ReplanDecision  # what is to be done: the action, why, what to cancel
    source: str  # "llm", "rule", "budget", "human" or "await_human"
    usages: list[Usage] = field(default_factory=list)
    fail_session: bool = False  # the rule policy's answer to a critical failure
    deadline_note: str = ""  # why the rules decided: too little time left for an LLM call


@dataclass
class Decision:
    """What the deliberation decided, about which changes, and why it decided now."""

    verdict: Verdict
    changes: list[Event]
    reason: str
