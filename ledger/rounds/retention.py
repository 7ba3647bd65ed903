"""Bounded retention of the audit trail: each node keeps its newest refusals, the rest go.

Refusals are recorded only under a sender whose signature verified (ledger.intake.accept), so a
node can only fill its own list; this caps that list, so no node (or key thief) can grow the table
without bound.
"""

from __future__ import annotations

import logging

from sqlalchemy import Engine, delete, func, select

from ledger.core.models import Rejection

log = logging.getLogger(__name__)

_REJ = Rejection.__table__  # type: ignore[attr-defined]


def prune_rejections(engine: Engine, *, keep: int) -> int:
    """Delete all but the newest ``keep`` refusals of every node; return how many went."""
    removed = 0
    with engine.begin() as conn:
        crowded = conn.execute(
            select(_REJ.c.node).group_by(_REJ.c.node).having(func.count() > keep)
        ).scalars()
        for node in list(crowded):
            cutoff = conn.execute(
                select(_REJ.c.id)
                .where(_REJ.c.node == node)
                .order_by(_REJ.c.id.desc())
                .offset(keep)
                .limit(1)
            ).scalar()
            if cutoff is None:
                continue
            gone = conn.execute(delete(_REJ).where(_REJ.c.node == node, _REJ.c.id <= cutoff))
            removed += gone.rowcount
    if removed:
        log.info("pruned %d old refusals (keeping %d per node)", removed, keep)
    return removed
