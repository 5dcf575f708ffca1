"""The tool catalogue's entries and the registry side of the sensitive names (no Redis)."""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr

from planloop.core.catalogue import CatalogueEntry, SensitiveNames, catalogue_entry
from planloop.core.tools import ToolRegistry, ToolSpec


class Params(BaseModel):
    sku: str
    pin: str = Field("", json_schema_extra={"sensitive": True})
    password: SecretStr = SecretStr("")


SPEC = ToolSpec("t.pay", "Pays.", Params, None, lambda p, c: {}, side_effect="write")


def test_an_entry_carries_the_contract_and_the_sensitive_fields() -> None:
    entry = catalogue_entry(SPEC, "host:1", now=100.0)
    assert entry.sensitive == ["password", "pin"]
    assert entry.side_effect == "write"
    assert "sku" in entry.params_schema["properties"]
    assert CatalogueEntry.model_validate_json(entry.model_dump_json()) == entry


def test_an_entry_is_served_while_it_is_re_published() -> None:
    entry = catalogue_entry(SPEC, "host:1", now=100.0)
    assert entry.served(refresh_s=30, now=150.0)
    assert not entry.served(refresh_s=30, now=161.0)


def test_without_a_catalogue_the_registry_decides() -> None:
    names = SensitiveNames(ToolRegistry([SPEC]))
    assert names.of_tool("t.pay") == {"pin", "password"}
    assert names.of_tool("t.unknown") is None
    assert names.of_tools(["t.pay", "t.unknown"]) == {"pin", "password"}
