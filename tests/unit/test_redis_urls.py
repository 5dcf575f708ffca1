"""Two Redis URLs are compared as the Redis they reach (core/redis_urls.py), wherever
Planloop compares them: Celery's broker against PLANLOOP_REDIS_URL, `planloop up`'s
embedded-or-given check."""

from __future__ import annotations

import pytest

from planloop.core.redis_urls import same_redis


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("redis://localhost:6379/0", "redis://127.0.0.1:6379"),
        ("redis://127.0.0.1", "redis://localhost:6379/0"),
        ("redis://[::1]:6379/0", "redis://localhost/0"),
        ("redis://:s3cret@127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://127.0.0.1:6379/2", "redis://127.0.0.1:6379?db=2"),
        ("redis://Cache.Internal:6379/1", "redis://cache.internal/1"),
        ("unix:///tmp/r.sock?db=1", "unix:///tmp/r.sock?db=1"),
    ],
)
def test_urls_that_reach_one_redis_are_the_same(first: str, second: str) -> None:
    assert same_redis(first, second)
    assert same_redis(second, first)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/1"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6380/0"),
        ("redis://127.0.0.1:6379/0", "rediss://127.0.0.1:6379/0"),
        ("redis://cache-a:6379/0", "redis://cache-b:6379/0"),
        ("unix:///tmp/a.sock", "unix:///tmp/b.sock"),
        ("redis://127.0.0.1:6379/0", "not a url"),
    ],
)
def test_urls_of_other_servers_or_databases_differ(first: str, second: str) -> None:
    assert not same_redis(first, second)
