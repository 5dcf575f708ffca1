"""A producer script: submit a plan from Python, follow its events, read outputs and answer.

Run it against a running stack (``planloop up`` in another shell, or ``docker compose up``);
it reads the same ``PLANLOOP_*`` variables as the ``planloop`` command.
"""

import planloop

plan = planloop.Plan(
    goal="Sales and stock of SKU12345, then reserve the shortfall",
    steps=[
        planloop.Step(id="orders", tool="ecommerce.order_stats", params={"product_id": "SKU12345"}),
        planloop.Step(id="stock", tool="ecommerce.inventory", params={"product_id": "SKU12345"}),
        planloop.Step(
            id="restock",
            tool="supply_chain.reserve_stock",
            params={"sku": "SKU12345", "qty": "{{stock.output.shortfall}}"},
            dependencies=["orders", "stock"],
            critical=True,
        ),
    ],
)

with planloop.Client() as client:
    sid = client.submit(plan, concurrency=4)
    print("submitted", sid)
    for item in client.events(sid):  # live, until the session ends
        print(" ", item.event.type, item.event.step_id)
    report = client.wait(sid, timeout_s=120)
    print(report.status, "in", report.duration_s, "s")
    print("units sold:", report.outputs["orders"]["units_sold"])
    print("reservation:", report.outputs["restock"])
    if report.answer:  # sessions planned by an LLM end with an answer
        print(report.answer.text)
    raise SystemExit(0 if report.ok else 1)
