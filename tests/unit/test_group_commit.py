"""The checkpoint writer's group commit: it waits for a quiet spell, but never for ever."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from config.settings import Settings
from core.record import Checkpoint
from supervisor.checkpointer import Checkpointer
from supervisor.context import SupervisorContext

T = TypeVar("T")
GENEROUS_S = 20.0  # only a writer that ignores flush() or MAX_LINGER_S takes this long


@dataclass
class _Record:
    commits: list[Checkpoint] = field(default_factory=list)

    def checkpoint(self, sid: str, epoch: int, batch: Checkpoint) -> None:
        self.commits.append(batch)


@dataclass
class _Store:
    acked: list[str] = field(default_factory=list)

    async def ack(self, sid: str, entry_ids: Sequence[str]) -> None:
        self.acked += entry_ids

    async def outputs(self, refs: Sequence[str]) -> list[Any]:
        return [None for _ in refs]

    async def trim_events(self, sid: str, keep: int) -> int:
        return 0


@dataclass
class _Context:
    """The part of SupervisorContext the writer uses, in memory."""

    settings: Settings
    record: _Record = field(default_factory=_Record)
    store: _Store = field(default_factory=_Store)

    async def sql(self, func: Callable[[], T]) -> T:
        return func()


def _writer(linger_s: float) -> tuple[Checkpointer, _Context]:
    ctx = _Context(Settings(checkpoint_linger_s=linger_s))
    return Checkpointer(cast(SupervisorContext, ctx), "S1", 1), ctx


def _batch(i: int) -> Checkpoint:
    return Checkpoint(session={"n": i})


def test_flush_does_not_wait_for_the_quiet_spell() -> None:
    async def scenario() -> _Context:
        writer, ctx = _writer(linger_s=3600)
        writer.submit(_batch(1), ["1-0"])
        writer.submit(_batch(2), ["2-0"])
        await asyncio.wait_for(writer.flush(), GENEROUS_S)
        await writer.close()
        return ctx

    ctx = asyncio.run(scenario())
    assert [c.session for c in ctx.record.commits] == [{"n": 2}], "one commit for both"
    assert ctx.store.acked == ["1-0", "2-0"]


def test_a_steady_stream_of_changes_is_still_committed() -> None:
    async def scenario() -> _Context:
        writer, ctx = _writer(linger_s=3600)  # never quiet for that long
        deadline = asyncio.get_running_loop().time() + GENEROUS_S
        i = 0
        while not ctx.record.commits and asyncio.get_running_loop().time() < deadline:
            i += 1
            writer.submit(_batch(i), [f"{i}-0"])
            await asyncio.sleep(0.005)
        await writer.close()
        return ctx

    ctx = asyncio.run(scenario())
    assert ctx.record.commits, "the writer waited for a quiet spell that never came"
    assert ctx.store.acked[0] == "1-0"
