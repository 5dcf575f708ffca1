"""Tools known from the catalogue a worker published: contract only, no code.

A producer or supervisor that cannot import a tool's module still validates plans against
it and shows it to planners: :func:`published_spec` turns a :class:`CatalogueEntry` into a
:class:`PublishedToolSpec`, a :class:`ToolSpec` whose params are checked against the JSON
schema the worker published (``jsonschema``) instead of a pydantic model. Validation
(planner/validation.py) asks the spec what fits and never learns where its schema came
from. Running one here is a permanent error: the worker that published it runs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError as SchemaError
from jsonschema.protocols import Validator
from pydantic import BaseModel, ConfigDict

from planloop.core.catalogue import CatalogueEntry
from planloop.core.errors import PermanentToolError
from planloop.core.tools import ParamError, ToolContext, ToolSpec


class PublishedParams(BaseModel):
    """Params as a published tool takes them: anything (its schema is checked instead)."""

    model_config = ConfigDict(extra="allow")


def _served_elsewhere(params: Any, ctx: ToolContext) -> Any:
    raise PermanentToolError(
        f"tool {ctx.tool!r} is known here only from the catalogue: a worker that imports "
        "its module runs it"
    )


@dataclass(frozen=True)
class PublishedToolSpec(ToolSpec):
    """A tool as a worker published it: its params JSON schema stands for the params model."""

    schema: Mapping[str, Any] = field(default_factory=dict, compare=False)
    sensitive: frozenset[str] = frozenset()
    worker: str = ""  # the worker that published it last

    def params_schema(self) -> dict[str, Any]:
        return dict(self.schema)

    def sensitive_fields(self) -> frozenset[str]:
        return self.sensitive

    def param_names(self) -> frozenset[str]:
        properties = self.schema.get("properties")
        return frozenset(properties) if isinstance(properties, Mapping) else frozenset()

    def takes_extra_params(self) -> bool:
        # pydantic writes additionalProperties only for extra="forbid" (false) and "allow"
        # (true); a model that ignores extras is closed here as validation treats it locally
        extra = self.schema.get("additionalProperties", False)
        return extra is not False

    def params_errors(self, params: Mapping[str, Any]) -> list[ParamError]:
        found: list[ParamError] = []
        for error in self._validator.iter_errors(dict(params)):
            found.extend(_param_errors(error))
        return sorted(found, key=lambda e: [str(part) for part in e[0]])

    @cached_property
    def _validator(self) -> Validator:
        return Draft202012Validator(dict(self.schema))


def _param_errors(error: SchemaError) -> list[ParamError]:
    """One JSON-schema error in the words validation uses, never quoting the value."""
    path = tuple(error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, Mapping):
        wanted = error.validator_value if isinstance(error.validator_value, list) else []
        return [((*path, name), "Field required") for name in wanted if name not in error.instance]
    if error.validator == "type":
        return [(path, f"should be of type {error.validator_value!r}")]
    if error.validator == "enum":
        return [(path, f"should be one of {error.validator_value!r}")]
    if error.validator == "additionalProperties":
        return [(path, error.message.replace("were unexpected", "are not params of the tool"))]
    return [(path, f"breaks the schema's {error.validator!r}: {error.validator_value!r}")]


def published_spec(entry: CatalogueEntry) -> PublishedToolSpec:
    """The spec a catalogue entry describes."""
    return PublishedToolSpec(
        name=entry.name,
        description=entry.description,
        params_model=PublishedParams,
        output_model=None,
        func=_served_elsewhere,
        side_effect=entry.side_effect,
        timeout_s=entry.timeout_s,
        compensate=entry.compensate,
        schema=entry.params_schema,
        sensitive=frozenset(entry.sensitive),
        worker=entry.worker,
    )
