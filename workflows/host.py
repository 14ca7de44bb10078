"""The host maintenance workflow: maintenance passes, each followed by a wait for the alarm.

Postgres holds the truth; this workflow only orchestrates. A pass walks its steps (each an
activity with an explicit timeout and a single attempt); then the run waits for min(alarm, wake)
on a workflow timer, or for a wait under a second on an activity that sleeps it (or starts the
next pass at once when the last one made progress). After 100 passes, or when Temporal suggests
it, the run continues as new. When a pass cleared the alarm and no wake is pending the run waits
``idle_linger_ms`` (2 s) for one, then completes: an idle host holds no open workflow.

History is a cost: search attributes are upserted only when a value changed, at most once per
pass, and the phase is written only when it can be seen (a pass that goes straight on to the
next one stays in ``pass``).
"""

import asyncio
import contextlib
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate
from temporalio.exceptions import ActivityError

from threadwarden.workflows import contracts
from threadwarden.workflows.passes import ONE_ATTEMPT, MaintenancePass

MAX_PASSES_PER_RUN = 100
"""Continue as new after this many passes (or sooner when Temporal suggests it)."""
FAILURE_FALLBACK = timedelta(seconds=5)
"""How long to wait when even the failure rearm could not run (e.g. the database is down)."""
CHAIN_LIMIT = timedelta(seconds=5)
"""Passes whose steps are all local activities follow each other inside one workflow task; once
that task has run this long, the run ends it before the next pass (`HostWorkflow._end_task`):
its steps' markers are recorded (a task that fails, e.g. because a wake arrived as the run was
about to complete, loses only its own), the clock moves on, and other workflows get the slot."""
TASK_BREAK_BOUND = timedelta(seconds=10)
"""Start-to-close of the no-op ``task_break`` activity (a worker lost while it holds it costs
the run this long), beyond the short wait it may sleep."""
TIMER_SHIFT = timedelta(seconds=1)
"""A wait shorter than this is not a workflow timer but ``task_break`` sleeping it
(`HostWorkflow._sleep`): the server fires a timer due sooner than its
``history.timerProcessorMaxTimeShift`` (1 s by default) only about that late."""
BUSY_UPSERT_INTERVAL = timedelta(seconds=1)
"""While passes run back to back, search attributes are upserted at most this often (each
upsert is a history event and a visibility write); a run that waits or goes idle always
upserts what changed."""

PHASE = SearchAttributeKey.for_keyword("ThreadwardenPhase")
PASS_OUTCOME = SearchAttributeKey.for_keyword("ThreadwardenPassOutcome")
"""The last pass's outcome (caught-up, actionable, failed), not a submission's."""
GENERATION = SearchAttributeKey.for_int("ThreadwardenGeneration")
NONTERMINAL = SearchAttributeKey.for_int("ThreadwardenNonterminal")
NEXT_ALARM = SearchAttributeKey.for_datetime("ThreadwardenNextAlarm")
SEARCH_ATTRIBUTES = (PHASE, PASS_OUTCOME, GENERATION, NONTERMINAL, NEXT_ALARM)
"""No attribute names a submission: that would be an upsert (a history event and a visibility
write) per head. The current details name the running head, the activities' summaries every
head, and `threadwarden status SUBMISSION` its thread and host."""


def _taken(done: asyncio.Future[Any]) -> None:
    """Take an activity's outcome that nothing awaits (so that none goes unretrieved)."""
    if not done.cancelled():
        done.exception()


@workflow.defn(name=contracts.HOST_WORKFLOW)
class HostWorkflow:
    """The maintenance loop of one host: passes, waits for the alarm, continue-as-new."""

    def __init__(self) -> None:
        self._host_id = ""
        self._wake_pending = False
        self._phase = "starting"
        self._passes = 0
        self._last: contracts.PassReport | None = None
        self._shown: dict[str, Any] = {}
        """The search attribute values as last upserted (carried over by continue-as-new)."""
        self._heads: list[contracts.HeadView] | None = None
        """The lane heads the last pass that read them reported (a caught-up pass reads none:
        nothing changed in the lanes since, so the details keep showing them)."""
        self._upserted_at: datetime | None = None
        self._chained_since: datetime | None = None
        """When the passes running back to back since the run last waited began (the first
        one's begin clock): they share one workflow task."""

    @workflow.signal(name=contracts.WAKE_SIGNAL)
    def wake(self, _: contracts.WakeInput) -> None:
        """A hint that a mutation committed; deferred while a pass runs."""
        self._wake_pending = True

    @workflow.query(name=contracts.STATUS_QUERY)
    def status(self) -> contracts.WorkflowStatus:
        return contracts.WorkflowStatus(
            host_id=self._host_id,
            phase=self._phase,
            passes=self._passes,
            wake_pending=self._wake_pending,
            last_outcome=self._last.outcome if self._last else None,
            next_alarm=self._last.alarm_at if self._last else None,
            last_pass=self._last,
        )

    @workflow.run  # noqa: RET503 - the last statement is continue-as-new, which never returns
    async def run(self, host: contracts.HostInput) -> contracts.HostResult:
        self._host_id = host.host_id
        self._passes = host.passes
        self._shown = {
            key.name: workflow.info().typed_search_attributes.get(key) for key in SEARCH_ATTRIBUTES
        }
        fresh = False  # whether this workflow task has recorded no pass yet (began after a wait)
        for passes_in_run in range(1, MAX_PASSES_PER_RUN + 1):
            # Wakes that arrived before this pass are consumed by it.
            self._wake_pending = False
            self._phase = "pass"
            maintenance = MaintenancePass(
                self._host_id, self._show_head, heads_known=self._heads is not None
            )
            report = await maintenance.run()
            if self._chained_since is None:
                self._chained_since = maintenance.started
            self._passes += 1
            self._last = report
            fresh = False
            if report is not None and report.alarm_at is None and not self._wake_pending:
                self._publish(report, "idle")
                # Linger (``idle_linger_ms``): a run that completed at once would meet the next
                # turn's wake as its last task completes it, and the server answers such a wake
                # only about a second later, in a new run.
                linger = maintenance.idle_linger
                if not (linger and await self._woken_within(linger, "idle: wake?")):
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    return contracts.HostResult(
                        host_id=host.host_id, passes=self._passes, last_outcome=report.outcome
                    )
                self._chained_since, fresh = None, True  # woken: a new task
            wait = None if maintenance.stopped else self._wait(report, moved=maintenance.moved)
            self._publish(report, "waiting" if wait else "pass")
            if maintenance.stopped:
                # Its worker shuts down: this task completes (its passes stay recorded), and
                # the next pass runs where the next task goes.
                await self._end_task("the head's worker stops")
                self._chained_since, fresh = None, True
            elif wait:
                await self._sleep(wait, backlog=report is not None and report.nonterminal > 1)
                self._chained_since, fresh = None, True
            elif self._chained_too_long(report):
                await self._end_task("end a long workflow task")
                self._chained_since, fresh = None, True
            if (
                passes_in_run >= MAX_PASSES_PER_RUN
                or workflow.info().is_continue_as_new_suggested()
            ):
                break
        # A task of its own for the continue-as-new: a wake arriving meanwhile makes the server
        # refuse it, and the refused task's markers (its passes) would be lost with it. A task
        # that began after a wait holds none: it continues as new at once (one round trip less
        # for the turn whose wake it is).
        if not fresh:
            await self._end_task("continue as new")
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(contracts.HostInput(host_id=host.host_id, passes=self._passes))

    async def _end_task(self, why: str) -> None:
        """End this workflow task and go on in the next: the run awaits a regular activity that
        does nothing (``task_break``, on its own task queue), whose completion the server hands
        back in a new task within milliseconds. Not a timer: the server moves a timer due
        sooner than its ``history.timerProcessorMaxTimeShift`` (1 s by default) to that shift,
        so a 1 ms timer cost a turn about a second (bench/README.md, "Ending a workflow
        task"). Whatever the activity's outcome, it arrives in a new task: that is all the run
        waits for."""
        with contextlib.suppress(ActivityError):
            await workflow.execute_activity(
                contracts.TASK_BREAK,
                start_to_close_timeout=TASK_BREAK_BOUND,
                retry_policy=ONE_ATTEMPT,
                summary=f"{contracts.TASK_BREAK}: {why}",
            )

    async def _woken_within(self, timeout: timedelta, summary: str | None = None) -> bool:
        """Whether a wake comes within ``timeout`` (a workflow timer, ``summary`` its name)."""
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(
                lambda: self._wake_pending, timeout=timeout, timeout_summary=summary
            )
        return self._wake_pending

    async def _sleep(self, wait: timedelta, *, backlog: bool) -> None:
        """Until the alarm (``wait`` from now) or a wake, whichever comes first. A wait shorter
        than `TIMER_SHIFT` (an admission's 50 ms floor met by a pass that had just begun) is
        ``task_break`` sleeping it on a worker: its completion comes back within milliseconds
        of its end, where a timer would fire about a second late (bench/README.md, "Ending a
        workflow task"). A wake ends the wait at once; the activity ends by itself, unawaited.
        A host with a ``backlog`` (more than one unsettled submission) waits on the timer all
        the same: the second it may lose folds its queue into one chain of passes, where exact
        waits cost a round trip each (bench 50×20: ratio 1.24 -> 0.88, history events per unit
        1.0 -> 2.1 with every short wait slept)."""
        if wait >= TIMER_SHIFT or backlog:
            await self._woken_within(wait)
            return
        sleep = workflow.start_activity(
            contracts.TASK_BREAK,
            wait // timedelta(milliseconds=1),
            start_to_close_timeout=TASK_BREAK_BOUND + wait,
            retry_policy=ONE_ATTEMPT,
            summary=f"{contracts.TASK_BREAK}: wait for the alarm",
        )
        # Whatever its outcome, and whenever it comes, the wait is over: its result is only
        # taken. Never cancelled: an abandoned activity's later timeout (its worker killed)
        # failed every workflow task after it in the SDK's state machine (chaos, 2026-12-07).
        sleep.add_done_callback(_taken)
        await workflow.wait_condition(lambda: self._wake_pending or sleep.done())

    def _chained_too_long(self, report: contracts.PassReport | None) -> bool:
        """Whether the passes chained since the run last waited have run `CHAIN_LIMIT`, on the
        clocks their steps recorded (`workflow.now()` moves with each local activity's result,
        so it cannot tell how long the workflow task has been open)."""
        at = report.reported_at if report is not None else None
        since = self._chained_since
        return at is not None and since is not None and at - since >= CHAIN_LIMIT

    def _wait(self, report: contracts.PassReport | None, *, moved: bool) -> timedelta | None:
        """How long the run waits before the next pass: None to go straight on (the pass made
        progress, a mutation committed while it ran (``moved``: its admission skipped the wake
        this pass's alarm stood for), a wake is pending, or the alarm is already due)."""
        if (report is not None and report.progressed) or moved or self._wake_pending:
            return None
        if report is None or report.alarm_at is None:
            return FAILURE_FALLBACK
        # The pass's own clock: the workflow's stands still while passes follow each other
        # inside one workflow task.
        now = max(workflow.now(), report.reported_at or workflow.now())
        wait = report.alarm_at - now
        return wait if wait > timedelta(0) else None

    def _publish(self, report: contracts.PassReport | None, phase: str) -> None:
        """One upsert of the search attributes that changed, if any; while passes run back to
        back, at most one per `BUSY_UPSERT_INTERVAL`."""
        self._phase = phase
        now = workflow.now()
        busy = phase == "pass" and self._shown.get(PHASE.name) == "pass"
        self._describe(report, phase)
        if busy and self._upserted_at and now - self._upserted_at < BUSY_UPSERT_INTERVAL:
            return
        values: dict[str, Any] = {PHASE.name: phase}
        values[PASS_OUTCOME.name] = report.outcome if report else "failed"
        if report is not None:
            values[GENERATION.name] = report.generation
            values[NONTERMINAL.name] = report.nonterminal
            values[NEXT_ALARM.name] = report.alarm_at
        self._upsert(values)

    def _show_head(self, head: contracts.RunHeadInput) -> None:
        """The head the pass is about to run, in the current details at once (no history
        event; the search attributes are written after the pass)."""
        pinned = f" at digest `{head.agent_digest}`" if head.agent_digest else ""
        workflow.set_current_details(
            f"**pass** · running `{head.submission_id}` on thread `{head.thread_id}`"
            f" (agent `{head.agent_id}`{pinned})"
        )

    def _upsert(self, values: dict[str, Any]) -> None:
        keys = {key.name: key for key in SEARCH_ATTRIBUTES}
        updates: list[SearchAttributeUpdate[Any]] = []
        for name, value in values.items():
            if self._shown.get(name) == value:
                continue
            self._shown[name] = value
            key = keys[name]
            updates.append(key.value_unset() if value is None else key.value_set(value))
        if updates:
            workflow.upsert_search_attributes(updates)
            self._upserted_at = workflow.now()

    def _describe(self, report: contracts.PassReport | None, phase: str) -> None:
        """The current details the Temporal UI shows: phase, next alarm, last pass, and the
        lane heads with what each waits for (no history event: served by a query)."""
        lines = [f"**{phase}** · pass {self._passes}"]
        if report is None:
            lines.append("last pass: no report (it failed before its finish)")
        else:
            alarm = report.alarm_at.isoformat(timespec="seconds") if report.alarm_at else "none"
            lines.append(
                f"last pass: {report.outcome} · next alarm {alarm} ·"
                f" {report.nonterminal} nonterminal"
            )
            if report.heads is not None:
                self._heads = report.heads
            heads = self._heads if report.nonterminal else []
            for head in heads or []:
                lines.append(_head_line(head))
            shown = len(heads or [])
            if heads is not None and report.nonterminal > shown:
                lines.append(f"- … {report.nonterminal - shown} more nonterminal")
        workflow.set_current_details("\n".join(lines))


def _head_line(head: contracts.HeadView) -> str:
    """One lane head for the current details: what it is, what it waits for, whose child."""
    if head.waiting_for == "child" and head.children:
        shown = ", ".join(f"`{child}`" for child in head.children)
        plural = "children" if len(head.children) > 1 else "child"
        waits = f", waits for {plural} {shown}"
    elif head.waiting_for:
        waits = f", waits for {head.waiting_for}"
    else:
        waits = ""
    parent = f", child of `{head.parent_submission_id}`" if head.parent_submission_id else ""
    return (
        f"- `{head.thread_id}`: `{head.submission_id}` {head.state}"
        f" (agent `{head.agent_id}`{waits}{parent})"
    )
