"""The timestamps of one worfbench run's plans, and the figures its report shows from them.

:class:`PlanRun` holds when each node was dispatched, started and finished (and, for
Planloop, when the session closed); the functions below turn a list of them into the rows of
bench/worfbench.py's tables: the ratios to the ideal, the phases of Planloop's steps, and
where each plan's excess over its ideal goes along its critical chain.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from bench.common import percentile

# node id -> dependencies; every node sleeps the same time
Dag = dict[str, list[str]]


@dataclass
class PlanRun:
    """Timestamps (epoch seconds) of one plan's execution and what follows from them."""

    dag: Dag
    ideal: float
    dispatched: dict[str, float] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)
    closed: float = 0.0  # the session's finished_at (Planloop only)
    visible: float = 0.0  # when its end was announced in Redis (Planloop only)

    @property
    def ratio(self) -> float:
        """First dispatch to the last node's end, over the critical path."""
        return (max(self.finished.values()) - min(self.dispatched.values())) / self.ideal

    def critical_chain(self) -> list[str]:
        """The nodes that set the plan's end: from the last node to finish back through the
        dependency that finished last, to a root (roots first)."""
        node = max(self.finished, key=self.finished.__getitem__)
        chain = [node]
        while self.dag[node]:
            node = max(self.dag[node], key=self.finished.__getitem__)
            chain.append(node)
        return chain[::-1]

    def excess(self, node_s: float) -> dict[str, float]:
        """The plan's duration less its ideal, split along :meth:`critical_chain` (seconds).

        The parts add up to the excess: the root's dispatch after the plan's first one, the
        supervisor (a dependency's end to the next node's dispatch), the pickup (dispatch to
        start) of the root and of the dependents, the node's run past ``node_s``, and a chain
        shorter than the critical path (negative)."""
        chain = self.critical_chain()
        root = chain[0]
        pickups = [self.started[s] - self.dispatched[s] for s in chain]
        return {
            "root dispatched after the plan's first": self.dispatched[root]
            - min(self.dispatched.values()),
            "supervisor (dependency finished -> dispatched)": sum(
                self.dispatched[b] - self.finished[a] for a, b in itertools.pairwise(chain)
            ),
            "root pickup (dispatched -> started)": pickups[0],
            "dependents' pickup (dispatched -> started)": sum(pickups[1:]),
            "node run past its sleep": sum(
                self.finished[s] - self.started[s] - node_s for s in chain
            ),
            "chain shorter than the critical path": len(chain) * node_s - self.ideal,
        }

    def released(self, until: dict[str, float]) -> list[float]:
        """Per dependent node: ``until[node]`` minus the latest end of its dependencies."""
        return [
            until[s] - max(self.finished[d] for d in deps) for s, deps in self.dag.items() if deps
        ]


def ms(values: list[float], q: float) -> str:
    return f"{percentile(values, q) * 1000:.1f}"


def rows_of(name: str, runs: list[PlanRun]) -> list[str]:
    ratios = [r.ratio for r in runs]
    dep_to_start = [g for r in runs for g in r.released(r.started)]
    return [
        name,
        str(len(runs)),
        f"{percentile(ratios, 50):.3f}",
        f"{percentile(ratios, 95):.3f}",
        f"{max(ratios):.3f}",
        ms(dep_to_start, 50),
        ms(dep_to_start, 95),
    ]


def phases(runs: list[PlanRun], *, sessions: bool = True) -> list[list[str]]:
    """The phases of every node's run; with ``sessions``, also of each session's end (a
    Planloop run's: the bare driver has no session to close)."""
    react = [g for r in runs for g in r.released(r.dispatched)]
    pickup = [r.started[s] - r.dispatched[s] for r in runs for s in r.dag]
    roots = [r.started[s] - r.dispatched[s] for r in runs for s, deps in r.dag.items() if not deps]
    dependents = [r.started[s] - r.dispatched[s] for r in runs for s, deps in r.dag.items() if deps]
    close = [r.closed - max(r.finished.values()) for r in runs]
    visible = [r.visible - max(r.finished.values()) for r in runs]
    rows: list[tuple[str, list[float]]] = [
        ("last dependency finished -> dispatched (supervisor)", react),
        ("dispatched -> started (broker + worker claim), every step", pickup),
        ("  of it, roots (dispatched with their session's start)", roots),
        ("  of it, dependents", dependents),
    ]
    if sessions:
        rows += [
            ("last step finished -> session finished_at", close),
            ("last step finished -> end announced in Redis (1 ms clock)", visible),
        ]
    return [[label, ms(v, 50), ms(v, 95)] for label, v in rows]


def attribution(runs: list[PlanRun], node_s: float) -> list[list[str]]:
    """Where the excess over the ideal goes, per plan along its critical chain: the mean
    over every plan and over the worst tenth (by ÷ ideal, the plans that make the p95)."""
    if not runs:
        return []
    ranked = sorted(runs, key=lambda r: r.ratio)
    worst = ranked[-max(1, len(ranked) // 10) :]
    parts = [r.excess(node_s) for r in runs]
    worst_parts = [r.excess(node_s) for r in worst]
    rows = []
    for name in parts[0]:
        every = sum(p[name] for p in parts) / len(parts)
        tail = sum(p[name] for p in worst_parts) / len(worst_parts)
        rows.append([name, f"{every * 1000:.1f}", f"{tail * 1000:.1f}"])
    total = sum(sum(p.values()) for p in parts) / len(parts)
    tail_total = sum(sum(p.values()) for p in worst_parts) / len(worst_parts)
    rows.append(["excess over the ideal", f"{total * 1000:.1f}", f"{tail_total * 1000:.1f}"])
    return rows
