"""The deployment's configured secret values (core/known_secrets.py) are hidden by the one
masker wherever they appear once an entry point checked its settings: in model prompts,
stored lessons, log lines, events and reports, including values no shape rule would catch
(a password that reads like a word)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from planloop.config.settings import Settings
from planloop.core.credentials import CONSOLE_PASSWORD_FILE, generated_password
from planloop.core.known_secrets import deployment_secrets, url_passwords
from planloop.core.lessons.data import NewLesson
from planloop.core.masking import MASK, MaskingFilter, forget_secrets, mask_messages, mask_text
from planloop.core.models import Event, EventType
from planloop.core.settings_check import check_settings

# Plain words: no credential shape, no name=value pair, nothing but the value to go by.
REDIS_PASSWORD = "orchardlanternmeadow"
DB_PASSWORD = "pebble%40harbourquiet"  # percent-encoded in the URL: "pebble@harbourquiet"
FLOWER_PASSWORD = "violetcanyonsummer"
LLM_KEY = "localmodelkeyplainwords"


@pytest.fixture(autouse=True)
def _fresh_masker() -> Iterator[None]:
    forget_secrets()
    yield
    forget_secrets()


def deployment() -> Settings:
    return Settings.model_construct(
        **{
            **Settings().model_dump(),
            "redis_url": f"redis://:{REDIS_PASSWORD}@cache.internal:6379/0",
            "database_url": f"postgresql+psycopg://planloop:{DB_PASSWORD}@db.internal/pl",
            "flower_basic_auth": SecretStr(f"ops:{FLOWER_PASSWORD},admin:{FLOWER_PASSWORD}2"),
            "llm_api_key": SecretStr(LLM_KEY),
            "console_users": SecretStr(""),
            "llm_base_url": None,
            "otel_endpoint": None,
        }
    )


def test_the_deployments_secrets_are_gathered_from_every_setting() -> None:
    found = set(deployment_secrets(deployment()))

    assert {REDIS_PASSWORD, DB_PASSWORD, "pebble@harbourquiet", LLM_KEY} <= found
    assert {FLOWER_PASSWORD, f"{FLOWER_PASSWORD}2"} <= found  # each pair's password alone
    assert "ops" not in found
    assert "planloop" not in found


def test_a_url_without_a_password_gives_none() -> None:
    assert url_passwords("redis://127.0.0.1:6379/0") == []
    assert url_passwords("redis://user@host/0") == []
    assert url_passwords("not a url") == []


def text_with_every_secret() -> str:
    return (
        f"could not log in with {REDIS_PASSWORD} nor pebble@harbourquiet; "
        f"the key {LLM_KEY} and {FLOWER_PASSWORD} were tried"
    )


def assert_hidden(text: str) -> None:
    for value in (REDIS_PASSWORD, "pebble@harbourquiet", LLM_KEY, FLOWER_PASSWORD):
        assert value not in text, f"{value} is shown in {text!r}"
    assert MASK in text


def test_before_the_settings_are_checked_plain_words_pass() -> None:
    assert mask_text(text_with_every_secret()) == text_with_every_secret()


def test_once_checked_they_are_hidden_in_prompts_lessons_logs_events_and_reports() -> None:
    check_settings(deployment(), record=False)
    text = text_with_every_secret()

    prompt = mask_messages([{"role": "user", "content": text}])[0]["content"]
    lesson = NewLesson(lesson=text, trigger=text, evidence=text, goal=text)
    record = logging.LogRecord("planloop", logging.INFO, __file__, 1, "%s", (text,), None)
    MaskingFilter().filter(record)
    event = Event(type=EventType.EXTERNAL_SIGNAL, description=text, payload={"text": text})
    fields = event.to_fields()

    for shown in (
        prompt,
        lesson.lesson,
        lesson.trigger,
        lesson.evidence,
        lesson.goal,
        record.getMessage(),
        fields["description"],
        fields["payload"],
        mask_text(text),  # what every report, show and status line passes through
    ):
        assert_hidden(shown)


def test_a_generated_console_password_is_hidden_in_this_process(tmp_path: Path) -> None:
    made = generated_password(tmp_path, CONSOLE_PASSWORD_FILE)

    assert mask_text(f"login with {made.password} failed") == f"login with {MASK} failed"
