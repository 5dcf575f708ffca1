"""Every number every ``planloop`` command takes, swept: each option and argument is bounded
and finite, and an unparsable or out-of-range value is exit 2 in one line before anything
runs (click's CliRunner: parsing fails before a command connects to anything)."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from planloop.core.models import SessionOptions
from planloop.producer.cli import cli
from planloop.producer.cli.options import MAX_TEXT_CHARS, BoundedFloat, CliText, session_option

HOSTILE_NUMBERS = ["nan", "inf", "-inf", "1e26", "99999999999999999999999", "-1", "abc", "", "0x10"]


def numeric_params() -> Iterator[tuple[list[str], click.Parameter]]:
    """(command path, parameter) for every numeric parameter of every command."""
    todo: list[tuple[list[str], click.Command]] = [([], cli)]
    while todo:
        path, command = todo.pop()
        if isinstance(command, click.Group):
            todo.extend(([*path, name], sub) for name, sub in command.commands.items())
        for param in command.params:
            kind = param.type
            if isinstance(kind, click.types._NumberParamTypeBase | BoundedFloat):
                yield path, param


PARAMS = list(numeric_params())


def _id(item: tuple[list[str], click.Parameter]) -> str:
    path, param = item
    return " ".join([*path, param.opts[0]])


def test_the_sweep_finds_the_numbers_of_every_command() -> None:
    found = {_id(item) for item in PARAMS}
    assert {"submit --concurrency", "status --limit", "lessons show lesson_id"} <= found
    assert {"submit --wait-for-workers", "worker --concurrency", "up --workers"} <= found


@pytest.mark.parametrize("item", PARAMS, ids=_id)
def test_every_number_has_both_bounds(item: tuple[list[str], click.Parameter]) -> None:
    _, param = item
    kind = param.type
    if isinstance(kind, BoundedFloat):
        return
    assert isinstance(kind, click.IntRange), f"{kind!r}: a bare int/float has no bounds"
    assert kind.min is not None, f"{kind!r} lacks a lower bound"
    assert kind.max is not None, f"{kind!r} lacks an upper bound"


def args_for(path: list[str], param: click.Parameter, value: str) -> list[str]:
    if isinstance(param, click.Argument):
        return [*path, "--", value]  # "-1" is a value here, not an option
    return [*path, f"{param.opts[0]}={value}"]


@pytest.mark.parametrize("value", HOSTILE_NUMBERS)
@pytest.mark.parametrize("item", PARAMS, ids=_id)
def test_a_hostile_number_is_exit_2_in_one_line(
    item: tuple[list[str], click.Parameter], value: str
) -> None:
    path, param = item
    result = CliRunner().invoke(cli, args_for(path, param, value))

    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: "), result.output
    # an optional value (--wait-for-workers) reads a leading "-" as the next option
    assert "Invalid value for" in lines[0] or "No such option '-" in lines[0], result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_session_option_flags_take_the_models_bounds() -> None:
    for name in ("concurrency", "max_replans", "max_tokens", "max_rounds"):
        kind = session_option(name)
        assert isinstance(kind, click.IntRange)
        info = SessionOptions.model_fields[name]
        assert kind.max == next(r.le for r in info.metadata if hasattr(r, "le")), name
    cost = session_option("max_cost_usd")
    assert isinstance(cost, BoundedFloat)
    assert cost.low_open
    with pytest.raises(ValueError, match="needs both bounds"):
        session_option("compensate_on_failure")


# --- text, names and paths --------------------------------------------------------------------

HOSTILE_TEXTS = {
    "empty": "",
    "blank": "   ",
    "escape": "a\x1b]0;title\x07b",
    "nul": "a\x00b",
    "c1-control": "a\x9b31mb",
    "too-long": "x" * (MAX_TEXT_CHARS + 1),
}
# Parameters that take any string on purpose: none. A choice is a closed list.
CLOSED = click.Choice | click.types.BoolParamType


def text_params() -> Iterator[tuple[list[str], click.Parameter]]:
    """(command path, parameter) for every string-valued parameter of every command."""
    todo: list[tuple[list[str], click.Command]] = [([], cli)]
    while todo:
        path, command = todo.pop()
        if isinstance(command, click.Group):
            todo.extend(([*path, name], sub) for name, sub in command.commands.items())
        for param in command.params:
            if isinstance(param, click.Option) and (param.is_flag or param.count):
                continue
            if isinstance(param.type, click.types._NumberParamTypeBase | BoundedFloat | CLOSED):
                continue
            yield path, param


TEXT_PARAMS = list(text_params())


def test_the_sweep_finds_the_texts_of_every_command() -> None:
    found = {_id(item) for item in TEXT_PARAMS}
    assert {"worker --name", "worker --queues", "up --plan", "db upgrade --revision"} <= found
    assert {"lessons add --root-cause", "signal text", "approve --as", "status session_id"} <= found


@pytest.mark.parametrize("item", TEXT_PARAMS, ids=_id)
def test_every_text_is_checked_text_or_a_path(item: tuple[list[str], click.Parameter]) -> None:
    _, param = item
    kind = param.type
    if isinstance(kind, click.Path):  # a file refuses a directory and a folder a file
        assert not (kind.file_okay and kind.dir_okay), f"{_id(item)} takes files and folders"
        return
    assert isinstance(kind, CliText), f"{_id(item)} is a bare {kind!r}: nothing checks it"


@pytest.mark.parametrize("value", list(HOSTILE_TEXTS.values()), ids=list(HOSTILE_TEXTS))
@pytest.mark.parametrize(
    "item", [i for i in TEXT_PARAMS if isinstance(i[1].type, CliText)], ids=_id
)
def test_a_hostile_text_is_exit_2_in_one_line(
    item: tuple[list[str], click.Parameter], value: str
) -> None:
    path, param = item
    kind = param.type
    assert isinstance(kind, CliText)
    if value == "" and kind.empty_ok:
        return  # "" is this option's default: none
    if value == HOSTILE_TEXTS["too-long"] and kind.max_chars > MAX_TEXT_CHARS:
        return
    result = CliRunner().invoke(cli, args_for(path, param, value))

    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output[:500]
    assert lines[0].startswith("error: Invalid value for"), lines[0][:500]
    assert "title" not in lines[0], "the value was echoed"
    assert "xxxxxxxxxx" not in lines[0], "the value was echoed"


@pytest.mark.parametrize(
    "args",
    [
        ["supervisor", "--loglevel", ""],
        ["worker", "--loglevel", "loud"],
        ["console", "--loglevel", ""],
        ["up", "--plan", "/"],
        ["up", "--plan", "/no/such/plan.yaml"],
        ["submit", "/", "--no-worker-check"],
        ["submit", "x.json", "--answer-schema", "/"],
        ["lessons", "add", "--file", "/"],
        ["users", "add", "bob", "--file", "/"],
    ],
    ids=" ".join,
)
def test_a_bad_level_or_path_is_exit_2_in_one_line(args: list[str]) -> None:
    result = CliRunner().invoke(cli, args)

    assert result.exit_code == 2, (result.output, result.exception)
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert result.output.startswith("error: Invalid value for"), result.output
