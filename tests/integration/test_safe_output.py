"""End to end from the wheel: credentials in a goal reach no prompt and no stored lesson, and
a tool's hostile texts reach no terminal raw.

1. A goal carrying ``password=hunter2`` and ``Bearer sk-…`` runs on a private stack (shipped
   worker and supervisor) that plans, decides, re-plans, critiques, summarizes and reflects
   with the scripted server: no role's prompt holds either credential; the lesson the
   reflector writes (echoing them) is stored masked — in SQL, in ``planloop lessons --json``
   and in the supervisor's log.
2. A tool whose output, error and description hold escape sequences and rich markup:
   ``planloop show``, ``watch``, ``status`` and ``tools`` print no escape or control byte,
   and the markup as the text it is.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from sqlalchemy import text

from planloop.core.heartbeat import live_workers
from planloop.core.lessons import LessonStore
from planloop.core.record import make_engine
from tests.conftest import wait_for
from tests.integration.conftest import MakeStack, PrivateStack
from tests.integration.test_planning_loop import decision, echo, failing, subgraph
from tests.llm_server import ScriptedLLMServer
from tests.shipped import shipped

pytestmark = pytest.mark.integration

ROLES_ASKED = {"router", "planner", "decider", "replanner", "critic", "summarizer", "reflector"}
# Any control byte but newline, any C1 control, any bidi or invisible formatting character.
UNSAFE = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]"
)


def planloop(stack: PrivateStack, *args: str, ok: bool = True) -> str:
    """A ``planloop`` command from the shipped venv against ``stack``; stdout and stderr."""
    result = subprocess.run(
        [*shipped().cli(), *args],
        env=shipped().env(stack.stack.env),
        cwd=shipped().home,
        capture_output=True,
        timeout=120,
        check=False,
    )
    out = (result.stdout + result.stderr).decode("utf-8", "surrogateescape")
    assert result.returncode == 0 or not ok, out
    return out


def submitted(out: str) -> str:
    """The session id ``submit --json`` printed (notes on stderr around it)."""
    found = re.search(r'"session_id": "([^"]+)"', out)
    assert found is not None, out
    return found.group(1)


def llm_stack(private_stack: MakeStack, server: ScriptedLLMServer) -> PrivateStack:
    return private_stack(
        workers=1,
        supervisors=1,
        llm_base_url=server.base_url,
        llm_api_key=SecretStr("test"),
        llm_max_retries=0,
    )


def test_a_goals_credentials_reach_no_prompt_and_no_stored_lesson(
    private_stack: MakeStack, llm_server: ScriptedLLMServer
) -> None:
    token = f"sk-{uuid.uuid4().hex}"
    goal = f"Restock SKU-9 for the garden aisle; db password=hunter2, header Bearer {token}"
    secrets = ("hunter2", token)
    llm_server.reset()
    try:
        stack = llm_stack(private_stack, llm_server)
        wait_for(lambda: live_workers(stack.redis, stack.keys, stack.settings.queue), 60)
        llm_server.script(
            "planner",
            {"goal": "Restock SKU-9", "steps": [echo("note", "ok"), failing("verify", "note")]},
        )
        llm_server.script("decider", decision("REPLAN_REMAINING", "verify cannot work"))
        llm_server.script("replanner", subgraph(echo("verify2", "fine", "note")))
        llm_server.script(
            "reflector",
            {
                "lessons": [
                    {
                        "trigger": f"verify failed; it logged in with token {token}",
                        "lesson": "Restocking garden SKUs: log in with password hunter2 "
                        f"and Bearer {token}, then verify a second supplier.",
                        "applies_to": {"toolsets": ["bench"], "tools": []},
                        "evidence": "password=hunter2 was sent and verify failed",
                    }
                ]
            },
        )
        sid = submitted(planloop(stack, "submit", "--goal", goal, "--tools", "bench", "--json"))
        session = stack.finish(sid, [], timeout_s=90)
        assert session.replans == 1, session.error
        store = LessonStore(make_engine(stack.settings.database_url))
        (row,) = wait_for(store.all, 30, "the reflector's lesson")

        # 1. No role's prompt carries them (the roles that ran are the ones expected).
        requests = list(llm_server.requests)
        assert {r.role for r in requests} >= ROLES_ASKED
        for request in requests:
            prompt = json.dumps(request.body)
            for secret in secrets:
                assert secret not in prompt, f"the {request.role} prompt holds {secret}"
        (planner,) = llm_server.requests_for("planner")
        assert "Restock SKU-9 for the garden aisle" in planner.prompt_text
        assert not any(s in i for s in secrets for i in llm_server.embedding_inputs)

        # 2. The lesson is stored masked: the SQL row, the CLI's JSON, the supervisor's log.
        with store.engine.connect() as db:
            stored = json.dumps([list(r) for r in db.execute(text("SELECT * FROM lessons"))])
        assert "second supplier" in stored
        assert "***" in stored
        listed = planloop(stack, "lessons", "--json")
        assert "second supplier" in listed
        logs = "".join(p.read_text(errors="replace") for p in stack.stack.log_dir.glob("*.log"))
        assert f"lesson {row.id} written" in logs
        for secret in secrets:
            assert secret not in stored
            assert secret not in listed
            assert secret not in logs
    finally:
        llm_server.reset()


HOSTILE_PLAN = """
goal: shout and fail
steps:
  - {id: shout, tool: hostile.shout, params: {}}
  - {id: fail, tool: hostile.fail, params: {}, dependencies: [shout], max_retries: 0}
"""


def assert_inert(command: str, out: str) -> None:
    found = UNSAFE.search(out)
    assert found is None, (
        f"{command} printed {found[0]!r}: {out[max(0, found.start() - 60) :][:160]!r}"
    )


def test_a_tools_hostile_texts_reach_no_terminal_raw(
    private_stack: MakeStack, tmp_path: Path
) -> None:
    stack = private_stack(workers=0, supervisors=1)
    stack.start_worker(tool_modules=["hostile_tools"])
    wait_for(lambda: live_workers(stack.redis, stack.keys, stack.settings.queue), 60)
    plan_file = tmp_path / "hostile.yaml"
    plan_file.write_text(HOSTILE_PLAN)
    sid = submitted(planloop(stack, "submit", str(plan_file), "--json"))
    session = stack.finish(sid, ["shout", "fail"])
    report: Any = session.report
    assert report is not None
    steps = {step["id"]: step for step in report["steps"]}
    # stored as the tool said it: only what shows it makes it safe
    assert "\x1b]0;pwned" in steps["shout"]["output"]["text"]
    assert "\x1b]0;pwned" in steps["fail"]["error"]

    views = {
        "show": planloop(stack, "show", sid),
        "show --json": planloop(stack, "show", sid, "--json"),
        "watch": planloop(stack, "watch", sid),  # completed around the failed step: exit 0
        "status SID": planloop(stack, "status", sid),
        "status": planloop(stack, "status"),
        "status --json": planloop(stack, "status", sid, "--json"),
        "tools": planloop(stack, "tools"),
    }
    for command, out in views.items():
        assert_inert(command, out)
    assert "tool broke: [bold red]boom[/]" in views["show"]  # markup printed as text
    assert "tool broke: [bold red]boom[/]" in views["watch"]
    assert "[bold red]boom[/]" in views["tools"]
    # controls that are not sequences are shown, escaped: the reader sees what was there
    assert "ok\\rFAILED \\u202etxt.exe" in views["show"]
