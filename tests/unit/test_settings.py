"""Settings: read from PLANLOOP_* variables, validated, and the Celery config derived from them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from planloop.config.celery import STEP_TASK, celery_config
from planloop.config.settings import Settings


def test_defaults_need_no_environment() -> None:
    settings = Settings()

    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.database_url.startswith("sqlite:///")
    assert settings.max_replans == 3
    assert settings.batch_react_size == 3
    assert settings.default_step_timeout_s <= settings.max_step_timeout_s


def test_reads_planloop_prefixed_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANLOOP_KEY_PREFIX", "custom")
    monkeypatch.setenv("PLANLOOP_SESSION_CONCURRENCY", "5")
    monkeypatch.setenv("PLANLOOP_DEFAULT_STEP_TIMEOUT_S", "2.5")
    monkeypatch.setenv("PLANLOOP_TOOL_MODULES", '["my.tools", "other.tools"]')

    settings = Settings()

    assert settings.key_prefix == "custom"
    assert settings.session_concurrency == 5
    assert settings.default_step_timeout_s == 2.5
    assert settings.tool_modules == ["my.tools", "other.tools"]


def test_ignores_variables_without_the_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEY_PREFIX", "leaked")
    monkeypatch.setenv("REDIS_URL", "redis://elsewhere:6379/0")

    settings = Settings()

    assert settings.key_prefix == "pl"
    assert settings.redis_url == "redis://127.0.0.1:6379/0"


def test_default_timeout_above_the_maximum_is_rejected() -> None:
    with pytest.raises(ValidationError, match="default_step_timeout_s must not exceed"):
        Settings(default_step_timeout_s=120, max_step_timeout_s=60)


def test_default_timeout_above_the_maximum_is_rejected_from_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PLANLOOP_DEFAULT_STEP_TIMEOUT_S", "100")
    monkeypatch.setenv("PLANLOOP_MAX_STEP_TIMEOUT_S", "10")

    with pytest.raises(ValidationError, match=r"100\.0 > 10\.0"):
        Settings()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("worker_concurrency", 0),
        ("session_concurrency", 0),
        ("default_step_timeout_s", 0),
        ("default_max_retries", -1),
        ("lease_ttl_s", 0),
        ("worker_pool", "gevent"),
        ("react_severity", "DEBUG"),
    ],
)
def test_out_of_range_values_are_rejected(field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        Settings(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("max_timeout", [1.0, 60.0, 3600.0, 86_400.0])
def test_visibility_timeout_is_above_the_longest_step_timeout(max_timeout: float) -> None:
    settings = Settings(max_step_timeout_s=max_timeout, default_step_timeout_s=1.0)

    assert settings.visibility_timeout_s > max_timeout + settings.watchdog_grace_s
    transport = celery_config(settings)["broker_transport_options"]
    assert transport["visibility_timeout"] == settings.visibility_timeout_s


def test_celery_config_is_json_only_with_late_acks_and_prefetch_one() -> None:
    settings = Settings(queue="q1", worker_concurrency=3)
    config = celery_config(settings)

    assert config["task_serializer"] == "json"
    assert config["accept_content"] == ["json"]
    assert config["task_acks_late"] is True
    assert config["task_reject_on_worker_lost"] is True
    assert config["worker_prefetch_multiplier"] == 1
    assert config["worker_concurrency"] == 3
    assert config["task_routes"][STEP_TASK] == {"queue": "q1"}


def test_settings_survive_the_trip_through_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a parent hands to child processes must rebuild the same settings there."""
    original = Settings(key_prefix="t1", queue="t1", tool_modules=["x.y"], lease_ttl_s=0.75)
    for name, value in original.to_env().items():
        monkeypatch.setenv(name, value)

    assert Settings() == original


def test_metrics_endpoints_bind_to_this_host_unless_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The /metrics of workers and supervisors have no auth: another host reaches them only
    # when a deployment says so.
    monkeypatch.delenv("PLANLOOP_METRICS_ADDRESS", raising=False)
    assert Settings().metrics_address == "127.0.0.1"
