"""The masker's free-text rules (core/secret_shapes.py): credentials a sentence carries."""

from __future__ import annotations

import string
from collections.abc import Iterator

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, SecretStr

from planloop.core.lessons import NewLesson
from planloop.core.masking import (
    MASK,
    forget_secrets,
    mask_messages,
    mask_text,
    remember_model_secrets,
    remember_secrets,
)
from planloop.core.secret_shapes import KNOWN_MIN_CHARS, MAX_KNOWN


@pytest.fixture(autouse=True)
def no_known_secrets() -> Iterator[None]:
    forget_secrets()
    yield
    forget_secrets()


AWS_KEY = "AKIA" + "IOSFODNN7EXAMPLE"
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7\nq9Zx==\n-----END RSA PRIVATE KEY-----"

# (text, the secret in it that must go)
LEAKS = [
    ("log in with password hunter2 please", "hunter2"),
    ("the password is hunter2", "hunter2"),
    ("Password: 'hunter2'", "hunter2"),
    ("passwd was x9!pass", "x9!pass"),
    ("pwd s3cret-pw", "s3cret-pw"),
    ("use token sk-live-999abcdef", "sk-live-999abcdef"),
    ("token abc123def for the API", "abc123def"),
    ("api key 5f3a9b7c", "5f3a9b7c"),
    ("the access key is AK-2020-x", "AK-2020-x"),
    ("call it with sk-proj-AbCdEf0123456789xyz", "sk-proj-AbCdEf0123456789xyz"),
    (f"aws id {AWS_KEY} in us-east-1", AWS_KEY),
    (f"clone with {GITHUB}", GITHUB),
    ("slack xoxb-123456789012-abcdefghij", "xoxb-123456789012-abcdefghij"),
    ("google AIzaSyA1234567890abcdefghijklmnopqrstuv", "AIzaSyA1234567890abcdefghijklmnopqrstuv"),
    ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    (f"session cookie {JWT}", JWT.split(".")[2]),
    (f"key:\n{PEM}\nthat is all", "MIIEpAIBAAKCAQEA7"),
    ("-----BEGIN PRIVATE KEY-----\nMIIcut-off-here", "MIIcut-off-here"),
    ("goal: password=hunter2 and Bearer sk-abcdef1234567890", "hunter2"),
    ("goal: password=hunter2 and Bearer sk-abcdef1234567890", "sk-abcdef1234567890"),
    ("Authorization: Token abc123", "abc123"),
    ("fetch https://bob:hunter2@example.com/x", "hunter2"),
]


@pytest.mark.parametrize(("text", "secret"), LEAKS)
def test_credentials_in_free_text_are_masked(text: str, secret: str) -> None:
    masked = mask_text(text)
    assert secret not in masked
    assert MASK in masked


# Ordinary sentences about credentials, token counts and JSON schemas stay as written.
UNTOUCHED = [
    "the password was rejected",
    "check the token budget",
    "reset the password for the user",
    "max tokens 1200/5000",
    "llm: tokens 1200/5000  cost $0.0012/-",
    "the secret sauce",
    "sk-learn is not a key",
    "task-12345678 is a ticket",
    'Params: {"properties":{"password":{"type":"string"},"token":{"type":"string"}}}',
    "the private key file is missing",
    "",
]


@pytest.mark.parametrize("text", UNTOUCHED)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert mask_text(text) == text


def test_a_closing_quote_stays_where_it_was() -> None:
    assert mask_text("password is 'hunter2' ok") == f"password is '{MASK}' ok"
    assert mask_text(PEM) == f"-----BEGIN RSA PRIVATE KEY-----{MASK}-----END RSA PRIVATE KEY-----"


def test_known_values_are_masked_anywhere_once_remembered() -> None:
    value = "zq7-correct-horse"
    assert mask_text(f"connected as {value}.") == f"connected as {value}."
    remember_secrets([value, "short"])
    assert mask_text(f"connected as {value}.") == f"connected as {MASK}."
    assert mask_text("a short word") == "a short word"  # under KNOWN_MIN_CHARS: not kept
    assert len("short") < KNOWN_MIN_CHARS


def test_a_longer_known_value_goes_whole_before_one_inside_it() -> None:
    remember_secrets(["abcdefgh", "abcdefgh-ijkl"])
    assert mask_text("x abcdefgh-ijkl y") == f"x {MASK} y"


def test_known_values_are_bounded() -> None:
    remember_secrets(f"value-{n:06d}" for n in range(MAX_KNOWN + 10))
    assert mask_text("value-000000") == "value-000000"  # the oldest went
    assert mask_text(f"value-{MAX_KNOWN + 9:06d}") == MASK


class Config(BaseModel):
    api_key: SecretStr
    name: str


def test_a_models_secret_fields_are_remembered() -> None:
    remember_model_secrets(Config(api_key=SecretStr("k-1234567890"), name="ordinary-name"))
    assert mask_text("key k-1234567890 for ordinary-name") == f"key {MASK} for ordinary-name"


def test_prompt_messages_are_masked_and_keep_their_other_fields() -> None:
    messages = [
        {"role": "system", "content": "ROLE: critic"},
        {"role": "user", "content": "goal: password=hunter2", "name": "u"},
        {"role": "user", "content": None},
    ]
    assert mask_messages(messages) == [
        {"role": "system", "content": "ROLE: critic"},
        {"role": "user", "content": f"goal: password={MASK}", "name": "u"},
        {"role": "user", "content": None},
    ]
    assert messages[1]["content"] == "goal: password=hunter2"  # the input is not changed


def test_a_new_lesson_is_masked_whoever_builds_it() -> None:
    lesson = NewLesson(
        lesson="retry with password hunter2",
        trigger="token sk-live-999abcdef failed",
        evidence="api_key=k9",
        goal="deploy with Bearer abc.def",
    )
    stored = " ".join([lesson.lesson, lesson.trigger, lesson.evidence, lesson.goal])
    for secret in ("hunter2", "sk-live-999abcdef", "k9", "abc.def"):
        assert secret not in stored


# what a password in a URL may hold unescaped, like any other context here
SECRET_CHARS = string.ascii_letters + string.digits + "-_!%+.~"
secret_values = st.text(SECRET_CHARS, min_size=6, max_size=40).filter(
    lambda s: any(not c.isalpha() for c in s)
)
filler = st.text(string.ascii_letters + " .,\n", max_size=60)
contexts = st.sampled_from(
    [
        "password {}",
        "password is {}",
        "password={}",
        "passwd: {}",
        "token {}",
        "api_key={}",
        "Bearer {}",
        "https://user:{}@host/x",
        '{{"secret": "{}"}}',
    ]
)


@settings(max_examples=300, deadline=None)
@given(before=filler, context=contexts, value=secret_values, after=filler)
def test_a_credential_in_any_surrounding_text_never_survives(
    before: str, context: str, value: str, after: str
) -> None:
    assume(value not in before and value not in after)
    text = f"{before} {context.format(value)} {after}"
    masked = mask_text(text)
    assert value not in masked
    assert mask_text(masked) == masked  # masking twice changes nothing more


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_masking_is_idempotent_on_any_text(text: str) -> None:
    once = mask_text(text)
    assert mask_text(once) == once


@pytest.mark.parametrize(
    "unit", ["password a1 ", "token ", "sk-", "-----BEGIN PRIVATE KEY-----", "eyJ", "AKIA"]
)
def test_long_texts_of_free_text_shapes_are_masked_in_one_pass(unit: str) -> None:
    # Quadratic patterns take minutes here; the suite's per-test timeout fails them.
    text = unit * 50_000
    assert mask_text(text)
