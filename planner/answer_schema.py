"""Whether an ``answer_schema`` a submitter gives can be used: checked before a session starts.

A schema that breaks here would break later, in the summarizer, after the session's steps ran:
a RecursionError on a schema nested 240 deep, a ``$ref`` that resolves to nothing (raised on
the first answer that reaches it), or a remote ``$ref``, which jsonschema would fetch from the
supervisor's network. So the CLI, the SDK, the console and the supervisor all refuse it here,
naming the problem, never quoting the schema.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from planloop.core.errors import ConfigError
from planloop.core.input_limits import DEFAULTS, InputLimits, value_problem

_BASE_URI = "urn:planloop:answer-schema"
_REF_KEYS = ("$ref", "$dynamicRef")


def check_answer_schema(schema: Any, limits: InputLimits = DEFAULTS) -> None:
    """Refuse an ``answer_schema`` that cannot be used.

    Raises:
        ConfigError: not a JSON object; nested deeper than ``limits.max_nesting_depth``,
            larger than ``limits.max_input_bytes``, a NaN, an overlong integer or a control
            character; not a valid JSON schema; a ``$ref`` that is not local or does not
            resolve. ``setting`` is ``answer_schema``.
    """
    if not isinstance(schema, Mapping):
        _refuse(f"must be a JSON object, got {type(schema).__name__}")
    problem = value_problem(schema, max_depth=limits.max_nesting_depth, path="answer_schema")
    if problem:
        raise ConfigError(problem, setting="answer_schema")
    if limits.max_input_bytes is not None:
        size = len(json.dumps(schema).encode())
        if size > limits.max_input_bytes:
            _refuse(f"{size} bytes, above the limit of {limits.max_input_bytes} (max_input_bytes)")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "<root>"
        _refuse(f"not a valid JSON schema at {where}: {_rule(exc)}")
    _check_references(schema)


def _check_references(schema: Mapping[str, Any]) -> None:
    resource = Resource.from_contents(dict(schema), default_specification=DRAFT202012)
    resolver = Registry().with_resource(_BASE_URI, resource).resolver(base_uri=_BASE_URI)
    for ref in _references(schema):
        if not ref.startswith("#"):
            _refuse("a $ref must point inside the schema (#/...); remote ones are not fetched")
        try:
            resolver.lookup(ref)
        except Unresolvable:
            _refuse(f"the $ref {ref[:80]!r} points at nothing in the schema")


def _references(schema: Mapping[str, Any]) -> Iterator[str]:
    """Every ``$ref`` text in the schema (walked without recursion: depth is checked already)."""
    todo: list[Any] = [schema]
    while todo:
        item = todo.pop()
        if isinstance(item, Mapping):
            for key, value in item.items():
                if key in _REF_KEYS and isinstance(value, str):
                    yield value
                else:
                    todo.append(value)
        elif isinstance(item, list):
            todo.extend(item)


def _rule(exc: jsonschema.SchemaError) -> str:
    """What the meta-schema asks there, without quoting the schema's own value."""
    expected = json.dumps(exc.validator_value, default=str)[:120]
    if exc.validator == "type":
        return f"must be of type {expected}"
    if exc.validator == "enum":
        return f"must be one of {expected}"
    return f"breaks the meta-schema's {exc.validator!r} rule"


def _refuse(problem: str) -> None:
    raise ConfigError(f"answer_schema: {problem}", setting="answer_schema")
