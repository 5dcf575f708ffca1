"""The hostile-input corpus: every input an entry point must refuse, fed through each one.

Each case is one thing a person (or a script, or an attacker) may hand Planloop: a plan, a
goal, options, an answer schema, a signal. A planted secret rides in every one, so a test can
tell that no refusal echoes the input. The module imports only the standard library and
``planloop``: run as a script by the shipped venv's interpreter, it feeds the corpus through
the SDK installed from the wheel and prints one JSON line per case (``python hostile_inputs.py
sdk SESSION_ID``); tests/integration/test_hostile_inputs.py feeds it through the CLI and the
console too.

The limits are lowered for the corpus (:data:`LIMITS_ENV`) so that "too large" stays small.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SECRET = "sk-planted-7f3a9c1e5b2d4086"
LIMITS_ENV = {"PLANLOOP_MAX_INPUT_BYTES": "65536", "PLANLOOP_MAX_PLAN_BYTES": "131072"}
TOO_LONG = 70_000  # characters: above PLANLOOP_MAX_INPUT_BYTES
TOO_BIG_PLAN = 140_000  # characters: above PLANLOOP_MAX_PLAN_BYTES

# What an entry point is handed: a plan, a goal, SessionOptions fields, an answer schema,
# or a person's event to a session (signal, approve, retry, skip, cancel).
KINDS = ("plan", "goal", "options", "answer_schema", "signal")
EVERYWHERE = ("cli", "sdk")
TO_SESSIONS = ("cli", "sdk", "console")  # the console takes no plan: it steers sessions


def nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def one_step(goal: str = "hostile", **step: Any) -> dict[str, Any]:
    return {"goal": goal, "steps": [{"id": "s", "tool": "bench.echo", **step}]}


BIG_INT_TEXT = "1" * 5_000


@dataclass(frozen=True)
class Hostile:
    """One hostile input. ``value`` builds it as Python data; ``text`` as the document a
    file holds (plans and schemas: JSON, or YAML when ``suffix`` says so), for inputs that
    Python data cannot carry (a duplicate key, a 5,000-digit literal)."""

    name: str
    kind: str
    value: Callable[[], Any]
    text: Callable[[], str] | None = None
    suffix: str = ".json"
    entries: tuple[str, ...] = field(default=EVERYWHERE)

    def document(self) -> str:
        return self.text() if self.text is not None else json.dumps(self.value())


def _big_int_plan_text() -> str:
    return json.dumps(one_step(f"g {SECRET}", params={"value": "BIG"})).replace(
        '"BIG"', BIG_INT_TEXT
    )


CASES: list[Hostile] = [
    # --- plans ------------------------------------------------------------------------------
    Hostile("plan-params-240-deep", "plan", lambda: one_step(params={"v": nested(240, SECRET)})),
    Hostile(
        "plan-5000-digit-integer",
        "plan",
        lambda: one_step(f"g {SECRET}", params={"value": 10**5000}),
        text=_big_int_plan_text,
    ),
    Hostile(
        "plan-nan-param", "plan", lambda: one_step(params={"value": float("nan"), "k": SECRET})
    ),
    Hostile("plan-inf-timeout", "plan", lambda: one_step(SECRET, timeout_s=float("inf"))),
    Hostile(
        "plan-escape-in-param", "plan", lambda: one_step(params={"v": f"{SECRET}\x1b]0;x\x07"})
    ),
    Hostile("plan-nul-in-goal", "plan", lambda: one_step(f"password={SECRET}\x00")),
    Hostile("plan-huge-goal", "plan", lambda: one_step("x" * TOO_LONG + SECRET)),
    Hostile(
        "plan-huge-params", "plan", lambda: one_step(params={"v": "y" * TOO_BIG_PLAN + SECRET})
    ),
    Hostile("plan-params-not-a-mapping", "plan", lambda: one_step(params=f"token {SECRET}")),
    Hostile("plan-steps-not-a-list", "plan", lambda: {"goal": "g", "steps": f"{SECRET}"}),
    Hostile("plan-not-a-mapping", "plan", lambda: [SECRET]),
    Hostile(
        "plan-json-duplicate-key",
        "plan",
        lambda: None,
        text=lambda: (
            '{"goal": "g", "steps": [{"id": "s", "tool": "bench.echo", '
            f'"params": {{"v": "{SECRET}"}}, "tool": "bench.fail"}}]}}'
        ),
    ),
    Hostile(
        "plan-yaml-duplicate-key",
        "plan",
        lambda: None,
        text=lambda: (
            f"goal: g\nsteps:\n  - id: s\n    tool: bench.echo\n    params: {{v: {SECRET}}}\n"
            "    id: t\n"
        ),
        suffix=".yaml",
    ),
    Hostile(
        "plan-yaml-5000-digit-integer",
        "plan",
        lambda: None,
        text=lambda: (
            f"goal: {SECRET}\nsteps: [{{id: s, tool: bench.echo, params: {{v: {BIG_INT_TEXT}}}}}]\n"
        ),
        suffix=".yaml",
    ),
    # --- goals (an LLM plans them: refused before that) -------------------------------------
    Hostile("goal-escape", "goal", lambda: f"buy with token {SECRET} \x1b[2J\x1b]8;;http://x\x07"),
    Hostile("goal-huge", "goal", lambda: "z" * TOO_LONG + SECRET),
    Hostile("goal-c1-control", "goal", lambda: f"{SECRET}\x9b31m"),
    Hostile("goal-lone-surrogate", "goal", lambda: f"{SECRET}\ud800", entries=("sdk",)),
    Hostile("goal-not-text", "goal", lambda: {"text": SECRET}, entries=("sdk",)),
    # --- session options --------------------------------------------------------------------
    Hostile("options-cost-nan", "options", lambda: {"max_cost_usd": float("nan")}),
    Hostile("options-cost-inf", "options", lambda: {"max_cost_usd": float("inf")}),
    Hostile("options-concurrency-1e26", "options", lambda: {"concurrency": 10**26}),
    Hostile("options-rounds-20-digits", "options", lambda: {"max_rounds": 99999999999999999999}),
    Hostile("options-tokens-negative", "options", lambda: {"max_tokens": -1}),
    Hostile(
        "options-deadline-nan", "options", lambda: {"deadline_s": float("nan")}, entries=("sdk",)
    ),
    Hostile("options-unknown-field", "options", lambda: {SECRET: 1}, entries=("sdk",)),
    # --- answer schemas -----------------------------------------------------------------------
    Hostile(
        "schema-240-deep",
        "answer_schema",
        lambda: nested(240, {"type": "string", "description": SECRET}),
    ),
    Hostile("schema-bad-type", "answer_schema", lambda: {"type": SECRET}),
    Hostile("schema-bad-required", "answer_schema", lambda: {"required": SECRET}),
    Hostile("schema-dangling-ref", "answer_schema", lambda: {"$ref": "#/$defs/missing"}),
    Hostile("schema-remote-ref", "answer_schema", lambda: {"$ref": f"http://127.0.0.1:9/{SECRET}"}),
    Hostile("schema-nan", "answer_schema", lambda: {"type": "number", "maximum": float("nan")}),
    Hostile("schema-not-an-object", "answer_schema", lambda: [SECRET]),
    Hostile(
        "schema-duplicate-key",
        "answer_schema",
        lambda: None,
        text=lambda: f'{{"type": "object", "type": "{SECRET}"}}',
        entries=("cli",),
    ),
    # --- a person's events to a session ---------------------------------------------------------
    Hostile(
        "signal-escape", "signal", lambda: f"budget {SECRET} \x1b[2J is 5k", entries=TO_SESSIONS
    ),
    Hostile("signal-nul", "signal", lambda: f"{SECRET}\x00", entries=("sdk", "console")),
    Hostile("signal-huge", "signal", lambda: "s" * TOO_LONG + SECRET, entries=TO_SESSIONS),
    Hostile("signal-not-text", "signal", lambda: [SECRET], entries=("sdk", "console")),
]


ESCAPE = "\x1b]0;title\x07"
BIG = "99999999999999999999999"
# Every command's flags and arguments a person (or a script) may get wrong, which only the
# CLI takes: each is exit 2 in one line naming the option, nothing written. ``{sid}`` is a
# live session's id, ``{plain}`` a valid plan file.
CLI_ARGS: dict[str, tuple[str, ...]] = {
    "supervisor-loglevel-empty": ("supervisor", "--loglevel", ""),
    "supervisor-loglevel-unknown": ("supervisor", "--loglevel", "loud"),
    "worker-name-escape": ("worker", "--name", f"w{ESCAPE}"),
    "worker-name-empty": ("worker", "--name", ""),
    "worker-queues-empty": ("worker", "--queues", ""),
    "worker-queues-escape": ("worker", "--queues", f"q{ESCAPE}"),
    "worker-concurrency-1e26": ("worker", "--concurrency", "1e26"),
    "worker-concurrency-huge": ("worker", "--concurrency", BIG),
    "up-plan-directory": ("up", "--plan", "/"),
    "up-plan-missing": ("up", "--plan", "/no/such/plan.yaml"),
    "up-workers-huge": ("up", "--workers", BIG),
    "up-concurrency-nan": ("up", "--concurrency", "nan"),
    "lessons-add-root-cause-empty": (
        "lessons",
        "add",
        "--goal-pattern",
        "g",
        "--root-cause",
        "",
        "--suggestion",
        "s",
    ),
    "lessons-add-suggestion-escape": (
        "lessons",
        "add",
        "--goal-pattern",
        "g",
        "--suggestion",
        f"{SECRET}{ESCAPE}",
    ),
    "lessons-add-toolsets-empty": (
        "lessons",
        "add",
        "--goal-pattern",
        "g",
        "--suggestion",
        "s",
        "--toolsets",
        "",
    ),
    "lessons-add-file-directory": ("lessons", "add", "--file", "/"),
    "lessons-show-huge-id": ("lessons", "show", BIG),
    "lessons-show-nan-id": ("lessons", "show", "nan"),
    "lessons-disable-reason-empty": ("lessons", "disable", "1", "--reason", ""),
    "lessons-delete-negative-id": ("lessons", "delete", "--", "-1"),
    "db-upgrade-unknown-revision": ("db", "upgrade", "--revision", "nope"),
    "db-upgrade-revision-empty": ("db", "upgrade", "--revision", ""),
    "submit-goal-empty": ("submit", "--goal", "", "--no-worker-check"),
    "submit-constraint-empty": ("submit", "{plain}", "--constraint", "", "--no-worker-check"),
    "submit-tools-escape": ("submit", "--goal", "g", "--tools", f"t{ESCAPE}"),
    "submit-plan-directory": ("submit", "/", "--no-worker-check"),
    "submit-answer-schema-directory": ("submit", "{plain}", "--answer-schema", "/"),
    "submit-wait-for-workers-nan": ("submit", "{plain}", "--wait-for-workers", "nan"),
    "submit-wait-for-workers-inf": ("submit", "{plain}", "--wait-for-workers", "inf"),
    "submit-max-replans-huge": ("submit", "{plain}", "--max-replans", BIG),
    "submit-max-cost-negative": ("submit", "{plain}", "--max-cost-usd", "-1"),
    "status-limit-huge": ("status", "--limit", BIG),
    "status-session-escape": ("status", f"s{ESCAPE}"),
    "show-session-empty": ("show", ""),
    "watch-session-escape": ("watch", f"s{ESCAPE}"),
    "signal-text-empty": ("signal", "{sid}", ""),
    "signal-session-empty": ("signal", "", "hello"),
    "approve-step-empty": ("approve", "{sid}", "--step", ""),
    "approve-as-escape": ("approve", "{sid}", "--step", "s", "--as", f"a{ESCAPE}"),
    "approve-as-empty": ("approve", "{sid}", "--step", "s", "--as", ""),
    "cancel-reason-empty": ("cancel", "{sid}", "--reason", ""),
    "retry-step-escape": ("retry", "{sid}", f"s{ESCAPE}"),
    "retry-step-empty": ("retry", "{sid}", ""),
    "skip-note-escape": ("skip", "{sid}", "s", "--note", f"{SECRET}{ESCAPE}"),
    "flower-address-escape": ("flower", "--address", f"a{ESCAPE}"),
    "flower-port-huge": ("flower", "--port", BIG),
    "console-address-empty": ("console", "--address", ""),
    "console-loglevel-empty": ("console", "--loglevel", ""),
    "console-port-nan": ("console", "--port", "nan"),
    "health-port-huge": ("health", "console", "--port", BIG),
    "health-role-unknown": ("health", "everything"),
    "users-add-name-escape": ("users", "add", f"u{ESCAPE}"),
    "users-add-file-directory": ("users", "add", "bob", "--file", "/"),
    "examples-into-a-file": ("examples", "/etc/hostname"),
}


def cases(kind: str | None = None, entry: str | None = None) -> list[Hostile]:
    return [
        case
        for case in CASES
        if (kind is None or case.kind == kind) and (entry is None or entry in case.entries)
    ]


# --- the SDK runner (the shipped venv's interpreter runs this file) ----------------------------


def feed_sdk(client: Any, case: Hostile, sid: str, tmp: str) -> None:
    """Hand ``case`` to the SDK as a user would: raises what the SDK raises."""
    value = case.value()
    if case.kind == "plan":
        if case.text is not None:  # only a file can carry it: the path form
            path = f"{tmp}/{case.name}{case.suffix}"
            with open(path, "w", encoding="utf-8") as out:
                out.write(case.document())
            client.submit(path)
        else:
            client.submit(value)
    elif case.kind == "goal":
        client.submit_goal(value)
    elif case.kind == "options":
        client.submit(one_step(params={"value": 1}), **value)
    elif case.kind == "answer_schema":
        client.submit(one_step(params={"value": 1}), answer_schema=value)
    else:
        client.signal(sid, value)


def run_sdk(sid: str, tmp: str) -> None:
    """One JSON line per SDK case: refused (a PlanloopError), accepted, or crashed."""
    import planloop

    with planloop.Client() as client:
        for case in cases(entry="sdk"):
            outcome: dict[str, Any] = {"name": case.name}
            try:
                feed_sdk(client, case, sid, tmp)
            except planloop.PlanloopError as exc:
                outcome.update(outcome="refused", type=type(exc).__name__, message=str(exc))
            except Exception as exc:  # what the SDK must never raise
                outcome.update(
                    outcome="crashed", type=type(exc).__name__, message=traceback.format_exc()
                )
            else:
                outcome.update(outcome="accepted", type="", message="")
            print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["sdk"]:
        run_sdk(sys.argv[2], sys.argv[3])
