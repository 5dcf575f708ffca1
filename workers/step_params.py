"""A step attempt's params as the tool gets them: those sent by reference (too big to
travel in the message, core/values.py) read back from their stored copy in Redis."""

from __future__ import annotations

import json
from typing import Any

from planloop.core.errors import OutputTooLarge, TransientToolError
from planloop.core.hot_state import HotState
from planloop.core.models import StepTaskArgs
from planloop.core.values import ValueLimits, walk


def step_params(args: StepTaskArgs, state: HotState, limits: ValueLimits) -> dict[str, Any]:
    """The params of ``args``, every reference resolved.

    Raises:
        OutputTooLarge: a referenced value is above ``limits.max_bytes`` (permanent).
        TransientToolError: a referenced value is no longer in Redis (the supervisor
            stores it again when it dispatches the next attempt).
    """
    if not args.param_refs:
        return args.params
    params, limit = dict(args.params), limits.max_bytes
    for name, ref in args.param_refs.items():
        if ref.size > limit:
            raise OutputTooLarge(args.step_id, f"param {name!r}", size=ref.size, limit=limit)
        text = state.blob_text(ref.digest)
        if text is None:
            raise TransientToolError(
                f"param {name!r}: its stored value is no longer in Redis; the supervisor "
                "stores it again when it dispatches the next attempt"
            )
        params[name] = walk(json.loads(text), ref.path)
    return params
