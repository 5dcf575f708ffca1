"""Usage errors of the ``planloop`` command line in one line, exit 2.

Click prints a usage error as three lines (the usage, a hint, the error); a script reading
stderr, and the rule that bad input is one line, want just the error. Everything else click
handles as it always does.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from planloop.producer.exits import EXIT_INVALID


def usage_line(exc: click.UsageError) -> str:
    """The error and where to read more, in one line."""
    where = exc.ctx.command_path if exc.ctx is not None else "planloop"
    message = " ".join(exc.format_message().split())
    return f"error: {message} (see `{where} --help`)"


def run_main(main: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run click's ``main`` with its errors handled here: a usage error as one line and
    exit 2; other click exceptions, ``Exit`` and ``Abort`` as click would."""
    kwargs.pop("standalone_mode", None)
    try:
        code = main(*args, standalone_mode=False, **kwargs)
    except click.UsageError as exc:
        click.echo(usage_line(exc), err=True)
        sys.exit(EXIT_INVALID)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("Aborted!", err=True)
        sys.exit(1)
    # without standalone mode click returns the code of ctx.exit() (--help, --version)
    sys.exit(code if isinstance(code, int) else 0)
