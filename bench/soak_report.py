"""The soak's verdict: per fault kind, the deaths, duplicates and recovery times it is blamed
for, then the totals against the targets."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from bench.common import console, median, print_table
from bench.soak_faults import KINDS, Injected, Ledger
from bench.soak_outcome import Outcome
from bench.soak_stack import Fleet, Watchman

if TYPE_CHECKING:  # bench.soak runs the soak and imports this module
    from bench.soak import SoakOptions, Submitter

# A fault's consequences (a death, a duplicate) are blamed on it for this long.
BLAME_WINDOW_S = 15.0


def blame(faults: list[Injected], at: float) -> str:
    """The kind of the last fault that began before ``at`` (within the blame window)."""
    before = [f for f in faults if f.began <= at <= f.ended + BLAME_WINDOW_S]
    return max(before, key=lambda f: f.began).kind if before else "(none)"


def report(
    opts: SoakOptions,
    ledger: Ledger,
    fleet: Fleet,
    watchman: Watchman,
    submitter: Submitter,
    out: Outcome,
) -> bool:
    faults = ledger.faults
    deaths = Counter(blame(faults, d.at) for d in fleet.deaths)
    dup_blame = Counter(blame(faults, t) for t in out.duplicate_times)
    progress = sorted(out.progress_at)
    rows = []
    for kind in opts.kinds:
        mine = [f for f in faults if f.kind == kind]
        recovery = [_next_after(progress, f.ended) for f in mine]
        waits = [w for w in recovery if w is not None]
        stuck = _stuck_through(ledger, set(out.stuck), mine)
        rows.append(
            [
                kind,
                str(len(mine)),
                str(ledger.skipped[kind]),
                str(deaths[kind]),
                str(dup_blame[kind]) if out.duplicates_trusted else "?",
                str(stuck),
                f"{median(waits):.1f}" if waits else "-",
                str(len(recovery) - len(waits)),
            ]
        )
    print_table(
        "faults by kind",
        ["kind", "injected", "no target", "deaths", "dups", "stuck hit", "recover s", "no step"],
        rows,
    )
    console.print(
        "deaths, dups: processes that died on their own and duplicate effects within "
        f"{BLAME_WINDOW_S:g}s of a fault of the kind; stuck hit: stuck sessions it targeted "
        "(or, untargeted, that lived through it); recover s: median seconds from its end to "
        "the next completed step anywhere; no step: faults never followed by one"
    )
    for kind in opts.kinds:
        console.print(f"  {kind}: {KINDS[kind]}")
    died = fleet.deaths
    by_role = Counter(d.role for d in died)
    codes = Counter(f"{d.role} exit {d.returncode}" for d in died)
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(out.statuses.items()))
    n_dup = sum(out.duplicates.values())
    console.print(f"faults injected: {len(faults)}")
    console.print(
        f"sessions submitted: {len(ledger.sessions)} (submit retried on {dict(submitter.errors)})"
    )
    console.print(
        f"completed: {out.statuses['completed']} (by status: {statuses}; "
        f"{len(ledger.poisoned)} sessions got a poison event; "
        f"{len(out.wiped)} wiped from Redis before any supervisor recorded them, not counted)"
    )
    console.print(f"stuck: {len(out.stuck)} (not ended {opts.drain_s:g}s after the last fault)")
    for sid, what in sorted(out.stuck.items())[:10]:
        poisoned = " (poisoned)" if sid in ledger.poisoned else ""
        console.print(f"  {sid}: {what}{poisoned}")
    source = (
        "from the effect audit file, outside Redis"
        if out.duplicates_trusted
        else "NOT TRUSTWORTHY: no effect audit file appeared, so no write was seen applied"
    )
    console.print(f"duplicate effects: {n_dup} ({source})")
    for key, n in sorted(out.duplicates.items())[:10]:
        console.print(f"  {key}: applied {n + 1} times")
    console.print(
        f"lost events: {len(out.lost)} (steps re-run and deduplicated: {out.rerun_steps})"
    )
    for line in out.lost[:10]:
        console.print(f"  {line}")
    console.print(
        f"ended sessions rewritten: {len(out.rewritten)} of {len(ledger.reannounced)} re-announced"
    )
    for line in out.rewritten[:10]:
        console.print(f"  {line}")
    console.print(
        f"processes that died on their own: {len(died)} (supervisor {by_role['supervisor']}, "
        f"worker {by_role['worker']}; {dict(codes)}); Redis: {len(watchman.redis_deaths)}"
    )
    console.print(f"target: >= {opts.target_faults} faults, 0 stuck, 0 duplicates, 0 lost")
    console.print("also required: 0 ended sessions rewritten, 0 processes dead on their own")
    missed = {
        f"{len(faults)} faults": len(faults) < opts.target_faults,
        f"{len(out.stuck)} stuck": bool(out.stuck),
        f"{n_dup} duplicates": n_dup > 0,
        "duplicates not counted outside Redis": not out.duplicates_trusted,
        f"{len(out.lost)} lost": bool(out.lost),
        f"{len(out.rewritten)} ended sessions rewritten": bool(out.rewritten),
        f"{len(died) + len(watchman.redis_deaths)} deaths": bool(died or watchman.redis_deaths),
    }
    failed = [what for what, bad in missed.items() if bad]
    print(f"FAIL: {', '.join(failed)}" if failed else "PASS")
    return not failed


def _next_after(progress: list[float], at: float) -> float | None:
    later = next((t for t in progress if t > at), None)
    return None if later is None else later - at


def _stuck_through(ledger: Ledger, stuck: set[str], faults: list[Injected]) -> int:
    """Stuck sessions a fault targeted, or (untargeted kinds) that were live during one."""
    hit = set()
    for fault in faults:
        if fault.target and fault.target in ledger.sessions:
            hit |= {fault.target} & stuck
        else:
            hit |= {sid for sid in stuck if ledger.sessions[sid].at <= fault.ended}
    return len(hit)
