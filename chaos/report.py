"""The chaos run's one JSON object: the ledger check's counts first, then what was done."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chaos.checks import Counts

if TYPE_CHECKING:
    from chaos.run import Options, Outcome


def report(
    options: Options,
    counts: Counts,
    outcome: Outcome,
    fired: dict[str, int],
    unquiet: int,
    exits: int,
    seconds: float,
) -> dict[str, Any]:
    """The run's one JSON object: the check's counts first, then what was done to get them."""
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
        "unquiet_hosts": unquiet,
        "failed_on_purpose": counts.failed_on_purpose,
        "children": counts.children,
        "children_settled": counts.children_settled,
        "children_failed_on_purpose": counts.children_failed_on_purpose,
        "agent_turns": counts.agent_turns,
        "agent_turns_settled": counts.agent_turns_settled,
        "unsettled_states": counts.unsettled_states,
        "faults": {
            "worker_kill": outcome.faults["worker_kill"],
            "postgres_stop": outcome.faults["postgres_stop"],
            "temporal_kill": outcome.faults["temporal_kill"],
            "failpoint": sum(fired.values()),
            "failpoints": fired,
        },
        "submit_retries": outcome.submit_retries,
        "refused_submits": outcome.refused[:5],
        "worker_unplanned_exits": exits,
        "threads": options.threads,
        "workers": options.workers,
        "seed": options.seed,
        "seconds": round(seconds, 1),
        "error": outcome.error,
        "ok": counts.clean and not (unquiet or outcome.refused or outcome.error),
    }
