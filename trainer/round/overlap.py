"""The overlap option of :class:`trainer.round.node.NodeRunner`: a one-round delayed outer step.

Round r's all-reduce runs in a background thread while the node computes round r+1, so the
communication hides behind compute (streaming DiLoCo's idea, with the whole model as one
fragment). Per round r, with ``B`` the newest outer state this node holds::

    join round r, read its config; start round r-1's all-reduce (in the background)
    train round r from S_r                    # S_r = B - (this node's round r-1 progress)
    wait for round r-1's average (in flight)  # usually done: it ran during this compute
    B <- outer_step(B, mean_{r-1})            # the bit-exact step; hash check; checkpoint r-1
    attest round r-1                          # base: the checkpoint before, result: B
    queue round r's all-reduce (the same packet, S_r - local): it starts after round r+1's join
    S_{r+1} = B - (S_r - local)               # the newest base plus own unaveraged progress

So round r's attestation names the committed checkpoint of round r-1 as its base and the
checkpoint after the step as its result: the ledger's replay (``outer_step`` of the weighted
mean of the round's commitments) is unchanged; the attestation comes one round late. The
eager restart from ``S_{r+1}`` instead of the stale base cuts the loss cost of the delay (see
docs/trainer.md, ``overlap_loss_ratio``).

The in-flight round lands first (synchronously) whenever the member list changes, the node sits
a round out, or it leaves: a joiner then fetches the checkpoint of round r-1 and everybody trains
round r from it. A failed background all-reduce (a peer died, or was evicted by the hash check
and left the group) falls back to the synchronous re-form-and-retry path of
``NodeRunner.synchronize`` for that round, and so does a hash check that fails because a peer
died after the mean (during this node's compute; the step is undone first). The background
collective is not heartbeat-watched: a
dead peer closes its sockets (found at once), a stalled one is found by the collective timeout.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from torch import Tensor

from protocol.errors import CollectiveError

if TYPE_CHECKING:
    from reference.data import ShardSpec
    from trainer.network.group import RoundGroup
    from trainer.round.diloco import LocalWork
    from trainer.round.node import NodeRunner, RoundReport
    from trainer.round.runconfig import RunConfig

log = logging.getLogger(__name__)


@dataclass
class InFlight:
    """One round whose all-reduce runs in the background."""

    round: int
    group: RoundGroup
    local: LocalWork
    spec: ShardSpec
    config: RunConfig
    thread: threading.Thread | None = None
    result: tuple[Tensor, int] | None = None
    error: Exception | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        """Start the all-reduce (once; at the next round's start, after its join and config
        read, whose small messages would otherwise queue behind the packet on the uplink)."""
        if self.thread is not None:
            return
        settings = self.config.settings
        vector = self.local.packet if self.local.packet is not None else self.local.pseudo_gradient

        def run() -> None:
            try:
                tokens = self.local.inner.tokens
                self.result = self.group.averager.average(vector, settings.wire_format, tokens)
            except Exception as exc:  # reported where the round lands, in the main thread
                self.error = exc
            finally:
                self.done.set()

        self.thread = threading.Thread(target=run, name=f"allreduce-r{self.round}", daemon=True)
        self.thread.start()

    def wait(self) -> tuple[Tensor, int] | None:
        """The mean and bytes sent, or None when the collective failed (logged)."""
        self.start()
        assert self.thread is not None
        self.thread.join()
        if self.error is not None:
            log.warning("round %d: the background all-reduce failed: %s", self.round, self.error)
            return None
        return self.result


class Overlap:
    """Runs a :class:`NodeRunner`'s rounds with the one-round delayed outer step."""

    def __init__(self, node: NodeRunner) -> None:
        self.node = node
        self.inflight: InFlight | None = None
        self.start: Tensor | None = None
        """Where the next inner phase starts (None: from the base weights)."""

    def run_round(self, r: int) -> RoundReport | None:
        """Work round r; returns the report of round r-1 (landed during this round), if any."""
        from trainer.round.node import _LeftOut, _SitOut

        n = self.node
        if not n.strategy.takes_part(n, r):
            landed = self.drain()
            n.strategy.off_round(n, r)
            n.drop_group()
            return landed
        if not n.attester.join(r):
            log.info("round %d started at the ledger without this node; trying the next one", r)
            return self.drain()
        members = n.join(r)
        if n.address not in members.addresses:
            landed = self.drain()
            n.drop_group()
            return landed
        try:
            config, members = n.read_config(members)
        except _SitOut:
            log.warning("round %d: sat out (config not agreed at the round's block)", r)
            landed = self.drain()
            n.drop_group()
            return landed
        landed = None
        if self.inflight is not None and self.inflight.group.members.addresses != members.addresses:
            landed = self.drain()  # publishes round r-1's checkpoint: a joiner fetches it
        elif self.inflight is not None:
            self.inflight.start()  # round r-1's all-reduce, during this round's compute
        held = n.state_round if self.inflight is None else self.inflight.round
        if held != r - 1:  # a joiner fetches while the members train; groups form after
            n.adopt(n.recovery.from_peer(n.rdv.checkpoints, r - 1))
            self.start = None
        spec, local = n.train_local(r, config, members, start=self.start)
        try:
            group = n.group_for(members)
        except _LeftOut:
            log.warning("round %d re-formed without this node; rejoining next round", r)
            self.start = None
            return landed or self.drain()
        if self.inflight is not None:
            landed = self.land()
            if landed is None:  # evicted or left out while landing: round r's work is lost too
                n.drop_group()
                return None
            group = n._group or group  # re-formed with the survivors if a peer was lost
        assert n.diloco is not None
        n._group = group  # kept: round r's all-reduce runs in it
        self.inflight = InFlight(r, group, local, spec, config)  # started at round r+1's start
        self.start = n.diloco.state.base - local.pseudo_gradient
        return landed

    def drain(self) -> RoundReport | None:
        """Land the round in flight now (before a membership change, a sit-out or leaving)."""
        self.start = None
        if self.inflight is None:
            return None
        return self.land()

    def land(self) -> RoundReport | None:
        """Wait for the in-flight average, take the outer step, check the members agree,
        publish the checkpoint and attest the round; None if this node lost the round."""
        from trainer.network.group import DivergedError
        from trainer.round.diloco import RoundOutcome
        from trainer.round.node import _LeftOut

        f, self.inflight = self.inflight, None
        assert f is not None
        n = self.node
        assert n.diloco is not None
        local = f.local
        local.base_hash = n.diloco.base_hash()  # the committed checkpoint the mean steps from
        got = f.wait()
        group = f.group
        try:
            if got is None:  # a peer died mid-collective: the synchronous re-form-and-retry path
                outcome, group = n.synchronize(f.round, f.group, local, f.config)
            else:
                mean, sent = got
                state = n.diloco.state
                before = (state.base.clone(), state.momentum.clone())
                n.diloco.outer_step(mean, f.config.settings)
                n.diloco.sync_inner_model()
                outcome = RoundOutcome(local, n.diloco.base_hash(), sent, group.world_size)
                timeout = getattr(group.averager, "timeout", None)
                try:
                    if timeout is not None:
                        group.check_same(outcome.result_hash, timeout)
                except CollectiveError as exc:  # a peer died after the mean, before the check
                    # (during this node's compute): undo the step, and the survivors average
                    # the round again without it, as when a peer dies mid-all-reduce
                    log.warning("round %d: hash check failed (%s); re-forming", f.round, exc)
                    state.base.copy_(before[0])
                    state.momentum.copy_(before[1])
                    n.diloco.sync_inner_model()
                    outcome, group = n.synchronize(f.round, f.group, local, f.config)
            n.save_and_publish(f.round, group)
        except (_LeftOut, CollectiveError) as exc:
            log.warning("round %d finished without this node (%s); rejoining", f.round, exc)
            self.start = None
            n.state_round = -1
            return None
        except DivergedError as exc:
            log.error("round %d: %s; evicted by the majority, recovering from a peer", f.round,
                      exc)  # fmt: skip
            self.start = None
            n.state_round = -1
            return None
        n._group = (
            group  # the round's group, re-formed if a peer was lost (the next one runs in it)
        )
        return n.report(f.round, group, local, f.spec, f.config, outcome=outcome)
