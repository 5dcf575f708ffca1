"""Running the console: uvicorn on the configured address, the app from :mod:`console.app`."""

from __future__ import annotations

import uvicorn

from planloop.config.settings import Settings
from planloop.console.app import create_app
from planloop.core.redis_faults import redact_url


def console_url(settings: Settings, port: int | None = None, address: str | None = None) -> str:
    return f"http://{address or settings.console_address}:{port or settings.console_port}/"


def run_console(
    settings: Settings,
    *,
    port: int | None = None,
    address: str | None = None,
    loglevel: str = "WARNING",
) -> None:
    """Serve the console until interrupted (basic auth: ``flower_basic_auth``)."""
    user = settings.flower_basic_auth.get_secret_value().partition(":")[0]
    print(
        f"console on {console_url(settings, port, address)} (user {user!r}), "
        f"Redis {redact_url(settings.redis_url)}",
        flush=True,
    )
    uvicorn.run(
        create_app(settings),
        host=address or settings.console_address,
        port=port or settings.console_port,
        log_level=loglevel.lower(),
        # the live streams hold connections open; Ctrl-C should not wait on them for long
        timeout_graceful_shutdown=2,
    )
