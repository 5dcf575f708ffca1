"""Supply-chain tools: ERP stock, suppliers, reservations, purchase orders and approvals.

Reads return deterministic fake data. Writes go through ``ctx.effects`` keyed by the step's
idempotency key, so a repeated attempt returns the first receipt instead of acting twice.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import BaseModel, Field, model_validator

from planloop.core.errors import PermanentToolError
from planloop.core.tools import ToolContext, simulate, tool
from planloop.workers.toolsets._data import (
    COVER_DAYS,
    ToolParams,
    receipt_id,
    rng_for,
    stock_profile,
    supplier_quote,
    undo_key,
)

# Requests up to this amount are approved unless the plan forces the answer.
AUTO_APPROVE_LIMIT = 10_000.0
ALTERNATIVE_SUPPLIERS = (
    "acme-industrial",
    "northwind-supply",
    "globex-parts",
    "initech-logistics",
    "umbrella-trading",
    "stark-components",
    "wayne-wholesale",
)


class SkuParams(ToolParams):
    """Identifies one SKU."""

    sku: str = Field(
        min_length=1, max_length=64, description="Stock keeping unit, e.g. 'SKU12345'."
    )


class ErpStockParams(SkuParams):
    """Params of ``supply_chain.erp_stock``."""


class ErpStock(BaseModel):
    """The ERP's view of one SKU's stock."""

    sku: str
    on_hand: int = Field(description="Units in stock across warehouses.")
    in_transit: int = Field(description="Units ordered and on their way.")
    safety_stock: int = Field(description="Buffer the ERP keeps against demand spikes.")
    shortfall: int = Field(
        ge=0,
        description=f"Units to order to hold safety stock plus {COVER_DAYS} days of demand "
        "after counting in-transit units; 0 when covered.",
    )


@tool(
    "supply_chain.erp_stock",
    description="ERP stock of a SKU: on hand, in transit, safety stock and shortfall "
    f"(units to order to hold safety stock plus {COVER_DAYS} days of demand).",
    params=ErpStockParams,
    output=ErpStock,
)
def erp_stock(params: ErpStockParams, ctx: ToolContext) -> ErpStock:
    """Report the SKU's stock as the ERP sees it."""
    simulate(params.simulate, ctx)
    p = stock_profile(params.sku)
    wanted = p.safety_stock + COVER_DAYS * p.daily_demand
    return ErpStock(
        sku=params.sku,
        on_hand=p.on_hand,
        in_transit=p.in_transit,
        safety_stock=p.safety_stock,
        shortfall=max(0, wanted - p.on_hand - p.in_transit),
    )


class VerifySupplierParams(SkuParams):
    """Params of ``supply_chain.verify_supplier``."""

    supplier_id: str = Field("primary", min_length=1, description="Supplier to check.")
    available: bool | None = Field(
        None, description="Force the answer (demos and tests); unset asks the supplier."
    )


class SupplierCheck(BaseModel):
    """A supplier's confirmation that it can supply a SKU."""

    supplier_id: str
    sku: str
    available: bool
    lead_time_days: int
    unit_cost: float


@tool(
    "supply_chain.verify_supplier",
    description="Check that a supplier can supply a SKU; returns lead time and unit cost. "
    "Fails permanently when the supplier cannot supply it (use "
    "supply_chain.alternative_suppliers then).",
    params=VerifySupplierParams,
    output=SupplierCheck,
)
def verify_supplier(params: VerifySupplierParams, ctx: ToolContext) -> SupplierCheck:
    """Confirm the supplier, or raise :class:`PermanentToolError` when it cannot deliver."""
    simulate(params.simulate, ctx)
    available, lead_time, cost = supplier_quote(params.sku, params.supplier_id)
    if params.available is not None:
        available = params.available
    if not available:
        raise PermanentToolError(
            f"supplier {params.supplier_id!r} cannot supply SKU {params.sku}; "
            "find another with supply_chain.alternative_suppliers"
        )
    return SupplierCheck(
        supplier_id=params.supplier_id,
        sku=params.sku,
        available=True,
        lead_time_days=lead_time,
        unit_cost=cost,
    )


class AlternativeSuppliersParams(SkuParams):
    """Params of ``supply_chain.alternative_suppliers``."""

    max_results: int = Field(3, ge=1, le=len(ALTERNATIVE_SUPPLIERS), description="Most to list.")


class SupplierOffer(BaseModel):
    """One alternative supplier's terms for a SKU."""

    supplier_id: str
    lead_time_days: int
    unit_cost: float
    rating: float = Field(description="Past performance, 1 to 5.")


class AlternativeSuppliers(BaseModel):
    """Alternative suppliers able to supply a SKU."""

    sku: str
    suppliers: list[SupplierOffer] = Field(description="Best rated first.")


@tool(
    "supply_chain.alternative_suppliers",
    description="Suppliers other than the primary that can supply a SKU, best rated first, "
    "with lead time, unit cost and rating. Each verifies with supply_chain.verify_supplier.",
    params=AlternativeSuppliersParams,
    output=AlternativeSuppliers,
)
def alternative_suppliers(
    params: AlternativeSuppliersParams, ctx: ToolContext
) -> AlternativeSuppliers:
    """List alternatives that ``verify_supplier`` would confirm for the SKU."""
    simulate(params.simulate, ctx)
    offers = []
    for supplier_id in ALTERNATIVE_SUPPLIERS:
        available, lead_time, cost = supplier_quote(params.sku, supplier_id)
        if available:
            rating = round(rng_for("rating", supplier_id).uniform(3.0, 5.0), 1)
            offers.append(
                SupplierOffer(
                    supplier_id=supplier_id, lead_time_days=lead_time, unit_cost=cost, rating=rating
                )
            )
    offers.sort(key=lambda o: (-o.rating, o.lead_time_days, o.supplier_id))
    return AlternativeSuppliers(sku=params.sku, suppliers=offers[: params.max_results])


class ReserveStockParams(SkuParams):
    """Params of ``supply_chain.reserve_stock``."""

    qty: int = Field(ge=0, description="Units to reserve; 0 records an empty reservation.")
    warehouse: str = Field("main", min_length=1, description="Warehouse to reserve in.")


class Reservation(BaseModel):
    """Receipt of a stock reservation."""

    reservation_id: str
    sku: str
    qty: int
    warehouse: str
    status: Literal["reserved"] = "reserved"


@tool(
    "supply_chain.reserve_stock",
    description="Reserve units of a SKU in a warehouse (write; undone by "
    "supply_chain.cancel_reservation). Repeating the step returns the same reservation.",
    params=ReserveStockParams,
    output=Reservation,
    side_effect="write",
    compensate="supply_chain.cancel_reservation",
)
def reserve_stock(params: ReserveStockParams, ctx: ToolContext) -> Reservation:
    """Reserve once per idempotency key."""
    simulate(params.simulate, ctx)

    def make_receipt() -> dict[str, Any]:
        return Reservation(
            reservation_id=receipt_id("RSV", ctx.idempotency_key),
            sku=params.sku,
            qty=params.qty,
            warehouse=params.warehouse,
        ).model_dump(mode="json")

    return Reservation.model_validate(
        ctx.effects.apply_once(ctx.idempotency_key, make_receipt, ctx)
    )


class CancelReservationParams(ToolParams):
    """Params of ``supply_chain.cancel_reservation``: a reservation id, or a SKU to release."""

    reservation_id: str | None = Field(None, description="Reservation to cancel.")
    sku: str | None = Field(None, description="Release every reservation of this SKU.")

    @model_validator(mode="after")
    def _needs_target(self) -> Self:
        if self.reservation_id is None and self.sku is None:
            raise ValueError("give reservation_id or sku")
        return self


class CancelledReservation(BaseModel):
    """Receipt of a cancelled reservation."""

    cancelled: bool
    reservation_id: str | None
    sku: str | None


@tool(
    "supply_chain.cancel_reservation",
    description="Cancel a stock reservation by reservation_id, or release a SKU's "
    "reservations by sku (write; compensates supply_chain.reserve_stock).",
    params=CancelReservationParams,
    output=CancelledReservation,
    side_effect="write",
)
def cancel_reservation(params: CancelReservationParams, ctx: ToolContext) -> CancelledReservation:
    """Cancel once per idempotency key."""
    simulate(params.simulate, ctx)

    def make_receipt() -> dict[str, Any]:
        return CancelledReservation(
            cancelled=True, reservation_id=params.reservation_id, sku=params.sku
        ).model_dump(mode="json")

    receipt = ctx.effects.apply_once(undo_key(ctx), make_receipt, ctx)
    return CancelledReservation.model_validate(receipt)


class PurchaseOrderParams(SkuParams):
    """Params of ``supply_chain.create_purchase_order``."""

    qty: int = Field(gt=0, description="Units to order.")
    supplier_id: str = Field(min_length=1, description="Supplier to order from.")
    unit_cost: float | None = Field(
        None, gt=0, description="Agreed unit cost; unset uses the supplier's quote."
    )


class PurchaseOrder(BaseModel):
    """Receipt of a purchase order."""

    po_id: str
    sku: str
    qty: int
    supplier_id: str
    unit_cost: float
    total: float
    status: Literal["created"] = "created"


@tool(
    "supply_chain.create_purchase_order",
    description="Create a purchase order for a SKU with a supplier (write; undone by "
    "supply_chain.cancel_purchase_order). Repeating the step returns the same order.",
    params=PurchaseOrderParams,
    output=PurchaseOrder,
    side_effect="write",
    compensate="supply_chain.cancel_purchase_order",
)
def create_purchase_order(params: PurchaseOrderParams, ctx: ToolContext) -> PurchaseOrder:
    """Order once per idempotency key."""
    simulate(params.simulate, ctx)
    unit_cost = params.unit_cost
    if unit_cost is None:
        unit_cost = supplier_quote(params.sku, params.supplier_id)[2]

    def make_receipt() -> dict[str, Any]:
        return PurchaseOrder(
            po_id=receipt_id("PO", ctx.idempotency_key),
            sku=params.sku,
            qty=params.qty,
            supplier_id=params.supplier_id,
            unit_cost=unit_cost,
            total=round(params.qty * unit_cost, 2),
        ).model_dump(mode="json")

    return PurchaseOrder.model_validate(
        ctx.effects.apply_once(ctx.idempotency_key, make_receipt, ctx)
    )


class CancelPurchaseOrderParams(ToolParams):
    """Params of ``supply_chain.cancel_purchase_order``."""

    po_id: str | None = Field(None, description="Purchase order to cancel.")


class CancelledPurchaseOrder(BaseModel):
    """Receipt of a cancelled purchase order."""

    cancelled: bool
    po_id: str | None


@tool(
    "supply_chain.cancel_purchase_order",
    description="Cancel a purchase order (write; compensates supply_chain.create_purchase_order).",
    params=CancelPurchaseOrderParams,
    output=CancelledPurchaseOrder,
    side_effect="write",
)
def cancel_purchase_order(
    params: CancelPurchaseOrderParams, ctx: ToolContext
) -> CancelledPurchaseOrder:
    """Cancel once per idempotency key; without a ``po_id`` there is nothing to cancel."""
    simulate(params.simulate, ctx)

    def make_receipt() -> dict[str, Any]:
        return CancelledPurchaseOrder(
            cancelled=params.po_id is not None, po_id=params.po_id
        ).model_dump(mode="json")

    receipt = ctx.effects.apply_once(undo_key(ctx), make_receipt, ctx)
    return CancelledPurchaseOrder.model_validate(receipt)


class ApprovalParams(ToolParams):
    """Params of ``supply_chain.request_approval``."""

    subject: str = Field(min_length=1, description="What needs approving, in one line.")
    amount: float = Field(0, ge=0, description="Money at stake, in the shop currency.")
    approver: str = Field("manager", min_length=1, description="Who approves.")
    approve: bool | None = Field(
        None,
        description=f"Force the answer (demos and tests); unset approves amounts up to "
        f"{AUTO_APPROVE_LIMIT:,.0f}.",
    )


class Approval(BaseModel):
    """The approver's answer."""

    approval_id: str
    approved: bool
    approver: str
    subject: str
    amount: float


@tool(
    "supply_chain.request_approval",
    description="Ask an approver to approve a spend (write). Amounts up to "
    f"{AUTO_APPROVE_LIMIT:,.0f} are approved; check 'approved' before acting on it.",
    params=ApprovalParams,
    output=Approval,
    side_effect="write",
)
def request_approval(params: ApprovalParams, ctx: ToolContext) -> Approval:
    """Record one approval request per idempotency key and answer it deterministically."""
    simulate(params.simulate, ctx)
    approved = params.amount <= AUTO_APPROVE_LIMIT if params.approve is None else params.approve

    def make_receipt() -> dict[str, Any]:
        return Approval(
            approval_id=receipt_id("APR", ctx.idempotency_key),
            approved=approved,
            approver=params.approver,
            subject=params.subject,
            amount=params.amount,
        ).model_dump(mode="json")

    return Approval.model_validate(ctx.effects.apply_once(ctx.idempotency_key, make_receipt, ctx))
