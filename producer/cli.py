"""The ``planloop`` command line: submit, watch, status, signal, cancel, show, and the servers."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Literal

import click

from config.settings import Settings
from core.errors import ConfigError, PlanloopError
from core.masking import install_log_masking
from core.models import SessionOptions

EXIT_INVALID = 2


def _settings() -> Settings:
    try:
        return Settings()
    except ValueError as exc:
        raise click.ClickException(f"invalid PLANLOOP_* settings: {exc}") from exc


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    install_log_masking()  # log lines pass the one masker too (core/masking.py)


def _fail(message: str, code: int = EXIT_INVALID) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


@click.group()
@click.version_option(package_name="planloop")
def cli() -> None:
    """Planloop: plan-and-execute sessions on a Celery worker pool."""


@cli.command()
@click.argument("plan_file", type=click.Path(path_type=Path), required=False)
@click.option("--goal", default=None, help="Plan this goal with the LLM instead of a file.")
@click.option("--tools", "toolsets", default="", help="Toolsets for --goal, e.g. ecommerce.")
@click.option("--constraint", "constraints", multiple=True, help="A constraint (repeatable).")
@click.option("--wait", is_flag=True, help="Watch the session live until it ends.")
@click.option(
    "--concurrency", type=click.IntRange(min=1), default=None, help="Steps running at once."
)
@click.option(
    "--max-replans", type=click.IntRange(min=0), default=None, help="Re-plan budget of the session."
)
@click.option(
    "--compensate-on-failure/--no-compensate-on-failure",
    default=True,
    show_default=True,
    help="Undo completed writes when the session ends failed (critical failure, deadline).",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1),
    default=None,
    help="LLM token budget of the session (every role).",
)
@click.option(
    "--max-cost-usd",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="LLM cost budget of the session, US dollars (priced by PLANLOOP_LLM_PRICES).",
)
@click.option(
    "--max-rounds",
    type=click.IntRange(min=1),
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
    as_json: bool,
) -> None:
    """Submit PLAN_FILE (YAML or JSON), or a --goal for the LLM planner, as a new session."""
    from core.input_limits import InputLimits
    from planner.plan import load_plan
    from producer.client import Producer

    if (plan_file is None) == (goal is None):
        _fail("give either a plan file (YAML or JSON) or --goal TEXT")
        return
    options = SessionOptions(
        concurrency=concurrency,
        max_replans=max_replans,
        compensate_on_failure=compensate_on_failure,
        max_tokens=max_tokens,
        max_cost_usd=max_cost_usd,
        max_rounds=max_rounds,
        mode=mode,
    )
    try:
        if answer_schema_file is not None:
            options = options.model_copy(
                update={"answer_schema": read_answer_schema(answer_schema_file)}
            )
        settings = _settings()
        producer = Producer.from_settings(settings)
        if goal is not None:
            tools = [t.strip() for t in toolsets.split(",") if t.strip()]
            sid = producer.submit_goal(
                goal, tools=tools, constraints=list(constraints), options=options
            )
        else:
            assert plan_file is not None
            plan = load_plan(plan_file, limits=InputLimits.from_settings(settings))
            sid = producer.submit(plan, options)
    except PlanloopError as exc:
        _fail(f"{exc}\n(nothing was submitted)")
        return
    click.echo(json.dumps({"session_id": sid}) if as_json else sid)
    if wait:
        from producer.watch import watch_session

        status = watch_session(producer, sid)
        sys.exit(0 if status == "completed" else 1)


def read_answer_schema(path: Path) -> dict[str, Any]:
    """The JSON schema in ``path``, checked before anything is submitted.

    Raises:
        ConfigError: the file is not JSON, not an object, or not a valid JSON schema.
    """
    from planner.summarizer import check_answer_schema  # jsonschema: only when asked for

    try:
        schema = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the answer schema {path}: {exc}") from None
    if not isinstance(schema, dict):
        raise ConfigError(f"the answer schema {path} must be a JSON object")
    check_answer_schema(schema)
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
def approve(session_id: str, action: str | None, step: str | None, note: str) -> None:
    """Answer a session waiting for a person: approve a step, or choose an action."""
    from producer.client import Producer

    if (action is None) == (step is None):
        _fail("give either --step STEP_ID or --action ACTION")
        return
    try:
        Producer.from_settings(_settings()).approve(session_id, action, note, step=step)
    except PlanloopError as exc:
        _fail(str(exc))
    click.echo(f"approval ({step or action}) sent to {session_id}")


@cli.command()
@click.argument("session_id", required=False)
@click.option(
    "--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Sessions to list."
)
def status(session_id: str | None, limit: int) -> None:
    """Show one session (or the newest ones)."""
    from producer.client import Producer
    from producer.views import print_status

    producer = Producer.from_settings(_settings())
    try:
        print_status(producer, session_id, limit)
    except PlanloopError as exc:
        _fail(str(exc))


@cli.command()
@click.argument("session_id")
def watch(session_id: str) -> None:
    """Watch a session live until it ends."""
    from producer.client import Producer
    from producer.watch import watch_session

    producer = Producer.from_settings(_settings())
    try:
        result = watch_session(producer, session_id)
    except PlanloopError as exc:
        _fail(str(exc))
        return
    sys.exit(0 if result == "completed" else 1)


@cli.command()
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def show(session_id: str, as_json: bool) -> None:
    """Show a session's event timeline, report and DAG (Mermaid)."""
    from producer.client import Producer
    from producer.views import print_show

    producer = Producer.from_settings(_settings())
    try:
        print_show(producer, session_id, as_json=as_json)
    except PlanloopError as exc:
        _fail(str(exc))


@cli.command()
@click.argument("session_id")
@click.option("--reason", default="cancelled by user", help="Why, for the report.")
def cancel(session_id: str, reason: str) -> None:
    """Cancel a session: running steps stop, nothing new starts."""
    from producer.client import Producer

    try:
        before = Producer.from_settings(_settings()).cancel(session_id, reason)
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
def signal(session_id: str, text: str, plain: bool) -> None:
    """Tell a running session something new, e.g. "budget is 5k"."""
    from producer.client import Producer

    try:
        Producer.from_settings(_settings()).signal(session_id, text, constraint=not plain)
    except PlanloopError as exc:
        _fail(str(exc))
    click.echo(f"signal sent to {session_id}")


@cli.command()
@click.option(
    "--concurrency", type=click.IntRange(min=1), default=None, help="Threads (or processes)."
)
@click.option(
    "--pool",
    type=click.Choice(["threads", "prefork", "solo"]),
    default=None,
    help="Celery pool (default: PLANLOOP_WORKER_POOL); solo runs one task at a time.",
)
@click.option("--loglevel", default="INFO", show_default=True)
@click.option("--name", default=None, help="Worker node name (default: unique per process).")
def worker(concurrency: int | None, pool: str | None, loglevel: str, name: str | None) -> None:
    """Start a Celery worker for step tasks."""
    settings = _settings()
    from workers.app import create_app, run_worker

    chosen_pool = pool or settings.worker_pool
    # solo runs one task at a time in the consumer's own thread, whatever -c says.
    slots = 1 if chosen_pool == "solo" else concurrency or settings.worker_concurrency
    # Celery reads "-P prefork" as "no -P given" and falls back to the configured pool;
    # configuring the chosen pool makes every choice mean what it says.
    settings = settings.model_copy(update={"worker_pool": chosen_pool, "worker_concurrency": slots})
    app = create_app(settings)
    argv = [
        "worker",
        "-Q",
        settings.queue,
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
    sys.exit(run_worker(app, argv))


@cli.command()
@click.option("--loglevel", default="INFO", show_default=True)
def supervisor(loglevel: str) -> None:
    """Start a supervisor (run as many as you like)."""
    from supervisor.service import serve

    _setup_logging(loglevel)
    try:
        serve(_settings())
    except ConfigError as exc:  # e.g. the record's schema is behind: say what to run
        _fail(str(exc), code=1)


@cli.command()
@click.option("--demo", is_flag=True, help="Submit the e-commerce example, watch it, then stop.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True)
@click.option(
    "--plan",
    "plan_file",
    type=click.Path(path_type=Path),
    default=None,
    help="Plan the demo submits (default: examples/ecommerce.yaml).",
)
def up(demo: bool, workers: int, concurrency: int, plan_file: Path | None) -> None:
    """Start Redis (embedded if none answers), workers and a supervisor; --demo runs a plan."""
    from core.errors import PlanError
    from producer.up import UpOptions, run_up

    options = UpOptions(demo=demo, workers=workers, concurrency=concurrency, plan_file=plan_file)
    try:
        code = run_up(_settings(), options)
    except PlanError as exc:
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
    """Start Flower on our broker, behind basic auth (PLANLOOP_FLOWER_BASIC_AUTH)."""
    from producer.up import run_flower

    run_flower(_settings(), port=port, address=address)


@cli.group()
def db() -> None:
    """The SQL record's schema (Alembic migrations shipped with Planloop)."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True, help="Target revision.")
def db_upgrade(revision: str) -> None:
    """Upgrade the record at PLANLOOP_DATABASE_URL (run once before supervisors start)."""
    from core.migrate import upgrade
    from core.record import make_engine
    from core.redis_faults import redact_url

    settings = _settings()
    engine = make_engine(settings.database_url)
    try:
        reached = upgrade(engine, revision)
    finally:
        engine.dispose()
    click.echo(f"record at {redact_url(settings.database_url)} is at revision {reached}")


@db.command("current")
def db_current() -> None:
    """Print the record's revision and the newest one; exit 1 when it is behind."""
    from core.migrate import current_revision, head_revision
    from core.record import make_engine

    engine = make_engine(_settings().database_url)
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
    from producer.health import console_health, flower_health, supervisor_health, worker_health

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


def main(argv: list[str] | None = None) -> Any:
    """Entry point of the ``planloop`` console script."""
    return cli.main(args=argv, prog_name="planloop")


if __name__ == "__main__":
    main()
