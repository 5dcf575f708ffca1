"""Planloop's exceptions. Every one a user can meet derives from :class:`PlanloopError`.

The tree draws every subclass there is (tests/unit/test_errors_tree.py keeps it so); one
defined in another module names that module in brackets. The errors without brackets are
written one family per module (``error_base``, ``config_errors``, ``plan_errors``,
``tool_errors``, ``session_errors``, ``llm_errors``) and live here: they are imported from
here, and their ``__module__`` (what a traceback or a pickle names) is this module.

::

    PlanloopError
    ├── ConfigError                 settings that cannot work (no LLM endpoint for --goal, a
    │   │                           Redis URL that is not one, a database driver not installed,
    │   │                           ...); ``setting`` names the PLANLOOP_* variable or option
    │   ├── PortInUseError          a server's port is taken; names the port and what chose it
    │   ├── CredentialsError        no login for a console or Flower on a non-loopback
    │   │                           address, or a users entry that cannot be read
    │   ├── LibraryVersionError     Celery, kombu, redis-py or Flower at a minor version
    │   │                           Planloop's hooks into it were not checked on (core/seams.py)
    │   ├── ToolModuleError         a PLANLOOP_TOOL_MODULES module that cannot be imported
    │   ├── SchemaBehindError       [planloop.core.migrate] the SQL record's schema is older
    │   │                           than this Planloop needs: run `planloop db upgrade`
    │   ├── SentinelMasterMissingError  [planloop.core.redis_client] a sentinel:// Redis URL
    │   │                           without PLANLOOP_REDIS_SENTINEL_MASTER
    │   └── BadLessonError          [planloop.producer.lesson_add] a seeded lesson that does
    │                               not pass its checks
    ├── InputLimitError             a goal, signal or reason that breaks an input limit
    ├── PlanError                   a plan that cannot run; names the culprit
    │   ├── PlanLoadError           unreadable file, bad YAML/JSON, schema mismatch
    │   ├── PlanValidationError     duplicate id, unknown dependency, cycle, unknown tool,
    │   │                           params that do not fit, reference to a non-ancestor
    │   ├── PlanReferenceError      a {{step.output.path}} that cannot be resolved at dispatch
    │   ├── RepeatedPlanError       a re-plan that repeats a plan that already failed
    │   └── NoLiveWorkerError       a plan's tool that no live worker serves (submit refuses it)
    ├── ToolError                   raised by or about a tool
    │   ├── UnknownToolError        no tool registered under that name
    │   ├── TransientToolError      worth retrying (network blip, 5xx, rate limit)
    │   │   └── EffectNotRecordedError  a write's key was claimed but holds no receipt
    │   ├── StoreWriteError         the effect ledger could not write (disk full, locked):
    │   │                           an infrastructure fault, retried once the store recovers
    │   ├── LateEffectRefused       an effect asked for after its attempt timed out (refused)
    │   ├── PermanentToolError      retrying cannot help (bad input, not found)
    │   │   ├── OutputTooLarge      an output or param above value_max_bytes
    │   │   ├── ToolParamsError     params that do not fit the tool's schema
    │   │   ├── AgentStepExhausted  an agent step gave no final answer within its turns
    │   │   └── AgentStepStalled    an agent step's loop stopped making progress (the same
    │   │                           call and result, or refused calls, again and again)
    │   ├── ToolTimeoutError        the tool ran past its timeout
    │   └── StepAttemptFailed       the step task's Celery FAILURE, raised after the outcome
    │                               is recorded (Flower shows it; the supervisor reads streams)
    ├── SessionError                about one session
    │   ├── SessionNotFoundError
    │   ├── StepNotFoundError       no version of the session's plan has that step (console)
    │   ├── FencedOutError          a write carried a stale epoch: another supervisor owns it
    │   ├── SessionEndedError       the session has ended; it is never reopened or rewritten
    │   ├── CommandRefusedError     retry/skip/approve of a step that does not exist or whose
    │   │                           state the command cannot apply to (nothing was sent)
    │   ├── SessionInputRefusedError  a stored session that breaks the input limits (written
    │   │   │                       past the producer): it ends failed before anything runs
    │   │   └── StoredSessionError  its hash does not parse (options out of range, not JSON)
    │   ├── PlanVersionNotFoundError  `planloop fork --version N` of a version the session lacks
    │   ├── ContinueRefusedError    `planloop continue` of a session still running, or that
    │   │                           did not end failed/aborted by its deadline or a budget
    │   └── HotStateLostError       the session's hot state vanished from Redis while it was
    │                               loaded (it is rebuilt from the SQL record)
    ├── WaitTimeoutError            [planloop.client] Client.wait ran out of time; the session
    │                               goes on
    ├── DispatchError               a step message the supervisor cannot build from its
    │                               template (supervisor/io/step_message.py: Celery or kombu
    │                               changed it, or a queue kombu would publish to otherwise)
    └── LLMError                    the model endpoint failed or answered garbage
        ├── LLMUnavailableError     unreachable, refused, or still failing after the retries
        ├── LLMResponseError        an answer that is not usable JSON; carries the raw text
        └── LLMBudgetSpentError     no call starts: the session's token or cost budget is spent

Outside the tree, never shown to a user as such: ``YamlLimitError``
[planloop.planner.safe_yaml] (a ``ValueError``, which its callers turn into PlanLoadError or
BadLessonError), ``ReactStopped`` [planloop.planner.react] (ends an agent loop from inside),
``ScriptedNonRetryable`` [planloop.workers.toolsets.bench] (a bench tool's own error type),
``JsonInputError`` [planloop.core.json_input] (a ``ValueError`` about a JSON document, turned
into PlanLoadError or a 400 by its callers), ``BodyTooLargeError``
[planloop.console.hardening] (a chunked request body past the limit, answered 413),
``_NotServed`` [planloop.workers.late_effects] (a late effect's compensation this worker
does not serve: the row is left for one that does, or failed with the reason).
"""

from __future__ import annotations

from planloop.core.config_errors import (
    ConfigError,
    CredentialsError,
    LibraryVersionError,
    PortInUseError,
    ToolModuleError,
)
from planloop.core.error_base import DispatchError, InputLimitError, PlanloopError
from planloop.core.llm_errors import (
    LLMBudgetSpentError,
    LLMError,
    LLMResponseError,
    LLMUnavailableError,
)
from planloop.core.plan_errors import (
    NoLiveWorkerError,
    PlanError,
    PlanLoadError,
    PlanReferenceError,
    PlanValidationError,
    RepeatedPlanError,
)
from planloop.core.session_errors import (
    CommandRefusedError,
    ContinueRefusedError,
    FencedOutError,
    HotStateLostError,
    PlanVersionNotFoundError,
    SessionEndedError,
    SessionError,
    SessionInputRefusedError,
    SessionNotFoundError,
    StepNotFoundError,
    StoredSessionError,
)
from planloop.core.tool_errors import (
    AgentStepExhausted,
    AgentStepStalled,
    EffectNotRecordedError,
    LateEffectRefused,
    OutputTooLarge,
    PermanentToolError,
    StepAttemptFailed,
    StoreWriteError,
    ToolError,
    ToolParamsError,
    ToolTimeoutError,
    TransientToolError,
    UnknownToolError,
)

__all__ = [
    "AgentStepExhausted",
    "AgentStepStalled",
    "CommandRefusedError",
    "ConfigError",
    "ContinueRefusedError",
    "CredentialsError",
    "DispatchError",
    "EffectNotRecordedError",
    "FencedOutError",
    "HotStateLostError",
    "InputLimitError",
    "LLMBudgetSpentError",
    "LLMError",
    "LLMResponseError",
    "LLMUnavailableError",
    "LateEffectRefused",
    "LibraryVersionError",
    "NoLiveWorkerError",
    "OutputTooLarge",
    "PermanentToolError",
    "PlanError",
    "PlanLoadError",
    "PlanReferenceError",
    "PlanValidationError",
    "PlanVersionNotFoundError",
    "PlanloopError",
    "PortInUseError",
    "RepeatedPlanError",
    "SessionEndedError",
    "SessionError",
    "SessionInputRefusedError",
    "SessionNotFoundError",
    "StepAttemptFailed",
    "StepNotFoundError",
    "StoreWriteError",
    "StoredSessionError",
    "ToolError",
    "ToolModuleError",
    "ToolParamsError",
    "ToolTimeoutError",
    "TransientToolError",
    "UnknownToolError",
]
