"""The session hash's cancel field, looked at once a second at most.

The cancel's event on the stream ends a session at once; the field is for a loop that cannot
get that far (a cancel asked for before the session was loaded, or while it plans). So the
first look comes before the session's first dispatch, and the later ones (once a second)
after a turn's dispatch: a look is a round trip, and it would otherwise hold up the steps
an outcome just released, in one turn of each session per second.
"""

from __future__ import annotations

import time

from planloop.core.models import SessionStatus
from planloop.supervisor.io.store_port import SessionStorePort
from planloop.supervisor.session.ports import CANCEL_FIELD
from planloop.supervisor.session.state import SessionState

CANCEL_CHECK_INTERVAL_S = 1.0  # the session hash's cancel field, looked at this often


class CancelWatch:
    """Ends ``state`` cancelled when its session hash asks for it."""

    def __init__(self, store: SessionStorePort, state: SessionState) -> None:
        self.store = store
        self.state = state
        self._next_check = 0.0

    @property
    def never_looked(self) -> bool:
        """Neither this watch nor the start's read looked at the field yet."""
        return self._next_check == 0.0

    def looked(self) -> None:
        """The field was just read another way (with the lease): no need to look again yet."""
        self._next_check = time.monotonic() + CANCEL_CHECK_INTERVAL_S

    async def check(self) -> None:
        """A cancel asked for in the session hash wins over everything not yet done."""
        now = time.monotonic()
        if self.state.outcome is not None or now < self._next_check:
            return
        self._next_check = now + CANCEL_CHECK_INTERVAL_S
        await read_cancel(self.store, self.state)


async def read_cancel(store: SessionStorePort, state: SessionState) -> None:
    """End ``state`` cancelled if its session hash asks for it (read now, watched or not)."""
    reason = await store.session_field(state.sid, CANCEL_FIELD)
    if reason is not None:
        state.outcome = (SessionStatus.CANCELLED, reason or "cancelled by user")
