"""``{{step_id.output.path}}`` references in step params: finding and resolving them."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from planloop.core.errors import PlanReferenceError

REFERENCE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_-]*)\.output((?:\.[A-Za-z0-9_-]+)*)\s*\}\}")
# The same pattern with the step id as its only group, for ``findall``.
_REFERENCED_ID = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_-]*)\.output(?:\.[A-Za-z0-9_-]+)*\s*\}\}")


def find_references(value: Any) -> set[str]:
    """Ids of the steps referenced anywhere inside ``value`` (nested dicts, lists, strings).

    One iterative walk; the regex only runs on strings that hold ``{{``.
    """
    found: set[str] = set()
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            if "{{" in item:
                found.update(_REFERENCED_ID.findall(item))
        elif isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, list | tuple):
            todo.extend(item)
        elif isinstance(item, Mapping):  # the slower abc check, after the JSON types
            todo.extend(item.values())
    return found


def has_reference(value: Any) -> bool:
    """Whether ``value`` holds at least one reference."""
    return bool(find_references(value))


def resolve_params(
    params: Mapping[str, Any], outputs: Mapping[str, Any], *, step_id: str
) -> dict[str, Any]:
    """Replace every reference in ``params`` with the output it points at.

    A string that is exactly one reference becomes the referenced value with its own type; a
    reference inside longer text is interpolated (non-strings JSON-encoded).

    Args:
        params: The step's params, possibly nested.
        outputs: Step id -> that step's output.
        step_id: The step whose params these are (named in errors).

    Raises:
        PlanReferenceError: a referenced step has no output, or the path is not in it.
    """
    return {key: _resolve(value, outputs, step_id) for key, value in params.items()}


def _resolve(value: Any, outputs: Mapping[str, Any], step_id: str) -> Any:
    if isinstance(value, str):
        return _resolve_text(value, outputs, step_id)
    if isinstance(value, Mapping):
        return {key: _resolve(item, outputs, step_id) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_resolve(item, outputs, step_id) for item in value]
    return value


def _resolve_text(text: str, outputs: Mapping[str, Any], step_id: str) -> Any:
    whole = REFERENCE.fullmatch(text.strip())
    if whole:
        return _lookup(whole, outputs, step_id)

    def interpolate(match: re.Match[str]) -> str:
        found = _lookup(match, outputs, step_id)
        return found if isinstance(found, str) else json.dumps(found, default=str)

    return REFERENCE.sub(interpolate, text)


def _lookup(match: re.Match[str], outputs: Mapping[str, Any], step_id: str) -> Any:
    """The value ``match`` points at; each path segment walks a dict key or a list index."""
    ref_step, path = match.group(1), match.group(2)
    reference = match.group(0)
    if ref_step not in outputs:
        raise PlanReferenceError(
            f"no output recorded for step {ref_step!r}", step_id=step_id, reference=reference
        )
    current = outputs[ref_step]
    walked = f"{ref_step}.output"
    for segment in path.split(".")[1:]:
        current = _child(current, segment, walked, step_id, reference)
        walked = f"{walked}.{segment}"
    return current


def _child(container: Any, segment: str, walked: str, step_id: str, reference: str) -> Any:
    if isinstance(container, Mapping) and segment in container:
        return container[segment]
    if isinstance(container, list | tuple) and segment.isdigit() and int(segment) < len(container):
        return container[int(segment)]
    if isinstance(container, Mapping):
        names = sorted(map(str, container))
        keys = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "") if names else "none"
        detail = f"has no key {segment!r} (keys: {keys})"
    elif isinstance(container, list | tuple):
        detail = f"has no index {segment!r} (length {len(container)})"
    else:
        detail = f"is a {type(container).__name__}, so has no {segment!r}"
    raise PlanReferenceError(
        f"missing segment {segment!r}: {walked} {detail}", step_id=step_id, reference=reference
    )
