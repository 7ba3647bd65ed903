"""The time-boxed inner phase of heterogeneous nodes: each round's budget, from signed paces.

After its inner phase of round r, every member posts its pace (seconds per inner step, the
whole phase over its steps) as a signed ``PACE`` message under ``pace/r/<address>``, before its
all-reduce, so reading them costs the next round no wait. Round r + 1's budget is H + 1 steps at
the fastest pace that round r's members posted: the fastest node runs its H steps under the
conditions of the moment and a slower one runs the steps that fit (``InnerTrainer.train``),
declares them, and is weighted and paid by their tokens, so nobody waits for it.

Who can post a pace: any registered, active member (the board refuses unsigned, foreign, stale
and misattributed messages, as for every coordination message). The worst a member can do is
claim to be very fast, which would cut every other node's steps; so the fastest pace counts
only down to ``FLOOR`` times the median of the posted paces: with an honest majority a liar can
at most halve the honest nodes' steps for the round, and it is paid only for the tokens it
declares. A round with no posted pace (the run's first, or members that all just joined) has
no budget: every node runs H steps.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Iterable

from protocol.coordination import Kind
from protocol.errors import ColocoError, ConfigError
from reference.inner import InnerResult
from trainer.network.coordination.board import Board

log = logging.getLogger(__name__)
FLOOR = 0.5
"""The fastest pace counts down to this fraction of the median pace (a liar's bound)."""


def pace_key(round: int, address: str) -> str:
    return f"pace/{round}/{address}"


def pace_of(result: InnerResult) -> float:
    """Seconds per inner step of a finished inner phase."""
    if result.steps <= 0:
        raise ConfigError("an inner phase with no step has no pace")
    return result.seconds / result.steps


def post_pace(board: Board, round: int, result: InnerResult) -> float:
    """Post this node's pace of ``round`` (signed); returns it."""
    step_s = pace_of(result)
    board.post(pace_key(round, board.address), Kind.PACE, round, 0, {"step_s": repr(step_s)})
    return step_s


def read_paces(board: Board, round: int, addresses: Iterable[str]) -> dict[str, float]:
    """The verified paces that ``addresses`` posted for ``round`` (absent or refused: left out)."""
    paces: dict[str, float] = {}
    for address in addresses:
        msg = board.read(pace_key(round, address), Kind.PACE, round, 0, signer=address)
        if msg is None:
            continue
        try:
            step_s = float(msg.body()["step_s"])
        except (ColocoError, KeyError, TypeError, ValueError):
            board.refuse("invalid", pace_key(round, address), f"pace payload {msg.payload!r}")
            continue
        if not math.isfinite(step_s) or step_s <= 0:
            board.refuse("invalid", pace_key(round, address), f"pace {step_s!r} s a step")
            continue
        paces[address] = step_s
    return paces


def budget_from(paces: Iterable[float], steps: int) -> float | None:
    """H + 1 steps at the fastest pace, bounded below by ``FLOOR`` x the median; None if none."""
    values = sorted(paces)
    if not values:
        return None
    step_s = max(values[0], FLOOR * statistics.median(values))
    return (steps + 1) * step_s


def budget(board: Board, round: int, addresses: Iterable[str], steps: int) -> float | None:
    """Round ``round``'s time box in seconds from the paces its members posted for the round
    before (None: no pace posted, no box)."""
    paces = read_paces(board, round - 1, addresses)
    box = budget_from(paces.values(), steps)
    if box is not None:
        log.info("round %d: time box %.2f s (%d steps at %.3f s, %d paces)", round, box, steps,
                 box / (steps + 1), len(paces))  # fmt: skip
    return box
