"""Which unfinished sessions a rebuild round looks for in Redis."""

from __future__ import annotations

from planloop.supervisor.io.rebuild import sessions_to_check


def test_sessions_of_shards_held_elsewhere_are_never_looked_at() -> None:
    picked = sessions_to_check(
        ["a", "b"], holds=lambda sid: sid == "a", running=set(), round_no=1, slices=10
    )
    assert picked == ["a"]


def test_sessions_without_a_loop_here_are_looked_at_every_round() -> None:
    sids = [f"s{i}" for i in range(50)]
    for round_no in range(20):
        assert (
            sessions_to_check(sids, holds=lambda _: True, running=set(), round_no=round_no) == sids
        )


def test_each_session_with_a_loop_here_is_looked_at_once_every_slices_rounds() -> None:
    sids = [f"s{i}" for i in range(200)]
    seen: dict[str, int] = dict.fromkeys(sids, 0)
    for round_no in range(30):
        for sid in sessions_to_check(
            sids, holds=lambda _: True, running=set(sids), round_no=round_no, slices=10
        ):
            seen[sid] += 1
    assert set(seen.values()) == {3}
