"""``planloop lessons``: list, add, show, disable, enable and delete lessons."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from planloop.producer.cli.options import MAX_TEXT_CHARS, name, row_id, text
from planloop.producer.cli.root import command_settings, fail

if TYPE_CHECKING:
    from planloop.core.lessons import LessonStore, Thresholds
    from planloop.producer.lesson_views import Freshness


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the lessons as JSON.")
@click.pass_context
def lessons(ctx: click.Context, as_json: bool) -> None:
    """Lessons from earlier sessions, with uses and the success rates with and without;
    a stale one (a tool it was learned on changed, or too old) is marked and never used."""
    if ctx.invoked_subcommand is None:
        from planloop.producer.lesson_views import print_lessons

        store, thresholds = _lesson_store()
        print_lessons(store, thresholds, as_json=as_json, fresh=_freshness())


@lessons.command("add")
@click.option(
    "--goal-pattern", type=text(), default=None, help="The goals it is for (its search key)."
)
@click.option("--root-cause", type=text(), default=None, help="What goes wrong.")
@click.option("--avoidance", type=text(), default=None, help="What not to do.")
@click.option("--suggestion", type=text(), default=None, help="What to do instead.")
@click.option(
    "--toolsets",
    type=name(max_chars=MAX_TEXT_CHARS),
    default=None,
    help="Comma list of toolsets (ecommerce,supply_chain): only sessions using one get it.",
)
@click.option(
    "--file",
    "lesson_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A YAML/JSON file with the same fields (options given override it).",
)
@click.option("--json", "as_json", is_flag=True, help="Print {id, merged} as JSON.")
def lessons_add(
    goal_pattern: str | None,
    root_cause: str | None,
    avoidance: str | None,
    suggestion: str | None,
    toolsets: str | None,
    lesson_file: Path | None,
    as_json: bool,
) -> None:
    """Seed a lesson by hand, embedded and scoped like a learned one."""
    from planloop.producer import lesson_add as seed

    settings = command_settings(record=True)
    fields = seed.read_lesson_file(lesson_file, settings) if lesson_file else {}
    given = {
        "goal_pattern": goal_pattern,
        "root_cause": root_cause,
        "avoidance": avoidance,
        "suggestion": suggestion,
        "toolsets": seed.split_toolsets(toolsets) if toolsets is not None else None,
    }
    fields.update({k: v for k, v in given.items() if v is not None})
    seeded = seed.parse_seeded(fields)
    store, _ = _lesson_store()
    lesson_id, merged = seed.add_seeded(store, seeded, settings, seed.live_versions(settings))
    if as_json:
        click.echo(json.dumps({"id": lesson_id, "merged": merged}))
    elif merged:
        click.echo(f"lesson {lesson_id}: merged into this near-duplicate")
    else:
        click.echo(f"lesson {lesson_id} added")


@lessons.command("show")
@click.argument("lesson_id", type=row_id())
@click.option("--json", "as_json", is_flag=True, help="Print the lesson as JSON.")
def lessons_show(lesson_id: int, as_json: bool) -> None:
    """One lesson in full, with its measured effect."""
    from planloop.producer.lesson_views import print_lesson

    store, thresholds = _lesson_store()
    fresh = _freshness()
    if not print_lesson(store, lesson_id, thresholds, as_json=as_json, fresh=fresh):
        fail(f"no lesson {lesson_id}; `planloop lessons` lists them")


@lessons.command("disable")
@click.argument("lesson_id", type=row_id())
@click.option("--reason", type=text(), default="disabled by a person", help="Why, for the record.")
def lessons_disable(lesson_id: int, reason: str) -> None:
    """Stop giving a lesson to prompts (kept, with its record; `enable` undoes it)."""
    store, _ = _lesson_store()
    if not store.disable(lesson_id, reason):
        fail(f"no lesson {lesson_id}; `planloop lessons` lists them")
    click.echo(f"lesson {lesson_id} disabled")


@lessons.command("enable")
@click.argument("lesson_id", type=row_id())
def lessons_enable(lesson_id: int) -> None:
    """Give a disabled lesson to prompts again."""
    store, _ = _lesson_store()
    if not store.enable(lesson_id):
        fail(f"no lesson {lesson_id}; `planloop lessons` lists them")
    click.echo(f"lesson {lesson_id} enabled")


@lessons.command("delete")
@click.argument("lesson_id", type=row_id())
def lessons_delete(lesson_id: int) -> None:
    """Delete a lesson and its uses."""
    store, _ = _lesson_store()
    if not store.delete(lesson_id):
        fail(f"no lesson {lesson_id}; `planloop lessons` lists them")
    click.echo(f"lesson {lesson_id} deleted")


def _freshness() -> Freshness:
    """What tells a stale lesson: the live catalogue's tool versions and the age setting
    (without Redis, the age alone; said on stderr)."""
    import redis

    from planloop.producer.lesson_add import live_versions
    from planloop.producer.lesson_views import Freshness

    settings = command_settings()
    try:
        served = live_versions(settings)
    except redis.RedisError as exc:
        click.echo(f"note: tool versions not checked (Redis: {exc})", err=True)
        served = {}
    return Freshness(served, settings.lesson_max_age_days)


def _lesson_store() -> tuple[LessonStore, Thresholds]:
    """The lessons store on ``PLANLOOP_DATABASE_URL`` and the similarity thresholds."""
    from planloop.core.lessons import LessonStore, Thresholds
    from planloop.core.record import make_engine

    settings = command_settings(record=True)
    thresholds = Thresholds(
        settings.lessons_min_similarity, settings.lessons_min_lexical_similarity
    )
    return LessonStore(make_engine(settings.database_url)), thresholds
