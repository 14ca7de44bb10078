"""The chaos run's one JSON object: the ledger check's counts first, then what was done."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chaos.checks import Counts
from chaos.workers import EXIT_DEADLINE_S

if TYPE_CHECKING:
    from chaos.run import Options, Outcome
    from chaos.workers import ChaosWorkers


def report(
    options: Options,
    counts: Counts,
    outcome: Outcome,
    fired: dict[str, int],
    unquiet: int,
    workers: ChaosWorkers,
    seconds: float,
) -> dict[str, Any]:
    """The run's one JSON object: the check's counts first, then what was done to get them."""
    exit_times = [*workers.deploy_exits, *workers.stop_exits]
    slow = sum(seconds > EXIT_DEADLINE_S for seconds in exit_times)
    return {
        "submissions": counts.submissions,
        "settled": counts.settled,
        "lost": counts.lost,
        "duplicate_admissions": counts.duplicate_admissions,
        "duplicate_settlements": counts.duplicate_settlements,
        "fifo_violations": counts.fifo_violations,
        "wrong_outcomes": counts.wrong_outcomes,
        "wrong_histories": counts.wrong_histories,
        "stale_writes": counts.stale_writes,
        "unexpected_submissions": counts.unexpected_submissions,
        "unjoined_children": counts.unjoined_children,
        "duplicate_joins": counts.duplicate_joins,
        "duplicate_children": counts.duplicate_children,
        "parents_settled_before_children": counts.parents_settled_before_children,
        "wrong_child_markers": counts.wrong_child_markers,
        "unlinked_messages": counts.unlinked_messages,
        "unquiet_hosts": unquiet,
        "failed_on_purpose": counts.failed_on_purpose,
        "children": counts.children,
        "children_settled": counts.children_settled,
        "children_failed_on_purpose": counts.children_failed_on_purpose,
        "agent_turns": counts.agent_turns,
        "agent_turns_settled": counts.agent_turns_settled,
        "messages": counts.messages,
        "messages_settled": counts.messages_settled,
        "unsettled_states": counts.unsettled_states,
        "faults": {
            "worker_kill": outcome.faults["worker_kill"],
            "postgres_stop": outcome.faults["postgres_stop"],
            "temporal_kill": outcome.faults["temporal_kill"],
            "deploy": outcome.faults["deploy"],
            "failpoint": sum(fired.values()),
            "failpoints": fired,
        },
        "submit_retries": outcome.submit_retries,
        "refused_submits": outcome.refused[:5],
        "worker_unplanned_exits": workers.unplanned_exits,
        "failed_deploys": workers.failed_deploys,
        "exit_after_sigterm_s": {
            "deploys": [round(seconds, 2) for seconds in workers.deploy_exits],
            "final_stop": [round(seconds, 2) for seconds in workers.stop_exits],
            "max": round(max(exit_times), 2) if exit_times else None,
            "over_limit": slow,
            "limit": EXIT_DEADLINE_S,
        },
        "threads": options.threads,
        "workers": options.workers,
        "long_send_share": options.long_send_share,
        "seed": options.seed,
        "seconds": round(seconds, 1),
        "error": outcome.error,
        "ok": counts.clean
        and not (unquiet or outcome.refused or outcome.error or slow or workers.failed_deploys),
    }
