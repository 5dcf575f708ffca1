"""docker-compose.yml: every service is health-checked, migrations run once before the
supervisors and workers, Flower and the console are reachable through their published ports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

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
    assert console["command"] == ["console", "--host", "0.0.0.0", "--port", "8765"]
    assert any(p.endswith(":5555:5555") for p in flower["ports"])
    assert any(p.endswith(":8765:8765") for p in console["ports"])
