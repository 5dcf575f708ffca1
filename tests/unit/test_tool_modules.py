"""A PLANLOOP_TOOL_MODULES module that cannot be imported: not found, or found but failing."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from planloop.core.errors import ConfigError, ToolModuleError
from planloop.core.tools import import_tool_module


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("pl_test_")]:
        del sys.modules[name]


def test_a_module_that_is_not_found_says_how_to_make_it_importable() -> None:
    with pytest.raises(ToolModuleError) as caught:
        import_tool_module("pl_test_nowhere.tools")
    error = caught.value
    assert isinstance(error, ConfigError)
    assert error.module == "pl_test_nowhere.tools"
    assert error.missing is None
    text = str(error)
    assert "'pl_test_nowhere.tools'" in text
    assert "PYTHONPATH" in text
    assert "install" in text
    assert "\n" not in text


def test_a_missing_dependency_inside_the_module_is_named(module_dir: Path) -> None:
    (module_dir / "pl_test_acme.py").write_text("import pl_test_requests_like\n")
    with pytest.raises(ToolModuleError) as caught:
        import_tool_module("pl_test_acme")
    assert caught.value.missing == "pl_test_requests_like"
    text = str(caught.value)
    assert "'pl_test_acme' (PLANLOOP_TOOL_MODULES) was found" in text
    assert "'pl_test_requests_like'" in text
    assert "PYTHONPATH" not in text


def test_a_missing_submodule_of_an_existing_package_is_not_found(module_dir: Path) -> None:
    (module_dir / "pl_test_pkg").mkdir()
    (module_dir / "pl_test_pkg" / "__init__.py").write_text("")
    with pytest.raises(ToolModuleError) as caught:
        import_tool_module("pl_test_pkg.tools")
    assert caught.value.missing is None


def test_an_error_raised_while_the_module_imports_is_told_in_one_line(module_dir: Path) -> None:
    (module_dir / "pl_test_broken.py").write_text("raise ValueError('no API key\\nset one')\n")
    with pytest.raises(ToolModuleError) as caught:
        import_tool_module("pl_test_broken")
    assert "ValueError: no API key set one" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_importable_module_registers_its_tools(module_dir: Path) -> None:
    (module_dir / "pl_test_fine.py").write_text("VALUE = 1\n")
    import_tool_module("pl_test_fine")
    assert sys.modules["pl_test_fine"].VALUE == 1


def test_planloop_worker_imports_tool_modules_from_the_directory_it_starts_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the `planloop` script, unlike `python -m`, does not put the current directory on the path
    from planloop.config.settings import Settings
    from planloop.producer.cli.servers import import_tool_modules

    (tmp_path / "pl_test_here.py").write_text("HERE = True\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    try:
        import_tool_modules(Settings(tool_modules=["pl_test_here"]))
        assert sys.modules["pl_test_here"].HERE is True
        assert sys.path[0] == str(tmp_path)
    finally:
        sys.modules.pop("pl_test_here", None)
