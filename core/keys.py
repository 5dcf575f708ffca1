"""Every Redis key Planloop reads or writes, in one place.

Per session ``{sid}`` (with the default prefix ``pl``):

=====================================  ======================================================
``pl:s:{sid}``                         hash: status, goal, epoch, owner, plan_version, ...,
                                       cancel_requested (reason), crashes, last_crash
``pl:s:{sid}:step:{step_id}``          hash: status, attempt, epoch, worker, timings, ...
``pl:s:{sid}:plan:{version}``          string: plan version JSON (immutable once written)
``pl:s:{sid}:events``                  stream: context-change events (consumer group ``sup``)
``pl:s:{sid}:lease``                   string: the owning supervisor's lease token
``pl:s:{sid}:progress``                stream: progress notes for ``watch`` (replans, ends)
``pl:blob:{sha256}``                   string: a step output (or a big param made from
                                       outputs), stored once by content; expires after
                                       ``blob_ttl_s`` (SQL ``blobs`` keeps outputs for good);
                                       task messages refer to it (core/values.py)
``pl:inbox``                           stream: new session ids for supervisors
``pl:sessions``                        zset: every session id, scored by creation time
``pl:active``                          set: sessions not yet ended (reclaim looks here)
``pl:effects``                         hash: idempotency key -> receipt (a cache of SQL ``effects``)
``pl:deadletter``                      stream: events that cannot be applied (sid,
                                       entry_id, event, cause)
``pl:supervisors``                     zset: supervisor name -> when it last served (unix s)
``pl:tools``                           hash: tool name -> catalogue entry JSON (workers publish)
``pl:workers``                         hash: worker name -> heartbeat JSON (queue, tools,
                                       expires_at); a worker refreshes its own entry
``pl:metrics:shared``                  string: the supervisor that exports the gauges read
                                       from shared state (core/metrics.py), with a TTL
=====================================  ======================================================
"""

from __future__ import annotations

from dataclasses import dataclass

EVENTS_GROUP = "sup"
INBOX_GROUP = "sup"


@dataclass(frozen=True)
class Keys:
    """Redis key names under one prefix."""

    prefix: str = "pl"

    def session(self, sid: str) -> str:
        return f"{self.prefix}:s:{sid}"

    def step(self, sid: str, step_id: str) -> str:
        return f"{self.prefix}:s:{sid}:step:{step_id}"

    def plan(self, sid: str, version: int) -> str:
        return f"{self.prefix}:s:{sid}:plan:{version}"

    def events(self, sid: str) -> str:
        return f"{self.prefix}:s:{sid}:events"

    def lease(self, sid: str) -> str:
        return f"{self.prefix}:s:{sid}:lease"

    def progress(self, sid: str) -> str:
        return f"{self.prefix}:s:{sid}:progress"

    def blob(self, digest: str) -> str:
        return f"{self.prefix}:blob:{digest}"

    @property
    def inbox(self) -> str:
        return f"{self.prefix}:inbox"

    @property
    def supervisors(self) -> str:
        return f"{self.prefix}:supervisors"

    @property
    def sessions(self) -> str:
        return f"{self.prefix}:sessions"

    @property
    def active(self) -> str:
        return f"{self.prefix}:active"

    @property
    def effects(self) -> str:
        return f"{self.prefix}:effects"

    @property
    def deadletter(self) -> str:
        return f"{self.prefix}:deadletter"

    @property
    def tools(self) -> str:
        return f"{self.prefix}:tools"

    @property
    def workers(self) -> str:
        return f"{self.prefix}:workers"

    @property
    def shared_metrics(self) -> str:
        return f"{self.prefix}:metrics:shared"

    def breaker(self, tool: str) -> str:
        return f"{self.prefix}:breaker:{tool}"
