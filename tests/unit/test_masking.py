"""The one masker: name rules, value rules, nesting, error texts, and what it leaves alone."""

from __future__ import annotations

import logging
import sys
from typing import Any

import pytest
from pydantic import BaseModel, Field, SecretStr, ValidationError

from planloop.core.errors import PermanentToolError
from planloop.core.masking import (
    MASK,
    MaskingFilter,
    error_text,
    is_secret_name,
    mask,
    mask_text,
    validation_summary,
)
from planloop.core.tools import ToolContext, ToolSpec

SECRET_NAMES = [
    "password",
    "Password",
    "db_password",
    "passwd",
    "pwd",
    "db_pw",
    "passphrase",
    "secret",
    "client_secret",
    "clientSecret",
    "secret_key",
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "auth_token",
    "accessToken",
    "csrftoken",
    "api_key",
    "apiKey",
    "APIKey",
    "api-key",
    "x-api-key",
    "X-API-KEY",
    "apikey",
    "authorization",
    "Authorization",
    "proxy-authorization",
    "basic_auth",
    "private_key",
    "privateKey",
    "access_key",
    "accessKey",
    "AccountKey",
    "credentials",
    "cookie",
    "set-cookie",
    "Set-Cookie",
    "connection_string",
]
# Usage counts in our own reports, and everyday fields: never masked.
ORDINARY_NAMES = [
    "tokens",
    "token_count",
    "max_tokens",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "token_type",
    "key",
    "primary_key",
    "idempotency_key",
    "monkey",
    "session",
    "step",
    "author",
    "sku",
    "url",
    "items",
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_credential_names_are_secret_in_every_naming_style(name: str) -> None:
    assert is_secret_name(name)
    assert mask({name: "s3cr3t-value"}) == {name: MASK}


@pytest.mark.parametrize("name", ORDINARY_NAMES)
def test_ordinary_names_and_token_counts_are_left_alone(name: str) -> None:
    assert not is_secret_name(name)
    assert mask({name: 42}) == {name: 42}


NESTED_CASES: list[tuple[Any, Any]] = [
    ({"items": [{"token": "S1"}, {"n": 1}]}, {"items": [{"token": MASK}, {"n": 1}]}),
    ([[{"apiKey": "S2"}]], [[{"apiKey": MASK}]]),
    ({"a": ({"Authorization": "Bearer S3"},)}, {"a": [{"Authorization": MASK}]}),
    (
        {"outer": {"inner": {"private_key": "S4", "ok": True}}},
        {"outer": {"inner": {"private_key": MASK, "ok": True}}},
    ),
    (
        {"usage": {"prompt_tokens": 10, "tokens": 12}},
        {"usage": {"prompt_tokens": 10, "tokens": 12}},
    ),
    ({"pin": SecretStr("S5")}, {"pin": MASK}),
    ({"dsn": "redis://user:S6@host:6379/0"}, {"dsn": f"redis://user:{MASK}@host:6379/0"}),
    ({"note": "send with Bearer S7"}, {"note": f"send with Bearer {MASK}"}),
    ("plain text", "plain text"),
    (None, None),
    (3.5, 3.5),
]


@pytest.mark.parametrize(("value", "expected"), NESTED_CASES)
def test_mask_walks_dicts_lists_and_tuples(value: Any, expected: Any) -> None:
    assert mask(value) == expected


def test_fields_named_sensitive_by_the_caller_are_masked_at_any_depth() -> None:
    value = {"pin": "1234", "rows": [{"pin": "5678", "qty": 2}]}
    assert mask(value, {"pin"}) == {"pin": MASK, "rows": [{"pin": MASK, "qty": 2}]}


def test_mask_leaves_the_input_untouched() -> None:
    value = {"items": [{"token": "S1"}]}
    mask(value)
    assert value == {"items": [{"token": "S1"}]}


def test_values_too_deep_to_inspect_are_hidden() -> None:
    deep: Any = "S8"
    for _ in range(150):
        deep = [deep]
    assert "S8" not in repr(mask(deep))


TEXT_CASES = [
    ("redis://user:S1@host:6379/0", f"redis://user:{MASK}@host:6379/0"),
    ("redis://:S1@host", f"redis://:{MASK}@host"),
    ("postgresql+psycopg://app:S1@db/x failed", f"postgresql+psycopg://app:{MASK}@db/x failed"),
    ("Authorization: Bearer S1.x-y", f"Authorization: {MASK}"),
    ("sent bearer S1", f"sent bearer {MASK}"),
    ("header Basic dXNlcjpTMQ==", f"header Basic {MASK}"),
    ("error: token=S1 retry", f"error: token={MASK} retry"),
    ("GET /v1?api_key=S1&page=2", f"GET /v1?api_key={MASK}&page=2"),
    ('{"apiKey": "S1", "n": 1}', f'{{"apiKey": "{MASK}", "n": 1}}'),
    ("{'client_secret': 'S1'}", f"{{'client_secret': '{MASK}'}}"),
    ("Server=db;Password=S1;User=app", f"Server=db;Password={MASK};User=app"),
    ("max_tokens=512 token_count: 30", "max_tokens=512 token_count: 30"),
    ("https://example.com/a:b@c", "https://example.com/a:b@c"),
    ("step stock failed at 10:30", "step stock failed at 10:30"),
    ("nothing here", "nothing here"),
]


@pytest.mark.parametrize(("text", "expected"), TEXT_CASES)
def test_mask_text(text: str, expected: str) -> None:
    assert mask_text(text) == expected


class Inner(BaseModel):
    port: int
    name: str = Field(max_length=3)


def test_pydantic_errors_are_rendered_without_their_inputs() -> None:
    with pytest.raises(ValidationError) as caught:
        Inner.model_validate({"port": "S1-not-a-port", "name": "S2-too-long"})
    assert "S1-not-a-port" in str(caught.value)  # what pydantic itself would show
    text = error_text(caught.value)
    assert "S1" not in text
    assert "S2" not in text
    assert "port: Input should be a valid integer" in text
    assert "name: String should have at most 3 characters" in text
    assert "errors.pydantic.dev" not in validation_summary(caught.value)


def test_other_error_texts_are_masked() -> None:
    exc = ConnectionError("cannot reach redis://u:S1@cache:6379 with token=S2")
    assert error_text(exc) == f"cannot reach redis://u:{MASK}@cache:6379 with token={MASK}"


class Params(BaseModel):
    count: int


def test_a_tool_whose_params_do_not_fit_fails_without_repeating_them() -> None:
    spec = ToolSpec("t.x", "", Params, None, lambda p, c: {})
    ctx = ToolContext(session_id="s", step_id="a", attempt=1, idempotency_key="s:a")
    with pytest.raises(PermanentToolError) as caught:
        spec.run({"count": "S1-secret"}, ctx)
    assert "S1-secret" not in str(caught.value)
    assert "count: Input should be a valid integer" in str(caught.value)
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__


def test_log_records_are_masked_before_a_handler_writes_them() -> None:
    record = logging.LogRecord(
        "x",
        logging.INFO,
        __file__,
        1,
        "connecting to %s with %s",
        ("redis://u:S1@h", "token=S2"),
        None,
    )
    assert MaskingFilter().filter(record)
    assert record.getMessage() == f"connecting to redis://u:{MASK}@h with token={MASK}"


def test_pairs_named_sensitive_by_the_caller_are_masked_in_text() -> None:
    assert mask_text('{"pin":"S1","qty":2}', {"pin"}) == '{"pin":"***","qty":2}'
    assert mask({"note": "pin=S1"}, {"pin"}) == {"note": "pin=***"}


@pytest.mark.parametrize("unit", ["a", "a.", "ab:", "x://u:", 'token="', "a1-"])
def test_long_texts_are_masked_in_one_pass(unit: str) -> None:
    # A backtracking pattern takes minutes here (quadratic); the suite's per-test timeout
    # turns that into a failure.
    text = unit * 200_000
    assert len(mask_text(text)) >= len(text) // 2


def test_pydantic_inputs_are_masked_in_any_text() -> None:
    with pytest.raises(ValidationError) as caught:
        Inner.model_validate({"port": "S1-not-a-port", "name": "abc"})
    text = mask_text(f"tool said: {caught.value}")
    assert "S1" not in text
    assert "input_value=***, input_type=str" in text


def test_tracebacks_in_log_records_are_masked() -> None:
    given = {"port": "S1-not-a-port", "name": "abc"}
    try:
        Inner.model_validate(given)  # the traceback shows this line, not the value
    except ValidationError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "crashed", (), sys.exc_info())
    MaskingFilter().filter(record)
    assert record.exc_text
    assert "S1" not in record.exc_text
    assert "validation error for Inner" in record.exc_text
