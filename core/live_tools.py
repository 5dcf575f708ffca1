"""The tools a producer or supervisor plans and validates with: the live catalogue, else the
local one.

:class:`LiveTools` is a :class:`ToolRegistry` whose contents follow what live workers serve:

- **live** (some worker's heartbeat has not expired, core/heartbeat.py): the tools those
  workers serve, each as its worker published it (core/published_tools.py). This is what
  ``names()``/``specs()`` (the planner's prompt, ``planloop tools``) list.
- **local** (no live worker): the bundled toolsets and ``PLANLOOP_TOOL_MODULES``, imported
  here; the fallback is logged once each time it begins.

Looking a tool up (``get``, ``in``: plan validation, timeouts, compensations) also finds
tools no live worker serves right now, so that a plan submitted before its workers start
(``--no-worker-check``) is still checked: a served tool as published (live wins over
local), else the local tool, else the last entry any worker published.

The catalogue is read again at most every ``max_age_s``, and when a tool nobody knows is
looked up (at most once a second): two HGETALLs with a short socket timeout, because a
supervisor reads it on its event loop. A Redis fault keeps the last catalogue read (and the
next read waits ``max_age_s``); a producer, whose next Redis call would meet the same fault,
has it raised instead (``keep_last_on_fault=False``: the command says Redis is unreachable).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import redis

from planloop.core.catalogue import MIN_RELOAD_S, CatalogueEntry, read_catalogue
from planloop.core.heartbeat import Heartbeat, read_heartbeats
from planloop.core.keys import Keys
from planloop.core.published_tools import published_spec
from planloop.core.tools import ToolRegistry, ToolSpec

log = logging.getLogger(__name__)

LOCAL_NOTE = (
    "no live worker: using the local tool catalogue (bundled toolsets and "
    "PLANLOOP_TOOL_MODULES) instead of the one workers publish"
)


class CatalogueSource(StrEnum):
    """Where the listed tools come from."""

    LIVE = "live"  # tools some live worker serves, as published
    LOCAL = "local"  # no live worker: the tools this process imported


@dataclass(frozen=True)
class Snapshot:
    """One reading of the catalogue: the live workers and every published entry."""

    workers: list[Heartbeat] = field(default_factory=list)
    entries: Mapping[str, CatalogueEntry] = field(default_factory=dict)

    def served_names(self) -> set[str]:
        """The tools some live worker serves, by its heartbeat."""
        return {name for hb in self.workers for name in hb.tools}

    def served(self) -> dict[str, CatalogueEntry]:
        """The entries of tools some live worker serves, by name."""
        names = self.served_names()
        return {name: e for name, e in self.entries.items() if name in names}


def read_snapshot(client: redis.Redis, keys: Keys, now: float | None = None) -> Snapshot:
    """The live workers (any queue) and the published catalogue, read now."""
    at = time.time() if now is None else now
    workers = [hb for hb in read_heartbeats(client, keys) if hb.live(at)]
    return Snapshot(workers, read_catalogue(client, keys) if workers else {})


def merged_tools(local: ToolRegistry, snapshot: Snapshot) -> dict[str, ToolSpec]:
    """Every tool known: published entries, then local tools over them, then the served
    entries over both (live wins over local)."""
    known: dict[str, ToolSpec] = {n: published_spec(e) for n, e in snapshot.entries.items()}
    known.update((spec.name, spec) for spec in local.specs())
    known.update((n, published_spec(e)) for n, e in snapshot.served().items())
    return known


class LiveTools(ToolRegistry):
    """A registry that follows the live catalogue, falling back to ``local`` (module doc)."""

    def __init__(
        self,
        local: ToolRegistry,
        read: Callable[[], Snapshot] | None,
        *,
        max_age_s: float = 5.0,
        on_local: Callable[[str], None] | None = None,
        keep_last_on_fault: bool = True,
    ) -> None:
        """``read`` reads the catalogue (None: never, the local tools only; unit tests give
        a function of their own); ``on_local`` is told :data:`LOCAL_NOTE` each time the
        fallback begins (default: a warning in the log); ``keep_last_on_fault`` as in the
        module doc."""
        super().__init__()
        self.local = local
        self.read = read
        self.client: redis.Redis | None = None  # the client from_redis reads with
        self.max_age_s = max_age_s
        self._lock = threading.Lock()  # a supervisor's threads may look tools up too
        self._snapshot = Snapshot()
        self._known: dict[str, ToolSpec] = {s.name: s for s in local.specs()}
        self._listed: list[str] = local.names()
        self._source = CatalogueSource.LOCAL
        self._read_at = float("-inf")
        self._told_local = False
        self._reachable = True
        self._on_local = on_local or _log_local
        self._keep_last_on_fault = keep_last_on_fault

    @classmethod
    def from_redis(
        cls,
        local: ToolRegistry,
        client: redis.Redis,
        keys: Keys,
        *,
        max_age_s: float = 5.0,
        on_local: Callable[[str], None] | None = None,
        keep_last_on_fault: bool = True,
    ) -> LiveTools:
        """A view reading the catalogue of ``keys`` with ``client`` (closed by :meth:`close`)."""
        tools = cls(
            local,
            lambda: read_snapshot(client, keys),
            max_age_s=max_age_s,
            on_local=on_local,
            keep_last_on_fault=keep_last_on_fault,
        )
        tools.client = client
        return tools

    @property
    def source(self) -> CatalogueSource:
        """Where ``names()`` comes from now (reads the catalogue when it is due)."""
        self._refresh()
        return self._source

    def snapshot(self) -> Snapshot:
        """The last reading of the catalogue (read now when it is due)."""
        self._refresh()
        return self._snapshot

    def register(self, spec: ToolSpec) -> ToolSpec:
        return self.local.register(spec)

    def get(self, name: str) -> ToolSpec:
        if name not in self:
            return self.local.get(name)  # raises UnknownToolError
        return self._known[name]

    def __contains__(self, name: object) -> bool:
        self._refresh(missing=isinstance(name, str) and name not in self._known)
        return name in self._known

    def names(self) -> list[str]:
        self._refresh()
        return list(self._listed)

    def known_names(self) -> list[str]:
        self._refresh()
        return sorted(self._known)

    def specs(self) -> list[ToolSpec]:
        self._refresh()
        return [self._known[name] for name in self._listed]

    def close(self) -> None:
        if self.client is not None:
            self.client.close()

    def refresh(self) -> None:
        """Read the catalogue now."""
        self._refresh(force=True)

    def _refresh(self, *, missing: bool = False, force: bool = False) -> None:
        if self.read is None:
            return
        age = time.monotonic() - self._read_at
        soon = missing and self._reachable  # an outage is not asked about every second
        if not force and age < (MIN_RELOAD_S if soon else self.max_age_s):
            return
        with self._lock:
            self._read_at = time.monotonic()
            try:
                snapshot = self.read()
            except redis.RedisError as exc:
                if not self._keep_last_on_fault:
                    raise
                if self._reachable:  # once per outage, not per look-up
                    log.warning("tool catalogue unreadable (%s); using the last one read", exc)
                self._reachable = False
                return
            self._reachable = True
            self._use(snapshot)

    def _use(self, snapshot: Snapshot) -> None:
        known = merged_tools(self.local, snapshot)
        self._snapshot, self._known = snapshot, known
        if snapshot.workers:
            served = sorted(name for name in snapshot.served_names() if name in known)
            self._source, self._listed = CatalogueSource.LIVE, served
            self._told_local = False
            return
        self._source, self._listed = CatalogueSource.LOCAL, self.local.names()
        if not self._told_local:
            self._told_local = True
            self._on_local(LOCAL_NOTE)


def _log_local(note: str) -> None:
    log.warning("%s", note)
