"""Plain terminal views of sessions: status, the final report, and ``show`` (timeline + DAG).

``cells`` writes one value, ``masked`` and ``notes`` decide what a view hides and warns
about, and ``status``, ``report`` and ``show`` are the views; all are importable from here.
"""

from __future__ import annotations

from planloop.producer.views.cells import (
    EVENT_TEXT,
    SEVERITY_COLOURS,
    SHORT_OUTPUT,
    SHORT_TEXT,
    STATUS_COLOURS,
    actor_text,
    age,
    clock,
    event_line,
    output_cell,
    seconds,
    short,
    styled_status,
)
from planloop.producer.views.masked import load_session_plan, masked_report, sensitive_params
from planloop.producer.views.notes import (
    NO_CONSUMER_NOTES,
    UNSERVED_NOTES,
    consumer_warning,
    unserved_warnings,
)
from planloop.producer.views.report import print_conclusion, print_report
from planloop.producer.views.show import (
    gather_session,
    llm_budget,
    mermaid_block,
    print_show,
    report_statuses,
)
from planloop.producer.views.status import print_status, status_doc, workers_line

__all__ = [
    "EVENT_TEXT",
    "NO_CONSUMER_NOTES",
    "SEVERITY_COLOURS",
    "SHORT_OUTPUT",
    "SHORT_TEXT",
    "STATUS_COLOURS",
    "UNSERVED_NOTES",
    "actor_text",
    "age",
    "clock",
    "consumer_warning",
    "event_line",
    "gather_session",
    "llm_budget",
    "load_session_plan",
    "masked_report",
    "mermaid_block",
    "output_cell",
    "print_conclusion",
    "print_report",
    "print_show",
    "print_status",
    "report_statuses",
    "seconds",
    "sensitive_params",
    "short",
    "status_doc",
    "styled_status",
    "unserved_warnings",
    "workers_line",
]
