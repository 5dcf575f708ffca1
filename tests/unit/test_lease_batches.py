"""The lease keeper renews what the loop owns plus what it took and the loop has not
registered yet, each lease once; registering (``settle``) hands a lease over to ``owned``."""

from __future__ import annotations

import pytest

from planloop.core.keys import Keys
from planloop.supervisor.process.lease_keeper import LeaseKeeper, renewal_wait

Lease = tuple[str, str]


def keeper(owned: list[Lease]) -> LeaseKeeper:
    # No connection is made until a command runs: none does here.
    return LeaseKeeper(
        "redis://127.0.0.1:1/0",
        Keys("t"),
        1.5,
        owned=lambda: owned,
        lost=lambda lease: None,
        all_lost=lambda why: None,
    )


def test_fresh_leases_are_renewed_until_settled_and_never_twice() -> None:
    owned: list[Lease] = [("a", "ta")]
    k = keeper(owned)
    k._fresh.update({("b", "tb"), ("a", "ta")})  # as take() leaves them
    assert k._to_renew() == [("a", "ta"), ("b", "tb")]
    owned.append(("b", "tb"))
    k.settle([("a", "ta"), ("b", "tb")])
    assert k._to_renew() == [("a", "ta"), ("b", "tb")]
    assert not k._fresh


@pytest.mark.parametrize(("round_s", "wait_s"), [(0.0, 0.5), (0.2, 0.3), (0.5, 0.0), (1.01, 0.0)])
def test_renewal_rounds_start_a_third_of_the_ttl_apart_however_long_one_takes(
    round_s: float, wait_s: float
) -> None:
    assert renewal_wait(1.5, round_s) == pytest.approx(wait_s)
