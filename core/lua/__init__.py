"""Lua scripts that make each fenced Redis write atomic: no crash can split them.

Each script is a frozen dataclass whose fields are its KEYS and ARGV, in order: the one place
its argument list is written. The Lua source opens by naming them (``local step_key =
KEYS[1]``, as arq does), so the body reads by name; the dataclass is the typed Python wrapper,
built with keywords and run through a client's registered copy of the script::

    record = RecordOutcome.register(client)          # once per client
    record(RecordOutcome(step_key=..., attempt=..., ...))

Fields: :func:`key` (one of KEYS), :func:`arg` (one of ARGV), and at most one trailing
:func:`rest` (the remaining KEYS or ARGV, as a Lua table).

``script`` holds the wrapper; ``leases``, ``shard_leases``, ``session_writes``, ``attempts``
and ``breakers`` the scripts, all importable from here.
"""

from __future__ import annotations

from planloop.core.lua.attempts import EndAttempt, Queued, RecordOutcome, StartAttempt
from planloop.core.lua.breakers import BreakerAllow, BreakerRecord
from planloop.core.lua.leases import LoadStarts, ReleaseLease
from planloop.core.lua.script import (
    Arg,
    AsyncRegistered,
    LuaScript,
    Registered,
    Role,
    arg,
    key,
    rest,
)
from planloop.core.lua.session_writes import QUEUE, CountCrash, FencedWrite, as_commands
from planloop.core.lua.shard_leases import AcquireShard, AdoptSession

__all__ = [
    "QUEUE",
    "AcquireShard",
    "AdoptSession",
    "Arg",
    "AsyncRegistered",
    "BreakerAllow",
    "BreakerRecord",
    "CountCrash",
    "EndAttempt",
    "FencedWrite",
    "LoadStarts",
    "LuaScript",
    "Queued",
    "RecordOutcome",
    "Registered",
    "ReleaseLease",
    "Role",
    "StartAttempt",
    "arg",
    "as_commands",
    "key",
    "rest",
]
