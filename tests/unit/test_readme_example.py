"""The README's producer script is the one the test suite runs (examples/producer_script.py)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_shows_the_producer_script_the_suite_runs() -> None:
    script = (ROOT / "examples" / "producer_script.py").read_text(encoding="utf-8")
    code = script[script.index("import planloop") :]  # the script without its docstring
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"```python\n{code}```" in readme, (
        "README.md's Python API example differs from examples/producer_script.py: copy it over"
    )
