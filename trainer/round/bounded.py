"""The bounded overlap schedule of :class:`trainer.round.node.NodeRunner`: round r's exchange
runs during the first segment of round r+1 and lands at its first boundary.

The one-round delayed outer step (trainer.round.overlap) hides the exchange behind a whole
round and costs x1.085 in loss; bounding the delay to the first ``k`` inner steps (``k`` the
trace interval, TrainingConfig.traceInterval) costs x1.006 (docs/trainer.md, "The bounded
overlap"). Per round r+1, with ``B`` the base this node holds and ``e_r`` its own end of round r::

    join round r+1, read its config; start round r's exchange (in the background)
    train from e_r (weights, carried AdamW state and residual as round r left them)
    at step k (the first boundary after 0, before it is taken):
        wait for round r's average             # usually in: it ran during these k steps
        B <- outer_step(B, mean_r)            # the bit-exact step; hash check; checkpoint r
        attest round r                         # base: the checkpoint before, result: B
        w <- w + (B - e_r)                     # the k steps' progress, rebased on B
    train the rest; the packet is B - e_{r+1}  # measured from the attested base, as in lockstep
    queue round r+1's exchange (it starts after round r+2's join)

Round r+1's trace commits boundary 0 = e_r (round r's last boundary, bit for bit) and its
sketches against B (:meth:`trainer.round.diloco.DiLoCo.train_local`, ``landing``); the ledger
checks that origin and replays segment 0 from it, moved the same way
(ledger.judge.origin_check, ``bounded``). Every member lands at the same step, since the hash
check is a collective.

The fallbacks are the one-round schedule's (:class:`~trainer.round.overlap.Overlap`, whose
landing this reuses): a changed member list, a sat-out round or a leave lands what is in flight
first, and the next round starts from the base in lockstep; a failed background exchange is
re-formed and retried synchronously at the landing. A node that loses the round in flight
while landing it (evicted by the hash check, or the round re-formed without it) loses the round
it is training too (:class:`~trainer.round.schedule.RoundLost`): it rejoins from a peer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from trainer.round.overlap import InFlight, Overlap
from trainer.round.schedule import RoundLost, RoundReport, RoundWork

if TYPE_CHECKING:
    from trainer.network.group import RoundGroup

log = logging.getLogger(__name__)


class Bounded(Overlap):
    """Round r's average lands at round r+1's first boundary after step 0."""

    _landed: RoundReport | None = None

    @property
    def landing(self) -> Callable[[], None] | None:
        """What the inner phase calls at its first boundary after step 0: round r lands (None:
        nothing in flight, the round starts from the base)."""
        if self.inflight is None:
            return None
        return self._land_now

    def _land_now(self) -> None:
        assert self.inflight is not None
        r = self.inflight.round
        done = self._land()
        if done is None:  # evicted, or round r finished without this node: its work is lost
            self.node.drop_group()
            raise RoundLost(r + 1)
        self._landed = done[0]

    def worked(self, work: RoundWork, group: RoundGroup) -> RoundReport | None:
        """Queue round r+1's exchange (it starts after round r+2's join) and start round r+2
        from this node's own end of round r+1; the report of round r, landed during the inner
        phase."""
        landed, self._landed = self._landed, None
        assert self.inflight is None, "the inner phase lands the round in flight at a boundary"
        diloco = self.node.diloco
        assert diloco is not None
        self.node.keep_group(group)  # kept: round r+1's exchange runs in it
        self.inflight = InFlight(work, group, self.node.packet_check, self.node.watched)
        self._start = diloco.state.layout.flatten(dict(diloco.model.named_parameters()))
        return landed
