"""Every Redis key Planloop reads or writes, in one place.

Every key of one session carries the session id as a Redis Cluster hash tag (``{<sid>}``,
braces included): Redis hashes only what is between the braces, so all of a session's keys
lie in one slot and every script over them stays legal on a cluster (docs/redis-cluster.md).
Per session ``<sid>`` (with the default prefix ``pl``):

=====================================  ======================================================
``pl:s:{<sid>}``                       hash: status, goal, epoch, owner, plan_version, ...,
                                       cancel_requested (reason), crashes, last_crash
``pl:s:{<sid>}:step:<step_id>``        hash: status, attempt, epoch, worker, timings, ...
``pl:s:{<sid>}:plan:<version>``        string: plan version JSON (immutable once written)
``pl:s:{<sid>}:events``                stream: context-change events (consumer group ``sup``)
``pl:s:{<sid>}:lease``                 string: a hold on the session alone: a crashed
                                       loop's cool-off, or a lease of a release before
                                       session shards; no shard owner adopts it meanwhile
``pl:s:{<sid>}:progress``              stream: progress notes for ``watch`` (replans, ends)
``pl:blob:<sha256>``                   string: a step output (or a big param made from
                                       outputs), stored once by content; expires after
                                       ``blob_ttl_s`` (SQL ``blobs`` keeps outputs for good);
                                       task messages refer to it (core/values.py)
``pl:breaker:{<tool>}``                hash: one tool's circuit breaker (state, opened_at,
                                       probe_at); ``...:failures`` zset beside it, same slot
``pl:inbox``                           stream: new session ids for supervisors
``pl:inbox:to:{<name>}``               stream: session ids forwarded to the supervisor
                                       ``<name>``, which owns their shard
``pl:shard:{shard-<n>}:lease``         string: the lease token of session shard ``<n>``
                                       (``<owner name>:<random>``)
``pl:shard:{shard-<n>}:epoch``         string: the shard's fencing epoch (INCR per take)
``pl:shard-holders``                   zset: supervisor name -> when its lease keeper last
                                       renewed (unix s): the supervisors sharing the shards
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
``pl:layout``                          string: the key layout in Redis (``KEY_LAYOUT``); before
                                       it, session and breaker keys had no hash tag
                                       (core/key_layout.py renames them)
=====================================  ======================================================
"""

from __future__ import annotations

from dataclasses import dataclass

EVENTS_GROUP = "sup"
INBOX_GROUP = "sup"
# 2: session keys tagged ``{<sid>}``, breaker keys ``{<tool>}``; 1 (no ``layout`` key): neither.
KEY_LAYOUT = "2"


@dataclass(frozen=True)
class Keys:
    """Redis key names under one prefix."""

    prefix: str = "pl"

    def session(self, sid: str) -> str:
        """The session's hash, and the start of every key of the session: its hash tag."""
        return f"{self.prefix}:s:{{{sid}}}"

    def step(self, sid: str, step_id: str) -> str:
        return f"{self.session(sid)}:step:{step_id}"

    def plan(self, sid: str, version: int) -> str:
        return f"{self.session(sid)}:plan:{version}"

    def events(self, sid: str) -> str:
        return f"{self.session(sid)}:events"

    def lease(self, sid: str) -> str:
        return f"{self.session(sid)}:lease"

    def progress(self, sid: str) -> str:
        return f"{self.session(sid)}:progress"

    def blob(self, digest: str) -> str:
        return f"{self.prefix}:blob:{digest}"

    @property
    def inbox(self) -> str:
        return f"{self.prefix}:inbox"

    def direct_inbox(self, supervisor: str) -> str:
        """Sessions forwarded to ``supervisor`` because it owns their shard."""
        return f"{self.prefix}:inbox:to:{{{supervisor}}}"

    def shard_lease(self, shard: int) -> str:
        """Who holds one session shard (a holder's token, no expiry): tagged by the shard,
        like :meth:`shard_epoch`. The hold lasts while :meth:`holder_alive` of that token
        does."""
        return f"{self.prefix}:shard:{{shard-{shard}}}:lease"

    def holder_alive(self, token: str) -> str:
        """The liveness of one supervisor's hold on its shards (a key with a TTL, renewed
        while it runs; never written again once gone)."""
        return f"{self.prefix}:alive:{{{token}}}"

    def shard_epoch(self, shard: int) -> str:
        return f"{self.prefix}:shard:{{shard-{shard}}}:epoch"

    @property
    def shard_holders(self) -> str:
        return f"{self.prefix}:shard-holders"

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
        return f"{self.prefix}:breaker:{{{tool}}}"

    def breaker_failures(self, tool: str) -> str:
        """The breaker's recent failures: tagged like :meth:`breaker`, so one script holds both."""
        return f"{self.breaker(tool)}:failures"

    @property
    def layout(self) -> str:
        return f"{self.prefix}:layout"
