"""Bad settings are one ConfigError naming the PLANLOOP_* variable (core/settings_check.py)."""

from __future__ import annotations

import pytest

from planloop.core.errors import ConfigError
from planloop.core.settings_check import check_database_url, check_redis_url, load_settings


@pytest.mark.parametrize("url", ["notaurl", "http://127.0.0.1:6379", "redis://h:port/0"])
def test_a_redis_url_that_is_not_one_names_the_setting(url: str) -> None:
    with pytest.raises(ConfigError, match="is not a Redis URL") as caught:
        check_redis_url(url)
    assert caught.value.setting == "PLANLOOP_REDIS_URL"
    assert str(caught.value).startswith(f"PLANLOOP_REDIS_URL={url!r}")


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/0", "rediss://:pw@host:6380/1", "unix:///tmp/redis.sock"]
)
def test_redis_urls_pass_without_connecting(url: str) -> None:
    check_redis_url(url)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("notaurl", "is not a database URL"),
        ("foo://x/y", "unsupported database scheme 'foo'"),
        ("mysql://u@h/db", "unsupported database scheme 'mysql'"),
        ("postgresql+nodriver://u@h/db", "unknown postgresql driver 'nodriver'"),
        (
            "postgresql+psycopg2://u@h/db",
            "the psycopg2 driver is not installed (No module named 'psycopg2'); "
            "pip install 'planloop[postgres]' and use postgresql+psycopg://",
        ),
    ],
)
def test_a_database_url_the_record_cannot_use_names_the_setting(url: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_database_url(url)
    assert caught.value.setting == "PLANLOOP_DATABASE_URL"
    assert str(caught.value).startswith("PLANLOOP_DATABASE_URL=")
    assert says in str(caught.value)


def test_a_password_in_a_bad_url_is_masked() -> None:
    with pytest.raises(ConfigError) as caught:
        check_database_url("mysql://user:hunter2@h/db")
    assert "hunter2" not in str(caught.value)
    assert "mysql://user:***@h/db" in str(caught.value)


@pytest.mark.parametrize(
    "url", ["sqlite:///.planloop/planloop.db", "sqlite://", "postgresql+psycopg://u@h:1/db"]
)
def test_database_urls_the_record_runs_on_pass_without_connecting(url: str) -> None:
    check_database_url(url)


def test_field_errors_name_the_variable_in_one_line() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(worker_concurrency=0, console_port=70000)
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith("invalid PLANLOOP_* settings: PLANLOOP_WORKER_CONCURRENCY: ")
    assert "PLANLOOP_CONSOLE_PORT: " in text
    assert caught.value.setting == "PLANLOOP_WORKER_CONCURRENCY"


def test_load_settings_checks_the_urls_too() -> None:
    with pytest.raises(ConfigError, match="PLANLOOP_REDIS_URL"):
        load_settings(redis_url="notaurl")
    with pytest.raises(ConfigError, match="PLANLOOP_DATABASE_URL"):
        load_settings(record=True, database_url="foo://x")
    # a producer that talks to Redis only does not import the database driver to check it
    assert load_settings(database_url="foo://x").database_url == "foo://x"
