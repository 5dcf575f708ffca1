"""The image builds the package the repository builds (no Docker daemon needed).

The Dockerfile's first stage copies the whole build context and runs ``pip wheel .`` in it;
its second stage installs that wheel. So the image ships what the suite tests exactly when
the build context (the checkout less .dockerignore) builds the same wheel as the checkout.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from tests.integration.packaging import docker_context, wheel_contents
from tests.shipped import ROOT, build_wheel, checkout_files, copy_files, shipped, shipped_wheel

pytestmark = pytest.mark.integration

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def stages() -> list[str]:
    """The Dockerfile's stages, each from its FROM line on."""
    return re.split(r"(?m)^(?=FROM )", DOCKERFILE)[1:]


def test_the_dockerfile_builds_the_wheel_from_the_context_and_installs_only_it() -> None:
    build, final = stages()
    assert re.search(r"(?m)^COPY \. \.$", build), "the wheel stage copies the whole context"
    assert re.search(r"(?m)^RUN pip wheel --no-deps --wheel-dir /dist \.$", build)
    assert re.search(r"(?m)^COPY --from=wheel /dist /dist$", final)
    assert re.search(r"(?m)^RUN pip install \"\$\(ls /dist/planloop-\*\.whl\)\[postgres\]\"", final)
    assert not re.search(r"(?m)^COPY (?!--from)", final), "the final stage copies no source"


@pytest.mark.timeout(600)
def test_the_build_context_builds_the_checkouts_wheel() -> None:
    context = docker_context(checkout_files(), (ROOT / ".dockerignore").read_text())
    assert "pyproject.toml" in context
    assert "core/keys.py" in context
    assert not [n for n in context if n.startswith(("tests/", ".git/", "bench/"))]
    with tempfile.TemporaryDirectory(prefix="planloop-context-") as tmp:
        work = Path(tmp)
        copy_files(ROOT, context, work / "context")
        (work / "dist").mkdir()
        built = wheel_contents(build_wheel(work / "context", work / "dist"))
    tested = wheel_contents(shipped_wheel(shipped().venv))
    assert sorted(built) == sorted(tested)
    assert built == tested, [n for n in built if built[n] != tested[n]]


def test_the_context_reader_follows_dockerignore_rules() -> None:
    names = ["a.py", "pkg/__pycache__/m.pyc", "tests/t.py", "docs/x.md", "keep/tests/y"]
    ignore = "**/__pycache__\ntests\ndocs\n!docs/x.md\n"
    assert docker_context(names, ignore) == ["a.py", "docs/x.md", "keep/tests/y"]
