"""Whom a node stops waiting for at a round boundary (:meth:`Rendezvous.join`).

Two kinds of expected member are not waited for until the rendezvous timeout:

- a member whose heartbeat stopped (dead or stalled) while this node waited for it: each gets
  the heartbeat timeout from when it is first awaited (:func:`without_silent`);
- a node the ledger accepted for the round that never posts its rendezvous join (an honest node
  posts it right after the ledger took its own): it gets ``no_show_s`` from when this node first
  saw it missing (:func:`overdue`). Its heartbeat proves nothing here: a registered node that
  joins only at the ledger and keeps beating held every round to the rendezvous timeout
  (F12 of issue 25, tests/trainer/test_ledger_members.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Set as AbstractSet

from trainer.network.coordination.heartbeat import Liveness

log = logging.getLogger(__name__)


def without_silent(
    liveness: Liveness | None,
    me: str,
    expected: set[str] | int,
    present: set[str],
    watched: dict[str, bool],
) -> set[str] | int:
    """``expected`` less the members whose heartbeat stopped while this node waited for them.
    ``watched``: address -> whether it was found silent (logged once)."""
    if liveness is None or liveness.timeout_s <= 0 or not isinstance(expected, set):
        return expected
    awaited = tuple(sorted(expected - present - {me}))
    new = tuple(a for a in awaited if a not in watched)
    if new:
        liveness.reset(new)
        watched.update(dict.fromkeys(new, False))
    silent = set(liveness.stalled(awaited)) if awaited else set()
    for a in sorted(silent):
        if not watched[a]:
            watched[a] = True
            log.warning("round boundary: not waiting for %s, no heartbeat for %.1fs", a,
                        liveness.timeout_s)  # fmt: skip
    return expected - silent


def overdue(
    round: int, missing: AbstractSet[str], since: dict[str, float], no_show_s: float
) -> set[str]:
    """The nodes of ``missing`` (accepted by the ledger, no rendezvous join yet) missing for
    more than ``no_show_s`` since this node first saw them missing (``since``: address -> that
    time, filled here); each newly overdue one is logged."""
    now = time.monotonic()
    gone = set()
    for a in sorted(missing):
        first = since.setdefault(a, now)
        if now - first > no_show_s:
            gone.add(a)
            if now - first - no_show_s < 0.5:
                log.warning("round %d: not waiting for %s: the ledger took its join %.1fs ago "
                            "and it never joined here", round, a, now - first)  # fmt: skip
    return gone
