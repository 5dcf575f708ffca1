"""Whether a lesson still holds: the tool versions it was learned on, its age, its toolsets.

A tool's version here is the hash of its params schema (:func:`tool_version`), not a
``__version__`` string: the schema is what a plan's steps are written against, every worker
publishes it in the catalogue already (``pl:tools``), so a supervisor or a ``planloop``
command that never imported the tool's module can tell it too, and a tool author who never
bumps a version string still changes it by changing the params. A change that keeps the
params (a new implementation behind the same schema) keeps the version: such a lesson stays.

A lesson is stale (:func:`stale_reason`) when a tool it was learned on is served now with
another version, or when it is older than ``PLANLOOP_LESSON_MAX_AGE_DAYS``. A tool that is
not served now at all makes no lesson stale: the lesson is then out of scope, not wrong.
Stale lessons are never given to a prompt; ``planloop lessons`` lists them as stale.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from planloop.core.tools import ToolSpec

DAY_S = 86_400.0
VERSION_CHARS = 16  # hex digits of the schema hash kept: enough to tell two schemas apart


def tool_version(params_schema: Mapping[str, Any]) -> str:
    """A tool's version: the SHA-256 of its params schema as canonical JSON (shortened)."""
    canonical = json.dumps(params_schema, sort_keys=True, separators=(",", ":"), default=str)
    return "schema:" + hashlib.sha256(canonical.encode()).hexdigest()[:VERSION_CHARS]


def served_versions(specs: Iterable[ToolSpec]) -> dict[str, str]:
    """Tool name -> version of every tool in ``specs`` (a registry's, or the catalogue's)."""
    return {spec.name: tool_version(spec.params_schema()) for spec in specs}


def versions_for(served: Mapping[str, str], toolsets: Collection[str]) -> dict[str, str]:
    """The versions a lesson scoped to ``toolsets`` is learned on: those of every served
    tool in them (all served tools when the lesson has no toolsets)."""
    return {
        name: version
        for name, version in sorted(served.items())
        if not toolsets or name.split(".", 1)[0] in toolsets
    }


def stale_reason(
    learned_on: Mapping[str, str],
    served: Mapping[str, str],
    *,
    created_at: float,
    now: float,
    max_age_days: float,
) -> str | None:
    """Why a lesson no longer holds (one line), or None while it does.

    Args:
        learned_on: tool name -> version when the lesson was written.
        served: tool name -> version served now (a tool missing here is not a change).
        created_at: when the lesson was written, epoch seconds.
        now: epoch seconds.
        max_age_days: the age past which a lesson is stale; 0 turns the age check off.
    """
    changed = sorted(
        name for name, version in learned_on.items() if name in served and served[name] != version
    )
    if changed:
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if changed[3:] else "")
        return f"tool changed since it was learned: {shown}"
    if max_age_days and created_at and now - created_at > max_age_days * DAY_S:
        age = (now - created_at) / DAY_S
        return f"older than {max_age_days:g} days ({age:.0f} days)"
    return None


def in_scope(lesson_toolsets: Collection[str], session_toolsets: Collection[str]) -> bool:
    """A lesson without toolsets applies anywhere; otherwise the session must use one of
    its toolsets (a session that names no tools is not restricted)."""
    if not lesson_toolsets or not session_toolsets:
        return True
    return bool(set(lesson_toolsets) & set(session_toolsets))
