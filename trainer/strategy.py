"""Where a node may deviate from the protocol: one hook per decision a node makes in a round.

Honest nodes run :class:`Strategy` itself (every hook returns what the protocol asks for). The
red team (``tests/redteam``) plugs cheating strategies into the same node code by overriding
hooks: which round it joins, the base it trains from, its rows and step count, the
pseudo-gradient it reports, the attestations it signs. Nothing else in the trainer knows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

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
