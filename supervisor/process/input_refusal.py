"""The producer's input check, applied again by the supervisor to a session it takes first.

Anything with access to Redis can write a session (an old producer, a script, an attacker):
its goal, options or plan may break the limits the producer enforces, and would break the
loop later (an answer schema that cannot be used crashes the summarizer after the steps
ran; a 100 MB goal rides every prompt). A session nobody owned before is checked here with
the producer's own check (planner/input_check.py) and ends failed before anything runs.
"""

from __future__ import annotations

from collections.abc import Mapping

from planloop.config.settings import Settings
from planloop.core.errors import SessionInputRefusedError
from planloop.core.hot_state import plan_checked
from planloop.core.input_limits import InputLimits
from planloop.core.models import SessionRecord
from planloop.planner.input_check import session_refusal


def refuse_bad_input(
    info: SessionRecord, plan_json: str | None, fields: Mapping[str, str], settings: Settings
) -> None:
    """Refuse a never-started session the producer would have refused.

    ``fields`` is the session hash as read (empty when not at hand: the plan is then
    validated in full rather than trusted by its digest).

    Raises:
        SessionInputRefusedError: what breaks which limit (never the value).
    """
    first_plan = plan_json if info.plan_version == 1 else None
    constraints = info.deliberation.get("constraints", [])
    refusal = session_refusal(
        info.goal,
        constraints if isinstance(constraints, list) else [constraints],
        info.options,
        first_plan,
        InputLimits.from_settings(settings),
        plan_checked=first_plan is not None and plan_checked(fields, first_plan),
    )
    if refusal is not None:
        raise SessionInputRefusedError(info.id, refusal)
