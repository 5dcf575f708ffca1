"""Redis Sentinel over TLS: sentinels, master and replica on loopback listening on TLS only,
with a self-signed certificate this test makes (openssl). Planloop's redis-py clients (sync
and asyncio) and its Celery broker (kombu's sentinel transport) reach the master through
the sentinels with PLANLOOP_REDIS_SENTINEL_TLS and verify the certificate; a plain TCP
client is refused, so the TLS is real; and a session runs end to end on the shipped
supervisor and worker behind it. Skipped where redis-server has no TLS built in.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from planloop.config.celery import celery_config
from planloop.config.settings import Settings
from planloop.core.models import SessionStatus
from planloop.core.redis_client import async_client, redis_address, sync_client
from planloop.planner.plan import parse_plan
from planloop.producer.stack import free_port, redis_server_binary
from planloop.workers.runtime import PlanloopCelery, WorkerRuntime
from tests.integration.conftest import MakeStack, report_steps
from tests.sentinel_cluster import MASTER_NAME, SentinelCluster, TlsFiles

pytestmark = [pytest.mark.integration]


def _self_signed(folder: Path) -> TlsFiles:
    """A certificate for 127.0.0.1 that is its own CA (valid one day)."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return TlsFiles(cert=cert, key=key, ca=cert)


def _tls_unsupported(binary: str, files: TlsFiles, folder: Path) -> str | None:
    """Why ``binary`` cannot serve TLS (built without it), or None when it can."""
    port, log = free_port(), folder / "tls-probe.log"
    with log.open("wb") as out:
        probe = subprocess.Popen(
            [binary, "--port", "0", "--tls-port", str(port), *files.server_args(), "--save", ""],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=folder,
        )
    try:
        probe.wait(1.0)
    except subprocess.TimeoutExpired:  # still serving: TLS works
        return None
    finally:
        if probe.poll() is None:
            probe.kill()
            probe.wait(5)
    said = " ".join(log.read_text(errors="replace").split()[-20:])
    return said or f"exit code {probe.returncode}"


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelCluster]:
    """One TLS cluster for the module's tests (none of them changes it)."""
    tmp_path = tmp_path_factory.mktemp("tls")
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make the test's certificate")
    binary = redis_server_binary()
    files = _self_signed(tmp_path)
    why = _tls_unsupported(binary, files, tmp_path)
    if why is not None:
        pytest.skip(f"{binary} serves no TLS (built without it?): {why}")
    cluster = SentinelCluster(binary=binary, tls=files).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _settings(cluster: SentinelCluster) -> Settings:
    assert cluster.tls is not None
    return Settings(
        redis_url=cluster.url,
        redis_sentinel_master=MASTER_NAME,
        redis_sentinel_tls=True,
        redis_sentinel_tls_ca_file=str(cluster.tls.ca),
        key_prefix=f"tls{uuid.uuid4().hex[:6]}",
    )


def test_clients_reach_the_master_behind_tls_sentinels(tls_cluster: SentinelCluster) -> None:
    settings = _settings(tls_cluster)
    plain = redis.Redis(port=tls_cluster.sentinels[0].port, socket_timeout=2)
    with pytest.raises(redis.ConnectionError):  # the servers speak TLS only
        plain.ping()
    plain.close()
    client = sync_client(redis_address(settings), socket_timeout=2)
    try:
        assert client.set("tls:probe", "sync")
        assert client.get("tls:probe") == b"sync"
        assert tls_cluster.master().client().get("tls:probe") == "sync"  # on the master
    finally:
        client.close()

    async def through_asyncio() -> bytes | None:
        aclient = async_client(redis_address(settings), socket_timeout=2)
        try:
            await aclient.set("tls:probe", "async")
            return await aclient.get("tls:probe")
        finally:
            await aclient.aclose()

    assert asyncio.run(through_asyncio()) == b"async"


def test_a_client_that_cannot_verify_the_certificate_is_refused(
    tls_cluster: SentinelCluster,
) -> None:
    settings = _settings(tls_cluster).model_copy(update={"redis_sentinel_tls_ca_file": ""})
    client = sync_client(redis_address(settings), socket_timeout=2)
    try:
        with pytest.raises(redis.ConnectionError):  # the system's CAs do not know it
            client.ping()
    finally:
        client.close()


def test_the_celery_broker_reaches_the_master_behind_tls_sentinels(
    tls_cluster: SentinelCluster,
) -> None:
    settings = _settings(tls_cluster)
    app = PlanloopCelery(WorkerRuntime(settings))
    app.conf.update(celery_config(settings))
    queue = f"{settings.key_prefix}.q"
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=3)
        with conn.SimpleQueue(queue) as simple:
            simple.put({"over": "tls"})
            message = simple.get(timeout=10)
            message.ack()
    assert message.payload == {"over": "tls"}
    assert tls_cluster.master().client().exists(f"_kombu.binding.{queue}")


def test_a_session_runs_end_to_end_behind_tls_sentinels(
    tls_cluster: SentinelCluster, private_stack: MakeStack
) -> None:
    """The shipped supervisor and worker, and the producer, all through the TLS cluster."""
    assert tls_cluster.tls is not None
    built = private_stack(
        redis_url=tls_cluster.url,
        redis_sentinel_master=MASTER_NAME,
        redis_sentinel_tls=True,
        redis_sentinel_tls_ca_file=str(tls_cluster.tls.ca),
    )
    plan = parse_plan(
        """
goal: two writes over TLS
steps:
  - {id: w1, tool: bench.write, params: {label: one}}
  - {id: w2, tool: bench.write, params: {label: two}, dependencies: [w1]}
"""
    )
    sid = built.producer.submit(plan)
    record = built.finish(sid, ["w1", "w2"], timeout_s=60)
    assert record.status == SessionStatus.COMPLETED, record.error
    assert {s["status"] for s in report_steps(record).values()} == {"completed"}
    master = tls_cluster.master().client()
    assert master.exists(built.keys.session(sid))  # the hot state is on the TLS master
