"""The real OpenAIChatModel over HTTP against the scripted OpenAI-compatible server."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from planloop.config.settings import Settings
from planloop.core.errors import ConfigError, LLMResponseError, LLMUnavailableError
from planloop.planner.llm import Role
from planloop.planner.openai_chat import OpenAIChatModel, build_chat_model
from tests.llm_server import Fail, ScriptedLLMServer, count_prompt_tokens

pytestmark = pytest.mark.integration

GOOD = {"action": "CONTINUE", "reasoning": "step 2 recovered", "confidence": 0.8}


class Decision(BaseModel):
    action: Literal["CONTINUE", "REPLAN_REMAINING", "ABORT"]
    reasoning: str
    confidence: float


def decider_messages(extra: str = "") -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "ROLE: decider\nYou decide what the supervisor does."},
        {"role": "user", "content": f"Step 2 failed with a timeout.{extra}"},
    ]


MakeChat = Callable[..., OpenAIChatModel]


@pytest.fixture
def srv() -> Iterator[ScriptedLLMServer]:
    with ScriptedLLMServer() as server:
        yield server


@pytest.fixture
def make_chat() -> Iterator[MakeChat]:
    clients: list[OpenAIChatModel] = []

    def make(server: ScriptedLLMServer, **overrides: Any) -> OpenAIChatModel:
        fields: dict[str, Any] = {
            "llm_base_url": server.base_url,
            "llm_api_key": "test-key-123",
            "llm_max_retries": 2,
        }
        fields.update(overrides)
        client = OpenAIChatModel(Settings(**fields), backoff_s=0.001, backoff_max_s=0.01)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def test_json_schema_path_and_per_role_model(srv: ScriptedLLMServer, make_chat: MakeChat) -> None:
    srv.script("decider", GOOD)
    chat = make_chat(srv, llm_model="base-model", llm_decider_model="decider-model")

    decision, usage = chat.complete_json(Role.DECIDER, decider_messages(), Decision)

    assert decision == Decision(**GOOD)
    (request,) = srv.requests_for("decider")
    assert request.body["model"] == "decider-model"
    assert usage.model == "decider-model"
    assert request.response_format_type == "json_schema"
    sent = request.body["response_format"]["json_schema"]
    assert sent["name"] == "Decision"
    assert sent["strict"] is False
    assert set(sent["schema"]["properties"]) == {"action", "reasoning", "confidence"}
    # With json_schema support the prompt goes out as written.
    assert request.messages == decider_messages()
    assert chat.model_for(Role.PLANNER) == "base-model"


def test_llamacpp_rejection_falls_back_to_json_object_and_remembers(
    make_chat: MakeChat,
) -> None:
    with ScriptedLLMServer(reject_json_schema=True) as srv:
        srv.script("decider", GOOD, {**GOOD, "action": "ABORT"})
        chat = make_chat(srv)

        first, _ = chat.complete_json(Role.DECIDER, decider_messages(), Decision)
        second, _ = chat.complete_json(Role.DECIDER, decider_messages(), Decision)

        assert (first.action, second.action) == ("CONTINUE", "ABORT")
        kinds = [r.response_format_type for r in srv.requests]
        assert kinds == ["json_schema", "json_object", "json_object"]
        assert chat.structured_mode == "json_object"
        fallback = srv.requests[1]
        assert fallback.body["response_format"]["schema"]["properties"]["action"]["enum"] == [
            "CONTINUE",
            "REPLAN_REMAINING",
            "ABORT",
        ]
        system = fallback.messages[0]["content"]
        assert system.startswith("ROLE: decider\n")
        assert "JSON schema" in system
        assert fallback.role == "decider"


def test_no_structured_output_at_all_falls_back_to_prompting(make_chat: MakeChat) -> None:
    with ScriptedLLMServer(reject_json_schema=True, json_object_ok=False) as srv:
        srv.script(
            "decider", "Here you go:\n" + '{"action": "ABORT", "reasoning": "r", "confidence": 0.1}'
        )
        chat = make_chat(srv)

        decision, _ = chat.complete_json(Role.DECIDER, decider_messages(), Decision)

        assert decision.action == "ABORT"
        kinds = [r.response_format_type for r in srv.requests]
        assert kinds == ["json_schema", "json_object", None]
        assert '"confidence"' in srv.requests[-1].messages[0]["content"]
        assert chat.structured_mode == "none"


def test_forced_mode_is_not_stepped_down(make_chat: MakeChat) -> None:
    with ScriptedLLMServer(reject_json_schema=True) as srv:
        srv.script("decider", GOOD)
        chat = make_chat(srv, llm_structured_output="json_schema")

        with pytest.raises(LLMUnavailableError, match="STRUCTURED_OUTPUT=auto") as info:
            chat.complete_json(Role.DECIDER, decider_messages(), Decision)

        assert info.value.status == 500
        assert len(srv.requests) == 1  # a rejection is not retried


def test_forced_json_object_goes_straight_there(
    srv: ScriptedLLMServer, make_chat: MakeChat
) -> None:
    srv.script("decider", GOOD)
    chat = make_chat(srv, llm_structured_output="json_object")
    chat.complete_json(Role.DECIDER, decider_messages(), Decision)
    assert [r.response_format_type for r in srv.requests] == ["json_object"]


def test_prose_and_fenced_json_are_parsed(srv: ScriptedLLMServer, make_chat: MakeChat) -> None:
    srv.script(
        "decider",
        'Let me think.\n```json\n{"action": "REPLAN_REMAINING", "reasoning": "x",'
        ' "confidence": 0.5,}\n```\nLet me know if you need more.',
    )
    decision, _ = make_chat(srv).complete_json(Role.DECIDER, decider_messages(), Decision)
    assert decision.action == "REPLAN_REMAINING"
    assert len(srv.requests) == 1


def test_broken_json_is_repaired_once(srv: ScriptedLLMServer, make_chat: MakeChat) -> None:
    broken = '{"action": "CONTINUE" "reasoning": "x", "confidence": 1}'
    srv.script("decider", broken, GOOD)
    chat = make_chat(srv)

    decision, usage = chat.complete_json(Role.DECIDER, decider_messages(), Decision)

    assert decision == Decision(**GOOD)
    first, repair = srv.requests_for("decider")
    assert repair.messages[: len(first.messages)] == first.messages
    assert repair.messages[-2] == {"role": "assistant", "content": broken}
    last = repair.messages[-1]
    assert last["role"] == "user"
    assert "does not parse: Expecting ',' delimiter at line 1 column" in last["content"]
    # The returned usage sums both calls; the client keeps each.
    assert len(chat.usages) == 2
    assert usage.prompt_tokens == sum(u.prompt_tokens for u in chat.usages)
    assert usage.completion_tokens == sum(u.completion_tokens for u in chat.usages)


def test_schema_mismatch_is_repaired_with_the_field_named(
    srv: ScriptedLLMServer, make_chat: MakeChat
) -> None:
    srv.script("decider", {**GOOD, "action": "MAYBE"}, GOOD)
    decision, _ = make_chat(srv).complete_json(Role.DECIDER, decider_messages(), Decision)
    assert decision.action == "CONTINUE"
    repair_note = srv.requests[-1].messages[-1]["content"]
    assert "does not fit the Decision schema: action: Input should be" in repair_note
    assert "errors.pydantic.dev" not in repair_note


def test_repairs_exhausted_raise_with_the_raw_text(
    srv: ScriptedLLMServer, make_chat: MakeChat
) -> None:
    srv.script("decider", "no idea", "still no idea", GOOD)
    chat = make_chat(srv, plan_max_repairs=1)

    with pytest.raises(LLMResponseError, match="after 1 repair") as info:
        chat.complete_json(Role.DECIDER, decider_messages(), Decision)

    assert info.value.raw == "still no idea"
    assert info.value.role == "decider"
    assert len(srv.requests) == 2
    assert srv.pending("decider") == 1


def test_429_then_success_is_retried(srv: ScriptedLLMServer, make_chat: MakeChat) -> None:
    srv.script("decider", Fail(status=429, headers={"Retry-After": "0"}), GOOD)
    decision, _ = make_chat(srv).complete_json(Role.DECIDER, decider_messages(), Decision)
    assert decision.action == "CONTINUE"
    assert len(srv.requests) == 2
    assert srv.requests[0].body == srv.requests[1].body


def test_5xx_retries_are_bounded(srv: ScriptedLLMServer, make_chat: MakeChat) -> None:
    srv.script("decider", Fail(status=503), Fail(status=502), GOOD)
    chat = make_chat(srv, llm_max_retries=1)

    with pytest.raises(LLMUnavailableError, match="HTTP 502") as info:
        chat.complete_json(Role.DECIDER, decider_messages(), Decision)

    assert info.value.status == 502
    assert info.value.base_url == srv.base_url
    assert len(srv.requests) == 2
    assert not chat.usages


def test_empty_script_fails_clearly(srv: ScriptedLLMServer, make_chat: MakeChat) -> None:
    chat = make_chat(srv, llm_max_retries=0)
    with pytest.raises(LLMUnavailableError, match="no scripted reply for role decider"):
        chat.complete_json(Role.DECIDER, decider_messages(), Decision)


def test_unreachable_endpoint(make_chat: MakeChat) -> None:
    with ScriptedLLMServer() as stopped:
        pass  # started and stopped: nothing listens on its port any more
    chat = make_chat(stopped, llm_max_retries=1)

    with pytest.raises(LLMUnavailableError, match="could not be reached") as info:
        chat.complete_json(Role.DECIDER, decider_messages(), Decision)

    assert info.value.status is None
    assert stopped.requests == []


def test_default_queue_serves_requests_without_a_role_line(
    srv: ScriptedLLMServer, make_chat: MakeChat
) -> None:
    srv.script("*", GOOD)
    messages = [{"role": "user", "content": "decide"}]
    decision, _ = make_chat(srv).complete_json(Role.CRITIC, messages, Decision)
    assert decision.action == "CONTINUE"
    assert srv.requests[0].role == "*"


def test_usage_is_counted_by_a_real_tokenizer(srv: ScriptedLLMServer, make_chat: MakeChat) -> None:
    srv.script("decider", GOOD, GOOD)
    chat = make_chat(srv)

    _, short = chat.complete_json(Role.DECIDER, decider_messages(), Decision)
    _, long = chat.complete_json(Role.DECIDER, decider_messages(" More detail." * 50), Decision)

    assert short.prompt_tokens == count_prompt_tokens(srv.requests[0].messages)
    assert short.prompt_tokens > 0
    assert short.completion_tokens > 0
    assert long.prompt_tokens > short.prompt_tokens + 100
    assert short.latency_s > 0
    assert short.role == "decider"
    assert list(chat.usages) == [short, long]


def test_prompts_and_key_stay_out_of_logs_above_debug(
    srv: ScriptedLLMServer, make_chat: MakeChat, caplog: pytest.LogCaptureFixture
) -> None:
    srv.script("decider", Fail(status=503), "not json", GOOD)
    caplog.set_level(logging.INFO)

    make_chat(srv).complete_json(Role.DECIDER, decider_messages(" SECRET-PROMPT"), Decision)

    assert caplog.records  # the retry and the repair were logged
    assert "SECRET-PROMPT" not in caplog.text
    assert "test-key-123" not in caplog.text


def test_no_base_url_says_how_to_configure() -> None:
    with pytest.raises(ConfigError) as info:
        build_chat_model(Settings(llm_base_url=None))
    message = str(info.value)
    for name in ("OpenAI", "vLLM", "Ollama", "llama.cpp", "PLANLOOP_LLM_BASE_URL"):
        assert name in message
    assert "https://api.openai.com/v1" in message
    assert "http://localhost:11434/v1" in message
