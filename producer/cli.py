"""The ``planloop`` command line: submit, watch, status, signal, cancel, show, and the servers."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from planloop.config.settings import Settings
from planloop.core.errors import ConfigError, PlanloopError, ToolModuleError
from planloop.producer.cli_types import (
    MAX_LISTED,
    MAX_PROCESSES,
    MAX_WAIT_S,
    MAX_WORKER_SLOTS,
    BoundedFloat,
    bounded_int,
    row_id,
    session_option,
)
from planloop.producer.exits import EXIT_INVALID, EXIT_SESSION_FAILED, EXIT_UNREACHABLE, unreachable
from planloop.producer.users_cli import users

if TYPE_CHECKING:
    from planloop.core.input_limits import InputLimits
    from planloop.core.lessons import LessonStore, Thresholds
    from planloop.producer.lesson_views import Freshness

DEFAULT_WAIT_FOR_WORKERS_S = 60.0


def _settings(*, record: bool = False) -> Settings:
    """This command's settings, read and checked once (core/settings_check.py); with
    ``record`` (a command that opens the SQL record) the database URL and driver too.

    Raises:
        ConfigError: a bad value, named; :class:`PlanloopGroup` makes it one line, exit 2.
    """
    from planloop.core.settings_check import check_database_url, load_settings

    root = click.get_current_context().find_root()
    if not isinstance(root.obj, Settings):
        root.obj = load_settings()
    if record:
        check_database_url(root.obj.database_url)
    return root.obj


def _service_urls() -> tuple[str, str]:
    """The Redis and database URLs this command used (the defaults if settings are broken)."""
    try:
        settings = Settings()
    except ValueError:
        settings = Settings.model_construct()
    return settings.redis_url, settings.database_url


class PlanloopGroup(click.Group):
    """The ``planloop`` group: a bad setting or option (:class:`ConfigError`: a URL that is
    not one, a driver not installed, a port in use, a tool module that cannot be imported,
    ...) ends any command with one line naming it and exit code 2; an unreachable Redis or
    database with one line naming the URL and what to do, and exit code 3
    (producer/exits.py). Never a traceback."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        from planloop.producer.cli_errors import run_main  # usage errors in one line

        return run_main(super().main, *args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            _fail(" ".join(str(exc).split()))
        except Exception as exc:
            seen: BaseException | None = exc
            while seen is not None:  # the fault may be the cause of a wrapping error
                found = unreachable(seen, *_service_urls())
                if found is not None:
                    _fail(found.message(), code=EXIT_UNREACHABLE)
                seen = seen.__cause__ or seen.__context__
            raise


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


def _exit_for(status: str) -> None:
    """Exit 0 for a session that ended completed, 1 for any other end."""
    sys.exit(0 if status == "completed" else EXIT_SESSION_FAILED)


def _setup_logging(level: str, settings: Settings) -> None:
    from planloop.core.logs import setup_logging

    setup_logging(level, settings.log_format)  # masked, human or JSON lines (core/logs.py)


def _fail(message: str, code: int = EXIT_INVALID) -> None:
    """One line on stderr (a message's own line breaks joined, escapes made harmless), then
    exit ``code``."""
    from planloop.producer.terminal import terminal_safe  # a name or a tool's text in it

    click.echo(f"error: {terminal_safe(' '.join(message.split()))}", err=True)
    sys.exit(code)


# Who asks, recorded with the command's event (default: the OS user running the CLI).
AS_OPTION = click.option(
    "--as", "actor", default=None, metavar="NAME", help="Who asks, for the record (default: you)."
)


@click.group(cls=PlanloopGroup)
@click.version_option(package_name="planloop")
def cli() -> None:
    """Planloop: plan-and-execute sessions on a Celery worker pool.

    \b
    Exit codes: 0 success; 1 the session ended failed, aborted or cancelled;
    2 bad input (plan, tool, options, settings); 3 Redis or the database unreachable.
    """


@cli.command(cls=SubmitCommand)
@click.argument("plan_file", type=click.Path(path_type=Path), required=False)
@click.option("--goal", default=None, help="Plan this goal with the LLM instead of a file.")
@click.option("--tools", "toolsets", default="", help="Toolsets for --goal, e.g. ecommerce.")
@click.option("--constraint", "constraints", multiple=True, help="A constraint (repeatable).")
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
        _fail("give either a plan file (YAML or JSON) or --goal TEXT")
        return
    plan_file, answer_schema_file = _shipped(plan_file), _shipped(answer_schema_file)
    settings = _settings()  # a bad setting is its own line (PlanloopGroup), exit 2
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
        _fail(f"{exc} (nothing was submitted)")
        return
    click.echo(json.dumps({"session_id": sid}) if as_json else sid)
    if wait:
        from planloop.producer.watch import watch_session

        _exit_for(watch_session(producer, sid))


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


@cli.command()
@click.argument("directory", type=click.Path(path_type=Path), default=Path("examples"))
@click.option("--overwrite", is_flag=True, help="Replace files of the same name.")
def examples(directory: Path, overwrite: bool) -> None:
    """Copy the example plans shipped with planloop into DIRECTORY (default: ./examples)."""
    from planloop.producer.examples import copy_examples

    try:
        copied, kept = copy_examples(directory, overwrite=overwrite)
    except OSError as exc:
        _fail(f"cannot copy the examples into {directory}: {exc.strerror or exc}")
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


@cli.command()
@click.argument("session_id")
@click.option(
    "--action",
    type=click.Choice(["continue", "replan_remaining", "replan_full", "abort"]),
    default=None,
    help="What a session whose re-plan budget is spent should do now.",
)
@click.option("--step", default=None, help="Let this step (requires_approval) run.")
@click.option("--note", default="", help="Why, for the record.")
@AS_OPTION
def approve(
    session_id: str, action: str | None, step: str | None, note: str, actor: str | None
) -> None:
    """Answer a session waiting for a person: approve a step, or choose an action."""
    from planloop.producer.client import Producer

    if (action is None) == (step is None):
        _fail("give either --step STEP_ID or --action ACTION")
        return
    try:
        Producer.from_settings(_settings()).approve(
            session_id, action, note, step=step, actor=actor
        )
    except PlanloopError as exc:
        _fail(str(exc))
    click.echo(f"approval ({step or action}) sent to {session_id}")


@cli.command()
@click.argument("session_id", required=False)
@click.option(
    "--limit",
    type=bounded_int(1, MAX_LISTED),
    default=20,
    show_default=True,
    help="Sessions to list.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(session_id: str | None, limit: int, as_json: bool) -> None:
    """Show one session (or the newest ones)."""
    from planloop.producer.client import Producer
    from planloop.producer.views import print_status, status_doc

    producer = Producer.from_settings(_settings())
    try:
        if as_json:
            print(json.dumps(status_doc(producer, session_id, limit), indent=2, default=str))
        else:
            print_status(producer, session_id, limit)
    except PlanloopError as exc:
        _fail(str(exc))


@cli.command()
@click.argument("session_id")
def watch(session_id: str) -> None:
    """Watch a session live until it ends."""
    from planloop.producer.client import Producer
    from planloop.producer.watch import watch_session

    producer = Producer.from_settings(_settings())
    try:
        result = watch_session(producer, session_id)
    except PlanloopError as exc:
        _fail(str(exc))
        return
    _exit_for(result)


@cli.command()
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def show(session_id: str, as_json: bool) -> None:
    """Show a session's event timeline, report and DAG (Mermaid)."""
    from planloop.producer.client import Producer
    from planloop.producer.views import print_show

    producer = Producer.from_settings(_settings())
    try:
        print_show(producer, session_id, as_json=as_json)
    except PlanloopError as exc:
        _fail(str(exc))


@cli.command()
@click.argument("session_id")
@click.option("--reason", default="cancelled by user", help="Why, for the report.")
@AS_OPTION
def cancel(session_id: str, reason: str, actor: str | None) -> None:
    """Cancel a session: running steps stop, nothing new starts."""
    from planloop.producer.client import Producer

    try:
        before = Producer.from_settings(_settings()).cancel(session_id, reason, actor=actor)
    except PlanloopError as exc:
        _fail(str(exc))
    if before == "pending":
        click.echo(
            f"cancel requested for {session_id}: it never started; it ends cancelled "
            "when a supervisor takes it"
        )
    else:
        click.echo(f"cancel requested for {session_id}")


@cli.command()
@click.argument("session_id")
@click.argument("text")
@click.option("--signal", "plain", is_flag=True, help="A plain signal, not a constraint.")
@AS_OPTION
def signal(session_id: str, text: str, plain: bool, actor: str | None) -> None:
    """Tell a running session something new, e.g. "budget is 5k"."""
    from planloop.producer.client import Producer

    try:
        Producer.from_settings(_settings()).signal(
            session_id, text, constraint=not plain, actor=actor
        )
    except PlanloopError as exc:
        _fail(str(exc))
    click.echo(f"signal sent to {session_id}")


@cli.group(invoke_without_command=True)
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
@click.option("--goal-pattern", default=None, help="The goals it is for (its search key).")
@click.option("--root-cause", default=None, help="What goes wrong.")
@click.option("--avoidance", default=None, help="What not to do.")
@click.option("--suggestion", default=None, help="What to do instead.")
@click.option(
    "--toolsets",
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

    settings = _settings(record=True)
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
        _fail(f"no lesson {lesson_id}; `planloop lessons` lists them")


@lessons.command("disable")
@click.argument("lesson_id", type=row_id())
@click.option("--reason", default="disabled by a person", help="Why, for the record.")
def lessons_disable(lesson_id: int, reason: str) -> None:
    """Stop giving a lesson to prompts (kept, with its record; `enable` undoes it)."""
    store, _ = _lesson_store()
    if not store.disable(lesson_id, reason):
        _fail(f"no lesson {lesson_id}; `planloop lessons` lists them")
    click.echo(f"lesson {lesson_id} disabled")


@lessons.command("enable")
@click.argument("lesson_id", type=row_id())
def lessons_enable(lesson_id: int) -> None:
    """Give a disabled lesson to prompts again."""
    store, _ = _lesson_store()
    if not store.enable(lesson_id):
        _fail(f"no lesson {lesson_id}; `planloop lessons` lists them")
    click.echo(f"lesson {lesson_id} enabled")


@lessons.command("delete")
@click.argument("lesson_id", type=row_id())
def lessons_delete(lesson_id: int) -> None:
    """Delete a lesson and its uses."""
    store, _ = _lesson_store()
    if not store.delete(lesson_id):
        _fail(f"no lesson {lesson_id}; `planloop lessons` lists them")
    click.echo(f"lesson {lesson_id} deleted")


def _freshness() -> Freshness:
    """What tells a stale lesson: the live catalogue's tool versions and the age setting
    (without Redis, the age alone; said on stderr)."""
    import redis

    from planloop.producer.lesson_add import live_versions
    from planloop.producer.lesson_views import Freshness

    settings = _settings()
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

    settings = _settings(record=True)
    thresholds = Thresholds(
        settings.lessons_min_similarity, settings.lessons_min_lexical_similarity
    )
    return LessonStore(make_engine(settings.database_url)), thresholds


@cli.command()
@click.argument("session_id")
@click.argument("step_id")
@click.option("--note", default="", help="Why, for the record.")
@AS_OPTION
def retry(session_id: str, step_id: str, note: str, actor: str | None) -> None:
    """Run a step that failed for good once more; its skipped dependents wait for it again."""
    from planloop.producer.client import Producer

    try:
        Producer.from_settings(_settings()).retry_step(session_id, step_id, note, actor=actor)
    except PlanloopError as exc:
        _fail(str(exc))
    click.echo(f"retry of {step_id} sent to {session_id}")


@cli.command()
@click.argument("session_id")
@click.argument("step_id")
@click.option("--note", default="", help="Why, for the record.")
@AS_OPTION
def skip(session_id: str, step_id: str, note: str, actor: str | None) -> None:
    """Give up a failed (or not yet started) step: it and its dependents end skipped."""
    from planloop.producer.client import Producer

    try:
        Producer.from_settings(_settings()).skip_step(session_id, step_id, note, actor=actor)
    except PlanloopError as exc:
        _fail(str(exc))
    click.echo(f"skip of {step_id} sent to {session_id}")


@cli.command()
@click.option(
    "--concurrency",
    type=bounded_int(1, MAX_WORKER_SLOTS),
    default=None,
    help="Threads (or processes).",
)
@click.option(
    "--pool",
    type=click.Choice(["threads", "prefork", "solo"]),
    default=None,
    help="Celery pool (default: PLANLOOP_WORKER_POOL); solo runs one task at a time.",
)
@click.option("--loglevel", default="INFO", show_default=True)
@click.option("--name", default=None, help="Worker node name (default: unique per process).")
@click.option(
    "--queues",
    default=None,
    metavar="A,B",
    help="Also consume these queues (besides the pool queue derived from the tools it "
    "serves); steps reach them by a step's queue: or PLANLOOP_TOOL_QUEUES. "
    "Default: PLANLOOP_WORKER_QUEUES.",
)
def worker(
    concurrency: int | None, pool: str | None, loglevel: str, name: str | None, queues: str | None
) -> None:
    """Start a Celery worker for step tasks.

    The worker serves the bundled toolsets and the modules of PLANLOOP_TOOL_MODULES, which
    may live in the directory it is started in. It consumes the pool queue of the tools it
    serves (core/routing.py): the supervisor sends a step only to a queue whose workers all
    serve its tool.
    """
    settings = _settings(record=True)
    _import_tool_modules(settings)
    if queues is not None:
        names = [q.strip() for q in queues.split(",") if q.strip()]
        settings = settings.model_copy(update={"worker_queues": names})
    chosen_pool = pool or settings.worker_pool
    metrics_dir = ""
    if settings.metrics_port and chosen_pool == "prefork":
        from planloop.core.metrics_dir import prepare_multiprocess_dir

        # Before the worker's modules import prometheus_client: its mode is chosen then.
        metrics_dir = prepare_multiprocess_dir(settings.metrics_dir)
    from planloop.workers.app import create_app, run_worker

    # solo runs one task at a time in the consumer's own thread, whatever -c says.
    slots = 1 if chosen_pool == "solo" else concurrency or settings.worker_concurrency
    # Celery reads "-P prefork" as "no -P given" and falls back to the configured pool;
    # configuring the chosen pool makes every choice mean what it says.
    settings = settings.model_copy(update={"worker_pool": chosen_pool, "worker_concurrency": slots})
    app = create_app(settings)
    argv = [
        "worker",
        "-Q",
        ",".join(_worker_queues(settings)),
        "-c",
        str(slots),
        "-P",
        chosen_pool,
        "--loglevel",
        loglevel,
        "-n",
        name or f"planloop-{os.getpid()}@%h",
        "--without-mingle",
        "--without-gossip",
    ]
    # Threads pass the GIL between the consumer and the pool: a shorter slice than the
    # default 5 ms keeps a received task from waiting on it.
    sys.setswitchinterval(0.0005)
    code = run_worker(app, argv)
    if metrics_dir and not settings.metrics_dir:  # our own temporary directory
        import shutil

        shutil.rmtree(metrics_dir, ignore_errors=True)
    sys.exit(code)


def _import_tool_modules(settings: Settings) -> None:
    """Import the worker's tool modules now, from the current directory too, so that one
    that cannot be imported ends the command in one line (exit 2) before Celery starts.

    ``python -m`` puts the current directory on ``sys.path``, the ``planloop`` script does
    not: a user starting ``planloop worker`` in their tool module's folder expects it found.
    """
    from planloop.core.tools import load_tools

    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    load_tools(settings.tool_modules)  # raises ToolModuleError: PlanloopGroup says it


@cli.command("tools")
@click.option("--json", "as_json", is_flag=True, help="Print the catalogue as JSON.")
def tools_command(as_json: bool) -> None:
    """List the tools live workers serve, by worker and queue (with none live: the local
    catalogue, saying so)."""
    from planloop.producer.client import Producer
    from planloop.producer.tool_views import catalogue_doc, print_catalogue

    producer = Producer.from_settings(_settings(), on_local_catalogue=lambda note: None)
    try:
        if as_json:
            print(json.dumps(catalogue_doc(producer.tools), indent=2))
        else:
            print_catalogue(producer.tools)
    finally:
        producer.close()


def _worker_queues(settings: Settings) -> list[str]:
    """The queues ``planloop worker`` consumes: the pool queue of the tools it serves, and
    ``--queues`` (core/routing.py)."""
    from planloop.core.tools import load_tools
    from planloop.workers.catalogue import worker_queues

    return worker_queues(settings, load_tools(settings.tool_modules))


@cli.command()
@click.option("--loglevel", default="INFO", show_default=True)
def supervisor(loglevel: str) -> None:
    """Start a supervisor (run as many as you like)."""
    from planloop.supervisor.service import serve

    settings = _settings(record=True)
    _setup_logging(loglevel, settings)
    try:
        serve(settings)
    except ToolModuleError:
        raise  # a bad setting: one line, exit 2 (PlanloopGroup)
    except ConfigError as exc:  # e.g. the record's schema is behind: say what to run
        _fail(str(exc), code=1)


@cli.command()
@click.option("--demo", is_flag=True, help="Submit the e-commerce example, watch it, then stop.")
@click.option("--workers", type=bounded_int(1, MAX_PROCESSES), default=1, show_default=True)
@click.option("--concurrency", type=bounded_int(1, MAX_WORKER_SLOTS), default=8, show_default=True)
@click.option(
    "--console/--no-console",
    "with_console",
    default=True,
    show_default=True,
    help="Also start the web console (PLANLOOP_CONSOLE_PORT).",
)
@click.option(
    "--plan",
    "plan_file",
    type=click.Path(path_type=Path),
    default=None,
    help="Plan the demo submits (default: examples/ecommerce.yaml).",
)
def up(
    demo: bool, workers: int, concurrency: int, with_console: bool, plan_file: Path | None
) -> None:
    """Start Redis (embedded if none answers), workers and a supervisor; --demo runs a plan."""
    from planloop.core.errors import NoLiveWorkerError, PlanError
    from planloop.producer.up import UpOptions, run_up

    options = UpOptions(
        demo=demo,
        workers=workers,
        concurrency=concurrency,
        plan_file=plan_file,
        console=with_console,
    )
    settings = _settings(record=True)  # a bad setting: exit 2 (PlanloopGroup), not 1
    try:
        code = run_up(settings, options)
    except NoLiveWorkerError as exc:  # the stack ran, its workers never served the plan
        _fail(f"{exc} (the stack was stopped)", code=1)
        return
    except (PlanError, ToolModuleError) as exc:
        _fail(f"{exc} (nothing was started)")
        return
    except PlanloopError as exc:
        _fail(str(exc), code=1)
        return
    sys.exit(code)


@cli.command()
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Port (default: PLANLOOP_FLOWER_PORT).",
)
@click.option("--address", default="127.0.0.1", show_default=True, help="Address to bind.")
def flower(port: int | None, address: str) -> None:
    """Start Flower on our broker, behind basic auth (PLANLOOP_FLOWER_BASIC_AUTH; unset on
    a loopback address: a generated password)."""
    from planloop.producer.up import run_flower

    run_flower(_settings(), port=port, address=address)


@cli.command()
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Port (default: PLANLOOP_CONSOLE_PORT, 8765).",
)
@click.option(
    "--address", default=None, help="Address to bind (default: PLANLOOP_CONSOLE_ADDRESS)."
)
@click.option("--loglevel", default="WARNING", show_default=True)
def console(port: int | None, address: str | None, loglevel: str) -> None:
    """Start the web console (live DAGs, actions) for its users (PLANLOOP_CONSOLE_USERS_FILE;
    none on a loopback address: a generated admin password)."""
    from planloop.console.serve import run_console

    settings = _settings(record=True)
    _setup_logging(loglevel, settings)
    run_console(settings, port=port, address=address, loglevel=loglevel)


@cli.group()
def db() -> None:
    """The SQL record's schema (Alembic migrations shipped with Planloop)."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True, help="Target revision.")
def db_upgrade(revision: str) -> None:
    """Upgrade the record at PLANLOOP_DATABASE_URL (run once before supervisors start)."""
    from planloop.core.migrate import upgrade
    from planloop.core.record import make_engine
    from planloop.core.redis_faults import redact_url

    settings = _settings(record=True)
    engine = make_engine(settings.database_url)
    try:
        reached = upgrade(engine, revision)
    finally:
        engine.dispose()
    click.echo(f"record at {redact_url(settings.database_url)} is at revision {reached}")


@db.command("current")
def db_current() -> None:
    """Print the record's revision and the newest one; exit 1 when it is behind."""
    from planloop.core.migrate import current_revision, head_revision
    from planloop.core.record import make_engine

    engine = make_engine(_settings(record=True).database_url)
    try:
        current, head = current_revision(engine), head_revision()
    finally:
        engine.dispose()
    click.echo(f"current {current or '(none)'}, head {head}")
    sys.exit(0 if current == head else 1)


@cli.command()
@click.argument("role", type=click.Choice(["worker", "supervisor", "flower", "console"]))
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="flower/console port.")
def health(role: str, port: int | None) -> None:
    """Exit 0 when the ROLE process of this host serves, 1 otherwise (for healthchecks)."""
    from planloop.producer.health import (
        console_health,
        flower_health,
        supervisor_health,
        worker_health,
    )

    settings = _settings()
    if role == "worker":
        result = worker_health(settings)
    elif role == "supervisor":
        result = supervisor_health(settings)
    elif role == "flower":
        result = flower_health(settings, port)
    else:
        result = console_health(port or 8765)
    click.echo(result.detail)
    sys.exit(0 if result.ok else 1)


cli.add_command(users)


def main(argv: list[str] | None = None) -> Any:
    """Entry point of the ``planloop`` console script."""
    return cli.main(args=argv, prog_name="planloop")


if __name__ == "__main__":
    main()
