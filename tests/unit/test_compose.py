"""docker-compose.yml: every service is health-checked, migrations run once before the
supervisors and workers, Flower and the console are reachable through their published ports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from planloop.producer import cli

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


def services() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text())["services"])


def test_every_long_running_service_has_a_healthcheck() -> None:
    for name, service in services().items():
        if name == "migrate":
            continue
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"


def test_migrations_run_once_before_supervisors_and_workers() -> None:
    found = services()
    assert found["migrate"]["command"] == ["db", "upgrade"]
    assert found["migrate"]["restart"] == "no"
    for name in ("supervisor", "worker", "console"):
        needs = found[name]["depends_on"]
        assert needs["migrate"] == {"condition": "service_completed_successfully"}, name
    # supervisors only check the schema: the one-shot service upgrades it
    assert found["supervisor"]["environment"]["PLANLOOP_DB_AUTO_MIGRATE"] == "false"


def test_flower_and_the_console_listen_on_every_interface_of_their_containers() -> None:
    found = services()
    flower, console = found["flower"], found["console"]
    assert flower["command"] == ["flower", "--address", "0.0.0.0"]
    assert console["command"] == ["console", "--address", "0.0.0.0", "--port", "8765"]
    assert any(p.endswith(":5555:5555") for p in flower["ports"])
    assert any(p.endswith(":8765:8765") for p in console["ports"])


def planloop_commands() -> list[tuple[str, list[str]]]:
    """Every planloop command line of the compose file: a Planloop service's ``command:`` (the
    image's entrypoint is ``planloop``) and each ``planloop ...`` health check."""
    found: list[tuple[str, list[str]]] = []
    for name, service in services().items():
        if service.get("image", "").startswith("planloop"):
            found.append((name, [str(a) for a in service["command"]]))
        test = service.get("healthcheck", {}).get("test", [])
        if test[:2] == ["CMD", "planloop"]:
            found.append((f"{name} healthcheck", [str(a) for a in test[2:]]))
    return found


def test_every_planloop_command_of_the_compose_file_is_accepted_by_the_cli() -> None:
    """Parsed by the real command line (options, choices, types), not run."""
    commands = planloop_commands()
    assert len(commands) >= 8  # migrate, supervisor, worker, flower, console + 4 health checks
    for where, argv in commands:
        ctx = cli.cli.make_context("planloop", list(argv), resilient_parsing=True)
        command = cli.cli.get_command(ctx, argv[0])
        assert command is not None, f"{where}: no planloop command {argv[0]!r}"
        try:
            command.make_context(argv[0], list(argv[1:]), parent=ctx)
        except click.UsageError as exc:
            pytest.fail(f"{where}: planloop {' '.join(argv)}: {exc.format_message()}")


def test_the_cli_check_can_fail() -> None:
    ctx = cli.cli.make_context("planloop", ["console"], resilient_parsing=True)
    command = cli.cli.get_command(ctx, "console")
    assert command is not None
    with pytest.raises(click.NoSuchOption):
        command.make_context("console", ["--host", "0.0.0.0"], parent=ctx)


def test_flower_and_the_console_get_their_logins_from_the_environment_not_a_fixed_pair() -> None:
    """Each has its own setting, filled from the shell or .env with no default: without one
    they refuse to start (tests/integration/test_no_default_login.py)."""
    found = services()
    flower, console = found["flower"]["environment"], found["console"]["environment"]
    assert flower["PLANLOOP_FLOWER_BASIC_AUTH"] == "${PLANLOOP_FLOWER_BASIC_AUTH:-}"
    assert console["PLANLOOP_CONSOLE_USERS"] == "${PLANLOOP_CONSOLE_USERS:-}"
    assert console["PLANLOOP_CONSOLE_USERS_FILE"] == "${PLANLOOP_CONSOLE_USERS_FILE:-}"
    assert "PLANLOOP_FLOWER_BASIC_AUTH" not in console  # the console never uses Flower's
    text = COMPOSE.read_text()
    assert "planloop}" not in text.replace("POSTGRES_PASSWORD:-planloop}", "")
    assert "admin:" not in text.replace("ada:admin:", "")
