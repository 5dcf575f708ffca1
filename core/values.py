"""Large values by reference: the limits, the reference a task message carries, previews.

A step output is stored once, by content (``pl:blob:{sha256}`` in Redis for hot reads, the SQL
record for good). A step param whose JSON is above ``inline_value_max_bytes`` does not travel
in the task message: the message carries a :class:`ValueRef` to a stored value (the output it
was resolved from, with the path inside it), and the worker reads it before the tool runs. A
value above ``value_max_bytes`` fails its step for good (:class:`core.errors.OutputTooLarge`).
Every view of a value (prompts, reports, ``show``) gets a bounded :func:`preview` with the
value's size.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from planloop.config.settings import Settings
from planloop.core.masking import mask, mask_text

PREVIEW_CHARS = 2_000  # the start of a big value's JSON that a view shows


@dataclass(frozen=True)
class ValueLimits:
    """When a value travels by reference, and when it is too big to keep at all (bytes)."""

    inline_max_bytes: int = 64 * 1024
    max_bytes: int = 16 * 1024 * 1024

    @classmethod
    def from_settings(cls, settings: Settings) -> ValueLimits:
        return cls(settings.inline_value_max_bytes, settings.value_max_bytes)


class ValueRef(BaseModel):
    """A param carried by reference: ``path`` inside the stored value ``digest``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    digest: str = Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of the stored JSON.")
    path: list[str] = Field(default_factory=list, description="Keys or list indexes walked.")
    size: int = Field(ge=0, description="Bytes of the referenced value's own JSON.")


def encode(value: Any) -> str:
    """The stored JSON of a value: compact, stable, ASCII (so its length is its size in
    bytes); the same encoding as ``core.hot_state.dumps``, so digests agree."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


def walk(value: Any, path: Sequence[str]) -> Any:
    """The part of ``value`` at ``path`` (dict keys, list indexes); KeyError when absent."""
    current = value
    for segment in path:
        if isinstance(current, Mapping) and segment in current:
            current = current[segment]
        elif isinstance(current, list) and segment.isdigit() and int(segment) < len(current):
            current = current[int(segment)]
        else:
            raise KeyError(segment)
    return current


def preview(
    value: Any, sensitive: Collection[str] = (), *, chars: int = PREVIEW_CHARS, ref: str = ""
) -> Any:
    """``value`` masked; one whose JSON is longer than ``chars`` becomes the masked start of
    its JSON with its size, and its stored copy's digest when ``ref`` names it (masking only
    what is shown keeps a huge value from costing seconds)."""
    if value is None:
        return None
    text = encode(value)
    if len(text) <= chars:
        return mask(value, sensitive)
    shown = {"truncated": True, "bytes": len(text), "preview": mask_text(text[:chars], sensitive)}
    return {**shown, "ref": ref} if ref else shown
