"""threadwarden's domain metrics (OpenTelemetry instruments) and how the activities feed them.

The plugin wraps the activities it assembles (`ActivityMetering.wrap`) and counts publications
(`CountedPublications`): the wrapper reads the activity's input and result (ids, outcomes,
counts; never payloads), so recording adds no SQL statement and no history event. Counters and
histograms are in-process; the ledger gauges are one query, run when the endpoint is scraped and
at most every ``metrics_gauge_interval_ms``.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from functools import wraps
from typing import Any, ParamSpec, TypeVar

import asyncpg
from opentelemetry import metrics, trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, CallbackT, Counter, Histogram, Meter, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry
from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from threadwarden.ledger.gauges import LedgerGauges, read_gauges
from threadwarden.ledger.publication import Publications
from threadwarden.publication import PublicationSink
from threadwarden.workflows import auxiliary_contracts, contracts

P = ParamSpec("P")
R = TypeVar("R")

SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)
"""Histogram buckets (seconds): a pass step takes milliseconds, a binding up to minutes."""
OPEN_PASSES = 10_000
"""Pass starts remembered for the pass-duration histogram (the oldest are forgotten first: a
pass whose finish runs on another worker never comes back for its entry)."""
SPAN_IDS = ("host_id", "thread_id", "submission_id", "agent_id")
"""Input fields copied onto the activity's span as ``threadwarden.<field>``."""
FENCED = {"StalePass", "StaleAttempt"}
"""The `ApplicationError` types of a fence refusal (activities/errors.py)."""
LATENCY_SECONDS = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0)
"""Submit-to-settle spans waits for people too (an approval may take hours)."""


INSTRUMENTS = {
    "submissions_admitted": "Submissions admitted by this process (message deliveries)",
    "submissions_settled": "Submissions settled by an attempt, by outcome",
    "passes": "Maintenance passes finished, by outcome",
    "binding_retries": "Heads backed off because no worker with their binding took them",
    "stale_fence_refusals": "Pass steps refused by the fence (a newer pass or attempt took over)",
    "publications": "Records published to the sinks",
    "messages_delivered": "Messages between threads delivered",
    "pass_duration": "From a pass's begin to its finish, by outcome",
    "attempt_duration": "Head attempts (run_head), by how they ended",
    "submission_latency": "From admission to settlement, for submissions an attempt settled here",
    "submissions": "Nonterminal submissions by state (suspended: waiting for approval)",
    "oldest_overdue_alarm": "How long the earliest alarm in the past is overdue (0: none)",
    "outbox_backlog": "Records not yet published to every sink",
    "message_backlog": "Messages between threads not yet delivered",
}
"""Every instrument of threadwarden's, ``threadwarden_<name>``, with its description (the
Prometheus ``HELP``; docs/operations.md, Metrics, says more)."""


def _counter(meter: Meter, name: str) -> Counter:
    return meter.create_counter(f"threadwarden_{name}", unit="1", description=INSTRUMENTS[name])


def _histogram(meter: Meter, name: str, buckets: Sequence[float]) -> Histogram:
    return meter.create_histogram(
        f"threadwarden_{name}",
        unit="s",
        description=INSTRUMENTS[name],
        explicit_bucket_boundaries_advisory=buckets,
    )


def _gauge(meter: Meter, name: str, unit: str, callback: CallbackT) -> None:
    meter.create_observable_gauge(
        f"threadwarden_{name}", callbacks=[callback], unit=unit, description=INSTRUMENTS[name]
    )


class DomainMetrics:
    """The instruments of threadwarden's own work, on one meter."""

    def __init__(self, meter: Meter) -> None:
        self.admitted = _counter(meter, "submissions_admitted")
        self.settled = _counter(meter, "submissions_settled")
        self.passes = _counter(meter, "passes")
        self.binding_retries = _counter(meter, "binding_retries")
        self.stale_refusals = _counter(meter, "stale_fence_refusals")
        self.publications = _counter(meter, "publications")
        self.delivered = _counter(meter, "messages_delivered")
        self.pass_duration = _histogram(meter, "pass_duration", SECONDS)
        self.attempt_duration = _histogram(meter, "attempt_duration", SECONDS)
        self.latency = _histogram(meter, "submission_latency", LATENCY_SECONDS)
        self._starts: OrderedDict[tuple[str, int], datetime] = OrderedDict()

    def pass_began(self, host_id: str, epoch: int, started: datetime) -> None:
        self._starts[(host_id, epoch)] = started
        while len(self._starts) > OPEN_PASSES:
            self._starts.popitem(last=False)

    def pass_finished(
        self,
        host_id: str,
        epoch: int,
        report: contracts.PassReport,
        started: datetime | None = None,
    ) -> None:
        self.passes.add(1, {"outcome": report.outcome})
        started = self._starts.pop((host_id, epoch), None) or started
        if started is not None:
            elapsed = (datetime.now(UTC) - started).total_seconds()
            self.pass_duration.record(max(elapsed, 0.0), {"outcome": report.outcome})

    def head_ended(self, result: contracts.RunHeadResult, elapsed_s: float | None) -> None:
        """What one ``run_head`` (``elapsed_s``: its duration) or ``head_unstarted`` (None)
        reported."""
        if result.outcome is not None:
            self.settled.add(1, {"outcome": result.outcome})
            if result.admitted_at is not None:
                waited = (datetime.now(UTC) - result.admitted_at).total_seconds()
                self.latency.record(max(waited, 0.0), {"outcome": result.outcome})
        if result.binding_error is not None:
            self.binding_retries.add(1)
        ended = (
            result.outcome
            or result.stopped
            or ("binding-unavailable" if result.binding_error else None)
            or ("pass-failed" if result.failure and result.native_failure else "none")
        )
        if elapsed_s is not None:
            self.attempt_duration.record(elapsed_s, {"result": ended})


class MeteredRuntime(Runtime):
    """A Temporal runtime whose SDK metrics the SDK's core (Rust) keeps and renders as
    Prometheus text on a loopback port of its own (`sdk_metrics_url`); the worker's endpoint
    appends that text to its own, so one scrape shows both. Nothing of it runs in Python per
    task (a ``MetricBuffer`` drained into OpenTelemetry cost the worker about 6% of its CPU at
    50×20, bench/README.md). Each runtime has its own thread pool: one per ``threadwarden
    worker`` process."""

    def __init__(self) -> None:
        port = _free_loopback_port()
        self.sdk_metrics_address = ("127.0.0.1", port)
        super().__init__(
            telemetry=TelemetryConfig(
                metrics=PrometheusConfig(
                    bind_address=f"127.0.0.1:{port}", counters_total_suffix=True, unit_suffix=True
                )
            )
        )


def _free_loopback_port() -> int:
    """A port the kernel has free on 127.0.0.1 now (the core binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class WorkerTelemetry:
    """One worker's metrics pipeline: a meter provider whose Prometheus reader renders into a
    registry of its own (so two workers in one process never mix), the domain instruments, the
    ledger gauges and, when the client's runtime buffers them, the Temporal SDK's metrics."""

    def __init__(self, pool: asyncpg.Pool[Any] | None, *, gauge_interval_s: float) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.provider = MeterProvider(
            metric_readers=[
                PrometheusMetricReader(scope_info_enabled=False, registry=self.registry)
            ],
            resource=Resource.create(),
        )
        meter = self.provider.get_meter("threadwarden")
        self.domain = DomainMetrics(meter)
        self._pool = pool
        self._interval_s = gauge_interval_s
        self._gauges: LedgerGauges | None = None
        self._read_at = -float("inf")
        self._lock = asyncio.Lock()
        _gauge(meter, "submissions", "1", self._submissions)
        _gauge(meter, "oldest_overdue_alarm", "s", self._single("oldest_overdue_alarm_s"))
        _gauge(meter, "outbox_backlog", "1", self._single("outbox_backlog"))
        _gauge(meter, "message_backlog", "1", self._single("message_backlog"))

    async def refresh_gauges(self) -> None:
        """Read the ledger gauges unless the last reading is recent enough."""
        if self._pool is None:
            return
        async with self._lock:
            if time.monotonic() - self._read_at < self._interval_s:
                return
            self._read_at = time.monotonic()
            self._gauges = await read_gauges(self._pool)

    def _submissions(self, _: CallbackOptions) -> Iterable[Observation]:
        if self._gauges is None:
            return []
        return [Observation(n, {"state": s}) for s, n in self._gauges.submissions.items()]

    def _single(self, field: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(_: CallbackOptions) -> Iterable[Observation]:
            return [] if self._gauges is None else [Observation(getattr(self._gauges, field))]

        return observe

    def shutdown(self) -> None:
        self.provider.shutdown()


def global_metrics() -> DomainMetrics:
    """Instruments on the process's global meter provider (an application's, or a no-op): for
    a plugin that serves no endpoint of its own."""
    return DomainMetrics(metrics.get_meter("threadwarden"))


class ActivityMetering:
    """Wraps a worker's activities so that they report to ``domain`` (one per assembly)."""

    def __init__(self, domain: DomainMetrics, *, pass_deadline_ms: int) -> None:
        self.domain = domain
        self._pass_deadline_ms = pass_deadline_ms
        self._observers: dict[str, Callable[[Any, Any, float], None]] = {
            contracts.BEGIN_PASS: self._began,
            contracts.FINISH_CAUGHT_UP: self._finished,
            contracts.FINISH_PASS: self._finished,
            contracts.REARM_FAILURE: self._finished,
            contracts.RUN_HEAD: self._head,
            contracts.HEAD_UNSTARTED: self._unstarted,
            contracts.DELIVER_MESSAGES: self._delivered,
        }

    def wrap(self, fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        """``fn`` (an activity) as an activity of the same name that tags its span with the
        input's ids, counts the fence refusals it raises and reports its result."""
        name = activity._Definition.must_from_callable(fn).name
        assert name is not None  # threadwarden's activities are all named
        observe = self._observers.get(name)
        domain = self.domain

        @wraps(fn, updated=())  # not its __dict__: that holds fn's own activity definition
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            step = args[0] if args else None
            _tag_span(step)
            started = time.monotonic()
            try:
                result = await fn(*args, **kwargs)
            except ApplicationError as error:
                if error.type in FENCED:
                    domain.stale_refusals.add(1, {"step": name})
                raise
            if observe is not None:
                observe(step, result, time.monotonic() - started)
            return result

        return activity.defn(name=name)(wrapper)

    def _began(
        self, step: contracts.BeginPassInput, result: contracts.BeginPassResult, elapsed_s: float
    ) -> None:
        started = result.begun_at
        self.domain.pass_began(step.host_id, result.epoch, started)
        if isinstance(
            result.route, contracts.RanHere
        ):  # begin ran the head (and finished its pass)
            head = result.route.result
            self.domain.head_ended(head, elapsed_s)
            if head.report is not None:
                self.domain.pass_finished(step.host_id, result.epoch, head.report, started)

    def _finished(
        self, step: contracts.PassStepInput, report: contracts.PassReport, _: float
    ) -> None:
        self.domain.pass_finished(step.host_id, step.epoch, report)

    def _head(
        self, step: contracts.RunHeadInput, result: contracts.RunHeadResult, elapsed_s: float
    ) -> None:
        self.domain.head_ended(result, elapsed_s)
        if result.report is not None:  # the head activity finished its pass
            started = step.pass_deadline - timedelta(milliseconds=self._pass_deadline_ms)
            self.domain.pass_finished(step.host_id, step.epoch, result.report, started)

    def _unstarted(
        self, step: contracts.HeadUnstartedInput, result: contracts.RunHeadResult, _: float
    ) -> None:
        self.domain.head_ended(result, None)
        if result.report is not None:
            self.domain.pass_finished(step.head.host_id, step.head.epoch, result.report)

    def _delivered(
        self,
        _: auxiliary_contracts.DeliverInput,
        result: auxiliary_contracts.DeliverResult,
        __: float,
    ) -> None:
        if result.delivered:
            self.domain.delivered.add(result.delivered)
            self.domain.admitted.add(result.delivered, {"source": "message"})


class CountedPublications(Publications):
    """`Publications` counting what it publishes (the drain activity's batches and the records
    an attempt or operator publishes right after its commit)."""

    def __init__(
        self, pool: asyncpg.Pool[Any], sinks: Sequence[PublicationSink], domain: DomainMetrics
    ) -> None:
        super().__init__(pool, sinks)
        self._domain = domain

    def published(self, count: int) -> None:
        if count:
            self._domain.publications.add(count)


def _tag_span(step: object) -> None:
    span = trace.get_current_span()
    if not span.is_recording():
        return
    # A head attempt's input does not name its agent; its task queue does (`head_task_queue`).
    _, agent_queue, agent = activity.info().task_queue.partition("/agent/")
    if agent_queue:
        span.set_attribute("threadwarden.agent_id", agent.split("/digest/")[0])
    for model in (step, getattr(step, "head", None)):
        if isinstance(model, BaseModel):
            for field in SPAN_IDS:
                value = getattr(model, field, None)
                if isinstance(value, str):
                    span.set_attribute(f"threadwarden.{field}", value)
