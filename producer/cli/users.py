"""``planloop users``: make password hashes and users files for the console (console/users.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from planloop.console.users import NAME, Role, User, hash_password, parse_users, user_line
from planloop.core.errors import CredentialsError
from planloop.producer.cli import options
from planloop.producer.exits import EXIT_INVALID

MIN_PASSWORD = 12


def _password(from_stdin: bool) -> str:
    """The new password: one line of stdin, or asked twice without echo."""
    if from_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt("password", hide_input=True, confirmation_prompt=True)
    if len(password) < MIN_PASSWORD:
        click.echo(f"error: a password needs at least {MIN_PASSWORD} characters", err=True)
        sys.exit(EXIT_INVALID)
    return password


def write_users(path: Path, user: User) -> bool:
    """Put ``user`` into the users file at ``path`` (made 0600), replacing an entry of the
    same name; whether one was replaced.

    Raises:
        CredentialsError: the file holds an entry that cannot be read.
    """
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    users = parse_users(text, str(path))
    replaced = user.name in users
    users[user.name] = user
    body = "# planloop console users: name:role:argon2 hash (planloop users add)\n"
    body += "".join(user_line(u) + "\n" for u in users.values())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(body)
    path.chmod(0o600)  # an older file may have been wider
    return replaced


@click.group()
def users() -> None:
    """Console users: password hashes and users files (PLANLOOP_CONSOLE_USERS_FILE)."""


@users.command("hash")
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin.")
def users_hash(password_stdin: bool) -> None:
    """Print the argon2 hash of a password (for a name:role:hash entry)."""
    click.echo(hash_password(_password(password_stdin)))


@users.command("add")
@click.argument("name", type=options.name())
@click.option(
    "--role",
    type=click.Choice([r.value for r in Role]),
    default=Role.VIEWER.value,
    show_default=True,
    help="viewer reads; operator also approves, rejects, signals, retries, skips, cancels; "
    "admin also manages lessons, forks and settings.",
)
@click.option(
    "--file",
    "path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Users file to add to (made 0600); without it, the entry is printed.",
)
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin.")
def users_add(name: str, role: str, path: Path | None, password_stdin: bool) -> None:
    """Add (or replace) console user NAME with a password asked for."""
    if not NAME.fullmatch(name):
        click.echo("error: a user name is 1-64 letters, digits or _.@+-", err=True)
        sys.exit(EXIT_INVALID)
    user = User(name, Role(role), hash_password(_password(password_stdin)))
    if path is None:
        click.echo(user_line(user))
        return
    try:
        replaced = write_users(path, user)
    except (CredentialsError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    verb = "replaced in" if replaced else "added to"
    click.echo(f"user {name!r} ({role}) {verb} {path}; set PLANLOOP_CONSOLE_USERS_FILE={path}")
