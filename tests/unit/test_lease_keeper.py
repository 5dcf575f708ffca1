"""The lease keeper's pure parts: when rounds start, and a hold retired once per token."""

from __future__ import annotations

import pytest

from planloop.core.keys import Keys
from planloop.core.shards import token_owner
from planloop.supervisor.process.lease_keeper import LeaseKeeper, renewal_wait


def keeper() -> LeaseKeeper:
    # No connection is made until a command runs: none does here.
    return LeaseKeeper(
        "redis://127.0.0.1:1/0", Keys("t"), 1.5, owner="sup-1", all_lost=lambda why: None
    )


def test_a_retired_token_is_replaced_once_and_names_the_same_owner() -> None:
    k = keeper()
    first = k.token
    assert token_owner(first) == "sup-1"
    k._retire(first, "lapsed")
    second = k.token
    assert second != first
    assert token_owner(second) == "sup-1"
    k._retire(first, "lapsed again")  # a late report about the old token changes nothing
    assert k.token == second


@pytest.mark.parametrize(("round_s", "wait_s"), [(0.0, 0.5), (0.2, 0.3), (0.5, 0.0), (1.01, 0.0)])
def test_renewal_rounds_start_a_third_of_the_ttl_apart_however_long_one_takes(
    round_s: float, wait_s: float
) -> None:
    assert renewal_wait(1.5, round_s) == pytest.approx(wait_s)
