"""The worker's metrics endpoint: threadwarden's and the Temporal SDK's series on one real HTTP
endpoint, the health checks beside them, and the ledger gauges' one query."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import socket
import urllib.error
import urllib.request
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from temporalio import activity
from temporalio.exceptions import ApplicationError

from tests.helpers.polling import eventually
from tests.helpers.stack import StackEndpoints
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.config.endpoints import Endpoints, read_endpoints, write_endpoints
from threadwarden.config.settings import Settings
from threadwarden.errors import InvalidInput
from threadwarden.ledger.gauges import GAUGES, read_gauges
from threadwarden.worker.embedded import free_port
from threadwarden.worker.metrics import ActivityMetering, DomainMetrics
from threadwarden.worker.runtime import running_worker
from threadwarden.workflows import contracts


async def get(url: str) -> tuple[int, str]:
    """A real HTTP GET: status and body."""

    def fetch() -> tuple[int, str]:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as error:
            return int(error.code), error.read().decode()
        except urllib.error.URLError:
            return 0, ""  # not listening (yet, or any more)

    return await asyncio.to_thread(fetch)


def value(text: str, series: str) -> float:
    """The value of one exact series (name and labels) in Prometheus text; 0 when absent."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture
def metered(settings: Settings) -> Settings:
    """The test's settings with a metrics endpoint on a free loopback port."""
    return settings.model_copy(
        update={"metrics_address": f"127.0.0.1:{quiet_port()}", "metrics_gauge_interval_ms": 1000}
    )


def quiet_port() -> int:
    """A free loopback port below Linux's ephemeral range (32768-60999): the suite's other
    processes take ports there (bind to port 0, outgoing connections), and one took a port
    `free_port` had just handed out before the worker bound it (its 404 answered instead)."""
    for port in random.sample(range(20_000, 32_000), 50):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return free_port()


def base_url(settings: Settings) -> str:
    return f"http://{settings.metrics_address}"


async def serving(settings: Settings) -> None:
    """Wait until the worker's endpoint answers (the plugin starts it once the worker runs)."""
    await eventually(
        lambda: get(f"{base_url(settings)}/healthz"), lambda a: a[0] != 0, what="endpoint"
    )


async def test_metrics_scrape_after_submissions_shows_threadwarden_and_temporal_series(
    metered: Settings, connections: Connections, ids: str
) -> None:
    async with (
        running_worker(metered, connections),
        ThreadwardenClient.connect(metered, connections) as client,
    ):
        await serving(metered)
        _, before = await get(f"{base_url(metered)}/metrics")
        completed = 'threadwarden_submissions_settled_total{outcome="completed"}'
        failed = 'threadwarden_submissions_settled_total{outcome="failed"}'
        assert value(before, completed) == 0
        receipts = [
            await client.submit(f"{ids}-{n}", agent_id="scripted", input=[{"say": f"hi {n}"}])
            for n in range(3)
        ]
        receipts.append(
            await client.submit(f"{ids}-x", agent_id="scripted", input=[{"fail": "no"}])
        )
        for receipt in receipts:
            await client.result(receipt.submission_id, timeout=60)

        def moved(scrape: tuple[int, str]) -> bool:
            # The SDK's metrics reach the endpoint within a drain (1 s) of being recorded.
            return (
                value(scrape[1], completed) >= 3
                and value(scrape[1], failed) >= 1
                # the heads of the inline scripted binding are local activities
                and "temporal_local_activity_execution_latency" in scrape[1]
            )

        status, text = await eventually(
            lambda: get(f"{base_url(metered)}/metrics"), moved, what="settled counters"
        )
    assert status == 200
    assert value(text, 'threadwarden_passes_total{outcome="actionable"}') >= 4
    assert value(text, "threadwarden_publications_total") >= 4  # at least a settlement each
    assert value(text, 'threadwarden_attempt_duration_seconds_count{result="completed"}') >= 3
    assert value(text, 'threadwarden_pass_duration_seconds_count{outcome="actionable"}') >= 1
    latency = 'threadwarden_submission_latency_seconds_count{outcome="completed"}'
    assert value(text, latency) >= 3  # submit to settle
    assert value(text, 'threadwarden_submission_latency_seconds_count{outcome="failed"}') >= 1
    assert 'threadwarden_submissions{state="ready"}' in text  # the ledger gauges
    assert "threadwarden_outbox_backlog " in text
    assert "threadwarden_oldest_overdue_alarm_seconds " in text
    temporal = {m.group(1) for m in re.finditer(r"^(temporal_\w+)", text, re.MULTILINE)}
    for series in ("temporal_num_pollers", "temporal_worker_task_slots_available"):
        assert series in temporal, sorted(temporal)
    assert any(name.startswith("temporal_workflow_task_") for name in temporal), sorted(temporal)
    for receipt in receipts:  # ids never become labels
        assert receipt.submission_id not in text


async def test_healthz_and_readyz_answer_beside_the_metrics(
    metered: Settings, connections: Connections
) -> None:
    async with running_worker(metered, connections):
        await serving(metered)
        assert await get(f"{base_url(metered)}/healthz") == (200, "ok\n")
        await eventually(
            lambda: get(f"{base_url(metered)}/readyz"),
            lambda answer: answer == (200, "ready\n"),
            what="readyz",
        )
        status, _ = await get(f"{base_url(metered)}/nothing")
        assert status == 404
    assert await get(f"{base_url(metered)}/healthz") == (0, "")  # it stops with the worker


async def test_healthz_fails_when_the_ledger_is_unreachable(
    metered: Settings, connections: Connections, postgres: StackEndpoints
) -> None:
    async with running_worker(metered, connections):
        await serving(metered)
        own = await asyncpg.connect(connections.database_url)
        name = await own.fetchval("SELECT current_database()")
        await own.close()
        admin = await asyncpg.connect(postgres.dsn("postgres"))
        try:  # no new connection to the test's database, and the pool's are cut
            await admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = $1 AND pid <> pg_backend_pid()",
                name,
            )
            status, body = await get(f"{base_url(metered)}/healthz")
            assert status == 503
            assert body.startswith("ledger unreachable")
        finally:
            await admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')
            await admin.close()


async def test_gauges_count_nonterminal_work(
    pool: asyncpg.Pool[Any], settings: Settings, connections: Connections, ids: str
) -> None:
    async with ThreadwardenClient.connect(settings, connections) as client:  # no worker runs
        await client.submit(f"{ids}-a", agent_id="scripted", input=[{"say": "a"}])
        await client.submit(f"{ids}-a", agent_id="scripted", input=[{"say": "b"}])
    gauges = await read_gauges(pool)
    assert gauges.submissions["ready"] == 2
    assert gauges.submissions["suspended"] == 0
    assert gauges.message_backlog == 0
    # No worker serves the host: its alarm (admission + 50 ms) falls overdue.
    overdue = await eventually(
        lambda: read_gauges(pool), lambda g: g.oldest_overdue_alarm_s > 0.1, what="overdue"
    )
    assert overdue.oldest_overdue_alarm_s < 60


async def test_gauge_query_uses_its_indexes(pool: asyncpg.Pool[Any]) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_seqscan = off")
        plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN {GAUGES}"))
    for index in ("submissions_lane", "hosts_alarm_at", "publications_due", "messages_due"):
        assert index in plan, f"{index} not used\n{plan}"
    assert "Seq Scan" not in plan, plan


async def test_a_head_without_a_worker_for_its_agent_counts_binding_retries(
    metered: Settings, connections: Connections, ids: str
) -> None:
    async with (
        running_worker(metered, connections),  # only the built-in `scripted` binding
        ThreadwardenClient.connect(metered, connections) as client,
    ):
        await serving(metered)
        await client.submit(f"{ids}-nobody", agent_id="nobody", input={"q": 1})
        status, text = await eventually(  # no worker polls its queue: at once
            lambda: get(f"{base_url(metered)}/metrics"),
            lambda scrape: value(scrape[1], "threadwarden_binding_retries_total") >= 1,
            what="a binding retry",
        )
    assert status == 200
    assert value(text, 'threadwarden_submissions_settled_total{outcome="completed"}') == 0
    assert value(text, 'threadwarden_submissions{state="ready"}') == 1


def test_stack_json_records_the_metrics_url_and_reads_older_files(tmp_path: Path) -> None:
    endpoints = Endpoints("postgresql://x/db", "127.0.0.1:1", "http://127.0.0.1:2", os.getpid())
    write_endpoints(tmp_path, replace(endpoints, metrics_url="http://127.0.0.1:3/metrics"))
    assert read_endpoints(tmp_path) == replace(endpoints, metrics_url="http://127.0.0.1:3/metrics")
    older = {k: v for k, v in asdict(endpoints).items() if k != "metrics_url"}
    (tmp_path / "stack.json").write_text(json.dumps(older))
    assert read_endpoints(tmp_path) == endpoints
    (tmp_path / "stack.json").write_text(json.dumps({**older, "metrics_url": 5}))
    with pytest.raises(InvalidInput):
        read_endpoints(tmp_path)


async def test_metering_keeps_the_activity_name_and_counts_fence_refusals() -> None:
    reader = InMemoryMetricReader()
    domain = DomainMetrics(MeterProvider(metric_readers=[reader]).get_meter("t"))
    metering = ActivityMetering(domain, pass_deadline_ms=840_000)

    @activity.defn(name=contracts.FINISH_PASS)
    async def refused(step: contracts.FinishPassInput) -> contracts.PassReport:
        raise ApplicationError("a newer pass took over", type="StalePass", non_retryable=True)

    wrapped = metering.wrap(refused)
    assert activity._Definition.must_from_callable(wrapped).name == contracts.FINISH_PASS
    step = contracts.FinishPassInput(
        host_id="h",
        epoch=1,
        generation=1,
        stalls=0,
        progressed=False,
        now=datetime.now(UTC),
        jitter=0.5,
    )
    with pytest.raises(ApplicationError):
        await wrapped(step)
    data = reader.get_metrics_data()
    assert data is not None
    points = {
        (m.name, tuple(sorted((p.attributes or {}).items()))): p
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        for p in m.data.data_points
    }
    refusals = points[("threadwarden_stale_fence_refusals", (("step", contracts.FINISH_PASS),))]
    assert getattr(refusals, "value") == 1  # noqa: B009 (a sum point)
    assert not any(name == "threadwarden_passes" for name, _ in points)
