"""Which unfinished sessions a rebuild round looks for in Redis."""

from __future__ import annotations

from planloop.supervisor.io.rebuild import sessions_to_check


def test_sessions_of_shards_held_elsewhere_are_never_looked_at() -> None:
    picked = sessions_to_check(["a", "b"], holds=lambda sid: sid == "a", running=set(), round_no=1)
    assert picked == ["a"]


def test_sessions_without_a_loop_here_are_looked_at_every_round() -> None:
    sids = [f"s{i}" for i in range(500)]
    for round_no in range(20):
        assert (
            sessions_to_check(sids, holds=lambda _: True, running=set(), round_no=round_no) == sids
        )


def test_a_few_sessions_with_loops_here_are_all_looked_at_every_round() -> None:
    sids = [f"s{i}" for i in range(50)]
    for round_no in range(5):
        picked = sessions_to_check(
            sids, holds=lambda _: True, running=set(sids), round_no=round_no, budget=50
        )
        assert picked == sids


def test_many_sessions_with_loops_here_are_looked_at_a_slice_per_round() -> None:
    sids = [f"s{i}" for i in range(1000)]
    seen: dict[str, int] = dict.fromkeys(sids, 0)
    for round_no in range(30):
        picked = sessions_to_check(
            sids, holds=lambda _: True, running=set(sids), round_no=round_no, budget=100
        )
        assert len(picked) < 200
        for sid in picked:
            seen[sid] += 1
    assert set(seen.values()) == {3}  # ten slices: each session every tenth round
