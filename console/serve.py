"""Running the console: uvicorn on the configured address, the app from :mod:`console.app`."""

from __future__ import annotations

import uvicorn

from planloop.config.settings import Settings
from planloop.console.app import create_app
from planloop.console.users import console_login, login_notice
from planloop.core.ports import bind_port
from planloop.core.redis_faults import redact_url
from planloop.producer.exits import EXIT_SESSION_FAILED


def console_url(settings: Settings, port: int | None = None, address: str | None = None) -> str:
    return f"http://{address or settings.console_address}:{port or settings.console_port}/"


def run_console(
    settings: Settings,
    *,
    port: int | None = None,
    address: str | None = None,
    loglevel: str = "WARNING",
) -> None:
    """Serve the console until interrupted, for its users (console/users.py); ``port``
    and ``address`` are the options' values (``None``: the settings').

    Raises:
        CredentialsError: no users configured for a non-loopback address (checked before
            anything is bound), or users that cannot be read.
        PortInUseError: the port is taken (bound here, before anything is printed; uvicorn
            serves on this very socket, so nothing can take it in between).
        ConfigError: the address cannot be bound here.
    """
    bound = address or settings.console_address
    login = console_login(settings, bound)
    sock = bind_port(
        address or settings.console_address,
        port or settings.console_port,
        port_setting="--port" if port else "PLANLOOP_CONSOLE_PORT",
        address_setting="--address" if address else "PLANLOOP_CONSOLE_ADDRESS",
    )
    print(
        f"console on {console_url(settings, port, address)}, "
        f"Redis {redact_url(settings.redis_url)}; {login_notice(login)}",
        flush=True,
    )
    if address:  # the Host allow-list includes the address actually bound
        settings = settings.model_copy(update={"console_address": address})
    config = uvicorn.Config(
        create_app(settings, login=login),
        host=address or settings.console_address,
        port=port or settings.console_port,
        log_level=loglevel.lower(),
        # the live streams hold connections open; Ctrl-C should not wait on them for long
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    with sock:
        server.run(sockets=[sock])
    if not server.started:  # uvicorn logged why (the app's startup failed)
        raise SystemExit(EXIT_SESSION_FAILED)
