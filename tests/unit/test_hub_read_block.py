"""How long the event hub's one read blocks."""

from __future__ import annotations

from planloop.supervisor.io.event_hub import READ_BLOCK_MAX_MS, read_block_ms


def test_without_a_socket_timeout_the_read_blocks_the_longest() -> None:
    assert read_block_ms(None) == READ_BLOCK_MAX_MS
    assert read_block_ms(0) == READ_BLOCK_MAX_MS


def test_the_read_blocks_well_inside_a_socket_timeout() -> None:
    assert read_block_ms(5.0) == 2_500
    assert read_block_ms(60.0) == READ_BLOCK_MAX_MS
    assert read_block_ms(0.01) == 50  # never a busy loop
