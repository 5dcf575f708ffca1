"""The ReAct loop of an agent step: thought → action → observation, bounded, then an answer.

Pure logic: the model is a :class:`planner.llm.ChatModel`, the tools are reached through a
callback the worker provides (which runs each call through the step machinery: param
validation, timeout, breaker, effect ledger), and each finished turn is handed to another
callback (the worker streams it as progress). Nothing here knows Redis or Celery.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field, model_validator

from planloop.core.errors import AgentStepExhausted
from planloop.core.tools import ToolRegistry, ToolSpec
from planloop.planner.llm import ChatModel, Role, Usage
from planloop.planner.prompting import render_prompt, tool_catalogue
from planloop.planner.react_stall import StallRules, find_stall

OBSERVATION_CHARS = 4000  # of one observation's JSON shown to the model; the rest is cut


class ReactTurn(BaseModel):
    """One answer of the model: a tool call, or the final answer."""

    thought: str = Field("", description="Why this action.")
    tool: str | None = Field(None, description="The tool to call now, or null to answer.")
    params: dict[str, Any] = Field(default_factory=dict, description="The tool's params.")
    final_answer: Any = Field(None, description="The answer (a JSON object), when done.")

    @model_validator(mode="after")
    def _one_action(self) -> ReactTurn:
        if (self.tool is None) == (self.final_answer is None):
            raise ValueError('give either "tool" (with "params") or "final_answer", not both')
        return self


@dataclass(frozen=True)
class Observation:
    """What one tool call gave the loop: its output, or the error it ended with.

    ``refused``: the call never ran (a tool the step may not use, params that do not fit);
    a streak of them is a stall (planner/react_stall.py).
    """

    ok: bool
    output: Any = None
    error: str = ""
    refused: bool = False

    def text(self, limit: int = OBSERVATION_CHARS) -> str:
        """The observation as the model reads it, cut to ``limit`` characters."""
        body = json.dumps(self.output, default=str) if self.ok else f"error: {self.error}"
        return body if len(body) <= limit else body[: limit - 3] + "..."


@dataclass(frozen=True)
class Iteration:
    """One finished turn: the model's thought and action, and the tool's observation."""

    number: int  # 1-based
    thought: str
    tool: str | None  # None: the turn gave the final answer
    params: dict[str, Any]
    observation: Observation | None
    usage: Usage


@dataclass(frozen=True)
class ReactTask:
    """What an agent step asks: an instruction, the tools it may use, its turn budget, and
    when its loop counts as stalled."""

    step_id: str
    instruction: str
    tools: list[ToolSpec]
    max_iterations: int
    context: dict[str, Any] = field(default_factory=dict)
    stall: StallRules = field(default_factory=StallRules)


@dataclass(frozen=True)
class ReactResult:
    """The loop's final answer and how it got there."""

    answer: Any
    iterations: list[Iteration]
    # Every model call the loop made as the meter charged it (repairs of unusable turns
    # included); None: not metered, the turns' usage is all there is.
    charged: list[Usage] | None = None

    @property
    def usages(self) -> list[Usage]:
        if self.charged is not None:
            return list(self.charged)
        return [it.usage for it in self.iterations]

    def output(self) -> dict[str, Any]:
        """The step's output: the answer, the tool calls made, the tokens the loop spent."""
        usages = self.usages
        return {
            "answer": self.answer,
            "iterations": len(self.iterations),
            "tool_calls": [
                {"iteration": it.number, "tool": it.tool, "ok": bool(it.observation.ok)}
                for it in self.iterations
                if it.tool is not None and it.observation is not None
            ],
            "llm_usage": usage_payload(usages),
        }


class ReactStopped(Exception):  # noqa: N818 (reads as what happened)
    """A loop that ended without an answer: ``cause`` says why, ``iterations`` what it did
    (their usage is still spent)."""

    def __init__(
        self,
        cause: BaseException,
        iterations: list[Iteration],
        charged: list[Usage] | None = None,
    ) -> None:
        self.cause = cause
        self.iterations = iterations
        self.charged = charged  # as in ReactResult.charged
        super().__init__(str(cause))

    @property
    def usages(self) -> list[Usage]:
        """Every call the loop spent (the meter's charges, else its turns')."""
        if self.charged is not None:
            return list(self.charged)
        return [it.usage for it in self.iterations]


CallTool = Callable[[int, str, dict[str, Any]], Observation]
OnIteration = Callable[[Iteration], None]


def usage_payload(usages: list[Usage]) -> list[dict[str, Any]]:
    """LLM calls as JSON rows (role, model, tokens, latency), for outputs and events."""
    return [
        {
            "role": u.role,
            "model": u.model,
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "latency_s": round(u.latency_s, 6),
            # Charged to the session's ledger by the worker as it arrived: the supervisor
            # counts it and does not record it again.
            "recorded": u.recorded,
        }
        for u in usages
    ]


def usages_of(rows: Any) -> list[Usage]:
    """The :class:`Usage` list :func:`usage_payload` wrote (unreadable rows are skipped)."""
    usages = []
    for row in rows if isinstance(rows, list) else []:
        try:
            usages.append(
                Usage(
                    prompt_tokens=int(row["prompt_tokens"]),
                    completion_tokens=int(row["completion_tokens"]),
                    latency_s=float(row.get("latency_s", 0.0)),
                    model=str(row["model"]),
                    role=str(row.get("role", Role.REACT)),
                    recorded=bool(row.get("recorded", False)),
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return usages


class ReactAgent:
    """Runs agent steps against one chat model."""

    def __init__(self, chat: ChatModel) -> None:
        self.chat = chat

    def run(
        self,
        task: ReactTask,
        call_tool: CallTool,
        on_iteration: OnIteration = lambda _: None,
        before_turn: Callable[[], None] = lambda: None,
    ) -> ReactResult:
        """Run the loop to its final answer.

        1. Render the ``react`` prompt: instruction, context, the allowed tools' catalogue.
        2. Up to ``max_iterations`` turns: ``before_turn`` (the worker's deadline check),
           ask the model for a :class:`ReactTurn`; a final answer ends the loop; a tool
           call runs through ``call_tool`` (a tool outside the allowed set is refused
           there and then) and its observation goes back to the model. Every turn is
           handed to ``on_iteration``.
        3. After each observation, the stall rules (``task.stall``, planner/react_stall.py):
           the same call with the same observation, or refused calls, too many turns in a
           row raise :class:`AgentStepStalled` before the model is asked again.
        4. The turn before the last tells the model to answer next; a tool call in the
           last turn (handed over without an observation) raises
           :class:`AgentStepExhausted`.

        Raises:
            ReactStopped: No answer; its ``cause`` is :class:`AgentStepExhausted` (no
                final answer within ``max_iterations`` turns), :class:`AgentStepStalled`,
                an ``LLMError``, or what ``before_turn`` or ``call_tool`` raised.
        """
        done: list[Iteration] = []

        def record(it: Iteration) -> None:
            done.append(it)
            on_iteration(it)

        try:
            return self._loop(task, call_tool, record, before_turn)
        except Exception as exc:
            raise ReactStopped(exc, done) from exc

    def _loop(
        self,
        task: ReactTask,
        call_tool: CallTool,
        on_iteration: OnIteration,
        before_turn: Callable[[], None],
    ) -> ReactResult:
        allowed = {spec.name for spec in task.tools}
        messages = render_prompt(
            "react",
            instruction=task.instruction,
            context=json.dumps(task.context, default=str) if task.context else "(none)",
            catalogue=tool_catalogue(ToolRegistry(task.tools)),
            max_iterations=str(task.max_iterations),
        )
        done: list[Iteration] = []
        for number in range(1, task.max_iterations + 1):
            before_turn()
            turn, usage = self.chat.complete_json(Role.REACT, messages, ReactTurn)
            if turn.tool is None:
                final = Iteration(number, turn.thought, None, {}, None, usage)
                done.append(final)
                on_iteration(final)
                return ReactResult(turn.final_answer, done)
            if number == task.max_iterations:
                on_iteration(Iteration(number, turn.thought, turn.tool, turn.params, None, usage))
                break
            if turn.tool in allowed:
                observation = call_tool(number, turn.tool, turn.params)
            else:
                listed = ", ".join(sorted(allowed))
                refusal = f"tool {turn.tool!r} is not allowed here; use one of: {listed}"
                observation = Observation(False, error=refusal, refused=True)
            step = Iteration(number, turn.thought, turn.tool, turn.params, observation, usage)
            done.append(step)
            on_iteration(step)
            stalled = find_stall(task.step_id, done, task.stall)
            if stalled is not None:
                raise stalled
            messages += [
                {"role": "assistant", "content": turn.model_dump_json(exclude_none=True)},
                {"role": "user", "content": _observation_message(step, task.max_iterations)},
            ]
        raise AgentStepExhausted(task.step_id, task.max_iterations)


def _observation_message(step: Iteration, max_iterations: int) -> str:
    assert step.observation is not None
    text = f"Observation (turn {step.number}, {step.tool}): {step.observation.text()}"
    left = max_iterations - step.number
    if left == 1:
        text += '\nThis is your last turn: reply with "final_answer" now.'
    return text
