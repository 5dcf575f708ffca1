"""The only module that reads the environment: every ``PLANLOOP_*`` variable lands here.

:class:`Settings` is the one settings class; its fields are declared by concern in
``config/sections/`` (stores, workers, sessions, llm, servers, safety) and the last few here.
A new setting goes into the section of its concern, with a description.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from planloop.config.sections.llm import LlmSettings, ModelPrice, default_llm_prices
from planloop.config.sections.safety import MAX_NESTING_DEPTH_CEILING, SafetySettings
from planloop.config.sections.servers import ServerSettings
from planloop.config.sections.sessions import SessionSettings
from planloop.config.sections.stores import StoreSettings
from planloop.config.sections.workers import WorkerSettings

__all__ = [
    "MAX_NESTING_DEPTH_CEILING",
    "STEP_TIMEOUT_CEILING_S",
    "ModelPrice",
    "Settings",
    "default_llm_prices",
    "get_settings",
]

# The longest step timeout a setting may ask for (core/input_limits.py explains why).
STEP_TIMEOUT_CEILING_S = 1e9


# pydantic lists inherited fields from the last base to the first: the groups are named in
# reverse, so the fields (and docs/settings.md) keep the order Redis, workers, ..., logs.
class Settings(
    SafetySettings,
    ServerSettings,
    LlmSettings,
    SessionSettings,
    WorkerSettings,
    StoreSettings,
    BaseSettings,
):
    """Typed settings for every Planloop process, read from ``PLANLOOP_*`` env vars.

    Build it once in an entry point and pass it down; nothing else reads the environment.
    """

    model_config = SettingsConfigDict(env_prefix="PLANLOOP_", env_file=None, extra="ignore")
    # --- Logs ------------------------------------------------------------------------------
    log_format: Literal["human", "json"] = Field(
        "human",
        description="Log lines of supervisors and workers: 'human' (default) or 'json', one "
        "object per line with session_id and step_id when the line is about one.",
    )

    @field_validator(
        "tool_modules",
        "worker_queues",
        "console_allowed_hosts",
        "console_trusted_proxies",
        mode="before",
    )
    @classmethod
    def _comma_or_json_list(cls, value: Any) -> Any:
        # A person writes PLANLOOP_TOOL_MODULES=acme.tools,acme.more; to_env() writes JSON.
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except ValueError as exc:
                raise ValueError(f"not a JSON list of module names: {exc}") from None
        return [name.strip() for name in text.split(",") if name.strip()]

    @field_validator("react_stall_repeats")
    @classmethod
    def _repeats_need_two(cls, value: int) -> int:
        # one call is not a repetition: 1 would fail every agent step at its first call
        if value == 1:
            raise ValueError("must be 0 (never) or at least 2: one call is not a repetition")
        return value

    @model_validator(mode="after")
    def _step_timeout_is_waitable(self) -> Settings:
        if self.max_step_timeout_s > STEP_TIMEOUT_CEILING_S:
            raise ValueError(f"max_step_timeout_s must not exceed {STEP_TIMEOUT_CEILING_S:g} s")
        return self

    # --- Tool catalogue (what workers publish; one masker) ---------------------------------
    catalogue_refresh_s: float = Field(
        30.0,
        gt=0,
        description="Seconds between a worker's re-publications of its tool catalogue "
        "(pl:tools); readers reload a tool they do not know at most once a second.",
    )

    # --- Watchdog and big values ---------------------------------------------------------
    no_consumer_warning_s: float = Field(
        30.0,
        gt=0,
        description="Seconds an attempt may wait in the step queue, with the queue not "
        "shrinking, before the session warns that no worker consumes it.",
    )
    blob_ttl_s: float = Field(
        86400.0,
        ge=0,
        description="Seconds a step output's hot copy stays in Redis after it was written "
        "or last read (0: forever); the SQL record keeps the durable copy.",
    )

    # --- Large values by reference -------------------------------------------------------
    inline_value_max_bytes: int = Field(
        64 * 1024,
        ge=0,
        description="Largest step param, as JSON bytes, that travels inline in a step's task "
        "message (default 64 KiB); a bigger one travels as a reference to its one stored "
        "copy, and prompts show a preview of any value above it with its size.",
    )
    value_max_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1,
        description="Largest step output or param, as JSON bytes (default 16 MiB): a step "
        "whose output or params are bigger fails for good with OutputTooLarge.",
    )

    @model_validator(mode="after")
    def _value_limits_fit(self) -> Settings:
        if self.inline_value_max_bytes > self.value_max_bytes:
            raise ValueError(
                "inline_value_max_bytes must not exceed value_max_bytes "
                f"({self.inline_value_max_bytes} > {self.value_max_bytes})"
            )
        return self

    @model_validator(mode="after")
    def _timeouts_fit(self) -> Settings:
        if self.default_step_timeout_s > self.max_step_timeout_s:
            raise ValueError(
                "default_step_timeout_s must not exceed max_step_timeout_s "
                f"({self.default_step_timeout_s} > {self.max_step_timeout_s})"
            )
        return self

    @property
    def visibility_timeout_s(self) -> int:
        """Broker visibility timeout: above the longest step timeout, so no early redelivery."""
        return int(self.max_step_timeout_s + self.watchdog_grace_s + 60)

    def to_env(self) -> dict[str, str]:
        """The ``PLANLOOP_*`` variables that recreate these settings in a child process."""
        env: dict[str, str] = {}
        for name, value in self.model_dump(mode="json").items():
            if value is None:
                continue
            raw = getattr(self, name)
            if isinstance(raw, SecretStr):
                value = raw.get_secret_value()
            env[f"PLANLOOP_{name.upper()}"] = value if isinstance(value, str) else json.dumps(value)
        return env


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings of this process, read from the environment once."""
    return Settings()
