"""The rule for a boundary the ledger asked for and never got: the node fails the audit.

An audit asks a node for boundary ``i`` of its trace of round ``r`` (ledger.intake.boundaries);
the node must upload that state, hashing to the leaf under the ``traceRoot`` it signed, before
the request's deadline. A request still pending at its deadline is a withheld boundary: the
audit cannot check the segment, so the node is treated as failing it (``boundary_withheld``),
never as passing by silence.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from ledger.core.models import BoundaryRequest
from ledger.judge.entries import Entry

CHECK = "boundary_withheld"


def withheld_reason(request: BoundaryRequest, now: datetime) -> str | None:
    """Why ``request`` fails its node at ``now``, or None (delivered, or not due yet)."""
    if request.state == "delivered" or now < request.deadline:
        return None
    return (
        f"boundary {request.boundary} of round {request.round} (traceRoot "
        f"{request.trace_root}) was asked for and not delivered by its deadline "
        f"{request.deadline.isoformat()}: the audit cannot check the round, so it fails"
    )


def check_boundaries(
    entries: Iterable[Entry], requests: Iterable[BoundaryRequest], now: datetime
) -> None:
    """Fail each entry whose node withheld a boundary of the entry's round."""
    due: dict[tuple[str, int, str], str] = {}
    for request in requests:
        reason = withheld_reason(request, now)
        if reason is not None:
            due.setdefault((request.run_id, request.round, request.node), reason)
    for e in entries:
        reason = due.get((e.att.run_id, e.att.round, e.att.node))
        if reason is not None:
            e.fail(CHECK, reason)
