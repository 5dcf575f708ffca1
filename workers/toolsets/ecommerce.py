"""E-commerce read tools: order statistics, inventory, reviews and competitor prices (fake data)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from planloop.core.tools import ToolContext, simulate, tool
from planloop.workers.toolsets._data import COVER_DAYS, ToolParams, rng_for, stock_profile

Trend = Literal["up", "flat", "down"]
PricePosition = Literal["below", "at", "above"]

# A trend smaller than this (relative change over the window) reads as "flat".
FLAT_TREND = 0.05
# Our price within this fraction of the competitors' average reads as "at".
PRICE_TOLERANCE = 0.02

COMPLAINTS = (
    "battery drains quickly",
    "arrived with scratches",
    "sizing runs small",
    "instructions are unclear",
    "shipping took too long",
    "stopped working after a month",
    "packaging was damaged",
    "too loud in use",
)
PRAISES = (
    "great value for money",
    "solid build quality",
    "easy to set up",
    "fast delivery",
    "looks better than in photos",
    "helpful customer service",
    "long battery life",
    "works exactly as described",
)
SELLERS = ("MegaMart", "ShopHub", "QuickBuy", "DealDepot", "PrimeGoods", "ValueZone")


class ProductParams(ToolParams):
    """Identifies one product."""

    product_id: str = Field(
        min_length=1, max_length=64, description="Product id / SKU, e.g. 'SKU12345'."
    )


class OrderStatsParams(ProductParams):
    """Params of ``ecommerce.order_stats``."""

    days: int = Field(30, ge=1, le=365, description="Look-back window in days.")


class OrderStats(BaseModel):
    """Sales of one product over a window."""

    product_id: str
    days: int = Field(description="Window length in days.")
    orders: int = Field(description="Number of orders.")
    units_sold: int = Field(description="Units sold over the window.")
    revenue: float = Field(description="Revenue over the window, in the shop currency.")
    avg_daily_units: float = Field(description="Units sold per day on average.")
    trend: Trend = Field(description="Direction of daily sales over the window.")


@tool(
    "ecommerce.order_stats",
    description="Order count, units sold, revenue, average daily units and sales trend "
    "of a product over the last N days.",
    params=OrderStatsParams,
    output=OrderStats,
)
def order_stats(params: OrderStatsParams, ctx: ToolContext) -> OrderStats:
    """Sum a deterministic daily sales series shaped by the product's demand and trend."""
    simulate(params.simulate, ctx)
    profile = stock_profile(params.product_id)
    rng = rng_for("orders", params.product_id, str(params.days))
    units = 0
    for day in range(params.days):
        # Demand drifts linearly from (1 - trend/2) to (1 + trend/2) across the window.
        drift = 1 + profile.trend * ((day + 0.5) / params.days - 0.5)
        units += max(0, round(profile.daily_demand * drift * rng.uniform(0.8, 1.2)))
    orders = max(1, round(units / rng.uniform(1.0, 1.6))) if units else 0
    revenue = units * profile.price * rng.uniform(0.9, 1.0)  # discounts shave a little off
    if profile.trend > FLAT_TREND:
        trend: Trend = "up"
    elif profile.trend < -FLAT_TREND:
        trend = "down"
    else:
        trend = "flat"
    return OrderStats(
        product_id=params.product_id,
        days=params.days,
        orders=orders,
        units_sold=units,
        revenue=round(revenue, 2),
        avg_daily_units=round(units / params.days, 2),
        trend=trend,
    )


class InventoryParams(ProductParams):
    """Params of ``ecommerce.inventory``."""


class Inventory(BaseModel):
    """Stock position of one product."""

    product_id: str
    on_hand: int = Field(description="Units physically in the warehouse.")
    reserved: int = Field(description="Units held for open orders.")
    available: int = Field(description="on_hand - reserved.")
    reorder_point: int = Field(description="Reorder when available drops below this.")
    daily_demand: int = Field(description="Average units sold per day.")
    days_of_cover: float = Field(description="available / daily_demand.")
    shortfall: int = Field(
        ge=0,
        description=f"Units needed to reach reorder_point + {COVER_DAYS} days of demand; "
        "0 when stock is sufficient.",
    )
    warehouse: str = Field(description="Warehouse holding the stock.")


@tool(
    "ecommerce.inventory",
    description="Stock position of a product: on hand, reserved, available, reorder point, "
    f"daily demand, days of cover and shortfall (units to restock to reach the reorder point "
    f"plus {COVER_DAYS} days of demand).",
    params=InventoryParams,
    output=Inventory,
)
def inventory(params: InventoryParams, ctx: ToolContext) -> Inventory:
    """Report the product's stock profile."""
    simulate(params.simulate, ctx)
    p = stock_profile(params.product_id)
    return Inventory(
        product_id=p.product_id,
        on_hand=p.on_hand,
        reserved=p.reserved,
        available=p.available,
        reorder_point=p.reorder_point,
        daily_demand=p.daily_demand,
        days_of_cover=round(p.available / p.daily_demand, 1),
        shortfall=max(0, p.target - p.available),
        warehouse=p.warehouse,
    )


class ReviewsParams(ProductParams):
    """Params of ``ecommerce.reviews``."""

    limit: int = Field(5, ge=1, le=20, description="Most complaints / praises to return.")


class Reviews(BaseModel):
    """Summary of a product's customer reviews."""

    product_id: str
    average_rating: float = Field(description="Mean star rating, 1 to 5.")
    count: int = Field(description="Number of reviews.")
    top_complaints: list[str] = Field(description="Most frequent complaints, most common first.")
    top_praises: list[str] = Field(description="Most frequent praises, most common first.")
    sentiment: float = Field(description="Overall sentiment from -1 (negative) to 1 (positive).")


@tool(
    "ecommerce.reviews",
    description="Customer review summary of a product: average rating, review count, "
    "top complaints and praises, sentiment score (-1..1).",
    params=ReviewsParams,
    output=Reviews,
)
def reviews(params: ReviewsParams, ctx: ToolContext) -> Reviews:
    """Draw a deterministic review summary; lower ratings surface more complaints."""
    simulate(params.simulate, ctx)
    rng = rng_for("reviews", params.product_id)
    rating = round(rng.uniform(2.8, 4.8), 1)
    complaints = rng.sample(COMPLAINTS, k=len(COMPLAINTS))
    praises = rng.sample(PRAISES, k=len(PRAISES))
    return Reviews(
        product_id=params.product_id,
        average_rating=rating,
        count=rng.randint(20, 2000),
        top_complaints=complaints[: min(params.limit, 1 + round((5 - rating) * 2))],
        top_praises=praises[: min(params.limit, 1 + round((rating - 2) * 2))],
        sentiment=round(max(-1.0, min(1.0, (rating - 3) / 2)), 2),
    )


class CompetitorsParams(ProductParams):
    """Params of ``ecommerce.competitors``."""


class Offer(BaseModel):
    """One competitor's offer."""

    seller: str
    price: float
    in_stock: bool


class Competitors(BaseModel):
    """Competitor offers for one product, compared with ours."""

    product_id: str
    offers: list[Offer] = Field(description="Competitor offers, cheapest first.")
    our_price: float
    price_position: PricePosition = Field(
        description="Our price against the average competitor price (in-stock offers first)."
    )


@tool(
    "ecommerce.competitors",
    description="Competitor offers (seller, price, in stock) for a product, our price, and "
    "whether we are priced below, at or above the competition.",
    params=CompetitorsParams,
    output=Competitors,
)
def competitors(params: CompetitorsParams, ctx: ToolContext) -> Competitors:
    """Draw 3-5 competitor offers around our price and place our price among them."""
    simulate(params.simulate, ctx)
    our_price = stock_profile(params.product_id).price
    rng = rng_for("competitors", params.product_id)
    sellers = rng.sample(SELLERS, k=rng.randint(3, 5))
    offers = sorted(
        (
            Offer(
                seller=seller,
                price=round(our_price * rng.uniform(0.85, 1.15), 2),
                in_stock=rng.random() < 0.8,
            )
            for seller in sellers
        ),
        key=lambda offer: offer.price,
    )
    # Out-of-stock offers do not compete; fall back to all offers when none is in stock.
    compared = [o.price for o in offers if o.in_stock] or [o.price for o in offers]
    average = sum(compared) / len(compared)
    if our_price < average * (1 - PRICE_TOLERANCE):
        position: PricePosition = "below"
    elif our_price > average * (1 + PRICE_TOLERANCE):
        position = "above"
    else:
        position = "at"
    return Competitors(
        product_id=params.product_id,
        offers=offers,
        our_price=our_price,
        price_position=position,
    )
