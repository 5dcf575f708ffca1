"""``planloop submit`` (a plan file or a goal for the LLM planner) and ``planloop examples``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from planloop.core.errors import ConfigError, PlanloopError, ToolModuleError
from planloop.producer.cli.options import (
    MAX_TEXT_CHARS,
    MAX_WAIT_S,
    BoundedFloat,
    name,
    session_option,
    text,
)
from planloop.producer.cli.root import command_settings, exit_for, fail

if TYPE_CHECKING:
    from planloop.core.input_limits import InputLimits


DEFAULT_WAIT_FOR_WORKERS_S = 60.0


class SubmitCommand(click.Command):
    """``submit``: a bare ``--wait-for-workers`` followed by the plan file means the default
    wait (click would take the file name as the option's value)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        fixed: list[str] = []
        for i, arg in enumerate(args):
            following = args[i + 1] if i + 1 < len(args) else None
            if arg == "--wait-for-workers" and not _is_number(following):
                arg = f"--wait-for-workers={DEFAULT_WAIT_FOR_WORKERS_S:g}"
            fixed.append(arg)
        return super().parse_args(ctx, fixed)


def _is_number(text: str | None) -> bool:
    try:
        float(text or "")
    except ValueError:
        return False
    return True


@click.command(cls=SubmitCommand)
@click.argument("plan_file", type=click.Path(dir_okay=False, path_type=Path), required=False)
@click.option(
    "--goal", type=text(), default=None, help="Plan this goal with the LLM instead of a file."
)
@click.option(
    "--tools",
    "toolsets",
    type=name(max_chars=MAX_TEXT_CHARS, empty_ok=True),
    default="",
    help="Toolsets for --goal, e.g. ecommerce.",
)
@click.option(
    "--constraint", "constraints", type=text(), multiple=True, help="A constraint (repeatable)."
)
@click.option("--wait", is_flag=True, help="Watch the session live until it ends.")
@click.option(
    "--concurrency", type=session_option("concurrency"), default=None, help="Steps running at once."
)
@click.option(
    "--max-replans",
    type=session_option("max_replans"),
    default=None,
    help="Re-plan budget of the session.",
)
@click.option(
    "--compensate-on-failure/--no-compensate-on-failure",
    default=True,
    show_default=True,
    help="Undo completed writes when the session ends failed (critical failure, deadline).",
)
@click.option(
    "--max-tokens",
    type=session_option("max_tokens"),
    default=None,
    help="LLM token budget of the session (every role).",
)
@click.option(
    "--max-cost-usd",
    type=session_option("max_cost_usd"),
    default=None,
    help="LLM cost budget of the session, US dollars (priced by PLANLOOP_LLM_PRICES).",
)
@click.option(
    "--max-rounds",
    type=session_option("max_rounds"),
    default=None,
    help="Rounds with critique (LLM sessions; default PLANLOOP_MAX_ROUNDS).",
)
@click.option(
    "--answer-schema",
    "answer_schema_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="JSON schema file the final answer's data must fit (LLM sessions).",
)
@click.option(
    "--mode",
    type=click.Choice(["plan", "react", "auto"]),
    default="auto",
    show_default=True,
    help="For --goal: a plan, one agent step (ReAct), or as the router decides.",
)
@click.option(
    "--wait-for-workers",
    "wait_for_workers_s",
    type=BoundedFloat(0, MAX_WAIT_S),
    is_flag=False,
    flag_value=DEFAULT_WAIT_FOR_WORKERS_S,
    default=0.0,
    metavar="[SECONDS]",
    help="When no live worker serves a tool of the plan, wait for one (default "
    f"{DEFAULT_WAIT_FOR_WORKERS_S:g}s) instead of refusing the plan.",
)
@click.option(
    "--worker-check/--no-worker-check",
    default=True,
    show_default=True,
    help="Refuse a plan whose tools no live worker serves (--no-worker-check: submit now, "
    "start the workers later).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the session id as JSON.")
def submit(
    plan_file: Path | None,
    goal: str | None,
    toolsets: str,
    constraints: tuple[str, ...],
    wait: bool,
    concurrency: int | None,
    max_replans: int | None,
    compensate_on_failure: bool,
    max_tokens: int | None,
    max_cost_usd: float | None,
    max_rounds: int | None,
    answer_schema_file: Path | None,
    mode: Literal["plan", "react", "auto"],
    wait_for_workers_s: float,
    worker_check: bool,
    as_json: bool,
) -> None:
    """Submit PLAN_FILE (YAML or JSON), or a --goal for the LLM planner, as a new session."""
    from planloop.core.input_limits import InputLimits
    from planloop.planner.input_check import session_options
    from planloop.planner.plan import load_plan
    from planloop.producer.client import Producer

    if (plan_file is None) == (goal is None):
        fail("give either a plan file (YAML or JSON) or --goal TEXT")
        return
    plan_file, answer_schema_file = _shipped(plan_file), _shipped(answer_schema_file)
    settings = command_settings()  # a bad setting is its own line (PlanloopGroup), exit 2
    try:
        limits = InputLimits.from_settings(settings)
        schema = read_answer_schema(answer_schema_file, limits) if answer_schema_file else None
        options = session_options(  # the SDK's own check: the same values pass both
            None,
            {
                "concurrency": concurrency,
                "max_replans": max_replans,
                "compensate_on_failure": compensate_on_failure,
                "max_tokens": max_tokens,
                "max_cost_usd": max_cost_usd,
                "max_rounds": max_rounds,
                "mode": mode,
                "answer_schema": schema,
            },
        )
        producer = Producer.from_settings(settings, on_local_catalogue=_say_local)
        if goal is not None:
            tools = [t.strip() for t in toolsets.split(",") if t.strip()]
            sid = producer.submit_goal(
                goal,
                tools=tools,
                constraints=list(constraints),
                options=options,
                check_workers=worker_check,
                wait_for_workers_s=wait_for_workers_s,
                on_wait=lambda missing: _say_waiting(missing, wait_for_workers_s),
            )
        else:
            assert plan_file is not None
            plan = load_plan(plan_file, limits=limits)
            sid = producer.submit(
                plan,
                options,
                check_workers=worker_check,
                wait_for_workers_s=wait_for_workers_s,
                on_wait=lambda missing: _say_waiting(missing, wait_for_workers_s),
            )
    except ToolModuleError:
        raise  # one line, exit 2 (PlanloopGroup)
    except PlanloopError as exc:
        fail(f"{exc} (nothing was submitted)")
        return
    click.echo(json.dumps({"session_id": sid}) if as_json else sid)
    if wait:
        from planloop.producer.watch import watch_session

        exit_for(watch_session(producer, sid))


def _say_local(note: str) -> None:
    click.echo(f"note: {note}", err=True)


def _say_waiting(missing: list[str], wait_s: float) -> None:
    click.echo(
        f"waiting up to {wait_s:g}s for a live worker serving {', '.join(missing)}", err=True
    )


def _shipped(path: Path | None) -> Path | None:
    """``path``, or the example shipped under that name when there is no such file here."""
    from planloop.producer.examples import example_path

    if path is None:
        return None
    found = example_path(path)
    if found != path:
        click.echo(f"{path}: no such file here; using the example shipped with planloop", err=True)
    return found


@click.command()
@click.argument(
    "directory", type=click.Path(file_okay=False, path_type=Path), default=Path("examples")
)
@click.option("--overwrite", is_flag=True, help="Replace files of the same name.")
def examples(directory: Path, overwrite: bool) -> None:
    """Copy the example plans shipped with planloop into DIRECTORY (default: ./examples)."""
    from planloop.producer.examples import copy_examples

    try:
        copied, kept = copy_examples(directory, overwrite=overwrite)
    except OSError as exc:
        fail(f"cannot copy the examples into {directory}: {exc.strerror or exc}")
        return
    for path in copied:
        click.echo(f"copied {path}")
    for path in kept:
        click.echo(f"kept {path} (exists; --overwrite replaces it)")
    click.echo(f"try: planloop submit {directory / 'diamond.yaml'} --wait")


def read_answer_schema(path: Path, limits: InputLimits | None = None) -> dict[str, Any]:
    """The JSON schema in ``path``, checked before anything is submitted.

    Raises:
        ConfigError: the file is not JSON (a duplicate key, an overlong number), not an
            object, or an answer schema that cannot be used (planner/answer_schema.py).
    """
    from planloop.core.input_limits import DEFAULTS
    from planloop.core.json_input import loads
    from planloop.planner.answer_schema import check_answer_schema  # jsonschema: when asked

    try:
        schema = loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the answer schema {path}: {exc}") from None
    if not isinstance(schema, dict):
        raise ConfigError(f"the answer schema {path} must be a JSON object")
    check_answer_schema(schema, limits or DEFAULTS)
    return schema
