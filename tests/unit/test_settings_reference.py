"""docs/settings.md lists every setting: it is generated from the Settings fields."""

from __future__ import annotations

from pathlib import Path

from planloop.config.reference import markdown
from planloop.config.settings import Settings

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def test_the_settings_reference_is_current() -> None:
    assert REFERENCE.read_text(encoding="utf-8") == markdown(), (
        "docs/settings.md is stale: run `python -m planloop.config.reference > docs/settings.md`"
    )


def test_every_setting_has_a_row_and_a_description() -> None:
    text = markdown()
    for name, field in Settings.model_fields.items():
        assert f"`PLANLOOP_{name.upper()}`" in text
        assert field.description, f"setting {name} has no description"


def test_secret_defaults_are_not_printed() -> None:
    assert "admin:planloop" not in markdown()
