"""Commands that start Planloop's processes: ``worker``, ``supervisor``, ``up``, ``flower``,
``console``, and ``health`` (their healthcheck)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from planloop.config.settings import Settings
from planloop.core.errors import ConfigError, PlanloopError, ToolModuleError
from planloop.producer.cli.options import (
    MAX_PROCESSES,
    MAX_TEXT_CHARS,
    MAX_WORKER_SLOTS,
    bounded_int,
    log_level,
    name,
    readable_file,
)
from planloop.producer.cli.root import command_settings, fail, start_logging


@click.command()
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
@click.option("--loglevel", type=log_level(), default="INFO", show_default=True)
@click.option(
    "--name", type=name(), default=None, help="Worker node name (default: unique per process)."
)
@click.option(
    "--queues",
    type=name(max_chars=MAX_TEXT_CHARS),
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
    settings = command_settings(record=True)
    import_tool_modules(settings)
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


def import_tool_modules(settings: Settings) -> None:
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


def _worker_queues(settings: Settings) -> list[str]:
    """The queues ``planloop worker`` consumes: the pool queue of the tools it serves, and
    ``--queues`` (core/routing.py)."""
    from planloop.core.tools import load_tools
    from planloop.workers.catalogue import worker_queues

    return worker_queues(settings, load_tools(settings.tool_modules))


@click.command()
@click.option("--loglevel", type=log_level(), default="INFO", show_default=True)
def supervisor(loglevel: str) -> None:
    """Start a supervisor (run as many as you like)."""
    from planloop.supervisor.process.serve import serve

    settings = command_settings(record=True)
    start_logging(loglevel, settings)
    try:
        serve(settings)
    except ToolModuleError:
        raise  # a bad setting: one line, exit 2 (PlanloopGroup)
    except ConfigError as exc:  # e.g. the record's schema is behind: say what to run
        fail(str(exc), code=1)


@click.command()
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
    type=readable_file(),
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
    settings = command_settings(record=True)  # a bad setting: exit 2 (PlanloopGroup), not 1
    try:
        code = run_up(settings, options)
    except NoLiveWorkerError as exc:  # the stack ran, its workers never served the plan
        fail(f"{exc} (the stack was stopped)", code=1)
        return
    except (PlanError, ToolModuleError) as exc:
        fail(f"{exc} (nothing was started)")
        return
    except PlanloopError as exc:
        fail(str(exc), code=1)
        return
    sys.exit(code)


@click.command()
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Port (default: PLANLOOP_FLOWER_PORT).",
)
@click.option(
    "--address", type=name(), default="127.0.0.1", show_default=True, help="Address to bind."
)
def flower(port: int | None, address: str) -> None:
    """Start Flower on our broker, behind basic auth (PLANLOOP_FLOWER_BASIC_AUTH; unset on
    a loopback address: a generated password)."""
    from planloop.producer.up import run_flower

    run_flower(command_settings(), port=port, address=address)


@click.command()
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Port (default: PLANLOOP_CONSOLE_PORT, 8765).",
)
@click.option(
    "--address",
    type=name(),
    default=None,
    help="Address to bind (default: PLANLOOP_CONSOLE_ADDRESS).",
)
@click.option("--loglevel", type=log_level(), default="WARNING", show_default=True)
def console(port: int | None, address: str | None, loglevel: str) -> None:
    """Start the web console (live DAGs, actions) for its users (PLANLOOP_CONSOLE_USERS_FILE;
    none on a loopback address: a generated admin password)."""
    from planloop.console.serve import run_console

    settings = command_settings(record=True)
    start_logging(loglevel, settings)
    run_console(settings, port=port, address=address, loglevel=loglevel)


@click.command()
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

    settings = command_settings()
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
