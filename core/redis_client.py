"""Every redis-py client Planloop builds, to one Redis or to the master behind Redis Sentinel.

PLANLOOP_REDIS_URL names one Redis (``redis://``, ``rediss://``, ``unix://``) or, in kombu's
form, the sentinels that know where the master is: ``sentinel://h1:26379;sentinel://h2:26379``
with an optional database path (``.../0``) and the data password as the URL's
(``sentinel://:pw@h1:26379;...``). A sentinel URL needs the master's name
(PLANLOOP_REDIS_SENTINEL_MASTER); the sentinels' own password is
PLANLOOP_REDIS_SENTINEL_PASSWORD; TLS to both sides is PLANLOOP_REDIS_SENTINEL_TLS
(core/redis_tls.py). :func:`redis_address` reads them into a :class:`RedisAddress`;
:func:`sync_client` and :func:`async_client` build clients from it,
and a plain URL string still works wherever no sentinel is involved.

A sentinel client asks the sentinels for the master on every new connection. Two redis-py
gaps are closed here, both about connections that stay open across a failover:

* redis-py asks only when it connects. A master that was demoted while reachable (a planned
  failover, a partition that healed) keeps its clients: until the sentinels reconfigure it,
  seconds later, it still accepts writes the new master never sees. The pools here ask the
  sentinels again at most every ``MASTER_CHECK_S`` when a connection is taken, and drop the
  idle connections to a former master (redis-py's own reaction to a changed address).
* The asyncio pool takes a connection back whatever server it talks to, so connections in
  use while the address changed would stay on the old master (stale reads, READONLY on
  writes); :class:`_AsyncMasterPool` drops them when they are released, as the sync pool does.

* A sentinel connection dropped under a command (the master died) reconnects, in redis-py,
  to the address it had: a client's retry, and a single-connection client (a blocking
  stream reader) forever, would knock at the dead master. :class:`_MasterConnection` and
  its asyncio twin reconnect through the sentinels.

A ``READONLY`` reply itself is turned by redis-py into a ConnectionError after disconnecting
that connection, which the client's retry tries again, on the new master.
"""

from __future__ import annotations

import time
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelConnectionPool
from redis.asyncio.sentinel import SentinelManagedConnection as AsyncSentinelManagedConnection
from redis.asyncio.sentinel import (
    SentinelManagedSSLConnection as AsyncSentinelManagedSSLConnection,
)
from redis.sentinel import (
    Sentinel,
    SentinelConnectionPool,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)

from planloop.core.config_errors import ConfigError
from planloop.core.redis_faults import redact_url
from planloop.core.redis_tls import SentinelTls, sentinel_tls

if TYPE_CHECKING:
    from planloop.config.settings import Settings

SENTINEL_SCHEME = "sentinel"
SENTINEL_PORT = 26379
URL_SETTING = "PLANLOOP_REDIS_URL"
MASTER_CHECK_S = 1.0  # how often a pool asks the sentinels whether the master moved
SENTINEL_TIMEOUT_S = 1.0  # a sentinel's socket time-outs when the client sets none
MASTER_SETTING = "PLANLOOP_REDIS_SENTINEL_MASTER"
# The socket options a sentinel connection takes from the client's (redis-py's own rule
# when no sentinel options are given); a sentinel that hangs must not hold a client longer.
_SENTINEL_SOCKET_OPTIONS = ("socket_timeout", "socket_connect_timeout", "socket_keepalive")


class SentinelMasterMissingError(ConfigError):
    """PLANLOOP_REDIS_URL names sentinels, but not which master of theirs to use."""

    def __init__(self, url: str) -> None:
        super().__init__(
            f"{URL_SETTING} names Redis sentinels ({redact_url(url)!r}) but "
            f"{MASTER_SETTING} is not set: set it to the master name the sentinels monitor "
            "(their `sentinel monitor NAME ...` line, e.g. mymaster)",
            setting=MASTER_SETTING,
        )


@dataclass(frozen=True)
class SentinelAddress:
    """Where the sentinels are, which master of theirs, and how to log in to each side."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int = 0
    username: str | None = None
    password: str | None = None  # the master's (and replicas') password
    sentinel_password: str | None = None
    tls: SentinelTls | None = None  # TLS to the sentinels and the master; None: plain TCP

    def kombu_url(self) -> str:
        """The broker URL kombu reads the same way: every part with the credentials and the
        database (kombu takes both from the first part only)."""
        login = ""
        if self.password is not None or self.username is not None:
            login = f"{self.username or ''}:{self.password or ''}@"
        return ";".join(f"sentinel://{login}{h}:{p}/{self.db}" for h, p in self.sentinels)

    def transport_options(self) -> dict[str, Any]:
        """kombu's sentinel transport options (``broker_transport_options``)."""
        options: dict[str, Any] = {"master_name": self.master}
        sentinel_kwargs = self.tls.sentinel_kwargs() if self.tls is not None else {}
        if self.sentinel_password:
            sentinel_kwargs["password"] = self.sentinel_password
        if sentinel_kwargs:
            options["sentinel_kwargs"] = sentinel_kwargs
        return options

    def broker_ssl(self) -> dict[str, Any] | None:
        """Celery's ``broker_use_ssl``: the master's TLS options, which kombu's sentinel
        transport gives the connections of the master it finds."""
        return self.tls.redis_kwargs() if self.tls is not None else None


@dataclass(frozen=True)
class RedisAddress:
    """PLANLOOP_REDIS_URL as it was given, and the sentinels it names, if it does."""

    url: str
    sentinel: SentinelAddress | None = None

    def broker_url(self) -> str:
        return self.url if self.sentinel is None else self.sentinel.kombu_url()


def is_sentinel_url(url: str) -> bool:
    return url.strip().lower().startswith(f"{SENTINEL_SCHEME}://")


def parse_redis_url(
    url: str, *, master: str = "", sentinel_password: str = "", tls: SentinelTls | None = None
) -> RedisAddress:
    """``url`` read as redis-py and kombu read it; a sentinel URL needs ``master``.

    Raises:
        SentinelMasterMissingError: a sentinel URL without ``master``.
        ConfigError: a sentinel URL that does not parse (a part of another scheme, no host,
            a port or database that is not a number, parts that disagree).
    """
    if not is_sentinel_url(url):
        return RedisAddress(url)
    parts = [part.strip() for part in url.split(";") if part.strip()]
    sentinels: list[tuple[str, int]] = []
    dbs: set[int] = set()
    logins: set[tuple[str | None, str | None]] = set()
    for part in parts:
        sentinels.append(_sentinel_host(url, part))
        split = urlsplit(part)
        path = split.path.strip("/")
        if path:
            if not path.isdigit():
                raise _bad_url(url, f"the database {path!r} is not a number")
            dbs.add(int(path))
        if split.username or split.password:
            logins.add((_unquoted(split.username), _unquoted(split.password)))
    if len(dbs) > 1 or len(logins) > 1:
        raise _bad_url(url, "its parts name different databases or passwords")
    if not master:
        raise SentinelMasterMissingError(url)
    username, password = logins.pop() if logins else (None, None)
    return RedisAddress(
        url,
        SentinelAddress(
            sentinels=tuple(sentinels),
            master=master,
            db=dbs.pop() if dbs else 0,
            username=username,
            password=password,
            sentinel_password=sentinel_password or None,
            tls=tls,
        ),
    )


def redis_address(settings: Settings) -> RedisAddress:
    """The address of ``settings``' Redis (PLANLOOP_REDIS_URL and the sentinel settings)."""
    return parse_redis_url(
        settings.redis_url,
        master=settings.redis_sentinel_master,
        sentinel_password=settings.redis_sentinel_password.get_secret_value(),
        tls=sentinel_tls(settings),
    )


def sync_client(target: str | RedisAddress, **options: Any) -> redis.Redis:
    """A redis-py client of ``target`` (``options`` as for ``redis.Redis``): the master's,
    found through the sentinels, for a sentinel address."""
    address = target if isinstance(target, RedisAddress) else parse_redis_url(target)
    if address.sentinel is None:
        return redis.Redis.from_url(address.url, **options)
    s = address.sentinel
    single = bool(options.pop("single_connection_client", False))
    manager = Sentinel(list(s.sentinels), sentinel_kwargs=_sentinel_kwargs(s, options))  # type: ignore[no-untyped-call]
    pool = _MasterPool(
        s.master,
        manager,
        is_master=True,
        connection_class=_MasterConnection if s.tls is None else _MasterSSLConnection,
        **_data_kwargs(s, options),
    )  # type: ignore[no-untyped-call]
    client = redis.Redis(connection_pool=pool, single_connection_client=single)
    client.auto_close_connection_pool = True  # as master_for's: closed with the client
    return client


def async_client(
    target: str | RedisAddress, *, max_connections: int | None = None, **options: Any
) -> aioredis.Redis:
    """The asyncio twin of :func:`sync_client`. With ``max_connections``, a command waits
    up to ``timeout`` seconds (an option) for a free connection instead of failing."""
    address = target if isinstance(target, RedisAddress) else parse_redis_url(target)
    if address.sentinel is None:
        if max_connections is None:
            return aioredis.Redis.from_url(address.url, **options)
        pool = aioredis.BlockingConnectionPool.from_url(
            address.url, max_connections=max_connections, **options
        )
        return aioredis.Redis.from_pool(pool)  # the pool is closed with the client
    s = address.sentinel
    single = bool(options.pop("single_connection_client", False))
    manager = AsyncSentinel(list(s.sentinels), sentinel_kwargs=_sentinel_kwargs(s, options))  # type: ignore[no-untyped-call]
    pool_class: type[AsyncSentinelConnectionPool] = _AsyncMasterPool
    if max_connections is not None:
        pool_class = _AsyncBlockingMasterPool
        options = {**options, "max_connections": max_connections}
    master_pool = pool_class(
        s.master,
        manager,
        is_master=True,
        connection_class=_AsyncMasterConnection if s.tls is None else _AsyncMasterSSLConnection,
        **_data_kwargs(s, options),
    )
    client = aioredis.Redis(connection_pool=master_pool, single_connection_client=single)
    client.auto_close_connection_pool = True
    return client


class _MasterConnection(SentinelManagedConnection):
    """redis-py's sentinel connection, asking the sentinels where to reconnect (module
    docstring)."""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self._sock:
            self.connect()  # type: ignore[no-untyped-call]
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


class _AsyncMasterConnection(AsyncSentinelManagedConnection):
    """The asyncio twin of :class:`_MasterConnection`."""

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self.is_connected:
            await self.connect()  # type: ignore[no-untyped-call]
        await super().send_packed_command(command, check_health)


class _MasterSSLConnection(_MasterConnection, SentinelManagedSSLConnection):
    """:class:`_MasterConnection` over TLS (PLANLOOP_REDIS_SENTINEL_TLS)."""


class _AsyncMasterSSLConnection(_AsyncMasterConnection, AsyncSentinelManagedSSLConnection):
    """:class:`_AsyncMasterConnection` over TLS."""


class _MasterPool(SentinelConnectionPool):
    """redis-py's sentinel pool, asking the sentinels whether the master moved at most every
    ``MASTER_CHECK_S`` (module docstring)."""

    _next_check = 0.0

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + MASTER_CHECK_S
            with suppress(redis.ConnectionError, redis.TimeoutError):  # the connect says so
                self.get_master_address()  # type: ignore[no-untyped-call]
        return super().get_connection(*args, **kwargs)


class _AsyncMasterPool(AsyncSentinelConnectionPool):
    """redis-py's asyncio sentinel pool, minus connections to a former master (module
    docstring): the address is checked at most every ``MASTER_CHECK_S``, and a released
    connection to another server than the master is closed."""

    _next_check = 0.0

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + MASTER_CHECK_S  # set first: one check however many wait
            with suppress(redis.ConnectionError, redis.TimeoutError):
                await self.get_master_address()  # type: ignore[no-untyped-call]
        return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]

    async def aclose(self) -> None:
        await super().aclose()
        for sentinel in self.sentinel_manager.sentinels:  # their connections are the pool's
            await sentinel.aclose()

    async def release(self, connection: Any) -> None:
        if (
            self.is_master
            and self.master_address is not None
            and connection.host is not None
            and (connection.host, connection.port) != tuple(self.master_address)
        ):
            await connection.disconnect()  # it reconnects, to the new master, when next used
        await super().release(connection)


class _AsyncBlockingMasterPool(_AsyncMasterPool, aioredis.BlockingConnectionPool):
    """:class:`_AsyncMasterPool` whose commands wait for a free connection."""


def _sentinel_host(url: str, part: str) -> tuple[str, int]:
    split = urlsplit(part)
    if split.scheme.lower() != SENTINEL_SCHEME:
        raise _bad_url(url, f"{split.scheme or part!r} is not sentinel://; every part must be")
    if not split.hostname:
        raise _bad_url(url, f"{part!r} names no host")
    try:
        port = split.port or SENTINEL_PORT
    except ValueError:
        raise _bad_url(url, f"{part!r} has a port that is not a number") from None
    return split.hostname, port


def _unquoted(text: str | None) -> str | None:
    return unquote(text) if text else None


def _bad_url(url: str, why: str) -> ConfigError:
    return ConfigError(
        f"{URL_SETTING}={redact_url(url)!r} is not a sentinel URL: {why}; e.g. "
        "sentinel://10.0.0.1:26379;sentinel://10.0.0.2:26379/0",
        setting=URL_SETTING,
    )


def _sentinel_kwargs(s: SentinelAddress, options: dict[str, Any]) -> dict[str, Any]:
    kwargs = {k: v for k, v in options.items() if k in _SENTINEL_SOCKET_OPTIONS}
    # A sentinel answers in milliseconds; one whose host drops packets must not hold a
    # connect (or the once-a-second master check) for the system's TCP time-out.
    for name in ("socket_timeout", "socket_connect_timeout"):
        if kwargs.get(name) is None:
            kwargs[name] = SENTINEL_TIMEOUT_S
    if s.sentinel_password:
        kwargs["password"] = s.sentinel_password
    if s.tls is not None:
        kwargs.update(s.tls.sentinel_kwargs())
    return kwargs


def _data_kwargs(s: SentinelAddress, options: dict[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"db": s.db, **options}
    if s.password is not None:
        kwargs["password"] = s.password
    if s.username is not None:
        kwargs["username"] = s.username
    if s.tls is not None:
        kwargs.update(s.tls.redis_kwargs())
    return kwargs
