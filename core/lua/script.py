"""The typed wrapper every Lua script is: :class:`LuaScript`, its fields (:func:`key`,
:func:`arg`, :func:`rest`) and the registered copies a client runs; the preludes scripts share."""

from __future__ import annotations

import keyword
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Generic, Literal, TypeVar

import redis
import redis.asyncio as aioredis
from redis.commands.core import AsyncScript, Script

Role = Literal["key", "arg", "rest_keys", "rest_args"]
Arg = str | int | float
_ROLE = "lua"
_LUA_KEYWORDS = frozenset(
    {"and", "break", "do", "else", "elseif", "end", "false", "for", "function", "if", "in"}
    | {"local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while"}
)
_SOURCES: dict[type[LuaScript], str] = {}
_LAYOUTS: dict[type[LuaScript], _Layout] = {}


def key() -> Any:
    """A field that is one of the script's KEYS."""
    return field(metadata={_ROLE: "key"})


def arg() -> Any:
    """A field that is one of the script's ARGV."""
    return field(metadata={_ROLE: "arg"})


def rest(role: Literal["rest_keys", "rest_args"]) -> Any:
    """The remaining KEYS or ARGV, a Lua table of that name in the script: the last field
    of its table (a script may have one of each, its KEYS' before or after its ARGV's)."""
    return field(default=(), metadata={_ROLE: role})


S = TypeVar("S", bound="LuaScript")


@dataclass(frozen=True, kw_only=True)
class LuaScript:
    """One script's call: subclasses declare fields and ``BODY`` (and a shared ``PRELUDE``)."""

    BODY: ClassVar[str]
    PRELUDE: ClassVar[str] = ""  # Lua tables and functions shared by several scripts

    @classmethod
    def source(cls) -> str:
        if cls not in _SOURCES:
            _SOURCES[cls] = _source(cls)
        return _SOURCES[cls]

    def keys_and_args(self) -> tuple[list[str], list[Arg]]:
        """KEYS and ARGV of this call, in the order the fields are declared."""
        layout = _layout(type(self))
        keys: list[str] = [getattr(self, name) for name in layout.keys]
        args: list[Arg] = [getattr(self, name) for name in layout.args]
        if layout.rest_keys:
            keys += getattr(self, layout.rest_keys)
        if layout.rest_args:
            args += getattr(self, layout.rest_args)
        return keys, args

    @classmethod
    def register(cls: type[S], client: redis.Redis) -> Registered[S]:
        """This script on ``client`` (or, per call, on one of its pipelines)."""
        return Registered(client.register_script(cls.source()))

    @classmethod
    def register_async(cls: type[S], client: aioredis.Redis) -> AsyncRegistered[S]:
        return AsyncRegistered(client.register_script(cls.source()))


class Registered(Generic[S]):
    """A script loaded on a sync client: call it with the script's dataclass."""

    def __init__(self, script: Script) -> None:
        self.script = script

    def __call__(self, call: S, *, client: Any = None) -> Any:
        keys, args = call.keys_and_args()
        return self.script(keys=keys, args=args, client=client)


class AsyncRegistered(Generic[S]):
    """A script loaded on an asyncio client: await it with the script's dataclass."""

    def __init__(self, script: AsyncScript) -> None:
        self.script = script

    async def __call__(self, call: S, *, client: Any = None) -> Any:
        keys, args = call.keys_and_args()
        return await self.script(keys=keys, args=args, client=client)


@dataclass(frozen=True)
class _Layout:
    """Which fields of a script are its KEYS and ARGV (worked out once per script: a call
    lays out its arguments on every step's hot path)."""

    keys: tuple[str, ...]
    args: tuple[str, ...]
    rest_keys: str = ""
    rest_args: str = ""


def _layout(cls: type[LuaScript]) -> _Layout:
    layout = _LAYOUTS.get(cls)
    if layout is None:
        by_role: dict[str, list[str]] = {"key": [], "arg": [], "rest_keys": [], "rest_args": []}
        for f in fields(cls):
            by_role[f.metadata[_ROLE]].append(f.name)
        layout = _Layout(
            tuple(by_role["key"]),
            tuple(by_role["arg"]),
            next(iter(by_role["rest_keys"]), ""),
            next(iter(by_role["rest_args"]), ""),
        )
        _LAYOUTS[cls] = layout
    return layout


def _source(cls: type[LuaScript]) -> str:
    """``cls``'s Lua: its KEYS and ARGV named, then the prelude, then the body."""
    lines: list[str] = []
    counts = {"key": 0, "arg": 0}
    declared = fields(cls)
    last = {_table(f): f for f in declared}  # each table's last field
    for f in declared:
        if keyword.iskeyword(f.name) or f.name in _LUA_KEYWORDS:
            raise ValueError(f"{cls.__name__}.{f.name}: a reserved word in Lua or Python")
        role = f.metadata[_ROLE]
        table = _table(f)
        kind = "key" if table == "KEYS" else "arg"
        if role in ("key", "arg"):
            counts[kind] += 1
            lines.append(f"local {f.name} = {table}[{counts[kind]}]")
        elif f is not last[table]:
            raise ValueError(f"{cls.__name__}.{f.name}: the remaining {table} come last of {table}")
        else:
            # a loop, not unpack(): unpack stops at a few thousand values
            lines.append(
                f"local {f.name} = {{}}\n"
                f"for i = {counts[kind] + 1}, #{table} do {f.name}[#{f.name} + 1] = {table}[i] end"
            )
    return "\n".join(lines) + "\n" + cls.PRELUDE + cls.BODY


def _table(f: Any) -> str:
    """The Lua table a field is read from: KEYS or ARGV."""
    return "KEYS" if f.metadata[_ROLE] in ("key", "rest_keys") else "ARGV"


# The statuses a session ends in (SessionStatus.ended): such a session is final.
ENDED = """
local ENDED = {completed=true, failed=true, aborted=true, cancelled=true}
"""
