"""The tool catalogue workers publish, and the sensitive param names read from it.

A supervisor or a ``planloop`` command that never imported a tool's module still has to
mask the params that tool marks ``sensitive``. Each worker therefore publishes what it
serves (workers/catalogue.py) to the hash ``pl:tools``: tool name -> :class:`CatalogueEntry`
as JSON, written when the worker starts and again every ``catalogue_refresh_s``. An entry
carries the worker that last published it and when (``published_at``), so a reader can tell
a tool some live worker serves (an entry younger than a couple of refresh periods) from one
whose workers are gone; the entry is never deleted, only left to age.

:class:`SensitiveNames` is what the masking paths use: the local registry's sensitive
fields merged with the catalogue's, the catalogue cached and reloaded when a tool is missing
from it (at most once a second) or older than the refresh period.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import cast

import redis
from pydantic import BaseModel, Field, ValidationError

from planloop.core.keys import Keys
from planloop.core.redis_client import RedisAddress, sync_client
from planloop.core.tools import SideEffect, ToolRegistry, ToolSpec

log = logging.getLogger(__name__)

# A tool missing from the cached catalogue triggers a reload at most this often, seconds.
MIN_RELOAD_S = 1.0
# A supervisor reads the catalogue on its event loop: a Redis that does not answer may hold
# it up this long, seconds, and is not asked again before the refresh period has passed.
READ_TIMEOUT_S = 0.2


def catalogue_client(url: str | RedisAddress) -> redis.Redis:
    """A client for reading the catalogue from a loop that must not wait on Redis for long."""
    return sync_client(
        url,
        decode_responses=True,
        socket_timeout=READ_TIMEOUT_S,
        socket_connect_timeout=READ_TIMEOUT_S,
    )


class CatalogueEntry(BaseModel):
    """One tool as a worker serves it (the value of one field of ``pl:tools``)."""

    name: str
    description: str = ""
    params_schema: dict[str, object] = Field(default_factory=dict)
    side_effect: SideEffect = "read"
    compensate: str | None = None
    timeout_s: float | None = Field(None, description="The tool's own timeout, seconds.")
    sensitive: list[str] = Field(default_factory=list, description="Params never shown.")
    non_retryable: list[str] = Field(
        default_factory=list,
        description="Exception classes (by name) that fail the step at once, not retried.",
    )
    worker: str = Field("", description="The worker that published this entry last.")
    published_at: float = Field(0.0, description="When it did, seconds since the epoch.")

    def served(self, refresh_s: float, now: float) -> bool:
        """Whether a live worker serves the tool: one re-published it within two refresh
        periods (one may be lost to a Redis fault)."""
        return now - self.published_at <= 2 * refresh_s


def catalogue_entry(spec: ToolSpec, worker: str, now: float) -> CatalogueEntry:
    """What a worker publishes about ``spec``."""
    return CatalogueEntry(
        name=spec.name,
        description=spec.description,
        params_schema=spec.params_schema(),
        side_effect=spec.side_effect,
        compensate=spec.compensate,
        timeout_s=spec.timeout_s,
        sensitive=sorted(spec.sensitive_fields()),
        non_retryable=spec.non_retryable_names(),
        worker=worker,
        published_at=now,
    )


def publish_catalogue(client: redis.Redis, keys: Keys, tools: ToolRegistry, worker: str) -> int:
    """Write every tool of ``tools`` to ``pl:tools`` in one call; returns how many."""
    now = time.time()
    mapping = {s.name: catalogue_entry(s, worker, now).model_dump_json() for s in tools.specs()}
    if mapping:
        client.hset(keys.tools, mapping=mapping)  # type: ignore[arg-type]
    return len(mapping)


def read_catalogue(client: redis.Redis, keys: Keys) -> dict[str, CatalogueEntry]:
    """Every published tool by name (an entry that does not parse is left out and logged)."""
    entries: dict[str, CatalogueEntry] = {}
    raw = cast(dict[str, str], client.hgetall(keys.tools))
    for name, text in raw.items():
        try:
            entries[name] = CatalogueEntry.model_validate_json(text)
        except ValidationError:
            log.warning("tool catalogue: entry %r does not parse; ignored", name)
    return entries


class SensitiveNames:
    """Sensitive param names per tool: the local registry's and the published catalogue's."""

    def __init__(
        self,
        tools: ToolRegistry,
        client: redis.Redis | None = None,
        keys: Keys | None = None,
        max_age_s: float = 30.0,
    ) -> None:
        self.tools = tools
        self.client = client
        self.keys = keys or Keys()
        self.max_age_s = max_age_s
        self._published: dict[str, frozenset[str]] = {}
        self._loaded_at = float("-inf")
        self._reachable = True

    def of_tool(self, tool: str) -> frozenset[str] | None:
        """The tool's sensitive params; None when neither the registry nor the catalogue
        knows the tool (callers then hide all of its params)."""
        local = self.tools.get(tool).sensitive_fields() if tool in self.tools else None
        self._refresh(missing=tool not in self._published)
        published = self._published.get(tool)
        if local is None and published is None:
            return None
        return (local or frozenset()) | (published or frozenset())

    def of_tools(self, tools: Iterable[str]) -> frozenset[str]:
        """The sensitive params of any of ``tools`` (names unknown to all add nothing)."""
        names: set[str] = set()
        for tool in set(tools):
            names |= self.of_tool(tool) or frozenset()
        return frozenset(names)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()

    def _refresh(self, *, missing: bool) -> None:
        if self.client is None:
            return
        age = time.monotonic() - self._loaded_at
        if age < (MIN_RELOAD_S if missing and self._reachable else self.max_age_s):
            return
        self._loaded_at = time.monotonic()
        try:
            catalogue = read_catalogue(self.client, self.keys)
        except redis.RedisError as exc:
            if self._reachable:  # once per outage, not per look-up
                log.warning("tool catalogue unreadable (%s); using the last one read", exc)
            self._reachable = False
            return
        if not self._reachable:
            log.info("tool catalogue readable again")
        self._reachable = True
        self._published = {name: frozenset(e.sensitive) for name, e in catalogue.items()}
