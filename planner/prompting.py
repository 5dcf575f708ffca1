"""Prompt templates (``planner/prompts/*.md``) and the text blocks that fill them.

A template is Markdown read by a person and filled with :class:`string.Template`
(``$name`` placeholders, so the JSON braces in the text need no escaping). The part above
the line ``<!-- user -->`` is the system message, whose first line is ``ROLE: <role>``; the
part below is the user message.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import resources
from string import Template
from typing import Any

from planloop.core.errors import ConfigError
from planloop.core.tools import ToolRegistry, ToolSpec
from planloop.planner.plan import Plan

USER_MARKER = "<!-- user -->"
# Params only tests and demos set; planners must never see them.
HIDDEN_PARAMS = frozenset({"simulate"})
_DEF_REF = re.compile(r'"#/\$defs/([^"]+)"')


@cache
def load_template(name: str) -> tuple[Template, Template]:
    """The system and user templates of ``planner/prompts/<name>.md``.

    Raises:
        ConfigError: the file is missing, has no user part, or does not start with ``ROLE:``.
    """
    try:
        prompts = resources.files("planloop.planner").joinpath("prompts")
        text = prompts.joinpath(f"{name}.md").read_text("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"prompt template {name!r} is missing from planner/prompts") from None
    system, marker, user = text.partition(f"\n{USER_MARKER}\n")
    if not marker or not system.startswith("ROLE: "):
        raise ConfigError(
            f"prompt template {name!r} must start with 'ROLE: <role>' and hold a "
            f"{USER_MARKER!r} line between the system and the user message"
        )
    return Template(system.strip()), Template(user.strip())


def render_prompt(name: str, **values: str) -> list[dict[str, str]]:
    """The chat messages of template ``name`` filled with ``values``.

    Raises:
        ConfigError: the template needs a placeholder ``values`` does not give.
    """
    system, user = load_template(name)
    try:
        return [
            {"role": "system", "content": system.substitute(values)},
            {"role": "user", "content": user.substitute(values)},
        ]
    except KeyError as exc:
        raise ConfigError(f"prompt template {name!r} needs a value for ${exc.args[0]}") from None


def bullets(items: Iterable[str], empty: str = "(none)") -> str:
    """``items`` as a Markdown list, or ``empty``."""
    lines = [f"- {item}" for item in items]
    return "\n".join(lines) if lines else empty


def planning_schema(spec: ToolSpec) -> dict[str, Any]:
    """The tool's params JSON schema as planners see it: no test-only fields, no titles."""
    schema = copy.deepcopy(spec.params_schema())
    props = schema.get("properties", {})
    for name in HIDDEN_PARAMS:
        props.pop(name, None)
    if "required" in schema:
        schema["required"] = [r for r in schema["required"] if r not in HIDDEN_PARAMS]
    schema = dict(_without_titles(schema))
    defs = schema.pop("$defs", {})
    used = _used_defs(schema, defs)
    if used:
        schema["$defs"] = {name: defs[name] for name in sorted(used)}
    return schema


def tool_catalogue(tools: ToolRegistry, *, compact: bool = False) -> str:
    """Every tool with its description and params: full JSON schemas, or one line each."""
    if compact:
        return "\n".join(_signature(spec) for spec in tools.specs()) or "(no tools)"
    blocks = []
    for spec in tools.specs():
        effect: str = spec.side_effect
        if spec.compensate:
            effect += f", undone by {spec.compensate}"
        schema = json.dumps(planning_schema(spec), separators=(",", ":"))
        blocks.append(
            f"### {spec.name}\n{spec.description}\nSide effect: {effect}.\nParams: {schema}"
        )
    return "\n\n".join(blocks) or "(no tools)"


def plan_outline(plan: Plan, statuses: Mapping[str, str]) -> str:
    """One line per step: id, tool, status and dependencies."""
    lines = []
    for step in plan.steps:
        deps = f" after {', '.join(step.dependencies)}" if step.dependencies else ""
        status = statuses.get(step.id, "pending")
        lines.append(f"- {step.id}: {step.tool} [{status}]{deps}")
    return "\n".join(lines)


def _signature(spec: ToolSpec) -> str:
    """``name(a: string, b?: integer = 30) - description``."""
    schema = planning_schema(spec)
    required = set(schema.get("required", []))
    params = []
    for name, prop in schema.get("properties", {}).items():
        kind = _type_name(prop)
        if name in required:
            params.append(f"{name}: {kind}")
        else:
            default = f" = {json.dumps(prop['default'])}" if "default" in prop else ""
            params.append(f"{name}?: {kind}{default}")
    return f"- {spec.name}({', '.join(params)}): {spec.description}"


def _type_name(prop: Mapping[str, Any]) -> str:
    if "enum" in prop:
        return "|".join(json.dumps(v) for v in prop["enum"])
    if "anyOf" in prop:
        return "|".join(_type_name(p) for p in prop["anyOf"])
    if "$ref" in prop:
        return str(prop["$ref"]).rsplit("/", 1)[-1]
    if prop.get("type") == "array" and isinstance(prop.get("items"), Mapping):
        return f"list[{_type_name(prop['items'])}]"
    return str(prop.get("type", "any"))


def _without_titles(node: Any) -> Any:
    """``node`` without the ``title`` strings pydantic adds (a property named title stays)."""
    if isinstance(node, dict):
        return {
            k: _without_titles(v)
            for k, v in node.items()
            if not (k == "title" and isinstance(v, str))
        }
    if isinstance(node, list):
        return [_without_titles(item) for item in node]
    return node


def _used_defs(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> set[str]:
    """Names of the ``$defs`` reachable from ``schema``."""
    used: set[str] = set()
    todo = _DEF_REF.findall(json.dumps(schema))
    while todo:
        name = todo.pop()
        if name in defs and name not in used:
            used.add(name)
            todo.extend(_DEF_REF.findall(json.dumps(defs[name])))
    return used
