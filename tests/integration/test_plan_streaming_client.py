"""Streamed planner replies over HTTP: the client's stream, and the planner's early steps."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from planloop.config.settings import Settings
from planloop.core.tools import load_tools
from planloop.planner.compact_plan import CompactPlan
from planloop.planner.first_plans import Planner
from planloop.planner.llm import Role, streams_plans
from planloop.planner.openai_chat import OpenAIChatModel
from planloop.planner.plan import Plan
from planloop.workers.toolsets.qa import QA_TOOLS
from tests.llm_server import Fail, ScriptedLLMServer, count_tokens

pytestmark = pytest.mark.integration

REPLY = (
    '{"steps":[\n'
    '["a","qa.capital",{"subject":"Norland"}],\n'
    '["b","qa.capital",{"subject":"Estovia"}],\n'
    '["c","qa.population",{"subject":"{{a.output.value}}"}]\n'
    "]}"
)
MESSAGES = [{"role": "system", "content": "ROLE: planner"}, {"role": "user", "content": "go"}]
TOOLS = load_tools([QA_TOOLS])


@pytest.fixture
def srv() -> Iterator[ScriptedLLMServer]:
    with ScriptedLLMServer(streams=True) as server:
        yield server


def chat_for(server: ScriptedLLMServer, **overrides: Any) -> OpenAIChatModel:
    fields: dict[str, Any] = {
        "llm_base_url": server.base_url,
        "llm_api_key": "k",
        "llm_max_retries": 0,
        **overrides,
    }
    return OpenAIChatModel(Settings(**fields))


def test_a_streamed_answer_arrives_in_pieces_with_its_usage(srv: ScriptedLLMServer) -> None:
    srv.script("planner", REPLY)
    chat = chat_for(srv)
    pieces: list[str] = []

    text, usage = chat.stream_text(Role.PLANNER, MESSAGES, CompactPlan, pieces.append)

    assert text == REPLY == "".join(pieces)
    assert len(pieces) > 10  # one per token, not one blob
    assert usage.completion_tokens == count_tokens(REPLY)
    assert usage.prompt_tokens > 0
    assert list(chat.usages) == [usage]
    request = srv.requests_for("planner")[0]
    assert request.body["stream"] is True
    assert request.body["stream_options"] == {"include_usage": True}
    assert request.response_format_type == "json_schema"


def test_a_server_that_answers_whole_completions_is_read_whole(srv: ScriptedLLMServer) -> None:
    srv.streams = False  # answers stream=true with one JSON completion
    srv.script("planner", REPLY)
    pieces: list[str] = []

    text, usage = chat_for(srv).stream_text(Role.PLANNER, MESSAGES, CompactPlan, pieces.append)

    assert (text, pieces) == (REPLY, [REPLY])
    assert usage.completion_tokens == count_tokens(REPLY)


def test_a_server_refusing_streams_is_not_asked_to_stream_again(srv: ScriptedLLMServer) -> None:
    refusal = Fail(400, body={"message": "stream_options is not supported"})
    srv.script("planner", refusal, REPLY, REPLY)
    chat = chat_for(srv)
    assert streams_plans(chat)

    text, _ = chat.stream_text(Role.PLANNER, MESSAGES, CompactPlan, lambda _: None)

    assert text == REPLY
    assert not streams_plans(chat)
    chat.stream_text(Role.PLANNER, MESSAGES, CompactPlan, lambda _: None)
    assert [r.body.get("stream") for r in srv.requests_for("planner")] == [True, None, None]


def test_the_setting_switches_streaming_off(srv: ScriptedLLMServer) -> None:
    assert not streams_plans(chat_for(srv, llm_stream_plans=False))


def test_the_planner_hands_over_steps_before_the_reply_ends(srv: ScriptedLLMServer) -> None:
    srv.chunk_s = 0.02
    srv.script("planner", REPLY)
    planner = Planner(chat_for(srv), TOOLS)
    prefixes: list[tuple[float, list[str]]] = []
    started = time.monotonic()

    plan, usages = planner.plan_streamed(
        "g", [], [], lambda p: prefixes.append((time.monotonic(), p.step_ids))
    )
    ended = time.monotonic()

    assert [ids for _, ids in prefixes] == [["a"], ["a", "b"], ["a", "b", "c"]]
    assert prefixes[0][0] < ended - 0.2  # well before the last token (>= 20 more at 20 ms)
    assert prefixes[0][0] > started
    # the same plan the whole-reply path makes of the same reply
    srv.streams = False
    srv.script("planner", REPLY)
    whole, _ = Planner(chat_for(srv, llm_stream_plans=False), TOOLS).plan("g")
    assert plan == whole
    assert [u.role for u in usages] == ["planner"]


def test_a_reply_that_ends_invalid_is_repaired_keeping_the_steps_handed_over(
    srv: ScriptedLLMServer,
) -> None:
    broken = REPLY.replace('"{{a.output.value}}"}]', '"{{zz.output.value}}"}]')
    repaired = (
        '{"steps":[["a","qa.capital",{"subject":"Norland"}],'
        '["c","qa.population",{"subject":"{{a.output.value}}"}]]}'
    )
    srv.script("planner", broken, repaired)
    prefixes: list[Plan] = []

    plan, usages = Planner(chat_for(srv), TOOLS).plan_streamed("g", [], [], prefixes.append)

    assert prefixes[-1].step_ids == ["a", "b"]  # c's reference stopped the early steps
    assert plan.step_ids == ["a", "b", "c"]  # b was handed over: kept though left out
    repair = srv.requests_for("planner")[1]
    assert "zz" in repair.prompt_text
    assert "already running" in repair.prompt_text
    assert len(usages) == 2


def test_garbage_then_a_plan_that_redefines_a_running_step_is_sent_back(
    srv: ScriptedLLMServer,
) -> None:
    garbage = REPLY[: REPLY.index('["c"')] + "oops"
    changes_a = '{"steps":[["a","qa.capital",{"subject":"Elsewhere"}]]}'
    srv.script("planner", garbage, changes_a, REPLY)

    plan, usages = Planner(chat_for(srv), TOOLS).plan_streamed("g", [], [], lambda _: None)

    assert plan.step_ids == ["a", "b", "c"]
    assert "already running" in srv.requests_for("planner")[2].prompt_text
    assert len(usages) == 3
