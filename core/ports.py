"""Binding a server's port up front, so a taken one is one line naming the port and the
setting (or option) that chose it, rather than the server's own traceback or exit code."""

from __future__ import annotations

import errno
import socket

from planloop.core.errors import ConfigError, PortInUseError


def bind_port(address: str, port: int, *, port_setting: str, address_setting: str) -> socket.socket:
    """A TCP socket bound to ``address:port`` (not listening yet: the server listens on it).

    ``SO_REUSEADDR`` as servers set it (uvicorn, tornado): a port whose last connections are
    in TIME_WAIT is free, one another socket listens on is not.

    Raises:
        PortInUseError: another process has the port (names ``port_setting``).
        ConfigError: the address cannot be bound here (names ``address_setting``).
    """
    try:
        family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0][0]
    except OSError as exc:
        raise ConfigError(
            f"cannot listen on {address}:{port}: {address!r} is not an address of this host "
            f"({exc.strerror or exc}); set {address_setting}",
            setting=address_setting,
        ) from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUseError(address, port, setting=port_setting) from None
        if exc.errno == errno.EACCES:
            raise ConfigError(
                f"cannot listen on {address}:{port}: permission denied (ports below 1024 "
                f"need privileges); choose another with {port_setting}",
                setting=port_setting,
            ) from None
        raise ConfigError(
            f"cannot listen on {address}:{port} ({exc.strerror or exc}); check {address_setting}",
            setting=address_setting,
        ) from None
    return sock


def check_port_free(address: str, port: int, *, port_setting: str, address_setting: str) -> None:
    """Raise as :func:`bind_port` does when ``address:port`` cannot be listened on; for a
    server that binds itself (Flower, after ``exec``)."""
    bind_port(address, port, port_setting=port_setting, address_setting=address_setting).close()
