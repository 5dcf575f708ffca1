"""Unit tests of the bundled toolsets: contracts, determinism, failure injection, write receipts."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from planloop.core.errors import PermanentToolError, TransientToolError
from planloop.core.tools import REGISTRY, MemoryEffectLedger, ToolContext, ToolSpec
from planloop.workers.toolsets import bench, ecommerce, supply_chain

TOOLSET_MODULES = (bench, ecommerce, supply_chain)
BUNDLED = REGISTRY.subset(["ecommerce", "supply_chain", "bench"])

# The smallest valid params of every bundled tool; the names are part of the contract.
MINIMAL_PARAMS: dict[str, dict[str, Any]] = {
    "ecommerce.order_stats": {"product_id": "SKU12345"},
    "ecommerce.inventory": {"product_id": "SKU12345"},
    "ecommerce.reviews": {"product_id": "SKU12345"},
    "ecommerce.competitors": {"product_id": "SKU12345"},
    "supply_chain.erp_stock": {"sku": "SKU12345"},
    "supply_chain.verify_supplier": {"sku": "SKU12345"},
    "supply_chain.alternative_suppliers": {"sku": "SKU12345"},
    "supply_chain.reserve_stock": {"sku": "SKU12345", "qty": 10},
    "supply_chain.cancel_reservation": {"reservation_id": "RSV-1"},
    "supply_chain.create_purchase_order": {"sku": "SKU12345", "qty": 10, "supplier_id": "primary"},
    "supply_chain.cancel_purchase_order": {"po_id": "PO-1"},
    "supply_chain.request_approval": {"subject": "restock SKU12345"},
    "bench.sleep": {},
    "bench.echo": {"value": {"a": [1, 2]}},
    "bench.digest": {"value": {"a": [1, 2]}},
    "bench.write": {"label": "w"},
    "bench.undo_write": {"label": "w"},
}
WRITE_TOOLS = sorted(n for n in MINIMAL_PARAMS if REGISTRY.get(n).side_effect == "write")


def make_ctx(
    attempt: int = 1, key: str = "s1:step", ledger: MemoryEffectLedger | None = None
) -> ToolContext:
    """A context for one attempt of step ``step`` in session ``s1``."""
    return ToolContext(
        session_id="s1",
        step_id="step",
        attempt=attempt,
        idempotency_key=key,
        effects=ledger if ledger is not None else MemoryEffectLedger(),
    )


def run(name: str, params: dict[str, Any], ctx: ToolContext | None = None) -> dict[str, Any]:
    """Run tool ``name`` the way a worker does."""
    return REGISTRY.get(name).run(params, ctx or make_ctx())


def with_simulation(name: str, **simulation: Any) -> dict[str, Any]:
    return {**MINIMAL_PARAMS[name], "simulate": simulation}


def test_bundled_tool_names_are_the_contract() -> None:
    assert all(
        module.__name__.startswith("planloop.workers.toolsets.") for module in TOOLSET_MODULES
    )
    assert set(BUNDLED.names()) == set(MINIMAL_PARAMS)


@pytest.mark.parametrize("name", sorted(MINIMAL_PARAMS))
def test_every_tool_is_deterministic(name: str) -> None:
    first = run(name, MINIMAL_PARAMS[name])
    second = run(name, MINIMAL_PARAMS[name], make_ctx())
    assert first == second
    assert json.loads(json.dumps(first)) == first


@pytest.mark.parametrize("name", sorted(MINIMAL_PARAMS))
def test_unknown_params_are_rejected(name: str) -> None:
    with pytest.raises(PermanentToolError, match="params do not fit"):
        run(name, {**MINIMAL_PARAMS[name], "colour": "red"})


@pytest.mark.parametrize("name", sorted(MINIMAL_PARAMS))
def test_fail_attempts_fails_only_that_attempt(name: str) -> None:
    params = with_simulation(name, fail_attempts=[2])
    assert run(name, params, make_ctx(attempt=1))
    with pytest.raises(TransientToolError, match="attempt 2"):
        run(name, params, make_ctx(attempt=2))
    assert run(name, params, make_ctx(attempt=3))


@pytest.mark.parametrize("name", sorted(MINIMAL_PARAMS))
def test_permanent_injected_failure_is_permanent(name: str) -> None:
    with pytest.raises(PermanentToolError, match="injected failure"):
        run(name, with_simulation(name, fail_attempts=[1], permanent=True))


def outcomes(seed: int, attempts: int = 40) -> list[bool]:
    """Which attempts of ``bench.echo`` succeed under a 50% injected failure rate."""
    params = with_simulation("bench.echo", fail_probability=0.5, seed=seed)
    results = []
    for attempt in range(1, attempts + 1):
        try:
            run("bench.echo", params, make_ctx(attempt=attempt))
        except TransientToolError:
            results.append(False)
        else:
            results.append(True)
    return results


def test_fail_probability_is_deterministic_under_a_seed() -> None:
    first = outcomes(seed=7)
    assert first == outcomes(seed=7)
    assert any(first)  # some attempts pass ...
    assert not all(first)  # ... and some fail
    assert first != outcomes(seed=8)


@pytest.mark.parametrize("name", WRITE_TOOLS)
def test_write_tools_act_once_per_idempotency_key(name: str) -> None:
    ledger = MemoryEffectLedger()
    first = run(name, MINIMAL_PARAMS[name], make_ctx(attempt=1, ledger=ledger))
    again = run(name, MINIMAL_PARAMS[name], make_ctx(attempt=2, ledger=ledger))
    assert again == first
    assert list(ledger.counts.values()) == [1]
    other = run(name, MINIMAL_PARAMS[name], make_ctx(key="s1:other", ledger=ledger))
    assert sorted(ledger.counts.values()) == [1, 1]
    if "idempotency_key" in first:
        assert other["idempotency_key"] != first["idempotency_key"]


@pytest.mark.parametrize("name", WRITE_TOOLS)
def test_injected_failure_of_a_write_tool_records_no_effect(name: str) -> None:
    ledger = MemoryEffectLedger()
    with pytest.raises(TransientToolError):
        run(name, with_simulation(name, fail_attempts=[1]), make_ctx(ledger=ledger))
    assert ledger.counts == {}


def test_receipt_ids_derive_from_the_idempotency_key() -> None:
    params = MINIMAL_PARAMS["supply_chain.reserve_stock"]
    a = run("supply_chain.reserve_stock", params, make_ctx(key="s1:a"))
    b = run("supply_chain.reserve_stock", params, make_ctx(key="s1:b"))
    assert a["reservation_id"].startswith("RSV-")
    assert (
        a["reservation_id"]
        == run("supply_chain.reserve_stock", params, make_ctx(key="s1:a"))["reservation_id"]
    )
    assert a["reservation_id"] != b["reservation_id"]
    assert a == {
        "reservation_id": a["reservation_id"],
        "sku": "SKU12345",
        "qty": 10,
        "warehouse": "main",
        "status": "reserved",
    }


def test_repeated_write_with_changed_params_returns_the_first_receipt() -> None:
    ledger = MemoryEffectLedger()
    first = run("supply_chain.reserve_stock", {"sku": "SKU1", "qty": 5}, make_ctx(ledger=ledger))
    again = run("supply_chain.reserve_stock", {"sku": "SKU1", "qty": 9}, make_ctx(ledger=ledger))
    assert again == first
    assert first["qty"] == 5


@pytest.mark.parametrize(
    ("name", "undo"),
    [
        ("supply_chain.reserve_stock", "supply_chain.cancel_reservation"),
        ("supply_chain.create_purchase_order", "supply_chain.cancel_purchase_order"),
        ("bench.write", "bench.undo_write"),
    ],
)
def test_compensation_is_registered_and_keeps_its_own_receipt(name: str, undo: str) -> None:
    spec = REGISTRY.get(name)
    assert spec.compensate == undo
    assert REGISTRY.get(undo).side_effect == "write"
    ledger = MemoryEffectLedger()
    done = run(name, MINIMAL_PARAMS[name], make_ctx(ledger=ledger))
    undone = run(undo, MINIMAL_PARAMS[undo], make_ctx(ledger=ledger))
    assert undone != done
    assert undone.get("cancelled", undone.get("undone")) is True
    assert ledger.counts == {"s1:step": 1, "s1:step:undo": 1}


def test_every_compensate_name_is_a_registered_tool() -> None:
    compensated = [s for s in BUNDLED.specs() if s.compensate]
    assert len(compensated) == 3
    assert all(s.compensate in REGISTRY for s in compensated)


@pytest.mark.parametrize("spec", BUNDLED.specs(), ids=lambda s: s.name)
def test_params_schema_is_json_and_planner_friendly(spec: ToolSpec) -> None:
    schema = json.loads(json.dumps(spec.params_schema()))
    assert schema["additionalProperties"] is False
    assert "simulate" in schema["properties"]
    undocumented = [k for k, v in schema["properties"].items() if not v.get("description")]
    assert undocumented == []
    assert spec.description


def test_inventory_of_the_demo_sku_calls_for_a_restock() -> None:
    inv = run("ecommerce.inventory", {"product_id": "SKU12345"})
    assert inv["available"] == inv["on_hand"] - inv["reserved"]
    target = inv["reorder_point"] + 14 * inv["daily_demand"]
    assert inv["shortfall"] == max(0, target - inv["available"]) > 0
    assert inv["days_of_cover"] == round(inv["available"] / inv["daily_demand"], 1)
    erp = run("supply_chain.erp_stock", {"sku": "SKU12345"})
    assert erp["on_hand"] == inv["on_hand"]
    assert erp["shortfall"] > 0


def test_shortfall_is_never_negative_and_data_varies_by_product() -> None:
    stocks = [run("ecommerce.inventory", {"product_id": f"P{i}"}) for i in range(50)]
    assert all(s["shortfall"] >= 0 for s in stocks)
    assert any(s["shortfall"] == 0 for s in stocks)
    assert len({s["on_hand"] for s in stocks}) > 10


def test_order_stats_follow_the_window() -> None:
    week = run("ecommerce.order_stats", {"product_id": "SKU12345", "days": 7})
    month = run("ecommerce.order_stats", {"product_id": "SKU12345", "days": 30})
    assert week["units_sold"] < month["units_sold"]
    assert month["avg_daily_units"] == round(month["units_sold"] / 30, 2)
    assert 0 < month["orders"] <= month["units_sold"]
    assert month["trend"] in {"up", "flat", "down"}
    with pytest.raises(PermanentToolError):
        run("ecommerce.order_stats", {"product_id": "SKU12345", "days": 0})


def test_reviews_respect_the_limit() -> None:
    out = run("ecommerce.reviews", {"product_id": "SKU12345", "limit": 1})
    wide = run("ecommerce.reviews", {"product_id": "SKU12345", "limit": 10})
    assert len(out["top_complaints"]) == len(out["top_praises"]) == 1
    assert out["top_complaints"] == wide["top_complaints"][:1]
    assert len(wide["top_complaints"]) + len(wide["top_praises"]) > 2
    # The same product always gets the same summary, and its sentiment follows its rating.
    assert out["average_rating"] == wide["average_rating"]
    rating = out["average_rating"]
    assert out["sentiment"] == round(max(-1.0, min(1.0, (rating - 3) / 2)), 2)


def test_competitor_price_position_matches_the_offers() -> None:
    for product_id in ("SKU12345", "SKU1", "ABC-9"):
        out = run("ecommerce.competitors", {"product_id": product_id})
        prices = [o["price"] for o in out["offers"] if o["in_stock"]] or [
            o["price"] for o in out["offers"]
        ]
        average = sum(prices) / len(prices)
        expected = (
            "below"
            if out["our_price"] < average * 0.98
            else "above"
            if out["our_price"] > average * 1.02
            else "at"
        )
        assert out["price_position"] == expected
        assert out["our_price"] > 0
        assert [o["price"] for o in out["offers"]] == sorted(o["price"] for o in out["offers"])


def test_unavailable_supplier_fails_permanently() -> None:
    with pytest.raises(PermanentToolError, match="supplier 'primary' cannot supply SKU SKU12345"):
        run("supply_chain.verify_supplier", {"sku": "SKU12345", "available": False})
    ok = run("supply_chain.verify_supplier", {"sku": "SKU12345", "available": True})
    assert ok["available"] is True
    assert ok["supplier_id"] == "primary"


def test_alternative_suppliers_verify_and_price_the_purchase_order() -> None:
    alternatives = run("supply_chain.alternative_suppliers", {"sku": "SKU1", "max_results": 2})
    everyone = run(
        "supply_chain.alternative_suppliers",
        {"sku": "SKU1", "max_results": len(supply_chain.ALTERNATIVE_SUPPLIERS)},
    )
    suppliers = alternatives["suppliers"]
    assert len(everyone["suppliers"]) > 2
    assert suppliers == everyone["suppliers"][:2], "the limit keeps the best-ranked offers"
    assert all(s["supplier_id"] != "primary" for s in suppliers)
    for offer in suppliers:
        check = run(
            "supply_chain.verify_supplier", {"sku": "SKU1", "supplier_id": offer["supplier_id"]}
        )
        assert check["unit_cost"] == offer["unit_cost"]
        po = run(
            "supply_chain.create_purchase_order",
            {"sku": "SKU1", "qty": 3, "supplier_id": offer["supplier_id"]},
        )
        assert po["unit_cost"] == offer["unit_cost"]
        assert po["total"] == round(3 * offer["unit_cost"], 2)
        assert po["status"] == "created"
        assert po["po_id"].startswith("PO-")


def test_purchase_order_and_reservation_quantities_are_checked() -> None:
    with pytest.raises(PermanentToolError):
        run("supply_chain.create_purchase_order", {"sku": "S", "qty": 0, "supplier_id": "x"})
    with pytest.raises(PermanentToolError):
        run("supply_chain.reserve_stock", {"sku": "S", "qty": -1})
    assert run("supply_chain.reserve_stock", {"sku": "S", "qty": 0})["qty"] == 0
    with pytest.raises(PermanentToolError, match="reservation_id or sku"):
        run("supply_chain.cancel_reservation", {})


@pytest.mark.parametrize(
    ("params", "approved"),
    [
        ({"amount": 10_000}, True),
        ({"amount": 10_000.01}, False),
        ({"amount": 50_000, "approve": True}, True),
        ({"amount": 1, "approve": False}, False),
    ],
)
def test_request_approval_answers_deterministically(params: dict[str, Any], approved: bool) -> None:
    out = run("supply_chain.request_approval", {"subject": "restock", **params})
    assert out["approved"] is approved
    assert out["approver"] == "manager"
    assert out["approval_id"].startswith("APR-")


def test_bench_sleep_fails_on_listed_attempts_only() -> None:
    params = {"seconds": 0, "fail_attempts": [1, 3], "payload_bytes": 5}
    with pytest.raises(TransientToolError, match="attempt 1"):
        run("bench.sleep", params, make_ctx(attempt=1))
    assert run("bench.sleep", params, make_ctx(attempt=2)) == {
        "slept": 0.0,
        "attempt": 2,
        "payload": "xxxxx",
    }
    with pytest.raises(TransientToolError, match="attempt 3"):
        run("bench.sleep", params, make_ctx(attempt=3))


def test_bench_echo_returns_the_value() -> None:
    assert run("bench.echo", {"value": [1, {"b": None}]}) == {"value": [1, {"b": None}]}
    with pytest.raises(PermanentToolError):
        run("bench.echo", {})


def test_bench_digest_answers_the_hash_and_size_of_the_stored_json() -> None:
    text = '[1,{"b":null}]'
    assert run("bench.digest", {"value": [1, {"b": None}]}) == {
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
        "bytes": len(text),
    }
