"""Logins nobody can guess: what a console or Flower started without credentials uses.

There is no default password. A server on a loopback address that was given none generates
one, tells the person who started it once, and keeps it in a 0600 file under
``secrets_dir`` so a restart reuses it; a server on any other address refuses to start,
since anyone who can reach it could otherwise try the well-known pair.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from planloop.core.errors import CredentialsError
from planloop.core.secret_shapes import remember_secrets

PASSWORD_BYTES = 24  # 192 bits: token_urlsafe makes 32 characters of them
CONSOLE_PASSWORD_FILE = "console-admin-password"  # noqa: S105 (a file name)
FLOWER_PASSWORD_FILE = "flower-password"  # noqa: S105 (a file name)
GENERATED_CONSOLE_USER = "admin"
GENERATED_FLOWER_USER = "flower"


@dataclass(frozen=True)
class GeneratedPassword:
    """A password made for a server started without one, and where it is kept."""

    password: str
    path: Path
    created: bool  # made by this start (shown once) or read back from ``path``


def is_loopback(address: str) -> bool:
    """Whether ``address`` is reachable from this host only (127.0.0.0/8, ::1, localhost)."""
    if address.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost: it may resolve to anything


def generated_password(directory: Path, name: str) -> GeneratedPassword:
    """The password kept in ``directory/name``, made (0600, ``directory`` 0700) when absent.

    Raises:
        CredentialsError: the file cannot be read or written here.
    """
    made = _generated_password(directory / name)
    remember_secrets([made.password])  # masked in this process's logs like a configured one
    return made


def _generated_password(path: Path) -> GeneratedPassword:
    directory = path.parent
    try:
        kept = _read_kept(path)
        if kept:
            return GeneratedPassword(kept, path, created=False)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        password = secrets.token_urlsafe(PASSWORD_BYTES)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first: use theirs
            return GeneratedPassword(_read_kept(path), path, created=False)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(password + "\n")
    except OSError as exc:
        raise CredentialsError(
            f"cannot keep a generated password in {path}: {exc.strerror or exc}; make "
            "PLANLOOP_SECRETS_DIR a writable directory, or configure credentials",
            setting="PLANLOOP_SECRETS_DIR",
        ) from None
    return GeneratedPassword(password, path, created=True)


def _read_kept(path: Path) -> str:
    """The password kept at ``path`` ("" when there is none), its mode narrowed to 0600."""
    if not path.exists():
        return ""
    if stat.S_IMODE(path.stat().st_mode) & 0o077:
        path.chmod(0o600)  # a copy others can read would be a password others know
    return path.read_text(encoding="utf-8").strip()


def refuse_open_address(server: str, address: str, how: str, setting: str) -> CredentialsError:
    """The error for ``server`` asked to listen on a non-loopback ``address`` with no
    credentials configured; ``how`` says how to configure them."""
    return CredentialsError(
        f"{server} will not listen on {address} without credentials: anyone who can reach "
        f"it could use it. {how} (or bind a loopback address, where a password is generated)",
        setting=setting,
    )


@dataclass(frozen=True)
class FlowerLogin:
    """Flower's ``user:password`` pairs (``FLOWER_BASIC_AUTH``) and what to say about them."""

    basic_auth: str
    notice: str


def flower_login(configured: str, secrets_dir: Path, address: str) -> FlowerLogin:
    """Flower's login: ``configured`` (``PLANLOOP_FLOWER_BASIC_AUTH``); else, on a loopback
    ``address``, ``flower`` with a password generated once and kept in ``secrets_dir``.

    Raises:
        CredentialsError: nothing configured for a non-loopback address, or pairs that are
            not ``user:password``.
    """
    if configured:
        pairs = [p for p in configured.split(",") if p]
        if not pairs or any(not p.partition(":")[0] or not p.partition(":")[2] for p in pairs):
            raise CredentialsError(
                "PLANLOOP_FLOWER_BASIC_AUTH must be user:password pairs, comma-separated",
                setting="PLANLOOP_FLOWER_BASIC_AUTH",
            )
        users = ", ".join(repr(p.partition(":")[0]) for p in pairs)
        return FlowerLogin(configured, f"user {users}")
    if not is_loopback(address):
        raise refuse_open_address(
            "Flower",
            address,
            "Set PLANLOOP_FLOWER_BASIC_AUTH=user:a-long-password",
            "PLANLOOP_FLOWER_BASIC_AUTH",
        )
    generated = generated_password(secrets_dir, FLOWER_PASSWORD_FILE)
    auth = f"{GENERATED_FLOWER_USER}:{generated.password}"
    if generated.created:
        notice = (
            f"no PLANLOOP_FLOWER_BASIC_AUTH: log in as {GENERATED_FLOWER_USER!r} with password "
            f"{generated.password} (shown once; kept in {generated.path}); set "
            "PLANLOOP_FLOWER_BASIC_AUTH=user:password to choose your own"
        )
    else:
        notice = f"user {GENERATED_FLOWER_USER!r}, password kept in {generated.path}"
    return FlowerLogin(auth, notice)


def kept_flower_login(configured: str, secrets_dir: Path) -> str:
    """The login a local health check uses: the configured one, else the kept generated
    password ("" when there is neither); never makes one."""
    if configured:
        return configured.split(",")[0]
    path = secrets_dir / FLOWER_PASSWORD_FILE
    try:
        kept = path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""
    return f"{GENERATED_FLOWER_USER}:{kept}" if kept else ""
