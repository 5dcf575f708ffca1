"""Shared pieces of the bundled toolsets: a params base, deterministic fake data, receipt ids."""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from planloop.core.tools import Simulation, ToolContext

# Days of demand a restock should cover on top of the reorder point.
COVER_DAYS = 14
WAREHOUSES = ("main", "east", "west")
# Stock / target ratio pinned for demo products: SKU12345 runs low so a restock has work to do.
DEMO_COVER = {"SKU12345": 0.45}
# Supplier availability pinned for demo pairs: the happy path works unless a plan forces a failure.
DEMO_AVAILABILITY = {("SKU12345", "primary"): True}


class ToolParams(BaseModel):
    """Base of every bundled tool's params: unknown fields are refused, ``simulate`` is honoured."""

    model_config = ConfigDict(extra="forbid")

    simulate: Simulation | None = Field(
        None,
        description="Testing only: injected latency and failures. Leave unset in real plans.",
    )


def digest(*parts: str) -> str:
    """Hex SHA-256 of ``parts``; stable across processes, unlike ``hash()``."""
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def rng_for(*parts: str) -> random.Random:
    """A random generator seeded by ``parts`` so the same ids always give the same data."""
    return random.Random(int(digest(*parts)[:16], 16))


def receipt_id(prefix: str, idempotency_key: str) -> str:
    """A short id derived from the idempotency key, e.g. ``RSV-3F2A9C01D4``."""
    return f"{prefix}-{digest(prefix, idempotency_key)[:10].upper()}"


def undo_key(ctx: ToolContext) -> str:
    """Ledger key of a compensating tool; distinct from the key of the write it undoes."""
    return f"{ctx.idempotency_key}:undo"


@dataclass(frozen=True)
class StockProfile:
    """The fake stock picture of one product; shared so inventory and ERP agree."""

    product_id: str
    on_hand: int
    reserved: int
    in_transit: int
    daily_demand: int
    lead_time_days: int
    safety_stock: int
    reorder_point: int
    warehouse: str
    price: float
    trend: float  # relative change of demand over a window: -0.2 (falling) .. 0.2 (rising)

    @property
    def available(self) -> int:
        """Units on hand that are not reserved."""
        return self.on_hand - self.reserved

    @property
    def target(self) -> int:
        """Units a healthy stock holds: the reorder point plus ``COVER_DAYS`` of demand."""
        return self.reorder_point + COVER_DAYS * self.daily_demand


def stock_profile(product_id: str) -> StockProfile:
    """The deterministic stock profile of ``product_id`` (also used as the SKU)."""
    rng = rng_for("stock", product_id)
    daily_demand = rng.randint(8, 60)
    lead_time = rng.randint(5, 21)
    safety_stock = math.ceil(daily_demand * rng.uniform(3, 7))
    reorder_point = daily_demand * lead_time + safety_stock
    target = reorder_point + COVER_DAYS * daily_demand
    # Most products sit below target (a restock is plausible), some are well stocked.
    ratio = DEMO_COVER.get(product_id, rng.uniform(0.25, 1.4))
    on_hand = int(target * ratio)
    reserved = int(on_hand * rng.uniform(0.02, 0.15))
    return StockProfile(
        product_id=product_id,
        on_hand=on_hand,
        reserved=reserved,
        in_transit=daily_demand * rng.choice((0, 0, 2, 5)),
        daily_demand=daily_demand,
        lead_time_days=lead_time,
        safety_stock=safety_stock,
        reorder_point=reorder_point,
        warehouse=rng.choice(WAREHOUSES),
        price=round(rng.uniform(9.99, 249.99), 2),
        trend=round(rng.uniform(-0.2, 0.2), 3),
    )


def supplier_quote(sku: str, supplier_id: str) -> tuple[bool, int, float]:
    """``(available, lead_time_days, unit_cost)`` of ``supplier_id`` for ``sku``."""
    rng = rng_for("supplier", sku, supplier_id)
    # Roughly one supplier/SKU pair in six cannot deliver.
    available = DEMO_AVAILABILITY.get((sku, supplier_id), rng.random() >= 0.17)
    lead_time = rng.randint(3, 30)
    cost = round(stock_profile(sku).price * rng.uniform(0.45, 0.75), 2)
    return available, lead_time, cost
