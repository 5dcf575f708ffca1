"""Contract tests of the library seams (core/seams.py) that need no Redis, and the guards.

Each contract test fails when Celery, kombu or redis-py changes what a hook relies on; the
ones on real Redis are in tests/integration/test_library_seams.py.
"""

from __future__ import annotations

import inspect
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.bin.celery import celery as celery_command
from celery.events.dispatcher import EventDispatcher
from celery.worker.consumer import Consumer as CeleryConsumer
from celery.worker.consumer import events as consumer_events
from flower.app import Flower as FlowerApp
from flower.utils.broker import Broker as FlowerBroker
from flower.utils.broker import Redis as FlowerRedisBroker
from kombu import Connection, Exchange, Producer, Queue
from kombu.asynchronous import Hub
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from packaging.requirements import Requirement
from redis.connection import SSLConnection, UnixDomainSocketConnection, parse_url

from planloop.config.celery import TRANSPORT, celery_config
from planloop.config.settings import Settings
from planloop.core import seams
from planloop.core.errors import ConfigError, LibraryVersionError
from planloop.core.receipts import KOMBU_UNACKED, KOMBU_UNACKED_INDEX
from planloop.workers import transport
from planloop.workers.app import create_app, run_worker

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = Settings(redis_url="redis://127.0.0.1:6379/9")


@pytest.fixture
def app() -> Iterator[Celery]:
    app = Celery("seams", set_as_current=False)
    app.conf.update(celery_config(SETTINGS))
    yield app
    app.close()


# --- the inventory and the pins ------------------------------------------------------------


def test_each_library_is_pinned_to_the_minor_version_its_seams_were_checked_on() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {Requirement(r).name: Requirement(r).specifier for r in project["dependencies"]}
    for library, (major, minor) in seams.CHECKED.items():
        assert str(pins[library]) == f"<{major}.{minor + 1},>={major}.{minor}", library


def test_the_installed_libraries_are_the_checked_ones() -> None:
    seams.check_libraries(*seams.CHECKED)


def test_every_seam_names_a_checked_library_and_contract_tests_that_exist() -> None:
    for seam in seams.SEAMS:
        assert seam.library in seams.CHECKED, seam
        for contract in seam.contract.split("; "):
            path, _, test = contract.partition("::")
            source = (ROOT / path).read_text()
            assert not test or re.search(rf"^def {test}\(", source, re.MULTILINE), contract


def test_an_unchecked_library_version_is_refused_naming_the_library(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(seams, "installed_version", lambda library: "5.8.0")

    with pytest.raises(LibraryVersionError, match=r"celery 5\.8\.0 is installed") as caught:
        seams.check_libraries("celery")

    assert caught.value.setting == "celery"
    assert "'celery>=5.7,<5.8'" in str(caught.value)


# --- the start-up guards ---------------------------------------------------------------------


def test_planloops_own_celery_configuration_passes(app: Celery) -> None:
    seams.check_celery_app(app, SETTINGS)


@pytest.mark.parametrize(
    "variable", ["CELERY_BROKER_URL", "CELERY_BROKER_READ_URL", "CELERY_BROKER_WRITE_URL"]
)
def test_a_broker_url_from_celerys_environment_is_refused_naming_it(
    app: Celery, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "redis://:s3cret@elsewhere:6379/0")

    with pytest.raises(ConfigError, match=f"unset {variable}") as caught:
        seams.check_celery_app(app, SETTINGS)

    assert caught.value.setting == variable
    assert "s3cret" not in str(caught.value)


def test_a_broker_url_naming_our_redis_another_way_passes(
    app: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CELERY_BROKER_URL", "redis://localhost:6379/9")
    app.conf.broker_url = "redis://localhost:6379/9"

    seams.check_celery_app(app, SETTINGS)  # SETTINGS: redis://127.0.0.1:6379/9


def test_flower_outside_its_checked_minor_is_refused_before_it_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from planloop.producer import up

    monkeypatch.setattr(seams, "installed_version", lambda library: "2.3.0")
    monkeypatch.setattr(up.os, "execve", lambda *a: pytest.fail("Flower was started"))

    with pytest.raises(LibraryVersionError, match=r"flower 2\.3\.0 is installed") as caught:
        up.run_flower(SETTINGS, port=None, address="127.0.0.1")

    assert "'flower>=2.2,<2.3'" in str(caught.value)


def test_a_broker_that_is_not_our_redis_transport_is_refused(app: Celery) -> None:
    app.conf.broker_transport = "amqp"

    with pytest.raises(ConfigError, match="broker_transport is 'amqp'"):
        seams.check_celery_app(app, SETTINGS)


@pytest.mark.parametrize(
    ("option", "value"), [("global_keyprefix", "shared:"), ("ack_emulation", False)]
)
def test_a_transport_option_the_hooks_cannot_work_with_is_refused_naming_it(
    app: Celery, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, option: str, value: Any
) -> None:
    (tmp_path / "site_celery.py").write_text("worker_hijack_root_logger = False\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("CELERY_CONFIG_MODULE", "site_celery")  # named as where it may come from
    app.conf.broker_transport_options = {"visibility_timeout": 60, option: value}

    with pytest.raises(ConfigError, match=re.escape(f"broker_transport_options['{option}']")) as e:
        seams.check_celery_app(app, SETTINGS)

    assert "CELERY_CONFIG_MODULE=site_celery" in str(e.value)


def test_harmless_transport_options_pass(app: Celery) -> None:
    app.conf.broker_transport_options = {"ack_emulation": True, "global_keyprefix": ""}

    seams.check_celery_app(app, SETTINGS)


# --- contracts ---------------------------------------------------------------------------------


def test_every_kombu_transport_option_is_supported_or_refused() -> None:
    known = seams.SUPPORTED_TRANSPORT_OPTIONS | set(seams.REFUSED_TRANSPORT_OPTIONS)

    assert set(kombu_redis.Channel.from_transport_options) <= known


def test_kombus_unacked_key_names_are_the_receipts_defaults() -> None:
    assert kombu_redis.Channel.unacked_key == KOMBU_UNACKED
    assert kombu_redis.Channel.unacked_index_key == KOMBU_UNACKED_INDEX


def _parameters(function: Any) -> list[tuple[str, Any]]:
    return [(p.name, p.default) for p in inspect.signature(function).parameters.values()]


def test_kombus_private_methods_keep_their_signatures() -> None:
    empty = inspect.Parameter.empty
    assert _parameters(kombu_redis.Channel._restore) == [
        ("self", empty),
        ("message", empty),
        ("leftmost", False),
    ]
    assert _parameters(kombu_redis.Channel._create_client) == [
        ("self", empty),
        ("asynchronous", False),
    ]
    assert _parameters(kombu_redis.QoS.append) == [
        ("self", empty),
        ("message", empty),
        ("delivery_tag", empty),
    ]
    assert _parameters(kombu_redis.QoS.restore_unacked) == [("self", empty), ("client", None)]
    assert _parameters(kombu_redis.QoS.pipe_or_acquire) == [
        ("self", empty),
        ("pipe", None),
        ("client", None),
    ]
    # Our QoS skips kombu's Redis QoS for step messages and calls the virtual one directly.
    assert kombu_redis.QoS.__mro__[1] is virtual.QoS
    assert transport.Channel.QoS is transport.QoS
    assert issubclass(transport.Transport.Channel, kombu_redis.Channel)


def test_kombus_qos_holds_a_received_messages_tag_in_delivered() -> None:
    # kombu's in-memory transport is virtual too: the same QoS and Message as Redis's.
    queue = Queue("seams-qos", Exchange("seams-qos"), "seams-qos")
    with Connection("memory://") as connection:
        channel = connection.channel()
        queue(channel).declare()
        Producer(channel).publish({"n": 1}, exchange=queue.exchange, routing_key="seams-qos")
        message = queue(channel).get(no_ack=False)

        assert message is not None
        assert isinstance(channel.qos, virtual.QoS)
        assert message.delivery_tag in channel.qos._delivered
        # what QoS.append puts in a receipt: the queued dict, where it was published
        assert message._raw["properties"]["delivery_tag"] == message.delivery_tag
        assert {"body", "headers", "properties"} <= set(message._raw)
        assert message.delivery_info["exchange"] == "seams-qos"
        assert message.delivery_info["routing_key"] == "seams-qos"
        message.ack()
        channel.close()


class Collector:
    """What kombu's publish-batch protocol hands over instead of running it."""

    def __init__(self) -> None:
        self.ops: list[tuple[Any, ...]] = []

    def add(self, *op: Any) -> None:
        self.ops.append(op)


def test_kombu_pushes_a_message_to_the_list_named_after_its_queue() -> None:
    channel = kombu_redis.Channel.__new__(kombu_redis.Channel)  # only what _put reads
    channel._expires = {}
    message = {"body": "e30=", "headers": {"id": "t-1", "task": "x"}, "properties": {}}
    collected = Collector()

    channel._put("planloop", message, _publish_batch=collected)

    assert [op[:2] for op in collected.ops] == [("lpush", "planloop")]
    assert '"id": "t-1"' in collected.ops[0][2]  # the needle of SessionStore.queued
    assert "BRPOP" in inspect.getsource(kombu_redis.Channel._brpop_start)  # out on the right


def test_a_kombu_channel_holds_its_transport_options_as_attributes() -> None:
    options = kombu_redis.Channel.from_transport_options
    assert {"global_keyprefix", "ack_emulation"} <= set(options)
    assert kombu_redis.Channel.global_keyprefix == ""
    assert kombu_redis.Channel.ack_emulation is True
    assert issubclass(kombu_redis.Channel, virtual.Channel)
    # virtual.Channel.__init__ sets each option read as an attribute (memory: no Redis needed)
    with Connection("memory://", transport_options={"deadletter_queue": "probe-dlq"}) as conn:
        channel = conn.channel()
        assert "deadletter_queue" in type(channel).from_transport_options
        assert channel.deadletter_queue == "probe-dlq"
        channel.close()


def test_the_transport_named_in_the_configuration_is_ours() -> None:
    module, _, name = TRANSPORT.partition(":")
    assert module == transport.__name__
    assert getattr(transport, name) is transport.Transport


def test_send_task_replies_to_the_apps_thread_oid() -> None:
    app = Celery("seams-oid", broker="memory://", set_as_current=False)
    app.conf.task_default_queue = "seams-oid"
    with app.connection_for_write() as connection:
        app.send_task("seams.probe", args=[1], connection=connection)
        message = connection.SimpleQueue("seams-oid").get(timeout=1)

    assert message.properties["reply_to"] == app.thread_oid
    app.close()


def test_celerys_consumer_flushes_buffered_events_through_the_hooks() -> None:
    # The worker's Events step hands the consumer's hook to its dispatcher when it buffers.
    wiring = inspect.getsource(consumer_events.Events.start)
    assert "on_send_buffered=c.on_send_event_buffered" in wiring
    assert "buffer_group=['task']" in wiring
    app = Celery("seams-events", broker="memory://", set_as_current=False)
    buffered: list[int] = []
    with app.connection_for_write() as connection:
        dispatcher = EventDispatcher(
            connection,
            app=app,
            buffer_group=["task"],
            on_send_buffered=lambda: buffered.append(1),
        )
        dispatcher.send("task-received", uuid="t1")
        assert buffered == [1]
        assert dispatcher._group_buffer["task"]

        consumer = CeleryConsumer.__new__(CeleryConsumer)  # only what _flush_events reads
        consumer.event_dispatcher = dispatcher
        CeleryConsumer._flush_events(consumer)

        assert not dispatcher._group_buffer["task"]
        dispatcher.close()
    app.close()


def test_the_consumers_task_handler_and_the_dispatchers_groups_gate_task_events() -> None:
    assert _parameters(CeleryConsumer.create_task_handler)[0] == ("self", inspect.Parameter.empty)
    # Task events off: the worker's Events step gives the dispatcher the worker group only.
    step = consumer_events.Events.__new__(consumer_events.Events)
    consumer_events.Events.__init__(step, CeleryConsumer.__new__(CeleryConsumer), task_events=False)
    assert step.groups == ["worker"]
    app = Celery("seams-groups", broker="memory://", set_as_current=False)
    sent: list[int] = []
    with app.connection_for_write() as connection:
        dispatcher = EventDispatcher(
            connection,
            app=app,
            groups=step.groups,
            buffer_group=["task"],
            on_send_buffered=lambda: sent.append(1),  # once per event it would send
        )
        assert dispatcher.groups == {"worker"}
        assert dispatcher.producer.channel is not None
        assert dispatcher.exchange.name == "celeryev"
        assert dispatcher.headers == {"hostname": dispatcher.hostname}
        dispatcher.send("task-received", uuid="t1")
        dispatcher.groups.add("task")
        dispatcher.send("task-started", uuid="t1")
        dispatcher.groups.discard("task")
        dispatcher.send("task-succeeded", uuid="t1")
        dispatcher.close()
    app.close()
    assert sent == [1]  # task-started only


def test_the_consumers_hub_schedules_callbacks_soon_and_later() -> None:
    empty = inspect.Parameter.empty
    assert _parameters(Hub.call_soon) == [("self", empty), ("callback", empty), ("args", empty)]
    assert _parameters(Hub.call_later) == [
        ("self", empty),
        ("delay", empty),
        ("callback", empty),
        ("args", empty),
    ]
    hub, ran = Hub(), []
    try:
        hub.call_soon(ran.append, "soon")
        hub.call_later(0.0, ran.append, "later")
        hub.fire_timers(propagate=(Exception,))
        assert ran == ["later"]
    finally:
        hub.close()  # runs what is ready, as a turn of its loop would

    assert ran == ["later", "soon"]


def test_the_celery_commands_first_parameter_is_app(capsys: pytest.CaptureFixture[str]) -> None:
    app = Celery("seams-report", broker="memory://", set_as_current=False)
    app.conf.planloop_probe = "the app run_worker was given"

    code = run_worker(app, ["report"])

    assert celery_command.params[0].name == "app"
    assert celery_command.params[0].default is None  # put back after the run
    assert code == 0
    assert "planloop_probe: 'the app run_worker was given'" in capsys.readouterr().out
    app.close()


def test_flower_picks_its_redis_broker_client_for_the_apps_uri() -> None:
    assert "conn.as_uri(include_password=True)" in inspect.getsource(
        FlowerApp.broker_uri_with_password.func
    )
    app = create_app(Settings(redis_url="redis://:pw@127.0.0.1:6379/13"))
    with app.connection() as connection:
        uri = connection.as_uri(include_password=True)
    app.close()

    broker = FlowerBroker(uri)

    assert type(broker) is FlowerRedisBroker  # the Broker page and /api/queues/length
    assert (broker.host, broker.port, broker.vhost, broker.password) == (
        "127.0.0.1",
        6379,
        13,
        "pw",
    )


@pytest.mark.parametrize(
    ("url", "fields"),
    [
        (
            "rediss://:pw@LocalHost:6380/3",
            {"host": "localhost", "port": 6380, "db": 3, "connection_class": SSLConnection},
        ),
        ("redis://10.0.0.2", {"host": "10.0.0.2", "connection_class": None}),
        (
            "unix:///tmp/redis.sock?db=2",
            {"path": "/tmp/redis.sock", "db": 2, "connection_class": UnixDomainSocketConnection},
        ),
    ],
)
def test_redis_parse_url_returns_the_fields_same_redis_reads(
    url: str, fields: dict[str, Any]
) -> None:
    parsed = parse_url(url)

    assert {name: parsed.get(name) for name in fields} == fields


def test_redis_parse_url_refuses_a_url_it_cannot_read_with_value_error() -> None:
    with pytest.raises(ValueError, match="Redis URL must specify"):
        parse_url("http://127.0.0.1:6379")


def test_redis_sentinel_classes_keep_what_our_subclasses_override_and_read() -> None:
    from redis import sentinel as sync_sentinel
    from redis.asyncio import sentinel as async_sentinel

    for module in (sync_sentinel, async_sentinel):
        for name in ("send_packed_command", "connect"):
            assert callable(getattr(module.SentinelManagedConnection, name)), (module, name)
        for name in ("get_connection", "get_master_address", "release"):
            assert callable(getattr(module.SentinelConnectionPool, name)), (module, name)
        params = inspect.signature(module.SentinelManagedConnection.send_packed_command)
        assert list(params.parameters)[:3] == ["self", "command", "check_health"], module
    manager = sync_sentinel.Sentinel([("127.0.0.1", 1)])
    pool = sync_sentinel.SentinelConnectionPool("m", manager)
    assert pool.is_master
    assert pool.master_address is None
    assert pool.sentinel_manager is manager
    assert manager.sentinels
    connection = sync_sentinel.SentinelManagedConnection(connection_pool=pool)
    assert connection._sock is None  # the socket our reconnect checks
    async_manager = async_sentinel.Sentinel([("127.0.0.1", 1)])
    async_pool = async_sentinel.SentinelConnectionPool("m", async_manager)
    assert async_pool.is_master
    assert async_pool.master_address is None
    assert not async_sentinel.SentinelManagedConnection(connection_pool=async_pool).is_connected


def test_kombus_sentinel_transport_opens_its_channel_class() -> None:
    assert issubclass(transport.SentinelTransport, kombu_redis.SentinelTransport)
    assert issubclass(transport.SentinelChannel, kombu_redis.SentinelChannel)
    assert transport.SentinelTransport.Channel is transport.SentinelChannel
    options = kombu_redis.SentinelChannel.from_transport_options
    assert {"master_name", "sentinel_kwargs"} <= set(options)
