"""The application-facing client: admit work and decide waits (docs/client.md); it reads status,
awaits outcomes and follows records with the reads it inherits (`threadwarden.client.reads`).
Mutations commit, then wake."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

import asyncpg
from opentelemetry import metrics
from temporalio.client import Client

from threadwarden.client.reads import ClientReads
from threadwarden.config.connect import Connections, connect_configured, resolve
from threadwarden.config.settings import Settings
from threadwarden.errors import InvalidInput
from threadwarden.failpoints import Failpoints
from threadwarden.ledger.admission import AdmissionRequest, Admissions
from threadwarden.ledger.host_work import HostWork
from threadwarden.ledger.messages import Messages
from threadwarden.ledger.operator import Operator, Resolution
from threadwarden.ledger.pool import create_pool
from threadwarden.ledger.projection import Projection
from threadwarden.ledger.publication import NotifySink, Publications
from threadwarden.ledger.status import StatusReader
from threadwarden.publication import PublicationSink
from threadwarden.scripted import SCRIPTED_AGENT_ID, parse_steps
from threadwarden.validation import IF_BUSY, IfBusy, validate_id, validate_input, validate_text
from threadwarden.views import OperatorResult, Receipt
from threadwarden.workflows.client_calls import PolledQueues, wake_host
from threadwarden.workflows.contracts import head_task_queue

logger = logging.getLogger(__name__)

RESOLUTIONS: tuple[Resolution, ...] = ("ran", "not-run", "fail")
"""The decisions `ThreadwardenClient.resolve` accepts for an unknown side effect."""
CLIENT_POOL_SIZE = 4
"""Connections of the pool a client opens itself (from settings or a DSN). Each `result` wait
and each `records` iteration holds one while it waits."""
SERVED_ASK_S = 1.0
"""The longest `ThreadwardenClient.submit` waits for Temporal's answer on an agent's workers."""


_ADMITTED = metrics.get_meter("threadwarden.client").create_counter(
    "threadwarden_submissions_admitted",
    unit="1",
    description="Submissions admitted by this process",
)
"""Admissions through the client, on the application's global meter provider (a no-op unless
it installed one; a worker counts the admissions it makes itself, message deliveries, on its
own endpoint)."""


def unserved_warning(agent_id: str, task_queue: str) -> str:
    """The warning of a submission no worker can run yet."""
    return (
        f"no worker serves agent {agent_id} on task queue {task_queue} yet: the submission waits"
        f" until one does (threadwarden dev --bindings module:bindings)"
    )


def _check_decision(submission_id: str, operator: str | None) -> None:
    """The ids every decision names: its submission and, if given, who decided."""
    validate_id("submission", submission_id)
    if operator is not None:
        validate_id("operator", operator)


class ThreadwardenClient(ClientReads):
    """Submit work onto threads and observe it."""

    def __init__(
        self,
        pool: asyncpg.Pool[Any],
        temporal: Client | Callable[[], Awaitable[Client]],
        settings: Settings,
        *,
        failpoints: Failpoints | None = None,
        sinks: Sequence[PublicationSink] = (),
    ) -> None:
        """``temporal`` is a connected client, or a coroutine function that connects one when
        the first wake needs it (reads and decisions that change nothing never do)."""
        self._failpoints = failpoints or Failpoints()
        self._publications = Publications(pool, [NotifySink(pool), *sinks])
        self._pool = pool
        self._temporal: Client | None = temporal if isinstance(temporal, Client) else None
        self._connect_temporal = None if isinstance(temporal, Client) else temporal
        self._temporal_lock = asyncio.Lock()
        self._settings = settings
        delay_ms = settings.timing.minimum_alarm_delay
        self._admissions = Admissions(pool, minimum_alarm_delay_ms=delay_ms)
        self._status = StatusReader(pool)
        self._messages = Messages(pool, self._admissions)
        self._projection = Projection(pool, minimum_alarm_delay_ms=delay_ms)
        self._operator = Operator(pool, minimum_alarm_delay_ms=delay_ms)
        self._host_work = HostWork(pool, minimum_alarm_delay_ms=delay_ms)
        self._polled = PolledQueues(timeout_s=SERVED_ASK_S)

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(
        cls,
        settings: Settings | None = None,
        connections: Connections | None = None,
        *,
        failpoints: Failpoints | None = None,
        sinks: Sequence[PublicationSink] = (),
        lazy_temporal: bool = False,
    ) -> AsyncIterator[ThreadwardenClient]:
        """A client for the ledger and Temporal named by ``connections``; by default those the
        settings name (``Settings()``: the ``THREADWARDEN_*`` environment), or else the stack
        ``threadwarden dev`` runs in the settings' data dir (`StackNotFound` when neither).

        With ``lazy_temporal`` Temporal is connected only when a wake needs it: reads
        (status, inbox, records, result) and decisions that change nothing work while Temporal
        is unreachable, and a wake that cannot connect is logged like any failed wake (the
        committed alarm stands; the sweeper starts the pass once Temporal is back)."""
        settings = settings or Settings()
        connections = connections or resolve(settings)
        pool = await create_pool(connections.database_url, max_size=CLIENT_POOL_SIZE)
        try:
            if lazy_temporal:
                here = connections

                async def temporal() -> Client:
                    return await connect_configured(settings, here)

                yield cls(pool, temporal, settings, failpoints=failpoints, sinks=sinks)
            else:
                client = await connect_configured(settings, connections)
                yield cls(pool, client, settings, failpoints=failpoints, sinks=sinks)
        finally:
            await pool.close()

    @classmethod
    @contextlib.asynccontextmanager
    async def from_client(
        cls,
        temporal: Client,
        *,
        database: str | asyncpg.Pool[Any],
        settings: Settings | None = None,
        sinks: Sequence[PublicationSink] = (),
    ) -> AsyncIterator[ThreadwardenClient]:
        """A client on an existing Temporal client and a Postgres DSN or pool.

        A DSN gets a pool of its own, closed on exit; a pool stays the caller's and is left
        open. The pool must decode json/jsonb to Python values, as ``create_pool`` from
        ``threadwarden.ledger.pool`` builds it; another raises `InvalidInput`. ``settings`` defaults
        to ``Settings()`` (the ``THREADWARDEN_*`` environment: task queue, limits, timing).
        """
        settings = settings or Settings()
        if isinstance(database, str):
            pool = await create_pool(database, max_size=CLIENT_POOL_SIZE)
            try:
                yield cls(pool, temporal, settings, sinks=sinks)
            finally:
                await pool.close()
            return
        if not isinstance(await database.fetchval("SELECT '{}'::jsonb"), dict):
            raise InvalidInput(
                "database",
                "a pool with json/jsonb codecs (threadwarden.ledger.pool.create_pool builds one)",
            )
        yield cls(database, temporal, settings, sinks=sinks)

    async def submit(
        self,
        thread_id: str,
        *,
        agent_id: str,
        input: Any,
        idempotency_key: str | None = None,
        host_id: str | None = None,
        agent_digest: str | None = None,
        if_busy: IfBusy = "enqueue",
    ) -> Receipt:
        """Admit one submission (idempotent per key) and wake its host.

        ``if_busy`` says what it does when the thread has a submission that has not settled:
        ``enqueue`` (queue behind it), ``reject`` (raise `ThreadBusy`, write nothing) or
        ``interrupt`` (ask each earlier one to abort in the same transaction; the receipt's
        ``interrupted`` lists them). Bad input raises `InvalidInput` before anything is
        written. A lost wake is harmless: the committed alarm lets the sweeper start the pass.
        """
        validate_id("thread", thread_id)
        validate_id("agent", agent_id)
        if host_id is not None:
            validate_id("host", host_id)
        if idempotency_key is not None:
            validate_id("idempotency_key", idempotency_key)
        if agent_digest is not None:
            validate_id("agent_digest", agent_digest)
        if if_busy not in IF_BUSY:
            raise InvalidInput("if_busy", f"one of {', '.join(IF_BUSY)}", if_busy)
        validate_input("input", input, max_bytes=self._settings.max_input_bytes)
        if agent_id == SCRIPTED_AGENT_ID:
            parse_steps(input)
        # Asked beside the admission and answered before the wake: a submit returns as soon as
        # its host is woken, as without the check (callers act on a pass not yet under way).
        request = AdmissionRequest(
            thread_id=thread_id,
            agent_id=agent_id,
            input=input,
            host_id=host_id,
            agent_digest=agent_digest,
            if_busy=if_busy,
        )
        served = asyncio.ensure_future(self._served(agent_id, agent_digest))
        try:
            receipt = await self._admit_and_wake(request, idempotency_key, served)
        finally:
            served.cancel()
        return receipt

    async def _admit_and_wake(
        self, request: AdmissionRequest, idempotency_key: str | None, served: asyncio.Task[bool]
    ) -> Receipt:
        await self._failpoints.hit("maintenance:mutation:before")
        await self._failpoints.hit("maintenance:dirty:before")
        receipt = await self._admissions.admit(idempotency_key=idempotency_key, **request)
        await self._failpoints.hit("maintenance:dirty:after")
        if not await served:  # a repeat too: it still waits
            warning = unserved_warning(request["agent_id"], self._settings.task_queue)
            receipt.warnings.append(warning)
        if receipt.created:
            _ADMITTED.add(1, {"source": "client"})
            await self._failpoints.hit("maintenance:mutation:armed")
            if receipt.wake:  # else an alarm as early was armed: its pass sees this admission
                await self.wake(receipt.host_id)
            for parent_host in receipt.parent_hosts:  # an interrupt settled a child
                await self.wake(parent_host, reason="child-settled")
            if receipt.interrupted:
                await self._publications.publish_committed(receipt.host_id)
            await self._failpoints.hit("maintenance:mutation:finished")
        await self._failpoints.hit("maintenance:mutation:after")
        return receipt

    async def _served(self, agent_id: str, agent_digest: str | None) -> bool:
        """False only when Temporal answered that no worker polls the agent's task queue (a
        slow or failed answer counts as served: a warning must not be a false alarm)."""
        if self._temporal is None:  # not connected (a lazy client whose wake could not)
            return True  # no verdict
        queue = head_task_queue(self._settings.task_queue, agent_id, agent_digest)
        return not await self._polled.unpolled(self._temporal, queue)

    async def approve(self, submission_id: str, *, operator: str | None = None) -> OperatorResult:
        """Grant a suspended submission's pending approval; it resumes.

        ``operator`` names who decided; it is recorded in the decision (an id's characters)."""
        _check_decision(submission_id, operator)
        return await self._operate(self._operator.approve(submission_id, operator=operator))

    async def deny(
        self, submission_id: str, reason: str | None = None, *, operator: str | None = None
    ) -> OperatorResult:
        """Refuse a pending approval; the submission settles failed (or, when its binding asked
        with ``on_deny="resume"``, it resumes and the binding gets the reason).

        ``reason`` is one line of at most `MAX_TEXT_CHARS` characters; ``operator`` as in
        `approve`.
        """
        _check_decision(submission_id, operator)
        if reason is not None:
            validate_text("reason", reason)
        return await self._operate(self._operator.deny(submission_id, reason, operator=operator))

    async def answer(
        self, submission_id: str, value: Any, *, operator: str | None = None
    ) -> OperatorResult:
        """Answer a submission's pending question (its binding's ``ctx.ask``); it resumes with
        ``value``. The same answer again changes nothing (``changed`` false); another value
        raises `DecisionConflict`; a submission that asks nothing raises `NotWaiting`; a value
        the question's schema refuses raises `InvalidInput`, before anything is written.
        ``operator`` as in `approve`."""
        _check_decision(submission_id, operator)
        validate_input("value", value, max_bytes=self._settings.max_input_bytes)
        return await self._operate(self._operator.answer(submission_id, value, operator=operator))

    async def resolve(
        self,
        submission_id: str,
        outcome: Resolution,
        result: Any = None,
        *,
        operator: str | None = None,
    ) -> OperatorResult:
        """Decide an unknown side effect: ``ran`` (with its result), ``not-run``, or ``fail``;
        ``operator`` as in `approve`."""
        _check_decision(submission_id, operator)
        if outcome not in RESOLUTIONS:
            raise InvalidInput("outcome", f"one of {', '.join(RESOLUTIONS)}", outcome)
        if outcome == "ran":
            validate_input("result", result, max_bytes=self._settings.max_input_bytes)
        elif result is not None:
            raise InvalidInput("result", "no result unless the outcome is ran")
        resolution = self._operator.resolve(submission_id, outcome, result, operator=operator)
        return await self._operate(resolution)

    async def abort(self, submission_id: str, *, operator: str | None = None) -> OperatorResult:
        """Abort now, or (when an attempt runs) at its next committed boundary; ``operator``
        as in `approve` (named in the reason of an abort settled at once)."""
        _check_decision(submission_id, operator)
        return await self._operate(self._operator.abort(submission_id, operator=operator))

    async def _operate(self, mutation: Awaitable[OperatorResult]) -> OperatorResult:
        await self._failpoints.hit("maintenance:mutation:before")
        result = await mutation
        await self._failpoints.hit("maintenance:mutation:armed")
        if result.changed:  # a repeated decision wrote nothing: there is nothing to wake for
            await self.wake(result.host_id, reason="operator")
            if result.parent_host_id is not None:  # it settled a child: its parent may go on
                await self.wake(result.parent_host_id, reason="child-settled")
            await self._publications.publish_committed(result.host_id)
        await self._failpoints.hit("maintenance:mutation:after")
        return result

    async def wake(self, host_id: str, reason: str = "mutation") -> None:
        """Signal-with-start the host; failures are logged, never raised (the sweeper covers)."""
        validate_id("host", host_id)
        try:
            await wake_host(
                await self._temporal_client(),
                host_id,
                task_queue=self._settings.task_queue,
                reason=reason,
            )
        except Exception as error:  # a wake is a hint; the durable alarm is the guarantee
            logger.warning("wake of host %s failed (the sweeper will catch up): %s", host_id, error)

    async def _temporal_client(self) -> Client:
        async with self._temporal_lock:
            if self._temporal is None:
                assert self._connect_temporal is not None
                self._temporal = await self._connect_temporal()
            return self._temporal

    async def rebuild_projection(self, host_id: str) -> None:
        """Drop the host's thread summaries; its passes rebuild them, one batch per pass."""
        validate_id("host", host_id)
        await self._projection.rebuild(host_id)
        await self.wake(host_id, reason="projection")

    async def host_work_due(self, host_id: str, at: datetime | None = None) -> None:
        """Record durably that the host plug-in has work for ``host_id`` at ``at`` (now if None;
        timezone-aware).

        The host's alarm is armed in the same statement, without making the host dirty, so the
        work gets its wave even when the wake that follows is lost. Raises `NotFound` for an
        unknown host.
        """
        validate_id("host", host_id)
        if await self._host_work.mark_due(host_id, at):
            await self.wake(host_id, reason="host-work")
