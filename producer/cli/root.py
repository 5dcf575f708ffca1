"""The ``planloop`` group and what its commands share: settings read once, one-line errors
with their exit codes, ``--as``."""

from __future__ import annotations

import sys
from typing import Any

import click

from planloop.config.settings import Settings
from planloop.core.errors import ConfigError
from planloop.producer.cli.options import name
from planloop.producer.exits import EXIT_INVALID, EXIT_SESSION_FAILED, EXIT_UNREACHABLE, unreachable


def command_settings(*, record: bool = False) -> Settings:
    """This command's settings, read and checked once (core/settings_check.py); with
    ``record`` (a command that opens the SQL record) the database URL and driver too.

    Raises:
        ConfigError: a bad value, named; :class:`PlanloopGroup` makes it one line, exit 2.
    """
    from planloop.core.settings_check import check_database_url, load_settings

    root = click.get_current_context().find_root()
    if not isinstance(root.obj, Settings):
        root.obj = load_settings()
    if record:
        check_database_url(root.obj.database_url)
    return root.obj


def _service_urls() -> tuple[str, str]:
    """The Redis and database URLs this command used (the defaults if settings are broken)."""
    try:
        settings = Settings()
    except ValueError:
        settings = Settings.model_construct()
    return settings.redis_url, settings.database_url


class PlanloopGroup(click.Group):
    """The ``planloop`` group: a bad setting or option (:class:`ConfigError`: a URL that is
    not one, a driver not installed, a port in use, a tool module that cannot be imported,
    ...) ends any command with one line naming it and exit code 2; an unreachable Redis or
    database with one line naming the URL and what to do, and exit code 3
    (producer/exits.py). Never a traceback."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        from planloop.producer.cli.usage_errors import run_main  # usage errors in one line

        return run_main(super().main, *args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            fail(" ".join(str(exc).split()))
        except Exception as exc:
            seen: BaseException | None = exc
            while seen is not None:  # the fault may be the cause of a wrapping error
                found = unreachable(seen, *_service_urls())
                if found is not None:
                    fail(found.message(), code=EXIT_UNREACHABLE)
                seen = seen.__cause__ or seen.__context__
            raise


def exit_for(status: str) -> None:
    """Exit 0 for a session that ended completed, 1 for any other end."""
    sys.exit(0 if status == "completed" else EXIT_SESSION_FAILED)


def start_logging(level: str, settings: Settings) -> None:
    from planloop.core.logs import setup_logging

    setup_logging(level, settings.log_format)  # masked, human or JSON lines (core/logs.py)


def fail(message: str, code: int = EXIT_INVALID) -> None:
    """One line on stderr (a message's own line breaks joined, escapes made harmless), then
    exit ``code``."""
    from planloop.producer.terminal import terminal_safe  # a name or a tool's text in it

    click.echo(f"error: {terminal_safe(' '.join(message.split()))}", err=True)
    sys.exit(code)


# Who asks, recorded with the command's event (default: the OS user running the CLI).
AS_OPTION = click.option(
    "--as",
    "actor",
    type=name(),
    default=None,
    metavar="NAME",
    help="Who asks, for the record (default: you).",
)


@click.group(cls=PlanloopGroup)
@click.version_option(package_name="planloop")
def cli() -> None:
    """Planloop: plan-and-execute sessions on a Celery worker pool.

    \b
    Exit codes: 0 success; 1 the session ended failed, aborted or cancelled;
    2 bad input (plan, tool, options, settings); 3 Redis or the database unreachable.
    """
