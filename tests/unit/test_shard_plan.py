"""Which session shards a supervisor takes and gives back (process/shard_plan.py), and the
shard of a session (core/shards.py)."""

from __future__ import annotations

from planloop.core.shards import gone_holders, live_holders, shard_of, shard_token, token_owner
from planloop.supervisor.process.shard_plan import (
    ShardMoves,
    ShardView,
    fair_share,
    plan_moves,
    update_free_since,
)

N = 8


def view(holders: dict[int, str | None], live: list[str], me: str = "a", **kw: object) -> ShardView:
    full = {s: holders.get(s) for s in range(N)}
    return ShardView(me=me, shards=N, holders=full, live=live, **kw)  # type: ignore[arg-type]


def test_a_sessions_shard_is_stable_and_spread() -> None:
    assert shard_of("20260101-120000-0a1b2c3d", 64) == shard_of("20260101-120000-0a1b2c3d", 64)
    spread = {shard_of(f"20260101-120000-{n:08x}", 64) for n in range(1_000)}
    assert spread == set(range(64))
    assert shard_of("x", 1) == 0


def test_a_lease_token_names_its_holder_even_with_colons_in_the_name() -> None:
    assert token_owner(shard_token("sup:host:1", "abc")) == "sup:host:1"
    assert token_owner(None) is None
    assert token_owner("") is None


def test_a_holder_counts_while_its_token_lives_and_is_gone_once_none_of_its_tokens_does() -> None:
    tokens = ["b:1", "b:1", "c:2", "c:1", None]
    holders = live_holders(tokens, alive={"c:2"})
    assert holders == [None, None, "c", None, None]
    # b's only token is dead: gone; c still holds a shard under a live token: not gone.
    assert gone_holders(tokens, holders) == {"b"}
    assert gone_holders([None, None], [None, None]) == set()


def test_fair_share_rounds_up_and_counts_the_supervisor_itself() -> None:
    assert fair_share(64, [], "a") == 64
    assert fair_share(64, ["a", "b"], "a") == 32
    assert fair_share(64, ["b", "c"], "a") == 22
    assert fair_share(3, ["a", "b", "c", "d"], "a") == 1


def test_a_lone_supervisor_takes_every_free_shard() -> None:
    moves = plan_moves(view({}, ["a"]))
    assert moves.take == list(range(N))
    assert moves.give_back == []


def test_two_starting_together_each_take_up_to_half() -> None:
    moves = plan_moves(view({}, ["a", "b"]))
    assert len(moves.take) == N // 2
    assert moves.give_back == []


def test_a_new_peer_gets_half_given_back_the_least_busy_first() -> None:
    holders: dict[int, str | None] = dict.fromkeys(range(N), "a")
    running = {s: 10 - s for s in range(N)}  # shard 7 runs fewest sessions
    moves = plan_moves(view(holders, ["a", "b"]), running)
    assert moves.take == []
    assert moves.give_back == [7, 6, 5, 4]
    # the newcomer waits for them (nothing is free yet) and gives nothing back
    assert plan_moves(view(holders, ["a", "b"], me="b")) == ShardMoves(take=[], give_back=[])


def test_shares_settle_without_moving_again() -> None:
    holders: dict[int, str | None] = {s: "a" if s < 3 else "b" if s < 6 else "c" for s in range(N)}
    for me in ("a", "b", "c"):
        moves = plan_moves(view(holders, ["a", "b", "c"], me=me))
        assert moves.take == []
        assert moves.give_back == []


def test_shards_given_back_are_not_taken_again_before_the_grace() -> None:
    holders: dict[int, str | None] = {s: "a" if s < 4 else None for s in range(N)}
    free = dict.fromkeys(range(4, N), 10.0)
    early = plan_moves(view(holders, ["a", "b"], free_since=free, now=11.0, grace_s=1.5))
    assert early.take == []
    late = plan_moves(view(holders, ["a", "b"], free_since=free, now=11.5, grace_s=1.5))
    assert late.take == [4, 5, 6, 7]  # nobody under its share came for them: orphans


def test_a_dead_peers_shards_are_taken_at_once_when_it_no_longer_renews() -> None:
    holders: dict[int, str | None] = {s: "a" if s < 4 else None for s in range(N)}
    moves = plan_moves(view(holders, ["a"]))  # b stopped renewing: not live
    assert moves.take == [4, 5, 6, 7]


def test_free_since_keeps_the_first_sighting_and_drops_shards_taken() -> None:
    first = update_free_since({}, {0: None, 1: "a"}, 2, now=1.0)
    assert first == {0: 1.0}
    assert update_free_since(first, {0: None, 1: None}, 2, now=2.0) == {0: 1.0, 1: 2.0}
    assert update_free_since(first, {0: "b", 1: None}, 2, now=3.0) == {1: 3.0}
