"""When a round's all-reduce and outer step run: the schedules one round procedure plugs in.

:meth:`trainer.round.node.NodeRunner.run_round` is the round, written once: the opening gates
(the node takes part, the ledger took its join, the rendezvous' member list holds it, the
members agree on the config), the state check, the inner phase and the process group. It then
hands the round's work to its schedule:

- :class:`trainer.round.overlap.Overlap` (``NodeSettings.overlap``): round r's
  all-reduce runs in the background during round r+1's compute, and round r lands at the end of
  round r+1;
- :class:`trainer.round.bounded.Bounded` (``NodeSettings.bounded_overlap``): round r's
  exchange runs during round r+1's first segment and lands at its first boundary;
- :class:`Lockstep` (the default, and always for a node of several local ranks or a
  time-boxed one: ``NodeSettings.schedule``): average, outer step, checkpoint and attest
  round r now.

A schedule drives the node through :class:`Runner` (the verbs it calls), never through its
fields. Each schedule returns the report of the round that landed, if any.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from protocol.errors import TrainerError
from trainer.network.group import DivergedError

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from torch import Tensor

    from reference.checkpoint import RoundCheckpoint
    from reference.data import ShardSpec
    from trainer.network.group import RoundGroup
    from trainer.network.members import Members
    from trainer.round.attest import Signed
    from trainer.round.commits import PacketCheck
    from trainer.round.diloco import DiLoCo, LocalWork, RoundOutcome
    from trainer.round.runconfig import RunConfig

log = logging.getLogger(__name__)


class SatOut(TrainerError):
    """This node's config read does not agree with the round's (or its chain is behind)."""

    def __init__(self, round: int) -> None:
        super().__init__(f"round {round}: this node sits the round out")


class LeftOut(TrainerError):
    """This node's re-formed round closed without it."""

    def __init__(self, round: int) -> None:
        super().__init__(f"round {round} was re-formed without this node")


class RoundLost(TrainerError):
    """The round in flight was lost while it landed during this round's inner phase (the
    bounded overlap: evicted, or re-formed without this node): this round's work is lost too."""

    def __init__(self, round: int) -> None:
        super().__init__(f"round {round}: the round in flight was lost while it landed; this "
                         "node rejoins from a peer")  # fmt: skip


@dataclass(frozen=True)
class RoundWork:
    """A round's inner phase on this node, ready to be averaged: the round, the config it ran
    with, its shard and its work."""

    round: int
    config: RunConfig
    spec: ShardSpec
    local: LocalWork


@dataclass
class RoundReport:
    round: int
    members: tuple[str, ...]
    rank: int
    attempts: int
    config: RunConfig
    shard_id: bytes
    steps: int
    tokens: int
    final_loss: float
    bytes_sent: int
    base_hash: bytes
    result_hash: bytes
    eval_loss: float | None
    signed: Signed
    groups_formed: int = 0  # process groups this node has built so far (kept while unchanged)
    attested: int | None = None
    """Rounds the ledger had taken from this node when this one was reported (its attestation
    may still be on its way: trainer.round.attest's sender); None: count ``signed.ledger_id``."""


class Runner(Protocol):
    """What a schedule asks of its node (:class:`trainer.round.node.NodeRunner`)."""

    stalled: list[tuple[int, tuple[str, ...]]]
    """(round, members) dropped from a collective because their heartbeat stopped."""

    @property
    def diloco(self) -> DiLoCo | None: ...

    def synchronize(
        self, r: int, group: RoundGroup, local: LocalWork, config: RunConfig
    ) -> tuple[RoundOutcome, RoundGroup]: ...

    def save_and_publish(self, r: int, group: RoundGroup) -> RoundCheckpoint: ...

    def packet_check(self, group: RoundGroup, local: LocalWork) -> PacketCheck | None: ...

    def watched(self, group: RoundGroup) -> AbstractContextManager[None]: ...

    def keep_group(self, group: RoundGroup) -> None: ...

    def drop_group(self) -> None: ...

    def drop_state(self) -> None: ...

    def report(self, done: RoundWork, group: RoundGroup, outcome: RoundOutcome) -> RoundReport: ...


class Schedule(Protocol):
    """The part of a round that differs between the schedules, in the order the round calls it."""

    def opened(self, members: Members) -> RoundReport | None:
        """Round r's members agreed (before its inner phase); what landed meanwhile, if any."""
        ...

    def holds(self, state_round: int) -> int:
        """The round whose state the node holds, or will once what is in flight has landed."""
        ...

    @property
    def start(self) -> Tensor | None:
        """Where the next inner phase starts (None: from the base weights)."""
        ...

    def restart(self) -> None:
        """The next inner phase starts from the base weights (new state, or a lost round)."""
        ...

    @property
    def landing(self) -> Callable[[], None] | None:
        """What the inner phase calls at its first boundary after step 0 to land the round in
        flight (the bounded overlap, trainer.round.bounded; None: nothing lands inside it)."""
        ...

    def worked(self, work: RoundWork, group: RoundGroup) -> RoundReport | None:
        """Round r's inner phase is done and its group formed: its share of the rest."""
        ...

    def drain(self) -> RoundReport | None:
        """Land whatever is in flight now (a sit-out, a membership change, leaving)."""
        ...


class Lockstep:
    """Average, outer step, checkpoint and attest each round before the next one starts."""

    def __init__(self, node: Runner) -> None:
        self.node = node

    def opened(self, members: Members) -> RoundReport | None:
        return None

    def holds(self, state_round: int) -> int:
        return state_round

    @property
    def start(self) -> Tensor | None:
        return None

    @property
    def landing(self) -> Callable[[], None] | None:
        return None

    def restart(self) -> None:
        pass

    def drain(self) -> RoundReport | None:
        return None

    def worked(self, work: RoundWork, group: RoundGroup) -> RoundReport | None:
        node, r = self.node, work.round
        kept = False
        try:
            outcome, group = node.synchronize(r, group, work.local, work.config)
            node.save_and_publish(r, group)
            if not group.divergent:  # kept for the next round (an evicted node rebuilds it)
                node.keep_group(group)
                kept = True
        except LeftOut:
            # The survivors re-formed the round without this node (its collective failed later
            # than theirs): its work of round r is lost; it rejoins at r + 1 from a peer.
            log.warning("round %d finished without this node; rejoining next round", r)
            return None
        except DivergedError as exc:
            # This node's weights differ from the majority's: it is evicted from the round (its
            # work is lost), drops its state and rejoins at r + 1 from a peer's checkpoint.
            log.error("round %d: %s; evicted by the majority, recovering from a peer", r, exc)
            node.drop_state()
            return None
        finally:
            if not kept:
                group.close()
        return node.report(work, group, outcome)
