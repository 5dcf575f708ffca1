"""What changed between two plan versions: the one diff ``planloop show`` prints and the
console outlines, so the two never disagree."""

from __future__ import annotations

from dataclasses import dataclass, field

from planloop.planner.plan import Plan, Step


@dataclass(frozen=True)
class PlanDiff:
    """Steps added, removed (ids in plan order) and changed (id -> the fields that did)."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: dict[str, list[str]] = field(default_factory=dict)

    def lines(self, old: Plan, new: Plan) -> list[str]:
        """One line per step: ``+ id (tool)``, ``- id (tool)``, ``~ id: fields changed``."""
        before, after = old.by_id, new.by_id
        return [
            *(f"+ {i} ({after[i].tool})" for i in self.added),
            *(f"- {i} ({before[i].tool})" for i in self.removed),
            *(f"~ {i}: {', '.join(names)} changed" for i, names in self.changed.items()),
        ]


def changed_fields(old: Step, new: Step) -> list[str]:
    """The fields of a step (every one the plan declares, in declaration order) that differ."""
    a, b = old.model_dump(mode="json"), new.model_dump(mode="json")
    return [name for name in Step.model_fields if a.get(name) != b.get(name)]


def diff_plans(old: Plan, new: Plan) -> PlanDiff:
    """The diff from ``old`` to ``new``."""
    before, after = old.by_id, new.by_id
    changed = {
        i: names for i in after if i in before for names in [changed_fields(before[i], after[i])]
    }
    return PlanDiff(
        added=[i for i in after if i not in before],
        removed=[i for i in before if i not in after],
        changed={i: names for i, names in changed.items() if names},
    )
