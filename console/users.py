"""The console's users and roles: who may read, who may act, who may administer.

A user is ``name:role:hash`` (the hash is argon2id, from ``planloop users hash``), from
``PLANLOOP_CONSOLE_USERS`` and the file ``PLANLOOP_CONSOLE_USERS_FILE``. With neither, the
console on a loopback address gets one generated ``admin`` (core/credentials.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from planloop.config.settings import Settings
from planloop.core.credentials import (
    CONSOLE_PASSWORD_FILE,
    GENERATED_CONSOLE_USER,
    GeneratedPassword,
    generated_password,
    is_loopback,
    refuse_open_address,
)
from planloop.core.errors import CredentialsError

NAME = re.compile(r"[A-Za-z0-9_.@+-]{1,64}")
HOW_TO_CONFIGURE = (
    "Add users with `planloop users add NAME --role operator --file users.txt` and set "
    "PLANLOOP_CONSOLE_USERS_FILE=users.txt (or PLANLOOP_CONSOLE_USERS to its lines)"
)


class Role(StrEnum):
    """What a console user may do; each role may do everything the ones before it may."""

    VIEWER = "viewer"  # read pages, sessions and live streams
    OPERATOR = "operator"  # approve, reject, signal, retry, skip, cancel
    ADMIN = "admin"  # lessons, forks, settings

    def allows(self, needed: Role) -> bool:
        return _RANK[self] >= _RANK[needed]


_RANK = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}


@dataclass(frozen=True)
class User:
    name: str
    role: Role
    password_hash: str


@dataclass(frozen=True)
class ConsoleLogin:
    """Who may log in to a console, and the generated password when there is one."""

    users: dict[str, User]
    generated: GeneratedPassword | None = None


def hasher() -> PasswordHasher:
    """argon2id with argon2-cffi's current defaults (RFC 9106's low-memory profile)."""
    return PasswordHasher()


def hash_password(password: str) -> str:
    return hasher().hash(password)


def verify(user: User, password: str) -> bool:
    """Whether ``password`` is ``user``'s (argon2 compares in constant time)."""
    try:
        return hasher().verify(user.password_hash, password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


def user_line(user: User) -> str:
    return f"{user.name}:{user.role.value}:{user.password_hash}"


def parse_users(text: str, where: str) -> dict[str, User]:
    """The users of whitespace-separated ``name:role:hash`` entries (``#`` starts a comment
    line in a file).

    Raises:
        CredentialsError: an entry that is not one, naming its position, never its hash.
    """
    users: dict[str, User] = {}
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    for number, entry in enumerate(" ".join(lines).split(), start=1):
        name, _, rest = entry.partition(":")
        role, _, password_hash = rest.partition(":")
        problem = None
        if not NAME.fullmatch(name):
            problem = "its name must be 1-64 letters, digits or _.@+-"
        elif role not in {r.value for r in Role}:
            problem = f"its role must be one of {', '.join(r.value for r in Role)}"
        elif not password_hash.startswith("$argon2"):
            problem = "its hash is not an argon2 hash (make one with `planloop users hash`)"
        elif name in users:
            problem = f"user {name!r} is listed twice"
        if problem:
            raise CredentialsError(f"{where}: entry {number} is not name:role:hash: {problem}")
        users[name] = User(name, Role(role), password_hash)
    return users


def configured_users(settings: Settings) -> dict[str, User]:
    """The users the settings list (none when neither setting is given).

    Raises:
        CredentialsError: an entry that cannot be read, or a users file that cannot be.
    """
    users = parse_users(settings.console_users.get_secret_value(), "PLANLOOP_CONSOLE_USERS")
    if settings.console_users_file:
        path = Path(settings.console_users_file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise CredentialsError(
                f"cannot read the console users file {path}: {exc.strerror or exc}",
                setting="PLANLOOP_CONSOLE_USERS_FILE",
            ) from None
        for name, user in parse_users(text, str(path)).items():
            users.setdefault(name, user)  # the setting wins over the file
    return users


def console_login(settings: Settings, address: str) -> ConsoleLogin:
    """The users of a console bound to ``address``: the configured ones; else, on a
    loopback address, one ``admin`` with a generated password kept in ``secrets_dir``.

    Raises:
        CredentialsError: no users configured for a non-loopback address, or unreadable ones.
    """
    users = configured_users(settings)
    if users:
        return ConsoleLogin(users)
    if not is_loopback(address):
        raise refuse_open_address(
            "the console", address, HOW_TO_CONFIGURE, "PLANLOOP_CONSOLE_USERS_FILE"
        )
    generated = generated_password(Path(settings.secrets_dir), CONSOLE_PASSWORD_FILE)
    admin = User(GENERATED_CONSOLE_USER, Role.ADMIN, hash_password(generated.password))
    return ConsoleLogin({admin.name: admin}, generated)


def login_notice(login: ConsoleLogin) -> str:
    """What the console says about its login when it starts (the password only the one
    time it is made)."""
    generated = login.generated
    if generated is None:
        roles = ", ".join(f"{u.name} ({u.role.value})" for u in login.users.values())
        return f"users: {roles}"
    if generated.created:
        return (
            f"no console users configured: log in as {GENERATED_CONSOLE_USER!r} with "
            f"password {generated.password} (shown once; kept in {generated.path}). "
            f"{HOW_TO_CONFIGURE}."
        )
    return (
        f"no console users configured: log in as {GENERATED_CONSOLE_USER!r} with the "
        f"password kept in {generated.path}"
    )
