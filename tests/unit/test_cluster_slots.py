"""Every Lua script's keys lie in one Redis Cluster slot for a session (docs/redis-cluster.md).

Slots are computed as a cluster computes them (CRC16 of the hash tag, redis-py's
``key_slot``); no cluster is needed. Each KEYS field of each script in core/lua.py is built
the way its callers build it (from :class:`Keys`); the scripts that also touch keys of no
session (the broker's, a tool's breaker, a content-addressed blob) or several sessions at
once are the exceptions the design note lists, and this test holds the two lists equal.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

import pytest
from redis.crc import key_slot

from planloop.core import lua
from planloop.core.key_layout import tagged_name
from planloop.core.keys import Keys

ROOT = Path(__file__).resolve().parents[2]
NOTE = ROOT / "docs" / "redis-cluster.md"
KEYS = Keys("pl")
SIDS = ("20260101-120000-0a1b2c3d", "s", "S1", "20261231-235959-ffffffff", "x:y")

# How the callers build each KEYS field of one session's call (core/hot_state.py,
# supervisor/io/redis_store.py, supervisor/process/lease_keeper.py).
SESSION_KEYS: dict[str, Callable[[str], str]] = {
    "session_key": KEYS.session,
    "lease_key": KEYS.lease,
    "step_key": lambda sid: KEYS.step(sid, "fetch-1"),
    "events_key": KEYS.events,
}
# KEYS fields that belong to no session; where each lives on a cluster is in the note.
GLOBAL_KEYS = {
    "blob_key": KEYS.blob("9f86d081884c7d659a2feaa0c55ad015"),
    "breaker_key": KEYS.breaker("crm.update"),
    "breaker_failures_key": KEYS.breaker_failures("crm.update"),
    "unacked_key": "unacked",
    "unacked_index_key": "unacked_index",
    "queue_key": "planloop",
    # a session shard's two keys: tagged by the shard, so one slot per shard
    "shard_lease_key": KEYS.shard_lease(7),
    "shard_epoch_key": KEYS.shard_epoch(7),
}
# Scripts whose one call spans slots, and why (the note's "Exceptions" table says the same).
CROSS_SLOT = {
    "LoadStarts": "many sessions",
    "FencedWrite": "session + pl:active / broker queue / kombu unacked",
    "StartAttempt": "session + breaker + kombu unacked",
    "RecordOutcome": "session + blob + breaker + kombu unacked",
}


def slot(key: str) -> int:
    return key_slot(key.encode())


def scripts() -> list[type[lua.LuaScript]]:
    # the package's scripts (not ones other tests define to check the wrapper itself)
    found = [c for c in vars(lua).values() if isinstance(c, type) and issubclass(c, lua.LuaScript)]
    return sorted((c for c in found if c is not lua.LuaScript), key=lambda c: c.__name__)


def key_fields(script: type[lua.LuaScript]) -> list[str]:
    return [f.name for f in fields(script) if f.metadata["lua"] == "key"]


@pytest.mark.parametrize("sid", SIDS)
def test_every_key_of_a_session_has_the_sessions_slot(sid: str) -> None:
    session_slot = slot(KEYS.session(sid))
    named = [
        KEYS.session(sid),
        KEYS.step(sid, "a"),
        KEYS.step(sid, "b:with:colons"),
        KEYS.plan(sid, 1),
        KEYS.plan(sid, 12),
        KEYS.events(sid),
        KEYS.lease(sid),
        KEYS.progress(sid),
    ]
    assert {slot(k) for k in named} == {session_slot}
    assert session_slot == key_slot(sid.encode())  # the tag is the id itself


def test_sessions_spread_over_slots() -> None:
    spread = {slot(KEYS.session(f"20260101-120000-{n:08x}")) for n in range(200)}
    assert len(spread) > 150


def test_a_breakers_two_keys_share_a_slot() -> None:
    for tool in ("crm.update", "bench.echo", "a:b"):
        assert slot(KEYS.breaker(tool)) == slot(KEYS.breaker_failures(tool))


def test_every_key_field_of_every_script_is_classified() -> None:
    unknown = {
        (s.__name__, name)
        for s in scripts()
        for name in key_fields(s)
        if name not in SESSION_KEYS and name not in GLOBAL_KEYS
    }
    assert not unknown, f"new KEYS fields: say which slot they belong to: {sorted(unknown)}"


@pytest.mark.parametrize("sid", SIDS)
@pytest.mark.parametrize("script", scripts(), ids=lambda s: s.__name__)
def test_each_script_is_in_one_slot_or_a_listed_exception(
    script: type[lua.LuaScript], sid: str
) -> None:
    keys = [
        SESSION_KEYS[name](sid) if name in SESSION_KEYS else GLOBAL_KEYS[name]
        for name in key_fields(script)
    ]
    rest = next((f.name for f in fields(script) if f.metadata["lua"] == "rest_keys"), "")
    if script is lua.LoadStarts:  # one session's pair: its plan and its events
        keys += [KEYS.plan(sid, 1), KEYS.events(sid)]
    elif script is lua.FencedWrite:  # the session's own targets
        keys += [KEYS.session(sid), KEYS.step(sid, "a"), KEYS.plan(sid, 2), KEYS.progress(sid)]
    else:
        assert not rest, f"{script.__name__}: classify its remaining KEYS here"
    one_slot = len({slot(k) for k in keys}) <= 1
    if script.__name__ in CROSS_SLOT:
        # one session's part is in one slot; what crosses is the listed global or batch part
        own = [k for k in keys if k not in GLOBAL_KEYS.values()]
        assert len({slot(k) for k in own}) == 1
    else:
        assert one_slot, f"{script.__name__} spans slots: {keys}"


def test_the_design_note_lists_every_script_and_every_exception() -> None:
    text = NOTE.read_text("utf-8")
    for script in scripts():
        assert f"`{script.__name__}`" in text, f"{script.__name__} missing from {NOTE.name}"
    exceptions = text.split("## Exceptions", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(\w+)`", exceptions, flags=re.MULTILINE))
    assert listed == set(CROSS_SLOT)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("pl:s:20260101-120000-0a1b2c3d", "pl:s:{20260101-120000-0a1b2c3d}"),
        ("pl:s:S1:step:fetch:1", "pl:s:{S1}:step:fetch:1"),
        ("pl:s:S1:plan:3", "pl:s:{S1}:plan:3"),
        ("pl:s:S1:events", "pl:s:{S1}:events"),
        ("pl:s:S1:lease", "pl:s:{S1}:lease"),
        ("pl:s:S1:progress", "pl:s:{S1}:progress"),
        ("pl:breaker:crm.update", "pl:breaker:{crm.update}"),
        ("pl:breaker:crm.update:failures", "pl:breaker:{crm.update}:failures"),
    ],
)
def test_layout_1_names_map_to_their_tagged_names(old: str, new: str) -> None:
    assert tagged_name(KEYS, old) == new


@pytest.mark.parametrize(
    "key",
    ["pl:s:{S1}", "pl:s:{S1}:events", "pl:breaker:{t}", "pl:blob:abc", "pl:active", "other:s:x"],
)
def test_tagged_and_other_keys_are_left_alone(key: str) -> None:
    assert tagged_name(KEYS, key) is None


def test_an_id_with_colons_is_read_whole_when_the_index_has_it() -> None:
    assert tagged_name(KEYS, "pl:s:x:y:step:a", {"x:y"}) == "pl:s:{x:y}:step:a"
    assert tagged_name(KEYS, "pl:s:x:y", {"x:y"}) == "pl:s:{x:y}"
