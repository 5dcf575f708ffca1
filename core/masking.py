"""The one masker: what every output path (Flower, events, prompts, reports, CLI, logs) shows.

Secrets reach Planloop as step params (a token a tool needs), inside tool outputs and inside
error texts. The worker needs the real values, so they are stored as given; everything that
*shows* a value goes through :func:`mask` (structured data) or :func:`mask_text` (free text).

Rules, in one place so every path agrees:

* **Names.** A key is secret when it is in the caller's ``sensitive`` set (fields a tool marks
  ``sensitive``) or when :func:`is_secret_name` says so. Names are split into words across
  naming styles (``apiKey``, ``api-key``, ``API_KEY``, ``x-api-key``) and compared
  case-insensitively:

  - any word, or the words run together, containing ``password``, ``passwd``, ``passphrase``,
    ``secret``, ``credential``, ``authorization``, ``cookie`` or ``connectionstring``; the
    words ``pwd`` and ``pw``;
  - a key qualified as a credential: ``api``, ``private``, ``access``, ``secret``,
    ``signing``, ``encryption``, ``master``, ``ssh``, ``account`` or ``client`` followed by
    ``key`` (``api_key``, ``privateKey``, ``x-api-key``, ``AccountKey``);
  - a last word ending in ``token`` (``token``, ``access_token``, ``idToken``, ``csrftoken``)
    or equal to ``auth`` (``basic_auth``). A plural, or a word after ``token``, names a
    count or a kind, not a credential: ``tokens``, ``max_tokens``, ``prompt_tokens``,
    ``token_count``, ``token_type`` stay (our own reports count LLM tokens).

  The rules lean to hiding: ``secretary`` or ``cookie_consent`` are masked too.

* **Values.** Wherever a string is shown: a URL's password (``redis://u:pw@h`` ->
  ``redis://u:***@h``), ``Bearer``/``Basic`` credentials, and ``name=value`` /
  ``name: value`` / ``"name": "value"`` pairs whose name is secret. ``SecretStr`` and
  ``SecretBytes`` values are always masked.

* **Errors.** :func:`error_text` renders pydantic's ``ValidationError`` as ``loc: msg`` lines
  without the offending input (its ``str()`` repeats ``input_value=...``) and masks the rest;
  in any other text (a traceback, a tool's message that wraps pydantic's), the
  ``input_value=...`` of pydantic's rendering is masked.

* **Free text** (core/secret_shapes.py): values this process knows to be secret
  (:func:`remember_secrets`: its ``SecretStr`` settings), token shapes (``sk-…``, ``AKIA…``,
  ``ghp_…``, JWTs), private key blocks, and the word after ``password``/``token``/``api key``
  when it is not a plain word ("password hunter2").

* **Prompts.** The LLM client sends every message through :func:`mask_messages`, at its one
  send point, so no role's prompt can skip the masker.

What it cannot see: a secret under an innocent name in an innocent-looking string. Tools
mark such fields ``sensitive`` (``Field(json_schema_extra={"sensitive": True})`` or
``SecretStr``); workers publish those names in the tool catalogue (core/catalogue.py).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Iterable, Mapping
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, SecretBytes, SecretStr, ValidationError

from planloop.core.secret_shapes import (
    MASK,
    forget_secrets,
    mask_known,
    mask_shapes,
    remember_model_secrets,
    remember_secrets,
)

# Deeper than this, a value is not inspected but hidden (plans are limited far below it).
MAX_DEPTH = 100

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_SECRET_PARTS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "credential",
    "authorization",
    "cookie",
    "connectionstring",
)
_KEY_QUALIFIERS = (
    "api",
    "private",
    "access",
    "secret",
    "signing",
    "encryption",
    "master",
    "ssh",
    "account",
    "client",
)
_SECRET_KEYS = tuple(f"{q}key" for q in _KEY_QUALIFIERS)

# Linear time on any input: a name or scheme starts only where a run of its characters
# starts (the look-behind), and its run is never re-scanned (possessive quantifiers).
_URL_PASSWORD = re.compile(
    r"(?<![a-zA-Z0-9+.\-])([a-zA-Z][a-zA-Z0-9+.\-]*+://[^\s:/?#@]*+:)[^\s/?#@]++(?=@)"
)
_BEARER = re.compile(r"\b(Bearer\s+)[^\s,;'\"<>()]++|\b(Basic\s+)[A-Za-z0-9+/]{8,}=*", re.I)
# What every value rule needs; most texts have none and are left after this one scan.
_MAYBE_SECRET = re.compile(r"[=:]|bearer|basic", re.I)
# pydantic's rendering of an error repeats the input: [type=..., input_value='S', ...]
_PYDANTIC_INPUT = re.compile(r"(input_value=)[^\n]{0,100000}?(?=, input_type=)")
# ``name=value``, ``name: value``, ``"name": "value"``: the name, then its value.
_PAIR_KEY = re.compile(r"""(["']?)(?<![A-Za-z0-9_.\-])([A-Za-z_][A-Za-z0-9_.\-]*+)\1\s*+[=:]\s*+""")
# A value that opens an object is structure (a JSON schema's property), not a credential.
_PAIR_VALUE = re.compile(
    r"""(?:Bearer|Basic|Token|Digest)\s+[^\s,;&)}\]]+|"[^"]*"?|'[^']*'?|[^\s,;&)}\]"'{][^\s,;&)}\]"']*+""",
    re.I,
)


def name_words(name: str) -> list[str]:
    """``name`` split into lower-case words across naming styles (``apiKey`` -> api, key)."""
    return [w.lower() for w in _WORD.findall(name)]


@lru_cache(maxsize=4096)  # the same few field names come by again and again
def is_secret_name(name: str) -> bool:
    """Whether a field called ``name`` holds a credential (rules in the module docstring)."""
    words = name_words(name)
    if not words:
        return False
    joined = "".join(words)
    if any(part in joined for part in _SECRET_PARTS) or any(k in joined for k in _SECRET_KEYS):
        return True
    last = words[-1]
    return "pwd" in words or "pw" in words or last.endswith("token") or last == "auth"


def mask(value: Any, sensitive: Collection[str] = ()) -> Any:
    """A copy of ``value`` fit to show: secret keys masked at any depth, strings masked.

    Mappings, lists and tuples are walked (tuples come back as lists, ready for JSON);
    pydantic models are dumped first. ``sensitive`` names fields to hide besides the ones
    :func:`is_secret_name` recognises.
    """
    return _mask(value, frozenset(sensitive), 0)


def _mask(value: Any, hidden: frozenset[str], depth: int) -> Any:
    if isinstance(value, str):
        return mask_text(value, hidden)
    if value is None or isinstance(value, bool | int | float):
        return value
    if depth > MAX_DEPTH or isinstance(value, SecretStr | SecretBytes):
        return MASK
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {
            key: MASK if _hidden(key, hidden) else _mask(item, hidden, depth + 1)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_mask(item, hidden, depth + 1) for item in value]
    return value


def _hidden(key: object, hidden: frozenset[str]) -> bool:
    return isinstance(key, str) and (key in hidden or is_secret_name(key))


def mask_text(text: str, sensitive: Collection[str] = ()) -> str:
    """``text`` with URL passwords, bearer credentials and secret ``name=value`` pairs masked
    (a pair is secret by :func:`is_secret_name` or when its name is in ``sensitive``), and
    the free-text credentials of core/secret_shapes.py."""
    text = mask_known(text)
    if _MAYBE_SECRET.search(text):  # else nothing here can hold a pair, a URL or a bearer
        text = _mask_pairs(text, sensitive)
        if "input_value=" in text:
            text = _PYDANTIC_INPUT.sub(rf"\g<1>{MASK}", text)
        text = _URL_PASSWORD.sub(rf"\g<1>{MASK}", text)
        text = _BEARER.sub(lambda m: f"{m.group(1) or m.group(2)}{MASK}", text)
    return mask_shapes(text)


def mask_messages(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages as a model may see them: every text content through :func:`mask_text`
    (the LLM client's one send point calls this; no prompt reaches a model otherwise)."""
    return [
        {**m, "content": mask_text(m["content"])} if isinstance(m.get("content"), str) else dict(m)
        for m in messages
    ]


def _mask_pairs(text: str, sensitive: Collection[str]) -> str:
    # A scan rather than one re.sub: a pair whose name is not secret must not swallow the
    # pair after it ("error: token=abc").
    parts, done = [], 0
    for key in _PAIR_KEY.finditer(text):
        if key.start() < done or not (key[2] in sensitive or is_secret_name(key[2])):
            continue
        value = _PAIR_VALUE.match(text, key.end())
        if value is None:
            continue
        quote = value[0][0] if value[0][0] in "'\"" else ""
        parts += [text[done : key.end()], f"{quote}{MASK}{quote}"]
        done = value.end()
    return "".join(parts) + text[done:] if parts else text


def validation_summary(exc: ValidationError) -> str:
    """A pydantic error as ``loc: msg`` lines, without the input values it would repeat."""
    parts = []
    for error in exc.errors(include_input=False, include_url=False, include_context=False):
        where = ".".join(str(p) for p in error["loc"]) or "(value)"
        parts.append(f"{where}: {error['msg']}")
    return mask_text("; ".join(parts))


def error_text(exc: BaseException) -> str:
    """``str(exc)`` fit to show: pydantic errors without inputs, secrets masked."""
    if isinstance(exc, ValidationError):
        return f"{exc.error_count()} validation error(s) for {exc.title}: {validation_summary(exc)}"
    return mask_text(str(exc))


class MaskingFilter(logging.Filter):
    """Masks every log record's message (and traceback) before a handler writes it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask_text(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = mask_text(logging.Formatter().formatException(record.exc_info))
        return True


def install_log_masking(logger: logging.Logger | None = None) -> None:
    """Add a :class:`MaskingFilter` to every handler of ``logger`` (the root by default)."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, MaskingFilter) for f in handler.filters):
            handler.addFilter(MaskingFilter())


__all__ = [
    "MASK",
    "MaskingFilter",
    "error_text",
    "forget_secrets",
    "install_log_masking",
    "is_secret_name",
    "mask",
    "mask_messages",
    "mask_text",
    "name_words",
    "remember_model_secrets",
    "remember_secrets",
    "validation_summary",
]
