"""Settings read and checked once per entry point: a bad value is one :class:`ConfigError`
line naming its ``PLANLOOP_*`` variable, before any process, connection or server starts.

Pydantic checks each field's type and range (config/settings.py); this module adds what a
field cannot check alone without importing a driver: that the Redis URL parses as one, and
that the database URL names a backend Planloop's record runs on, with its driver installed.
Nothing here connects to anything: an unreachable service is exit 3 (producer/exits.py).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from planloop.config.settings import Settings
from planloop.core.errors import ConfigError
from planloop.core.known_secrets import remember_deployment_secrets
from planloop.core.redis_faults import redact_url

# The record's SQL uses these dialects' own INSERT ... ON CONFLICT (core/record/statements.py).
RECORD_BACKENDS = ("sqlite", "postgresql")
POSTGRES_INSTALL = "pip install 'planloop[postgres]'"
POSTGRES_HINT = f"{POSTGRES_INSTALL} and use postgresql+psycopg://"


def env_name(field: str) -> str:
    """The environment variable of a settings field: ``redis_url`` -> ``PLANLOOP_REDIS_URL``."""
    return f"PLANLOOP_{field.upper()}"


def load_settings(*, record: bool = False, **overrides: Any) -> Settings:
    """The ``PLANLOOP_*`` settings (``overrides`` replacing single fields), checked; the
    database URL too with ``record`` (for a process that opens the SQL record: the check
    imports SQLAlchemy and the driver, which a producer that only talks to Redis skips;
    :func:`core.record.make_engine` checks it whenever the record is opened).

    Raises:
        ConfigError: a value that cannot work; the message names the variable.
    """
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        raise settings_error(exc) from None
    check_settings(settings, record=record)
    return settings


def settings_error(exc: ValidationError) -> ConfigError:
    """One line for pydantic's errors, each led by the variable it is about (inputs left
    out: a secret may be one)."""
    problems, fields = [], []
    for error in exc.errors(include_input=False, include_url=False):
        loc = error.get("loc") or ()
        # "Value error, " leads what a validator of ours raised: its text says it all
        message = " ".join(str(error.get("msg", "")).split()).removeprefix("Value error, ")
        if loc:
            fields.append(env_name(str(loc[0])))
            problems.append(f"{fields[-1]}: {message}")
        else:  # a rule across fields (model validator): its message names them
            problems.append(message)
    return ConfigError(
        f"invalid PLANLOOP_* settings: {'; '.join(problems)}",
        setting=fields[0] if fields else None,
    )


def check_settings(settings: Settings, *, record: bool = True) -> None:
    """What pydantic cannot check about ``settings`` (see the module docstring); the
    database URL only with ``record``.

    Its secret values (``SecretStr`` fields, URL passwords: core/known_secrets.py) are handed
    to the masker, which hides them in every log line, prompt and stored text of this
    process from now on.

    Raises:
        ConfigError: the first value that cannot work, naming its variable.
    """
    remember_deployment_secrets(settings)
    check_redis_url(settings.redis_url)
    from planloop.core.redis_client import redis_address

    redis_address(settings)  # a sentinel URL: parses, and names its master
    if record:
        check_database_url(settings.database_url)


def check_redis_url(url: str) -> None:
    """Raises ConfigError unless ``url`` parses as a Redis URL (nothing is connected); a
    sentinel URL is checked by :func:`planloop.core.redis_client.parse_redis_url`."""
    import redis

    from planloop.core.redis_client import is_sentinel_url

    if is_sentinel_url(url):  # checked with the sentinel settings (check_settings)
        return
    try:
        redis.ConnectionPool.from_url(url)
    except ValueError as exc:
        raise ConfigError(
            f"PLANLOOP_REDIS_URL={redact_url(url)!r} is not a Redis URL ({exc}); "
            "e.g. redis://127.0.0.1:6379/0",
            setting="PLANLOOP_REDIS_URL",
        ) from None


def check_database_url(url: str) -> None:
    """Raises ConfigError unless ``url`` is an SQLAlchemy URL of a backend the record runs
    on (SQLite, PostgreSQL) whose driver is installed (nothing is connected)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    setting, shown = "PLANLOOP_DATABASE_URL", redact_url(url)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError(
            f"{setting}={shown!r} is not a database URL; e.g. sqlite:///.planloop/planloop.db "
            "or postgresql+psycopg://user:password@host:5432/planloop",
            setting=setting,
        ) from None
    backend = parsed.get_backend_name()
    if backend not in RECORD_BACKENDS:
        raise ConfigError(
            f"{setting}={shown!r}: unsupported database scheme {parsed.drivername!r}; the "
            "record runs on SQLite (sqlite:///path) or PostgreSQL (postgresql+psycopg://...)",
            setting=setting,
        )
    try:
        parsed.get_dialect().import_dbapi()
    except NoSuchModuleError:
        raise ConfigError(
            f"{setting}={shown!r}: unknown {backend} driver {parsed.get_driver_name()!r}"
            + (f"; {POSTGRES_HINT}" if backend == "postgresql" else ""),
            setting=setting,
        ) from None
    except ImportError as exc:
        driver = parsed.get_driver_name()
        hint = "install it"
        if backend == "postgresql":  # the postgres extra installs psycopg (3)
            hint = (
                POSTGRES_INSTALL
                if driver == "psycopg"
                else f"{POSTGRES_HINT} (or install {driver})"
            )
        raise ConfigError(
            f"{setting}={shown!r}: the {driver} driver is not installed ({exc}); {hint}",
            setting=setting,
        ) from None
