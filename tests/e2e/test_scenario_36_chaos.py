"""Scenario 36: seeded chaos (crashes × alarm order over several lanes) converges to the control.

A fixed workload (three threads, two sharing one host and one on its own host, three scripted
submissions each under fixed idempotency keys) first runs with no fault armed: the control. Then,
per seed, ``random.Random(seed)`` decides a chaos plan on fresh threads: the order in which the
lanes' submissions interleave, one-shot faults armed before and between submissions (and after
the last), and extra wakes of the hosts. Every run must settle within a bounded deadline; its
normalized canonical evidence (per thread: the outcomes, then each record's submission ordinal,
kind and body, ids stripped) must equal the control's, thread by thread role.

Faults of three kinds:

- raised at a pass-level failpoint (begin, select, binding-retry, finish, retry), at the
  sweeper's ``ensure``, at ``claim`` and at ``settle`` (after the binding ran, before its outcome
  is recorded: the head is left running, recovery takes it back once its lease lapses, and the
  re-run replays the committed steps from the journal, so no record is written twice);
- raised in the caller's mutation (``maintenance:dirty:*`` and ``maintenance:mutation:*``): the
  submit fails; before the commit nothing was admitted, after it the admission stands. Either way
  the test does what a client does, it submits again with the same idempotency key until a
  receipt comes back;
- paused: a pass stops at a failpoint, is overtaken (every host run is terminated, as an
  eviction, and woken into a new run whose begin fences the paused pass out), then released, so
  the paused step goes on as a zombie whose fenced writes must change nothing.

The binding-retry failpoints only fire on binding failures, which this workload has none of.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient
from threadwarden.errors import NotFound
from threadwarden.failpoints import FailpointError, Failpoints
from threadwarden.views import HostStatus, ThreadStatus
from threadwarden.workflows.contracts import host_workflow_id

ROLES = ("alpha", "beta", "solo")
HOST_OF = {"alpha": "shared", "beta": "shared", "solo": "solo"}
"""alpha and beta are two lanes of one host; solo is a host of its own."""
PER_THREAD = 3
RAISE_LOCATIONS = tuple(
    f"maintenance:{phase}:{edge}"
    for phase in ("begin", "select", "binding-retry", "finish", "retry", "ensure")
    for edge in ("before", "after")
) + ("claim", "settle")
MUTATION_LOCATIONS = tuple(
    f"maintenance:{phase}:{edge}" for phase in ("dirty", "mutation") for edge in ("before", "after")
) + ("maintenance:mutation:armed", "maintenance:mutation:finished")
"""Hit inside ``ThreadwardenClient.submit``: a raise there fails the caller's submit."""
PAUSE_LOCATIONS = (
    "maintenance:begin:after",
    "maintenance:select:before",
    "maintenance:select:after",
    "maintenance:finish:before",
    "maintenance:finish:after",
    "claim",
    "settle",
)
CHAOS_LOCATIONS = RAISE_LOCATIONS + MUTATION_LOCATIONS
SEEDS = (7, 36, 1096, 2024, 4242, 90210)
SETTLE_DEADLINE_S = 90
PAUSE_REACH_S = 5
"""How long a paused failpoint may wait to be hit before it is disarmed unhit."""
SUBMIT_TRIES = 10

Evidence = dict[str, Any]


def _script(role: str, n: int) -> list[dict[str, Any]]:
    """The deterministic steps of submission ``n`` on the ``role`` thread."""
    steps: list[dict[str, Any]] = [
        {"say": f"{role} #{n}"},
        {"tool": "lookup", "args": {"role": role, "n": n}},
    ]
    if role == "beta" and n == 1:
        steps.append({"fail": "beta #1 gives up"})
    if n == PER_THREAD - 1:
        steps.append({"say": f"{role} done"})
    return steps


def _threads(prefix: str) -> dict[str, str]:
    return {role: f"{prefix}-{role}" for role in ROLES}


def _hosts(prefix: str) -> list[str]:
    return sorted({f"{prefix}-host-{host}" for host in HOST_OF.values()})


async def _submit(client: ThreadwardenClient, prefix: str, role: str, n: int) -> int:
    """Submit as a client does: a failed submit is sent again with the same idempotency key
    until a receipt comes back. Returns how many submits failed."""
    for failed in range(SUBMIT_TRIES):
        try:
            await client.submit(
                _threads(prefix)[role],
                agent_id="scripted",
                input=_script(role, n),
                idempotency_key=f"{role}-{n}",
                host_id=f"{prefix}-host-{HOST_OF[role]}",
            )
        except FailpointError:
            continue
        return failed
    raise AssertionError(f"{role} #{n}: no receipt after {SUBMIT_TRIES} submits")


def _interleaving(rng: random.Random) -> list[tuple[str, int]]:
    """A seed-shuffled merge of the lanes that keeps each lane's own submission order."""
    pending = {role: list(range(PER_THREAD)) for role in ROLES}
    order: list[tuple[str, int]] = []
    while any(pending.values()):
        role = rng.choice([r for r in ROLES if pending[r]])
        order.append((role, pending[role].pop(0)))
    return order


async def _statuses(client: ThreadwardenClient, prefix: str) -> list[ThreadStatus]:
    return [await client.thread_status(t) for t in _threads(prefix).values()]


async def _host_statuses(client: ThreadwardenClient, prefix: str) -> list[HostStatus]:
    return [await client.host_status(h) for h in _hosts(prefix)]


def _quiet(hosts: list[HostStatus]) -> bool:
    return all(h.processed == h.dirty and h.alarm_at is None for h in hosts)


async def _runs_open(temporal: Client, prefix: str) -> int:
    """How many of the prefix's host runs are still open."""
    open_runs = 0
    for host in _hosts(prefix):
        query = f"WorkflowId = '{host_workflow_id(host)}' AND ExecutionStatus = 'Running'"
        open_runs += len([run async for run in temporal.list_workflows(query)])
    return open_runs


async def _converged(client: ThreadwardenClient, temporal: Client, prefix: str) -> None:
    """Wait (bounded) until every submission settled, every host went quiet and its run ended:
    a run whose completion the server refused (a wake arrived during its last workflow task)
    replays its last passes, and their begin pre-arms the alarm again for a moment."""
    await eventually(
        lambda: _statuses(client, prefix),
        lambda ss: (
            all(len(s.submissions) == PER_THREAD for s in ss)
            and all(sub.state == "settled" for s in ss for sub in s.submissions)
        ),
        timeout_s=SETTLE_DEADLINE_S,
        what=f"{prefix}: every submission settled",
    )
    await eventually(
        lambda: _runs_open(temporal, prefix),
        lambda n: n == 0,
        timeout_s=SETTLE_DEADLINE_S,
        what=f"{prefix}: every host run ended",
    )
    await eventually(
        lambda: _host_statuses(client, prefix),
        _quiet,
        timeout_s=SETTLE_DEADLINE_S,
        what=f"{prefix}: every host acknowledged and cleared its alarm",
    )


async def _evidence(client: ThreadwardenClient, prefix: str) -> dict[str, Evidence]:
    """Per role: outcomes and records, normalized (ids replaced by submission ordinals)."""
    evidence: dict[str, Evidence] = {}
    for role, thread in _threads(prefix).items():
        status = await client.thread_status(thread)
        ordinal = {s.submission_id: n for n, s in enumerate(status.submissions)}
        records = await client.records(thread)
        evidence[role] = {
            "outcomes": [(s.outcome, s.reason) for s in status.submissions],
            "records": [(ordinal[r["submission_id"]], r["kind"], r["body"]) for r in records],
        }
    return evidence


async def _assert_ledger_invariants(client: ThreadwardenClient, prefix: str) -> None:
    """Exactly one settlement per submission, in FIFO order; unique record ids; quiet hosts."""
    for thread in _threads(prefix).values():
        status = await client.thread_status(thread)
        records = await client.records(thread)
        settled = [r["submission_id"] for r in records if r["kind"] == "settlement"]
        assert settled == [s.submission_id for s in status.submissions], thread
        record_ids = [r["record_id"] for r in records]
        assert len(record_ids) == len(set(record_ids)), f"{thread}: duplicate record ids"
        # A fault at settle (or a paused, overtaken attempt) makes the head run again.
        assert all(s.attempts >= 1 for s in status.submissions), thread
    for host in await _host_statuses(client, prefix):
        assert host.processed == host.dirty, host
        assert host.alarm_at is None, host
        assert host.nonterminal == 0, host
        # A failure rearm after finish acknowledged leaves a retry for that generation; the
        # caught-up finish keeps it (as the original does), and it is inert once acknowledged.
        assert host.retry is None or host.retry.generation <= host.processed, host
        assert host.binding_retries == [], host


class _Chaos:
    """One seed's plan, carried out against the test's worker and client."""

    def __init__(
        self,
        client: ThreadwardenClient,
        failpoints: Failpoints,
        temporal: Client,
        prefix: str,
        seed: int,
    ) -> None:
        self.client, self.failpoints, self.temporal = client, failpoints, temporal
        self.prefix, self.rng = prefix, random.Random(seed)
        self.hosts = _hosts(prefix)
        self.plan: list[str] = []
        self.refused = 0
        self.overtaken = 0
        self._overtakers: list[asyncio.Task[None]] = []
        self._paused: set[str] = set()

    async def run(self) -> None:
        """Submit the workload under the seed's plan."""
        await self._disturb(arm_chance=1.0, pause_chance=0.5, wake_chance=0.0)
        for role, n in _interleaving(self.rng):
            self.refused += await _submit(self.client, self.prefix, role, n)
            self.plan.append(f"submit {role} #{n}")
            await self._disturb(arm_chance=0.6, pause_chance=0.3, wake_chance=0.3)
            await asyncio.sleep(self.rng.uniform(0, 0.15))  # let passes race the next admission
        await self._disturb(arm_chance=1.0, pause_chance=0.5, wake_chance=0.5)
        await asyncio.gather(*self._overtakers)

    async def _disturb(self, *, arm_chance: float, pause_chance: float, wake_chance: float) -> None:
        rng = self.rng
        if rng.random() < arm_chance:
            location, times = rng.choice(CHAOS_LOCATIONS), rng.randint(1, 2)
            self.failpoints.arm(location, times=times)
            self.plan.append(f"arm {location} x{times}")
        if rng.random() < pause_chance:
            location = rng.choice(PAUSE_LOCATIONS)
            if location not in self._paused:
                self._paused.add(location)
                self.failpoints.arm(location, pause=True, times=1)
                self.plan.append(f"pause {location}")
                self._overtakers.append(asyncio.ensure_future(self._overtake(location)))
        if rng.random() < wake_chance:
            host = rng.choice(self.hosts)
            await self.client.wake(host, reason="chaos")
            self.plan.append(f"wake {host}")

    async def _epochs(self) -> dict[str, int]:
        epochs = {}
        for host in self.hosts:
            with contextlib.suppress(NotFound):  # not admitted yet
                epochs[host] = (await self.client.host_status(host)).pass_epoch
        return epochs

    async def _overtake(self, location: str) -> None:
        """Once a pass is paused at ``location``: evict every host run, wait until a newer pass
        began, then let the paused step go on (as a zombie of a terminated run)."""
        try:
            await self.failpoints.reached(location, timeout_s=PAUSE_REACH_S)
        except TimeoutError:
            self.failpoints.release(location)
            self._paused.discard(location)
            self.plan.append(f"pause {location} never reached")
            return
        epochs = await self._epochs()  # the hosts admitted so far
        for host in epochs:
            with contextlib.suppress(RPCError):  # a run that already ended
                await self.temporal.get_workflow_handle(host_workflow_id(host)).terminate(
                    reason="chaos: evicted mid-pass"
                )
        for host in epochs:
            await self.client.wake(host, reason="chaos: new run")
        await eventually(
            self._epochs,
            lambda now: all(now[host] > epoch for host, epoch in epochs.items()),
            timeout_s=SETTLE_DEADLINE_S,
            what=f"{self.prefix}: newer passes begun past the pause at {location}",
        )
        self.overtaken += 1
        self.failpoints.release(location)
        self._paused.discard(location)
        self.plan.append(f"overtook and released {location}")


async def _control(client: ThreadwardenClient, temporal: Client, ids: str) -> dict[str, Evidence]:
    prefix = f"control-{ids}"
    for n in range(PER_THREAD):
        for role in ROLES:
            await _submit(client, prefix, role, n)
    await _converged(client, temporal, prefix)
    await _assert_ledger_invariants(client, prefix)
    return await _evidence(client, prefix)


@pytest.mark.parametrize("seed", SEEDS)
async def test_scenario_36_seeded_chaos_converges_to_the_control_evidence(
    worker: None,
    client: ThreadwardenClient,
    failpoints: Failpoints,
    temporal_client: Client,
    ids: str,
    seed: int,
) -> None:
    control = await _control(client, temporal_client, ids)
    assert not failpoints.hits, "the control run must be uninterrupted"
    prefix = f"chaos{seed}-{ids}"
    chaos = _Chaos(client, failpoints, temporal_client, prefix, seed)
    try:
        await chaos.run()
        await _converged(client, temporal_client, prefix)
    finally:
        failpoints.release_all()
    fired = dict(failpoints.hits)
    report = (
        f"seed {seed}: fired {fired}; refused submits {chaos.refused};"
        f" overtaken pauses {chaos.overtaken}; plan {chaos.plan}"
    )
    assert fired, f"no fault fired; {report}"
    await _assert_ledger_invariants(client, prefix)
    assert await _evidence(client, prefix) == control, report
