"""Where Planloop leans on Celery, kombu, redis-py and Flower beyond their documented APIs.

Each :class:`Seam` in :data:`SEAMS` is one such hook: what we rely on, where, what must stay
true, and the contract test that fails when a release changes it. The libraries are pinned in
pyproject.toml to the minor versions the seams were checked on (:data:`CHECKED`, which a unit
test keeps equal to the pins), and each process refuses at start-up what the hooks do not
support, as a :class:`~planloop.core.errors.ConfigError` naming the setting at fault:

* a library version outside :data:`CHECKED` (:func:`check_libraries`; pip only warns when
  another package's install replaces a pinned one);
* a Celery app whose broker is not Planloop's Redis transport on ``PLANLOOP_REDIS_URL``, or
  whose transport options break the hooks (:func:`check_celery_app`): the supervisor queues
  step messages and the worker's scripts acknowledge them on that Redis, in kombu's own
  unacked hash, under kombu's unprefixed key names.

To move to a new release: install it, run the contract tests named here
(``pytest tests/unit/test_library_seams.py tests/integration/test_library_seams.py`` and
the others listed), fix what fails, then raise :data:`CHECKED` and the pins together.

No Celery or kombu import here: the app is read through its attributes, so every process
(the producer too) can import the core without loading them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from planloop.config.celery import TRANSPORT, TRANSPORTS
from planloop.config.settings import Settings
from planloop.core.errors import ConfigError, LibraryVersionError
from planloop.core.redis_faults import redact_url
from planloop.core.redis_urls import same_redis

UNIT = "tests/unit/test_library_seams.py"
INTEGRATION = "tests/integration/test_library_seams.py"


@dataclass(frozen=True)
class Seam:
    """One hook into a library: ``hook`` as the library spells it, used in ``used_in``;
    ``assumes`` is what must stay true; ``contract`` the test that checks it."""

    library: str
    hook: str
    used_in: str
    assumes: str
    contract: str


SEAMS: tuple[Seam, ...] = (
    Seam(
        "kombu",
        "kombu.transport.redis.QoS.append / ack / reject / restore_unacked / pipe_or_acquire",
        "workers/transport.py",
        "append writes the unacked entry and index, then calls virtual.QoS.append; ack "
        "deletes both, then calls virtual.QoS.ack; _delivered holds the unacked tags",
        f"{UNIT}::test_kombus_private_methods_keep_their_signatures; "
        f"{UNIT}::test_kombus_qos_holds_a_received_messages_tag_in_delivered; "
        f"{INTEGRATION}::test_kombu_writes_and_acks_the_unacked_entry_a_receipt_writes",
    ),
    Seam(
        "kombu",
        "kombu.Message._raw",
        "workers/transport.py",
        "the message dict as it was queued, which the unacked entry holds",
        f"{UNIT}::test_kombus_qos_holds_a_received_messages_tag_in_delivered; "
        f"{INTEGRATION}::test_kombu_writes_and_acks_the_unacked_entry_a_receipt_writes",
    ),
    Seam(
        "kombu",
        "the unacked layout (hash 'unacked': tag -> JSON [message, exchange, routing_key]; "
        "sorted set 'unacked_index': tag by time of receipt)",
        "core/receipts.py, core/lua/attempts.py (StartAttempt, RecordOutcome), "
        "core/lua/session_writes.py (FencedWrite's QUEUE), supervisor/io/step_message.py",
        "kombu's default key names and entry format; kombu restores what the claim wrote, "
        "and an entry the dispatch wrote that the claim indexed",
        f"{UNIT}::test_kombus_unacked_key_names_are_the_receipts_defaults; "
        f"{INTEGRATION}::test_kombu_restores_an_entry_the_claim_script_wrote; "
        "tests/integration/test_receipts.py::"
        "test_a_dispatched_message_is_held_from_the_dispatch_and_its_claim_only_indexes_it",
    ),
    Seam(
        "kombu",
        "the queue layout (a queue is the Redis list named after it: LPUSH in, BRPOP out; "
        "an envelope's headers plain JSON in kombu's spelling)",
        "supervisor/io/redis_store.py (queue_length, queued), core/lua/attempts.py (Queued), "
        "core/metrics.py and core/routing.py (planloop_queue_depth)",
        "a message without a priority goes to the list named after its queue; a task id "
        'reads \'"id": "<id>"\' in the queued text (a step message kombu would push '
        "elsewhere is a DispatchError when its template is made)",
        f"{UNIT}::test_kombu_pushes_a_message_to_the_list_named_after_its_queue",
    ),
    Seam(
        "kombu",
        "kombu.transport.redis.Channel._restore(message, leftmost=False)",
        "workers/transport.py",
        "called for each message put back; reads the entry from the unacked hash",
        f"{UNIT}::test_kombus_private_methods_keep_their_signatures; "
        f"{INTEGRATION}::test_kombu_restores_an_entry_the_claim_script_wrote",
    ),
    Seam(
        "kombu",
        "kombu.transport.redis.Channel._create_client(asynchronous=False)",
        "workers/transport.py",
        "builds the channel's redis.Redis on its connection pool (Channel.pool) each time",
        f"{UNIT}::test_kombus_private_methods_keep_their_signatures; "
        f"{INTEGRATION}::test_a_stock_channel_builds_its_client_on_its_pool",
    ),
    Seam(
        "kombu",
        "Channel.basic_publish(..., _publish_batch=collector) (the publish-batch protocol)",
        "supervisor/io/step_message.py",
        "the final LPUSH / PUBLISH of a message is handed to collector.add, not run",
        "tests/unit/test_step_message.py; tests/integration/test_dispatch.py",
    ),
    Seam(
        "kombu",
        "kombu.transport.redis.Channel.from_transport_options",
        "core/seams.py (check_transport_options)",
        "every transport option kombu reads is one this module supports or refuses",
        f"{UNIT}::test_every_kombu_transport_option_is_supported_or_refused",
    ),
    Seam(
        "kombu",
        "kombu.transport.redis.Channel.global_keyprefix / ack_emulation (attributes)",
        "workers/transport.py (Channel.__init__)",
        "a channel holds each transport option it read as the attribute of that name, "
        "defaults '' and True, whoever built its connection (Flower, a foreign app)",
        f"{UNIT}::test_a_kombu_channel_holds_its_transport_options_as_attributes",
    ),
    Seam(
        "celery",
        "Celery.amqp.create_task_message (protocol 2) and celery.events.Event",
        "supervisor/io/step_message.py",
        "a message whose per-task values sit where the template puts them",
        "tests/unit/test_step_message.py; tests/integration/test_dispatch.py",
    ),
    Seam(
        "celery",
        "Celery.thread_oid",
        "supervisor/io/step_queue.py",
        "what send_task puts in a message's reply_to",
        f"{UNIT}::test_send_task_replies_to_the_apps_thread_oid",
    ),
    Seam(
        "celery",
        "celery.worker.consumer.Consumer._flush_events / on_send_event_buffered / hub "
        "(kombu.asynchronous.Hub.call_soon, call_later)",
        "workers/consumer.py",
        "the event dispatcher calls on_send_event_buffered for each buffered task event; "
        "_flush_events publishes what is buffered; the hub runs callbacks soon or later",
        f"{UNIT}::test_celerys_consumer_flushes_buffered_events_through_the_hooks; "
        f"{UNIT}::test_the_consumers_hub_schedules_callbacks_soon_and_later",
    ),
    Seam(
        "celery",
        "celery.worker.consumer.Consumer.create_task_handler() and the event dispatcher's "
        "groups (EventDispatcher.groups, a set; the worker's Events step gives it "
        "{'worker'} with task events off); EventDispatcher.producer.channel, exchange, headers",
        "workers/consumer.py (task events while a monitor listens), core/event_listeners.py",
        "create_task_handler returns the handler of each received task message; a dispatcher "
        "sends a group's events only while the group is in its groups (what Celery's "
        "enable_events control adds); its producer's channel publishes its events",
        f"{UNIT}::test_the_consumers_task_handler_and_the_dispatchers_groups_gate_task_events; "
        "tests/unit/test_event_listeners.py",
    ),
    Seam(
        "celery",
        "celery.bin.celery.celery.params[0].default",
        "workers/app.py (run_worker)",
        "the first parameter of the celery command is --app, whose default names the app",
        f"{UNIT}::test_the_celery_commands_first_parameter_is_app",
    ),
    Seam(
        "celery",
        "Celery(amqp=...).amqp.Connection and kombu.Connection.as_uri(include_password, "
        "mask, getfields)",
        "workers/transport.py (BrokerConnection, AMQP)",
        "the app's connections are built from amqp.Connection; as_uri keeps its signature",
        "tests/unit/test_task_states.py::test_the_broker_uri_names_the_redis_scheme_for_flower",
    ),
    Seam(
        "flower",
        "Flower's broker client chosen by the broker URI's scheme",
        "workers/transport.py (BrokerConnection)",
        "a redis:// (rediss://) URI gives the Broker page and /api/queues/length; Flower "
        "reads the URI from the app's connection's as_uri(include_password=True)",
        f"{UNIT}::test_flower_picks_its_redis_broker_client_for_the_apps_uri; "
        "tests/integration/test_flower.py",
    ),
    Seam(
        "redis",
        "Pipeline.execute(raise_on_error=False) with EVALSHA, and Script.sha",
        "supervisor/io/redis_store.py (_evalsha)",
        "a script Redis lost comes back as a NoScriptError in its place, the others run",
        f"{INTEGRATION}::test_a_pipeline_returns_noscript_in_place_of_a_lost_script",
    ),
    Seam(
        "redis",
        "redis.connection.parse_url (undocumented: what Redis.from_url reads a URL with)",
        "core/redis_urls.py (same_redis: Celery's broker against PLANLOOP_REDIS_URL)",
        "a dict of host, port, db, path and connection_class (SSLConnection for rediss://, "
        "UnixDomainSocketConnection for unix://); ValueError for a URL it cannot read",
        f"{UNIT}::test_redis_parse_url_returns_the_fields_same_redis_reads",
    ),
    Seam(
        "redis",
        "Sentinel connections and pools, sync and asyncio (SentinelManagedConnection, "
        "SentinelConnectionPool: send_packed_command, get_connection, get_master_address, "
        "release, master_address, is_master, sentinel_manager.sentinels, _sock, is_connected)",
        "core/redis_client.py (_MasterConnection, _MasterPool, _AsyncMasterPool; the TLS "
        "twins mix in SentinelManagedSSLConnection)",
        "subclasses may override those methods and read those attributes; get_master_address "
        "asks the sentinels and updates master_address; a sync connection's socket is _sock",
        f"{UNIT}::test_redis_sentinel_classes_keep_what_our_subclasses_override_and_read; "
        "tests/integration/test_sentinel_failover.py",
    ),
    Seam(
        "kombu",
        "kombu.transport.redis.SentinelTransport and its Channel (subclassed)",
        "workers/transport.py (SentinelTransport, SentinelChannel)",
        "the Channel class attribute is what the transport opens; master_name and "
        "sentinel_kwargs come from the broker's transport options",
        f"{UNIT}::test_kombus_sentinel_transport_opens_its_channel_class; "
        "tests/integration/test_sentinel_failover.py",
    ),
)


CHECKED: dict[str, tuple[int, int]] = {
    "celery": (5, 7),
    "kombu": (5, 7),
    "redis": (8, 1),
    "flower": (2, 2),
}
"""The minor version of each library the seams were checked on (pyproject.toml pins them)."""

# kombu transport options (Channel.from_transport_options) the hooks work with; the refused
# ones map to why. A contract test fails when kombu reads an option that is in neither.
SUPPORTED_TRANSPORT_OPTIONS = frozenset(
    {
        "body_encoding",
        "client_name",
        "deadletter_queue",
        "fanout_patterns",
        "fanout_prefix",
        "health_check_interval",
        "max_connections",
        "priority_steps",
        "queue_order_strategy",
        "retry_on_timeout",
        "sep",
        "socket_connect_timeout",
        "socket_keepalive",
        "socket_keepalive_options",
        "socket_timeout",
        "unacked_index_key",  # a receipt carries the names its channel used
        "unacked_key",
        "unacked_mutex_expire",
        "unacked_mutex_key",
        "unacked_restore_interval",
        "unacked_restore_limit",
        "unacked_restore_throttle",
        "visibility_timeout",
    }
)
REFUSED_TRANSPORT_OPTIONS: dict[str, str] = {
    "global_keyprefix": "kombu would prefix its keys, but the supervisor queues step messages "
    "and the worker's scripts write kombu's unacked entries under the unprefixed names "
    "(use PLANLOOP_KEY_PREFIX, or a Redis database of its own, to share a Redis)",
    "ack_emulation": "the worker's scripts hold and acknowledge step messages in kombu's "
    "unacked hash, which exists only with kombu's ack emulation",
}


def installed_version(library: str) -> str | None:
    """The installed version of ``library`` (a distribution name), None when not installed."""
    try:
        return metadata.version(library)
    except metadata.PackageNotFoundError:
        return None


def check_libraries(*libraries: str) -> None:
    """Raises LibraryVersionError for the first of ``libraries`` installed at a minor
    version other than :data:`CHECKED`'s (one not installed is for the import to report)."""
    for library in libraries:
        version = installed_version(library)
        if version is None:
            continue
        major, minor = CHECKED[library]
        if _minor(version) != (major, minor):
            raise LibraryVersionError(library, version, f"{major}.{minor}")


def _minor(version: str) -> tuple[int, int] | None:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def check_celery_app(app: Any, settings: Settings) -> None:
    """Refuse a Celery app whose configuration the hooks do not support (module docstring):
    the libraries' versions, the broker URLs (Celery reads ``CELERY_BROKER_URL`` and its
    read/write variants over the app's own), the transport, its options.

    Raises:
        ConfigError: naming the Celery setting or environment variable at fault.
    """
    check_libraries("celery", "kombu", "redis")
    conf = app.conf
    for name in ("broker_url", "broker_read_url", "broker_write_url"):
        url = getattr(conf, name, None)
        if url and not same_redis(str(url), settings.redis_url):
            setting = _celery_setting(name)
            raise ConfigError(
                f"{setting} is {redact_url(str(url))!r}, not PLANLOOP_REDIS_URL "
                f"({redact_url(settings.redis_url)!r}): Planloop queues and acknowledges step "
                f"messages with scripts on PLANLOOP_REDIS_URL, so Celery's broker must be that "
                f"Redis; unset {setting}{_config_source()}",
                setting=setting,
            )
    if conf.broker_transport not in TRANSPORTS:
        raise ConfigError(
            f"Celery's broker_transport is {conf.broker_transport!r}; Planloop's hooks need "
            f"its own Redis transport {TRANSPORT!r} (remove the setting from the Celery "
            "configuration)",
            setting="broker_transport",
        )
    check_transport_options(conf.broker_transport_options or {})


def check_transport_options(options: Mapping[str, Any]) -> None:
    """Raises ConfigError for a kombu transport option the hooks do not support."""
    for name, why in REFUSED_TRANSPORT_OPTIONS.items():
        value = options.get(name)
        if name == "ack_emulation" and value is not False:
            continue
        if name == "global_keyprefix" and not value:
            continue
        setting = f"broker_transport_options[{name!r}]"
        raise ConfigError(
            f"Celery's {setting} is not supported: {why}; remove it from the Celery "
            f"configuration{_config_source()}",
            setting=setting,
        )


def _celery_setting(name: str) -> str:
    """The environment variable that set Celery's ``name``, else the setting's own name."""
    variable = f"CELERY_{name.upper()}"
    return variable if os.environ.get(variable) else f"Celery's {name}"


def _config_source() -> str:
    module = os.environ.get("CELERY_CONFIG_MODULE")
    return f" (CELERY_CONFIG_MODULE={module})" if module else ""
