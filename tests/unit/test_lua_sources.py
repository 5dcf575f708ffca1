"""Every Lua script opens by naming its KEYS and ARGV, and its body uses only the names."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

import pytest

from planloop.core import lua
from planloop.core.lua import LuaScript, arg, key, rest

SCRIPTS = [
    cls
    for cls in vars(lua).values()
    if isinstance(cls, type) and issubclass(cls, LuaScript) and cls is not LuaScript
]


def test_every_script_is_here() -> None:
    assert len(SCRIPTS) == 12


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda cls: cls.__name__)
def test_a_script_names_its_keys_and_args_first(script: type[LuaScript]) -> None:
    # the lines that name them (a remaining-KEYS or -ARGV table is filled by a loop after)
    lines = [line for line in script.source().splitlines() if line.startswith("local ")]
    names = [f.name for f in fields(script)]

    for name, line in zip(names, lines, strict=False):
        assert re.fullmatch(rf"local {name} = (\{{\}}|(KEYS|ARGV)\[\d+\])", line), line
    assert not re.search(r"\b(KEYS|ARGV)\[", script.PRELUDE + script.BODY)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda cls: cls.__name__)
def test_a_script_numbers_keys_and_args_in_field_order(script: type[LuaScript]) -> None:
    source = script.source()
    keys = re.findall(r"^local (\w+) = KEYS\[(\d+)\]$", source, re.M)
    args = re.findall(r"^local (\w+) = ARGV\[(\d+)\]$", source, re.M)

    assert [int(n) for _, n in keys] == list(range(1, len(keys) + 1))
    assert [int(n) for _, n in args] == list(range(1, len(args) + 1))


def test_a_call_lays_out_keys_then_args_in_declared_order() -> None:
    call = lua.EndAttempt(
        session_key="s",
        step_key="st",
        events_key="ev",
        epoch=3,
        attempt=2,
        status="interrupted",
        error="lost",
        error_kind="timeout",
        finished_at="12.5",
        event_fields=["type", "x"],
    )

    assert call.keys_and_args() == (
        ["s", "st", "ev"],
        [3, 2, "interrupted", "lost", "timeout", "12.5", "type", "x"],
    )


def test_a_rest_field_must_come_last() -> None:
    @dataclass(frozen=True, kw_only=True)
    class Misordered(LuaScript):
        extra: tuple[str, ...] = rest("rest_args")
        lease_key: str = key()
        token: str = arg()

        BODY = "return 1"

    with pytest.raises(ValueError, match="come last"):
        Misordered.source()


def test_a_script_may_have_remaining_keys_and_remaining_args() -> None:
    @dataclass(frozen=True, kw_only=True)
    class Both(LuaScript):
        lease_key: str = key()
        token: str = arg()
        more_keys: tuple[str, ...] = rest("rest_keys")
        more_args: tuple[str, ...] = rest("rest_args")

        BODY = "return 1"

    source = Both.source()
    call = Both(lease_key="l", token="t", more_keys=("k1", "k2"), more_args=("a1",))

    assert "for i = 2, #KEYS do more_keys" in source
    assert "for i = 2, #ARGV do more_args" in source
    assert call.keys_and_args() == (["l", "k1", "k2"], ["t", "a1"])


def test_a_rest_field_must_come_last_of_its_table() -> None:
    @dataclass(frozen=True, kw_only=True)
    class Misordered(LuaScript):
        more_keys: tuple[str, ...] = rest("rest_keys")
        lease_key: str = key()
        more_args: tuple[str, ...] = rest("rest_args")

        BODY = "return 1"

    with pytest.raises(ValueError, match="more_keys: the remaining KEYS come last"):
        Misordered.source()


def test_a_lua_keyword_is_refused_as_a_name() -> None:
    @dataclass(frozen=True, kw_only=True)
    class Reserved(LuaScript):
        until: str = arg()

        BODY = "return 1"

    with pytest.raises(ValueError, match="reserved word"):
        Reserved.source()
