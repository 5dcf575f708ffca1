"""Results past the context budget, end to end: real Redis, workers and a supervisor from the
installed wheel, a scripted LLM over HTTP. The critic and the summarizer still see every
step: compressed by the compressor role, or by the rule-based ladder when it fails."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import SecretStr

from planloop.core.models import SessionStatus
from planloop.planner.plan import parse_plan
from tests.integration.conftest import MakeStack, PrivateStack
from tests.integration.llm_conftest import wait_recorded
from tests.llm_server import Fail, ScriptedLLMServer

pytestmark = pytest.mark.integration

BUDGET = 2_000  # characters; eight outputs of ~800 characters do not fit
STEPS = [f"v{i}" for i in range(8)]
PLAN = "goal: write a report on the eight values\nsteps:\n" + "".join(
    f"  - {{id: {s}, tool: bench.echo, params: {{value: {s}-{'x' * 800}}}}}\n" for s in STEPS
)


def notes(*ids: str) -> dict[str, Any]:
    return {
        "steps": [{"id": i, "status": "completed", "note": f"{i} echoed its value"} for i in ids],
        "conclusions": ["every value was echoed"],
        "key_data": ["v0: 800 x characters"],
        "open_questions": [],
    }


def stack(private_stack: MakeStack, llm: ScriptedLLMServer) -> PrivateStack:
    return private_stack(
        llm_base_url=llm.base_url,
        llm_api_key=SecretStr("test"),
        llm_max_retries=0,
        context_max_chars=BUDGET,
    )


def test_results_past_the_budget_are_compressed_and_every_step_is_named(
    llm: ScriptedLLMServer, private_stack: MakeStack
) -> None:
    ps = stack(private_stack, llm)
    llm.script("compressor", *[notes(s) for s in STEPS])

    sid = ps.producer.submit(parse_plan(PLAN))
    session = wait_recorded(ps.producer, ps.record, sid, 60)

    assert session.status == SessionStatus.COMPLETED, session.error
    assert llm.requests_for("compressor"), "the compressor was not called"
    compressor_prompt = llm.requests_for("compressor")[0].prompt_text
    assert "write a report on the eight values" in compressor_prompt
    for role in ("critic", "summarizer"):
        (request,) = llm.requests_for(role)
        prompt = request.prompt_text
        assert "(Results compressed: all 8 step(s)" in prompt
        assert "compressor model summarised them in" in prompt
        assert all(f"- {s} (bench.echo): completed" in prompt for s in STEPS)
        assert "v0: 800 x characters" in prompt  # the notes' key data reached the prompt
        assert "x" * 800 not in prompt  # the raw outputs did not
    assert "## Recommendations" in llm.requests_for("summarizer")[0].prompt_text  # a report
    roles = [c.role for c in ps.record.llm_calls(sid)]
    assert roles.count("compressor") == len(llm.requests_for("compressor"))  # all recorded
    # the critic's and the summarizer's prompts share one compression
    assert roles.index("compressor") < roles.index("critic")


def test_a_failing_compressor_leaves_the_ladder_and_every_step_is_still_named(
    llm: ScriptedLLMServer, private_stack: MakeStack
) -> None:
    ps = stack(private_stack, llm)
    llm.script("compressor", Fail(status=500), Fail(status=500))

    sid = ps.producer.submit(parse_plan(PLAN))
    session = wait_recorded(ps.producer, ps.record, sid, 60)

    assert session.status == SessionStatus.COMPLETED, session.error
    assert llm.requests_for("compressor"), "the compressor was not asked"
    for role in ("critic", "summarizer"):
        (request,) = llm.requests_for(role)
        prompt = request.prompt_text
        assert "(Results compressed: all 8 step(s)" in prompt
        assert "the compressor failed" in prompt  # the prompt says what happened, and how
        assert all(f"- {s} (bench.echo): completed" in prompt for s in STEPS)
        assert "x" * 800 not in prompt


FAIL_LAST = (
    "{seconds: 0.01, simulate: {fail_attempts: [1], permanent: true}}, max_retries: 0, "
    "critical: true"
)
FAILING = (
    f"{PLAN}  - {{id: last, tool: bench.sleep, params: {FAIL_LAST}, "
    f"dependencies: [{', '.join(STEPS)}]}}\n"
)


def test_the_deciders_situation_past_the_budget_shows_the_compressors_notes(
    llm: ScriptedLLMServer, private_stack: MakeStack
) -> None:
    ps = stack(private_stack, llm)
    llm.script("compressor", *[notes(s) for s in STEPS * 2])
    llm.script("decider", {"action": "ABORT", "reasoning": "last failed", "confidence": 0.9})

    sid = ps.producer.submit(parse_plan(FAILING))
    session = wait_recorded(ps.producer, ps.record, sid, 60)

    assert session.status == SessionStatus.ABORTED, session.error
    (request,) = llm.requests_for("decider")
    prompt = request.prompt_text
    assert "(Outputs compressed: the 8 completed steps' outputs" in prompt
    assert all(f"- {s} (bench.echo): completed" in prompt for s in STEPS)
    assert "- last (bench.sleep)" in prompt  # the failed step, as the report lists it
    assert "x" * 800 not in prompt
    roles = [c.role for c in ps.record.llm_calls(sid)]
    assert roles.index("compressor") < roles.index("decider")
    assert roles.count("compressor") == len(llm.requests_for("compressor"))
