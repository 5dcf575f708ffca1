"""A plan's steps by id, built once per plan object, so a re-plan merge need not walk the plan.

A re-plan of an n-step plan looks up a few steps; building ``Plan.by_id`` for that touches
every step (26 ms at 50,000 steps, mostly cache misses). The index of a plan is kept for the
last few plans seen (plans are immutable), and the index of a merged plan is derived from the
plan it came from by a dict copy and the k new steps, never by walking the merged plan.
"""

from __future__ import annotations

import threading
from collections import ChainMap, OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from planloop.planner.plan import Plan, Step

# Plans whose index is kept: the plan in force and the merges being checked against it.
_KEPT = 8
# Merges whose new entries lie over an index before it is flattened into one dict.
_LAYERS = 8

_V = TypeVar("_V")


@dataclass(frozen=True)
class PlanIndex:
    """Main steps by id (the last one wins, as ``Plan.by_id``), and who owns each fallback
    step id (fallback step id -> the main step that declares it)."""

    by_id: Mapping[str, Step]
    fallback_owner: Mapping[str, str]

    def with_steps(self, steps: Iterable[Step]) -> PlanIndex:
        """The index after ``steps`` replace the steps of the same id or are appended.

        The new entries lie over the old maps (O(k), no copy of the plan's n entries); after
        a few merges, or when a replaced step declared fallbacks, the maps are flattened.
        """
        added: dict[str, Step] = {}
        owners: dict[str, str] = {}
        dropped = False
        for step in steps:
            old = added.get(step.id) or self.by_id.get(step.id)
            dropped = dropped or (old is not None and bool(old.fallback))
            added[step.id] = step
            owners.update((extra, step.id) for extra in _fallback_ids(step))
        if dropped:
            kept = {f: o for f, o in self.fallback_owner.items() if o not in added}
            return PlanIndex({**self.by_id, **added}, {**kept, **owners})
        return PlanIndex(_over(added, self.by_id), _over(owners, self.fallback_owner))


def _over(top: dict[str, _V], below: Mapping[str, _V]) -> Mapping[str, _V]:
    """``top`` over ``below`` without copying ``below``, unless the layers pile up."""
    layers = below.maps if isinstance(below, ChainMap) else [below]
    if len(layers) >= _LAYERS:
        return {**below, **top}
    return ChainMap(top, *layers)


_lock = threading.Lock()
_kept: OrderedDict[int, tuple[Plan, PlanIndex]] = OrderedDict()


def index_of(plan: Plan) -> PlanIndex:
    """The index of ``plan``: kept from an earlier call or :func:`remember`, else built."""
    with _lock:
        entry = _kept.get(id(plan))
        if entry is not None and entry[0] is plan:
            _kept.move_to_end(id(plan))
            return entry[1]
    by_id = plan.by_id
    owners = {extra: s.id for s in plan.steps if s.fallback for extra in _fallback_ids(s)}
    index = PlanIndex(by_id, owners)
    remember(plan, index)
    return index


def remember(plan: Plan, index: PlanIndex) -> None:
    """Keep ``index`` as the index of ``plan`` (which must be what it describes)."""
    with _lock:
        _kept[id(plan)] = (plan, index)  # the plan is held, so its id is not reused
        _kept.move_to_end(id(plan))
        while len(_kept) > _KEPT:
            _kept.popitem(last=False)


def _fallback_ids(step: Step) -> list[str]:
    found: list[str] = []
    todo = list(step.fallback)
    while todo:
        extra = todo.pop()
        found.append(extra.id)
        todo.extend(extra.fallback)
    return found
