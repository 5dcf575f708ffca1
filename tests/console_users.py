"""Console users of the test runs: one per role, passwords made per run, hashed cheaply.

Hashes verify by the parameters they carry, so tests hash with argon2's lowest cost and
the console checks them as fast; what ships hashes with argon2-cffi's defaults.
"""

from __future__ import annotations

import base64
import secrets

from argon2 import PasswordHasher

ROLES = {"vera": "viewer", "otto": "operator", "ada": "admin"}
PASSWORDS = {name: secrets.token_urlsafe(18) for name in ROLES}
FLOWER_LOGIN = f"flower-test:{secrets.token_urlsafe(18)}"
_CHEAP = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)


def cheap_hash(password: str) -> str:
    return _CHEAP.hash(password)


def users_setting() -> str:
    """``PLANLOOP_CONSOLE_USERS`` for the three test users."""
    return " ".join(f"{n}:{r}:{cheap_hash(PASSWORDS[n])}" for n, r in ROLES.items())


def login(name: str) -> str:
    return f"{name}:{PASSWORDS[name]}"


def auth_header(credentials: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(credentials.encode()).decode()}
