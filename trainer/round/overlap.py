"""The overlap schedule of :class:`trainer.round.node.NodeRunner`: a one-round delayed outer step.

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
collective is heartbeat-watched in its own thread (the watch is per thread,
trainer.network.coordination.heartbeat), and so is the hash check when the round lands: a dead
peer closes its sockets (found at once), a stalled one is found by its silent heartbeat, well
before the collective timeout.

The round itself (its opening gates, the inner phase, the group) is the node's one round
procedure (:meth:`trainer.round.node.NodeRunner.run_round`); :class:`Overlap` is the
:class:`~trainer.round.schedule.Schedule` it plugs in, next to
:class:`~trainer.round.schedule.Lockstep`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from torch import Tensor

from protocol.errors import CollectiveError
from trainer.network.coordination.heartbeat import StalledError
from trainer.network.group import DivergedError
from trainer.round.diloco import LocalWork, RoundOutcome
from trainer.round.schedule import LeftOut, RoundReport, RoundWork, Runner

if TYPE_CHECKING:
    from trainer.network.collective import Check
    from trainer.network.group import RoundGroup
    from trainer.network.members import Members

log = logging.getLogger(__name__)


@dataclass
class InFlight:
    """One round whose all-reduce runs in the background."""

    work: RoundWork
    group: RoundGroup
    commit: Callable[[RoundGroup, LocalWork], Check | None]
    """Posts this node's signed packet commitment; the check of every peer's (node.packet_check)."""
    watch: Callable[[RoundGroup], AbstractContextManager[None]] = lambda _: nullcontext()
    """The heartbeat watch over the group's peers (node.watched), entered in the thread."""
    thread: threading.Thread | None = None
    result: tuple[Tensor, int] | None = None
    error: Exception | None = None
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def round(self) -> int:
        return self.work.round

    def start(self) -> None:
        """Start the all-reduce (once; at the next round's start, after its join and config
        read, whose small messages would otherwise queue behind the packet on the uplink)."""
        if self.thread is not None:
            return
        local = self.work.local
        settings = self.work.config.settings
        vector = local.packet if local.packet is not None else local.pseudo_gradient
        check = self.commit(self.group, local)

        def run() -> None:
            try:
                tokens = local.inner.tokens
                with self.watch(self.group):  # a stalled peer ends it (StalledError)
                    self.result = self.group.averager.average(vector, settings.wire_format,
                                                              tokens, check)  # fmt: skip
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
    """The one-round delayed outer step: round r lands during round r+1."""

    def __init__(self, node: Runner) -> None:
        self.node = node
        self.inflight: InFlight | None = None
        self._start: Tensor | None = None

    @property
    def start(self) -> Tensor | None:
        """Where the next inner phase starts: the newest base minus this node's own progress in
        flight (None: from the base weights)."""
        return self._start

    @property
    def landing(self) -> Callable[[], None] | None:
        return None  # round r-1 lands after round r's inner phase (:meth:`worked`)

    def restart(self) -> None:
        self._start = None

    def opened(self, members: Members) -> RoundReport | None:
        """Round r-1's all-reduce starts now, during round r's compute; if the member list
        changed it lands first instead (publishing round r-1's checkpoint: a joiner fetches it)."""
        if self.inflight is None:
            return None
        if self.inflight.group.members.addresses != members.addresses:
            return self.drain()
        self.inflight.start()
        return None

    def holds(self, state_round: int) -> int:
        return state_round if self.inflight is None else self.inflight.round

    def worked(self, work: RoundWork, group: RoundGroup) -> RoundReport | None:
        """Land round r-1, then queue round r's all-reduce (the same packet: it starts after
        round r+1's join) and start round r+1 from the newest base less round r's progress."""
        landed = None
        if self.inflight is not None:
            done = self._land()
            if done is None:  # evicted or left out while landing: round r's work is lost too
                self.node.drop_group()
                return None
            landed, group = done  # re-formed with the survivors if a peer was lost
        diloco = self.node.diloco
        assert diloco is not None
        self.node.keep_group(group)  # kept: round r's all-reduce runs in it
        self.inflight = InFlight(work, group, self.node.packet_check,  # started at r+1's start
                                 self.node.watched)  # fmt: skip
        self._start = diloco.state.base - work.local.pseudo_gradient
        return landed

    def drain(self) -> RoundReport | None:
        """Land the round in flight now (before a membership change, a sit-out or leaving)."""
        self._start = None
        if self.inflight is None:
            return None
        done = self._land()
        return None if done is None else done[0]

    def _land(self) -> tuple[RoundReport, RoundGroup] | None:
        """Wait for the in-flight average, take the outer step, check the members agree,
        publish the checkpoint and attest the round; its report and the group it finished in
        (kept for the next round), or None if this node lost the round."""
        f, self.inflight = self.inflight, None
        assert f is not None
        n = self.node
        diloco = n.diloco
        assert diloco is not None
        r, local, config = f.round, f.work.local, f.work.config
        local.base_hash = diloco.base_hash()  # the committed checkpoint the mean steps from
        got = f.wait()
        if isinstance(f.error, StalledError):  # found by the watch of the background collective
            n.stalled.append((r, f.error.stalled))
        group = f.group
        try:
            if got is None:  # a peer died mid-collective: the synchronous re-form-and-retry path
                outcome, group = n.synchronize(r, f.group, local, config)
            else:
                mean, sent = got
                state = diloco.state
                before = (state.base.clone(), state.momentum.clone())
                diloco.outer_step(mean, config.settings)
                diloco.sync_inner_model()
                outcome = RoundOutcome(local, diloco.base_hash(), sent, group.world_size)
                timeout = getattr(group.averager, "timeout", None)
                try:
                    if timeout is not None:
                        with n.watched(group):
                            group.check_same(outcome.result_hash, timeout)
                except CollectiveError as exc:  # a peer died after the mean, before the check
                    # (during this node's compute): undo the step, and the survivors average
                    # the round again without it, as when a peer dies mid-all-reduce
                    log.warning("round %d: hash check failed (%s); re-forming", r, exc)
                    state.base.copy_(before[0])
                    state.momentum.copy_(before[1])
                    diloco.sync_inner_model()
                    outcome, group = n.synchronize(r, f.group, local, config)
            n.save_and_publish(r, group)
        except (LeftOut, CollectiveError) as exc:
            log.warning("round %d finished without this node (%s); rejoining", r, exc)
            self._start = None
            n.drop_state()
            return None
        except DivergedError as exc:
            log.error("round %d: %s; evicted by the majority, recovering from a peer", r, exc)
            self._start = None
            n.drop_state()
            return None
        n.keep_group(group)  # the round's group, re-formed if a peer was lost
        return n.report(f.work, group, outcome), group
