"""Where a node may deviate from the protocol: one hook per decision a node makes in a round.

Honest nodes run :class:`Strategy` itself (every hook returns what the protocol asks for).
:class:`trainer.round.node.NodeRunner` calls the hooks at each decision of its round (the same code
for every node); the red team (``bench/redteam/cheats.py``) plugs cheating strategies in by
overriding them: whether it takes part in the round's collective at all (if not, what it does
instead, through the node's own signing paths), the settings and rows it trains with, the
pseudo-gradient (packet) it feeds the all-reduce and commits to, and what it signs and posts.
Nothing else in the trainer knows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from torch import Tensor

if TYPE_CHECKING:
    from reference.codec import Packet
    from reference.data import ShardSpec
    from trainer.round.attest import Signed, WorkRecord
    from trainer.round.diloco import LocalWork, RoundSettings
    from trainer.round.node import NodeRunner


class Strategy:
    """Honest behaviour: the protocol, hook by hook."""

    name = "honest"

    def takes_part(self, node: NodeRunner, r: int) -> bool:
        """Whether the node works round ``r`` as a member (join, train, all-reduce, attest)."""
        return True

    def off_round(self, node: NodeRunner, r: int) -> None:
        """What the node does instead when it does not take part in round ``r``."""

    def settings(self, r: int, settings: RoundSettings) -> RoundSettings:
        """The settings the node actually trains with (the governed ones)."""
        return settings

    def rows(self, node: NodeRunner, r: int, spec: ShardSpec, rows: Tensor) -> Tensor:
        """The rows the node trains on (its shard's)."""
        return rows

    def local_work(self, node: NodeRunner, r: int, rows: Tensor, local: LocalWork) -> LocalWork:
        """The work the node feeds the all-reduce, commits to and attests (its own)."""
        return local

    def exchanged_packet(self, node: NodeRunner, r: int, packet: Packet) -> Packet:
        """The packet the node commits to before the exchange (the one it attests)."""
        return packet

    def publish(
        self, node: NodeRunner, work: WorkRecord, members: Sequence[str], commits: Sequence[str]
    ) -> Signed:
        """Sign and post the round's attestation (exactly one, of the work done), with the
        members' signed packet commitments this node checked (evidence for the ledger)."""
        return node.attester.publish(work, members, commits)
