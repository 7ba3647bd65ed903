"""Where a node may deviate from the protocol: one hook per decision a node makes in a round.

Honest nodes run :class:`Strategy` itself (every hook returns what the protocol asks for).
:class:`trainer.round.node.NodeRunner` calls the hooks at each decision of its round (the same code
for every node); the red team (``tests/redteam``) plugs cheating strategies in by overriding them:
whether it takes part in the round's collective at all (if not, what it does instead, through the
node's own signing paths), the settings and rows it trains with, the pseudo-gradient (packet) it
feeds the all-reduce and commits to, and what it signs and posts. Nothing else in the trainer knows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from torch import Tensor

if TYPE_CHECKING:
    from reference.data import ShardSpec
    from trainer.round.attest import Signed, WorkRecord
    from trainer.round.diloco import LocalWork, RoundSettings
    from trainer.round.node import NodeRunner

Tensors = dict[str, Tensor]


@dataclass
class RoundView:
    """What a node can see in round ``round``: its own work and what the network shows it."""

    round: int
    address: str
    governed_steps: int
    peers: Mapping[str, Tensors] = field(default_factory=dict)  # this round's all-reduce inputs
    previous_mean: Tensors | None = None  # the public mean of round r-1 (readable once closed)
    own_history: list[Tensors] = field(default_factory=list)  # its earlier pseudo-gradients
    honest_norm: float | None = None  # the median norm of the peers (seen in the all-reduce)
    extra: dict[str, Any] = field(default_factory=dict)


class Strategy:
    """Honest behaviour: the protocol, hook by hook."""

    name = "honest"

    # --- the hooks NodeRunner calls (trainer/round/node.py) ---------------------------------------

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

    def publish(self, node: NodeRunner, work: WorkRecord, members: Sequence[str]) -> Signed:
        """Sign and post the round's attestation (exactly one, of the work done)."""
        return node.attester.publish(work, members)

    # --- the in-process red-team network's hooks (tests/redteam/network.py) ------------------

    def join_round(self, r: int) -> int | None:
        """The round to sign a join for (None: do not join)."""
        return r

    def stale_base(self) -> bool:
        """Train from an older checkpoint than the committed one."""
        return False

    def inner_steps(self, governed: int) -> int:
        """How many inner steps to actually run."""
        return governed

    def train_on_other_data(self) -> bool:
        return False

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        """The pseudo-gradient to upload and commit to."""
        return own

    def attestations(self, fields: dict[str, Any], view: RoundView) -> list[dict[str, Any]]:
        """The attestation field sets to sign and post, in order (camelCase wire form)."""
        return [fields]

    def round_members(self, members: list[str], view: RoundView) -> list[str]:
        return members

    def in_allreduce(self) -> bool:
        """Whether the node takes part in the round's all-reduce."""
        return True
