"""Credentials free text carries without a ``name=value`` pair, for core/masking.py.

:func:`planloop.core.masking.mask_text` hides pairs, URL passwords and ``Bearer`` credentials;
this module adds what a sentence carries ("the password is hunter2", "token sk-…", a pasted
key):

* **Known values** (:func:`remember_secrets`): the values of this process's ``SecretStr``
  settings and whatever else a caller knows to be a secret, hidden wherever they appear.
  Values shorter than ``KNOWN_MIN_CHARS`` are not remembered: hidden everywhere, a short one
  (``test``) would blank out ordinary words.
* **Token shapes**: OpenAI/Anthropic ``sk-…``, AWS access key ids (``AKIA…``), GitHub
  (``ghp_…``, ``github_pat_…``), GitLab (``glpat-…``), Slack (``xox?-…``), Google
  (``AIza…``), Stripe (``sk_live_…``), JSON Web Tokens (``eyJ….eyJ….…``).
* **Private keys**: a PEM ``-----BEGIN … PRIVATE KEY-----`` block, up to its END line (or
  to the end of the text when it was cut).
* **A value after a credential word**: ``password hunter2``, ``passwd is x9!``,
  ``token abc123``, ``api key 5f…``: the next word, when it holds anything besides letters
  (a digit, a symbol). A plain word stays, so "the password was rejected" reads as written.

Every pattern runs in linear time: each starts at a fixed literal and its runs are bounded.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable

from pydantic import BaseModel, SecretBytes, SecretStr

MASK = "***"
KNOWN_MIN_CHARS = 8
MAX_KNOWN = 1024  # the newest known values kept (a long-lived process keeps learning some)

_TOKEN_SHAPES = re.compile(
    r"\bsk-[A-Za-z0-9_\-]{8,}+"
    r"|\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA)[A-Z0-9]{16}\b"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}+"
    r"|\bgithub_pat_[A-Za-z0-9_]{20,}+"
    r"|\bglpat-[A-Za-z0-9_\-]{20,}+"
    r"|\bxox[abposr]-[A-Za-z0-9\-]{10,}+"
    r"|\bAIza[0-9A-Za-z_\-]{35}"
    r"|\b[rs]k_(?:live|test)_[0-9A-Za-z]{10,}+"
    r"|\beyJ[A-Za-z0-9_\-]{10,}+\.[A-Za-z0-9_\-]{10,}+\.[A-Za-z0-9_\-]{10,}+"
)
_PEM_BEGIN = re.compile(r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY-----")
_PEM_END = re.compile(r"-----END[A-Z0-9 ]{0,40}PRIVATE KEY-----")
_WORD_VALUE = re.compile(
    r"\b(?P<word>passwords?|passwd|passphrase|pwd|secret|token|credentials?"
    r"|(?:api|access|secret|private)[ _\-]?key)"
    r"(?P<gap>\s++(?:(?:is|was|of|=|:)\s++)?)"
    r"(?P<quote>[\"'`]?)"
    r"(?P<value>(?=[^\s\"'`,;()<>\[\]{}]{0,200}?[^A-Za-z\s\"'`,;()<>\[\]{}])"
    r"[^\s\"'`,;()<>\[\]{}]{3,}+)",
    re.IGNORECASE,
)
# What any shape above needs; most texts have none and are left after this one scan.
MAYBE_SHAPE = re.compile(
    r"(?i:pass|pwd|secret|token|credential|key)"
    r"|sk-|[rs]k_|A[A-Z]{3}[A-Z0-9]{16}|gh[pousr]_|github_pat_|glpat-|xox|AIza|eyJ"
)

_known: dict[str, None] = {}  # insertion-ordered: the oldest go first past MAX_KNOWN
_known_pattern: re.Pattern[str] | None = None
_lock = threading.Lock()


def remember_secrets(values: Iterable[str]) -> None:
    """Hide each of ``values`` (of at least ``KNOWN_MIN_CHARS``) in every masked text from
    now on, in this process."""
    global _known_pattern
    with _lock:
        added = False
        for value in values:
            if len(value) >= KNOWN_MIN_CHARS and value not in _known:
                _known[value] = None
                added = True
        while len(_known) > MAX_KNOWN:
            del _known[next(iter(_known))]
        if added:
            ordered = sorted(_known, key=len, reverse=True)  # a value inside another goes too
            _known_pattern = re.compile("|".join(re.escape(v) for v in ordered))


def remember_model_secrets(model: BaseModel) -> None:
    """:func:`remember_secrets` for every ``SecretStr``/``SecretBytes`` field of ``model``
    (the settings of an entry point: the LLM key, Flower's login)."""
    values = []
    for name in type(model).model_fields:
        value = getattr(model, name, None)
        if isinstance(value, SecretStr):
            values.append(value.get_secret_value())
        elif isinstance(value, SecretBytes):
            values.append(value.get_secret_value().decode("utf-8", "replace"))
    remember_secrets(values)


def forget_secrets() -> None:
    """Forget every remembered value (tests)."""
    global _known_pattern
    with _lock:
        _known.clear()
        _known_pattern = None


def mask_known(text: str) -> str:
    """``text`` with every remembered secret value replaced by ``***``."""
    pattern = _known_pattern
    return pattern.sub(MASK, text) if pattern is not None else text


def mask_shapes(text: str) -> str:
    """``text`` with private keys, token shapes and values after credential words masked."""
    if not MAYBE_SHAPE.search(text):
        return text
    text = _mask_private_keys(text)
    text = _TOKEN_SHAPES.sub(MASK, text)
    return _WORD_VALUE.sub(_masked_value, text)


def _masked_value(match: re.Match[str]) -> str:
    # A closing quote is not part of the value: it stays where it was.
    return f"{match['word']}{match['gap']}{match['quote']}{MASK}"


def _mask_private_keys(text: str) -> str:
    parts, done = [], 0
    for begin in _PEM_BEGIN.finditer(text):
        if begin.start() < done:
            continue
        end = _PEM_END.search(text, begin.end())
        parts += [text[done : begin.end()], MASK]
        done = end.start() if end else len(text)
    return "".join(parts) + text[done:] if parts else text
