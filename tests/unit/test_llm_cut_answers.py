"""An answer cut off before its usage is recorded as the endpoint counted it: not at all.

The scripted server's chaos mode (tests/llm_chaos.py) over a real socket: a stream cut or
stalled half-way never sent its usage chunk, so nothing is charged (it was charged one token
per piece before, which the endpoint never reported); a whole stream is charged exactly what
its usage chunk said; a whole-JSON answer cut half-way is a failed request, charged nothing.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator

import pytest
from pydantic import BaseModel, SecretStr

from planloop.config.settings import Settings
from planloop.core.errors import LLMUnavailableError
from planloop.core.llm_budget import Budget
from planloop.core.llm_meter import METER, MemoryCallLedger, UsageMeter
from planloop.planner.compact_plan import CompactPlan
from planloop.planner.llm import Role
from planloop.planner.openai_chat import OpenAIChatModel
from tests.llm_chaos import Chaos
from tests.llm_server import ScriptedLLMServer, count_tokens

TIMEOUT_S = 0.5
PLAN_PROMPT = [
    {"role": "system", "content": "ROLE: planner\nPlan."},
    {"role": "user", "content": "go"},
]


@pytest.fixture
def server() -> Iterator[ScriptedLLMServer]:
    count_tokens("warm")  # the tokenizer loads once, slower than the client's timeout
    with ScriptedLLMServer(streams=True) as srv:
        yield srv


def client(server: ScriptedLLMServer) -> OpenAIChatModel:
    settings = Settings(
        llm_base_url=server.base_url,
        llm_api_key=SecretStr("test"),
        llm_timeout_s=TIMEOUT_S,
        llm_max_retries=0,
        llm_stream_plans=True,
    )
    return OpenAIChatModel(settings, backoff_s=0.0)


def metered(call: contextvars.Context, ledger: MemoryCallLedger) -> None:
    call.run(
        METER.set,
        UsageMeter("s1", ledger, budget=lambda: Budget(None, None), prices={}),
    )


def stream_once(server: ScriptedLLMServer, kind: str) -> tuple[str, MemoryCallLedger]:
    server.chaos = Chaos(
        7, rate=1.0 if kind != "good" else 0.0, client_timeout_s=TIMEOUT_S, kinds=(kind,)
    )
    ledger, context = MemoryCallLedger(), contextvars.copy_context()
    metered(context, ledger)
    chat = client(server)
    pieces: list[str] = []
    text, _usage = context.run(
        chat.stream_text, Role.PLANNER, PLAN_PROMPT, CompactPlan, pieces.append
    )
    assert "".join(pieces) == text
    return text, ledger


@pytest.mark.parametrize("kind", ["stream_disconnect", "stream_stall"])
def test_a_stream_cut_before_its_usage_is_charged_nothing(
    server: ScriptedLLMServer, kind: str
) -> None:
    text, ledger = stream_once(server, kind)

    assert text  # the half that came, for the caller's repair
    assert server.chaos is not None
    assert server.chaos.faults[kind] == 1
    assert ledger.charges == []
    assert server.served_usage()["calls"] == 0


def test_a_whole_stream_is_charged_what_its_usage_chunk_said(server: ScriptedLLMServer) -> None:
    text, ledger = stream_once(server, "good")

    assert CompactPlan.model_validate_json(text).steps
    served = server.served_usage()
    assert served["calls"] == 1
    (charge,) = ledger.charges
    assert (charge.prompt_tokens, charge.completion_tokens) == (
        served["prompt_tokens"],
        served["completion_tokens"],
    )


class Anything(BaseModel):
    text: str = ""


def test_a_whole_answer_cut_half_way_is_a_failed_call_charged_nothing(
    server: ScriptedLLMServer,
) -> None:
    server.chaos = Chaos(7, rate=1.0, client_timeout_s=TIMEOUT_S, kinds=("stream_disconnect",))
    ledger, context = MemoryCallLedger(), contextvars.copy_context()
    metered(context, ledger)

    with pytest.raises(LLMUnavailableError):
        context.run(client(server).complete_json, Role.CRITIC, PLAN_PROMPT, Anything)
    assert ledger.charges == []
    assert server.served_usage()["calls"] == 0


def test_a_whole_answer_to_a_streamed_request_cut_half_way_is_read_as_nothing(
    server: ScriptedLLMServer,
) -> None:
    server.streams = False  # an endpoint that answers stream=True with one JSON body
    text, ledger = stream_once(server, "stream_disconnect")

    assert text == ""  # the caller's validation finds it unusable and repairs it
    assert ledger.charges == []
    assert server.served_usage()["calls"] == 0
