"""What the planner's roles need of a model: prompts in, validated JSON out.

:class:`ChatModel` is the interface every role (planner, decider, critic, ...) talks to;
:class:`Role` says who is asking, :class:`Usage` what one call cost. The client that serves
it over any OpenAI-compatible endpoint is :class:`planner.openai_chat.OpenAIChatModel`;
this module imports no SDK, so a role's code and its tests load none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, TypeVar

from pydantic import BaseModel

T = TypeVar("T", bound=BaseModel)


class Role(StrEnum):
    """Who is asking the model; picks the model and names the call in usage records."""

    PLANNER = "planner"  # goal + tools -> first plan
    REPLANNER = "replanner"  # situation report -> sub-graph or new plan
    DECIDER = "decider"  # situation report -> ReplanDecision
    CRITIC = "critic"  # round output -> {passed, feedback}
    SUMMARIZER = "summarizer"  # completed session -> final report
    COMPRESSOR = "compressor"  # old outputs -> compact context
    REACT = "react"  # agent step: instruction + observations -> next tool call or answer
    ROUTER = "router"  # goal -> one open-ended agent step or a multi-step plan
    REFLECTOR = "reflector"  # an ended session that went wrong -> lessons for later ones


@dataclass(frozen=True)
class Usage:
    """Token counts and latency of one model call (or the sum of several)."""

    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    model: str
    role: str
    # Charged to the session's ledger as it arrived (core/llm_meter.py): the caller must
    # not record it again, only count it.
    recorded: bool = False

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


class ChatModel(Protocol):
    """The small interface the planner talks to: prompts in, validated JSON out."""

    def complete_json(
        self, role: Role, messages: list[dict[str, str]], schema: type[T]
    ) -> tuple[T, Usage]:
        """Ask the model for an instance of ``schema``; return it with the summed usage."""
        ...


class StreamingChatModel(ChatModel, Protocol):
    """A :class:`ChatModel` that can also hand over an answer's text while it is written."""

    @property
    def streams_plans(self) -> bool:
        """Whether first plans should be streamed (the setting, and the endpoint allows)."""
        ...

    def stream_text(
        self,
        role: Role,
        messages: list[dict[str, str]],
        schema: type[BaseModel],
        on_text: Callable[[str], None],
    ) -> tuple[str, Usage]:
        """One answer's text, ``on_text`` called with each piece as it arrives; the whole
        text (not validated: the caller validates and repairs) and the call's usage."""
        ...


def streams_plans(chat: ChatModel) -> bool:
    """Whether ``chat`` streams first plans (a :class:`StreamingChatModel`, switched on)."""
    return bool(getattr(chat, "streams_plans", False)) and hasattr(chat, "stream_text")
