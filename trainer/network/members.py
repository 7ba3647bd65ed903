"""A round's closed member list: what the signed round-open of one attempt names.

Every part that acts on a round's membership reads this one value: the rendezvous closes it
(:mod:`trainer.network.membership`), the process group is formed over it
(:mod:`trainer.network.group`), and the checkpoint board counts its signers against it
(:mod:`trainer.network.checkpoint_board`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Members:
    """The members of ``round`` (attempt ``attempt``) in address order; rank = position."""

    round: int
    attempt: int
    addresses: tuple[str, ...]
    config_block: int = 0
    """The block at which every member reads TrainingConfig (trainer.network.coordination)."""
    endpoints: tuple[str, ...] = field(default=(), compare=False)
    """Each member's successor endpoint (HOST:PORT, or empty), in address order."""
    serves: tuple[str, ...] = field(default=(), compare=False)
    """Where each member serves its checkpoints (HOST:PORT, or empty: not announced in its
    join), in address order: the only address a joiner fetches that member's blob from."""

    def rank_of(self, address: str) -> int:
        return self.addresses.index(address)
