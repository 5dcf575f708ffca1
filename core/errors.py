"""Planloop's exceptions. Every one a user can meet derives from :class:`PlanloopError`.

The tree draws every subclass there is (tests/unit/test_errors_tree.py keeps it so); one
defined in another module names that module in brackets.

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
    │   │                           past the producer): it ends failed before anything runs
    │   └── HotStateLostError       the session's hot state vanished from Redis while it was
    │                               loaded (it is rebuilt from the SQL record)
    ├── WaitTimeoutError            [planloop.client] Client.wait ran out of time; the session
    │                               goes on
    ├── DispatchError               a step message the supervisor cannot build from its
    │                               template (supervisor/step_message.py: Celery or kombu
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
[planloop.console.hardening] (a chunked request body past the limit, answered 413).
"""

from __future__ import annotations


class PlanloopError(Exception):
    """Root of every Planloop error."""


class ConfigError(PlanloopError):
    """Settings that cannot work (together); ``setting`` names the ``PLANLOOP_*`` variable
    or the command-line option at fault, when one is."""

    def __init__(self, message: str, *, setting: str | None = None) -> None:
        self.setting = setting
        super().__init__(message)


class PortInUseError(ConfigError):
    """``address:port``, chosen by ``setting`` (a ``PLANLOOP_*`` variable or an option),
    is taken by another process."""

    def __init__(self, address: str, port: int, *, setting: str) -> None:
        self.address = address
        self.port = port
        super().__init__(
            f"port {port} on {address} is in use (chosen by {setting}): stop what listens "
            f"there, or choose another port with {setting}",
            setting=setting,
        )


class CredentialsError(ConfigError):
    """A console or Flower that cannot get a login it may serve with: none configured for
    a non-loopback address, or a console users entry that cannot be read. The message says
    which setting to give and never echoes a password or a hash."""


class LibraryVersionError(ConfigError):
    """``library`` is installed at ``version``; Planloop's hooks into it were checked on
    ``checked`` (a minor version: core/seams.py)."""

    def __init__(self, library: str, version: str, checked: str) -> None:
        self.library, self.version, self.checked = library, version, checked
        major, minor = (int(part) for part in checked.split("."))
        super().__init__(
            f"{library} {version} is installed, but Planloop's hooks into {library} were "
            f"checked on {checked}.x only (core/seams.py): install "
            f"'{library}>={checked},<{major}.{minor + 1}'",
            setting=library,
        )


class ToolModuleError(ConfigError):
    """A module named by ``PLANLOOP_TOOL_MODULES`` that cannot be imported.

    ``missing`` tells the two cases apart: None when the module itself is not found (not
    installed, its folder not on the path), else the name the module's own import failed on
    (a dependency of the module that is not installed); ``reason`` is that failure in a line.
    """

    def __init__(self, module: str, *, missing: str | None = None, reason: str = "") -> None:
        self.module, self.missing, self.reason = module, missing, reason
        where = f"tool module {module!r} (PLANLOOP_TOOL_MODULES)"
        if missing is None and not reason:
            message = (
                f"{where} is not importable here: install it into this environment, or put "
                "the folder that holds it on PYTHONPATH (`planloop worker` also imports from "
                "the directory it is started in)"
            )
        elif missing is not None:
            message = (
                f"{where} was found, but its own import of {missing!r} failed: install "
                f"{missing!r} into this environment (or fix that import in {module!r})"
            )
        else:
            message = f"{where} was found, but importing it failed: {reason}"
        super().__init__(message, setting="PLANLOOP_TOOL_MODULES")


class InputLimitError(PlanloopError):
    """Text a person sent (``what``: goal, signal, ...) breaks an input limit."""

    def __init__(self, what: str, problem: str) -> None:
        self.what = what
        super().__init__(f"{what}: {problem}")


class PlanError(PlanloopError):
    """A plan that cannot run."""


class PlanLoadError(PlanError):
    """A plan file or document that cannot be read into a plan."""

    def __init__(self, message: str, *, source: str | None = None) -> None:
        self.source = source
        super().__init__(f"{source}: {message}" if source else message)


class PlanValidationError(PlanError):
    """A plan that breaks a rule; ``step_id`` names the culprit when there is one."""

    def __init__(self, message: str, *, step_id: str | None = None) -> None:
        self.step_id = step_id
        super().__init__(message)


class PlanReferenceError(PlanError):
    """Step ``step_id``'s params hold ``reference``, which points at no recorded output."""

    def __init__(self, message: str, *, step_id: str, reference: str) -> None:
        self.step_id = step_id
        self.reference = reference
        super().__init__(f"step {step_id!r}: cannot resolve {reference}: {message}")


class RepeatedPlanError(PlanError):
    """A proposed plan (or sub-graph) whose ``fingerprint`` matches one that already failed."""

    def __init__(self, message: str, *, fingerprint: str) -> None:
        self.fingerprint = fingerprint
        super().__init__(message)


class NoLiveWorkerError(PlanError):
    """No live worker on the queue serves ``tools``; ``live`` is each live worker's name with
    the toolsets it serves."""

    def __init__(
        self, tools: list[str], live: dict[str, list[str]], *, waited_s: float = 0
    ) -> None:
        self.tools = tools
        self.live = live
        served = (
            "; ".join(f"{name} ({', '.join(sets) or 'no tools'})" for name, sets in live.items())
            if live
            else "none"
        )
        waited = f" after waiting {waited_s:g}s" if waited_s else ""
        super().__init__(
            f"no live worker serves {', '.join('any tool' if t == '*' else t for t in tools)}"
            f"{waited}; live workers: {served}. Start "
            "a worker whose PLANLOOP_TOOL_MODULES provides it, or submit with "
            "--wait-for-workers[=SECONDS]"
        )


class ToolError(PlanloopError):
    """Raised by or about a tool."""


class UnknownToolError(ToolError):
    """No tool is registered under ``tool_name``."""

    def __init__(self, tool_name: str, known: list[str] | None = None) -> None:
        self.tool_name = tool_name
        hint = f"; known tools: {', '.join(sorted(known))}" if known else ""
        super().__init__(f"unknown tool {tool_name!r}{hint}")


class TransientToolError(ToolError):
    """A failure worth retrying."""


class EffectNotRecordedError(TransientToolError):
    """The effect ledger found ``idempotency_key`` claimed by another attempt but no receipt."""

    def __init__(self, idempotency_key: str) -> None:
        self.idempotency_key = idempotency_key
        super().__init__(
            f"effect {idempotency_key!r}: another attempt claimed it but committed no receipt; "
            "the step will be retried"
        )


class PermanentToolError(ToolError):
    """A failure that retrying cannot fix."""


class ToolParamsError(PermanentToolError):
    """Params that do not fit tool ``tool_name``'s schema: permanent, since the same params
    fail the same schema on every attempt."""

    def __init__(self, tool_name: str, problem: str) -> None:
        self.tool_name = tool_name
        super().__init__(f"tool {tool_name!r}: params do not fit: {problem}")


class StepAttemptFailed(ToolError):  # noqa: N818 (the state Flower shows, as it reads)
    """Attempt ``attempt`` of step ``step_id`` (tool ``tool``) in session ``session_id`` did
    not complete: raised by the Celery task after its outcome and event are recorded, so
    Celery (and Flower) show the task as FAILURE. ``message`` is the outcome's masked error.

    Keyword fields with defaults: pickling (the prefork pool) rebuilds it from the message.
    """

    def __init__(
        self,
        message: str,
        *,
        session_id: str = "",
        step_id: str = "",
        attempt: int = 0,
        tool: str = "",
        error_kind: str = "",
    ) -> None:
        self.session_id = session_id
        self.step_id = step_id
        self.attempt = attempt
        self.tool = tool
        self.error_kind = error_kind
        super().__init__(message)


class OutputTooLarge(PermanentToolError):  # noqa: N818 (the name users see)
    """Step ``step_id``'s ``what`` (its output, or one param) is ``size`` bytes of JSON, above
    ``limit``: permanent, since the same call makes the same value again."""

    def __init__(self, step_id: str, what: str, *, size: int, limit: int) -> None:
        self.step_id = step_id
        self.what = what
        self.size = size
        self.limit = limit
        super().__init__(
            f"step {step_id!r}: its {what} is {size:,} bytes of JSON, above the limit of "
            f"{limit:,} bytes; make the tool return less (store the data elsewhere and pass "
            "a link), or raise PLANLOOP_VALUE_MAX_BYTES"
        )


class AgentStepExhausted(PermanentToolError):  # noqa: N818 (reads as what happened)
    """Agent step ``step_id`` used its ``max_iterations`` turns without a final answer."""

    def __init__(self, step_id: str, max_iterations: int) -> None:
        self.step_id = step_id
        self.max_iterations = max_iterations
        super().__init__(
            f"agent step {step_id!r} gave no final answer within {max_iterations} turn(s); "
            "raise its params.max_iterations or narrow its instruction"
        )


class AgentStepStalled(PermanentToolError):  # noqa: N818 (reads as what happened)
    """Agent step ``step_id`` stopped making progress: ``rule`` fired after ``count`` turns in
    a row whose calls were ``call`` (the last one, as ``tool {params}``).

    ``rule`` is ``"repeated"`` (the same tool with the same params gave the same observation
    each time) or ``"refused"`` (each call was refused before it ran: a tool the step may not
    use, or params that do not fit). Permanent: the same loop would stall again.
    """

    def __init__(self, step_id: str, rule: str, count: int, call: str, detail: str = "") -> None:
        self.step_id = step_id
        self.rule = rule
        self.count = count
        self.call = call
        self.detail = detail
        if rule == "refused":
            what = f"{count} tool calls in a row were refused; the last: {call}"
        else:
            what = f"the same call gave the same observation {count} times in a row: {call}"
        why = f" ({detail})" if detail else ""
        super().__init__(
            f"agent step {step_id!r} stalled ({rule}): {what}{why}. The loop stopped without "
            "asking the model again; give the step the tools it needs, narrow its "
            "instruction, or re-plan it as explicit steps"
        )


class ToolTimeoutError(ToolError):
    """The tool ran past ``timeout_s``."""

    def __init__(self, tool_name: str, timeout_s: float) -> None:
        self.tool_name = tool_name
        self.timeout_s = timeout_s
        super().__init__(f"tool {tool_name!r} ran past its timeout of {timeout_s:g}s")


class SessionError(PlanloopError):
    """About one session."""

    def __init__(self, message: str, *, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(message)


class SessionNotFoundError(SessionError):
    """No session with that id."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id!r}", session_id=session_id)


class StepNotFoundError(SessionError):
    """No version of the session's plan has a step with that id."""

    def __init__(self, session_id: str, step_id: str) -> None:
        self.step_id = step_id
        super().__init__(
            f"session {session_id!r} has no step {step_id!r} in any plan version",
            session_id=session_id,
        )


class FencedOutError(SessionError):
    """A write carried epoch ``epoch``; the session has moved on to a newer owner."""

    def __init__(self, session_id: str, epoch: int) -> None:
        self.epoch = epoch
        super().__init__(
            f"session {session_id}: epoch {epoch} is stale, another supervisor owns it",
            session_id=session_id,
        )


class SessionEndedError(SessionError):
    """The session ended ``status``: ended is final, nothing reopens or rewrites it."""

    def __init__(self, session_id: str, status: str) -> None:
        self.status = status
        super().__init__(
            f"session {session_id} has ended ({status}); an ended session is never reopened",
            session_id=session_id,
        )


class CommandRefusedError(SessionError):
    """A person's ``command`` (retry, skip, approve) cannot apply to step ``step_id`` of the
    session (``None``: to the session itself), which is ``state`` (a step status, ``None``
    for a step that does not exist); ``reason`` says why. Nothing was sent."""

    def __init__(
        self,
        session_id: str,
        command: str,
        step_id: str | None,
        state: str | None,
        reason: str,
    ) -> None:
        self.command = command
        self.step_id = step_id
        self.state = state
        what = f"step {step_id!r} of session {session_id}" if step_id else f"session {session_id}"
        super().__init__(
            f"cannot {command} {what}: {reason} (nothing was sent)", session_id=session_id
        )


class SessionInputRefusedError(SessionError):
    """A session as stored breaks what the producer would have refused (``reason``): written
    by something other than Planloop's producer. It ends failed before anything runs; no
    crash is counted (it would fail the same way on every supervisor)."""

    def __init__(self, session_id: str, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"session {session_id} refused before it started: {reason}", session_id=session_id
        )


class HotStateLostError(SessionError):
    """The session's hot state vanished while it was being loaded (Redis lost its data)."""

    def __init__(self, session_id: str, what: str) -> None:
        super().__init__(
            f"session {session_id}: {what} vanished from Redis while the session was loaded "
            "(Redis lost its data); it is rebuilt from the SQL record if one was written",
            session_id=session_id,
        )


class DispatchError(PlanloopError):
    """A step attempt could not be turned into a Celery message."""


class LLMError(PlanloopError):
    """The model endpoint failed, or answered something we could not use."""


class LLMUnavailableError(LLMError):
    """The endpoint at ``base_url`` could not be reached, refused us, or kept failing.

    ``status`` is the last HTTP status, or ``None`` when no answer came back at all.
    """

    def __init__(self, message: str, *, base_url: str, status: int | None = None) -> None:
        self.base_url = base_url
        self.status = status
        super().__init__(message)


class LLMResponseError(LLMError):
    """The model answered for ``role`` with text that is not the JSON we asked for.

    ``raw`` holds the model's last answer verbatim, for the session record and debugging.
    """

    def __init__(self, message: str, *, raw: str, role: str | None = None) -> None:
        self.raw = raw
        self.role = role
        super().__init__(message)


class LLMBudgetSpentError(LLMError):
    """No call for ``role`` was started: session ``session_id`` has spent its LLM budget.

    The message says which budget and how much of it (``token budget spent (5100 of 5000
    tokens)``); raise ``--max-tokens`` / ``--max-cost-usd`` to give the session more.
    """

    def __init__(self, spent: str, *, session_id: str, role: str) -> None:
        self.spent = spent
        self.session_id = session_id
        self.role = role
        super().__init__(f"{spent}: no {role} call is started (session {session_id})")
