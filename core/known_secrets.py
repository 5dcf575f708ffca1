"""The deployment's configured secrets, handed to the one masker when an entry point starts.

The masker (core/masking.py) hides credentials by their shape and name; a password that
looks like a word, inside a sentence, has neither. What this deployment was configured with
is known, though, so every entry point hands it over once (core/settings_check.py calls
:func:`remember_deployment_secrets` when it checks the settings), and from then on
:func:`planloop.core.masking.mask_text` replaces each value wherever it appears: in every
model prompt (the LLM client's one send point), stored lesson, log line (the logging
filter), event description and report of this process.

What is gathered (:func:`deployment_secrets`):

* every ``SecretStr`` setting as a whole: the LLM API key, Flower's ``user:password``
  pairs, the console users;
* each password of Flower's pairs on its own (a log line may carry one without its user);
* the password of every URL the settings hold (Redis, the SQL record, the LLM endpoint, the
  OpenTelemetry collector), as written and percent-decoded (a driver's error shows it
  decoded). A Sentinel or cluster URL is a Redis URL too; Planloop has no separate
  Sentinel password setting;
* a password generated for a console or Flower started without one
  (core/credentials.py remembers it when it makes or reads it).

Values shorter than ``KNOWN_MIN_CHARS`` are left to the shape rules: hidden everywhere, a
short one (``test``) would blank out ordinary words.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from pydantic import SecretBytes, SecretStr

from planloop.config.settings import Settings
from planloop.core.secret_shapes import remember_secrets

# The settings that hold URLs whose userinfo may carry a password.
URL_SETTINGS = ("redis_url", "database_url", "llm_base_url", "otel_endpoint")


def url_passwords(url: str) -> list[str]:
    """The password of ``url`` as written and percent-decoded (none when it has none)."""
    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        return []
    userinfo, at, _ = netloc.rpartition("@")
    if not at:
        return []
    password = userinfo.partition(":")[2]  # redis://:pw@host, postgresql://user:pw@host
    return sorted({password, unquote(password)} - {""})


def flower_passwords(pairs: str) -> list[str]:
    """The passwords of Flower's comma-separated ``user:password`` pairs."""
    return [p.partition(":")[2] for p in pairs.split(",") if p.partition(":")[2]]


def deployment_secrets(settings: Settings) -> list[str]:
    """Every secret value ``settings`` holds (module docstring), longest first."""
    found: set[str] = set()
    for name in type(settings).model_fields:
        value = getattr(settings, name, None)
        if isinstance(value, SecretStr):
            found.add(value.get_secret_value())
        elif isinstance(value, SecretBytes):
            found.add(value.get_secret_value().decode("utf-8", "replace"))
    found.update(flower_passwords(settings.flower_basic_auth.get_secret_value()))
    for name in URL_SETTINGS:
        url = getattr(settings, name, None)
        if isinstance(url, str) and url:
            found.update(url_passwords(url))
    found.discard("")
    return sorted(found, key=len, reverse=True)


def remember_deployment_secrets(settings: Settings) -> None:
    """Hide every secret value of ``settings`` in each text this process masks from now on."""
    remember_secrets(deployment_secrets(settings))
