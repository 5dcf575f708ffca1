"""Errors of settings that cannot work: :class:`ConfigError` and its subclasses (the tree:
core/errors.py)."""

from __future__ import annotations

from planloop.core.error_base import PlanloopError, public


class ConfigError(PlanloopError):
    """Settings that cannot work (together); ``setting`` names the ``PLANLOOP_*`` variable
    or the command-line option at fault, when one is."""

    def __init__(self, message: str, *, setting: str | None = None) -> None:
        self.setting = setting
        super().__init__(message)


class PortInUseError(ConfigError):
    """``address:port``, chosen by ``setting`` (a ``PLANLOOP_*`` variable or an option),
    is taken by another process."""

    def __init__(self, address: str, port: int, *, setting: str) -> None:
        self.address = address
        self.port = port
        super().__init__(
            f"port {port} on {address} is in use (chosen by {setting}): stop what listens "
            f"there, or choose another port with {setting}",
            setting=setting,
        )


class CredentialsError(ConfigError):
    """A console or Flower that cannot get a login it may serve with: none configured for
    a non-loopback address, or a console users entry that cannot be read. The message says
    which setting to give and never echoes a password or a hash."""


class LibraryVersionError(ConfigError):
    """``library`` is installed at ``version``; Planloop's hooks into it were checked on
    ``checked`` (a minor version: core/seams.py)."""

    def __init__(self, library: str, version: str, checked: str) -> None:
        self.library, self.version, self.checked = library, version, checked
        major, minor = (int(part) for part in checked.split("."))
        super().__init__(
            f"{library} {version} is installed, but Planloop's hooks into {library} were "
            f"checked on {checked}.x only (core/seams.py): install "
            f"'{library}>={checked},<{major}.{minor + 1}'",
            setting=library,
        )


class ToolModuleError(ConfigError):
    """A module named by ``PLANLOOP_TOOL_MODULES`` that cannot be imported.

    ``missing`` tells the two cases apart: None when the module itself is not found (not
    installed, its folder not on the path), else the name the module's own import failed on
    (a dependency of the module that is not installed); ``reason`` is that failure in a line.
    """

    def __init__(self, module: str, *, missing: str | None = None, reason: str = "") -> None:
        self.module, self.missing, self.reason = module, missing, reason
        where = f"tool module {module!r} (PLANLOOP_TOOL_MODULES)"
        if missing is None and not reason:
            message = (
                f"{where} is not importable here: install it into this environment, or put "
                "the folder that holds it on PYTHONPATH (`planloop worker` also imports from "
                "the directory it is started in)"
            )
        elif missing is not None:
            message = (
                f"{where} was found, but its own import of {missing!r} failed: install "
                f"{missing!r} into this environment (or fix that import in {module!r})"
            )
        else:
            message = f"{where} was found, but importing it failed: {reason}"
        super().__init__(message, setting="PLANLOOP_TOOL_MODULES")


public(ConfigError, PortInUseError, CredentialsError, LibraryVersionError, ToolModuleError)
