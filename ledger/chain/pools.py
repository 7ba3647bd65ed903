"""The compute pool's share of a round: TrainingConfig's ownership split.

Each round's newly issued ownership (``rewardPerRound``) is shared between the compute, code and
capital pools in basis points that governance sets (``TrainingConfig.ownershipSplit``). The
ledger splits only the compute share among the round's nodes (the commit's reward budget is the
compute pool); the capital pool is minted into ``RunFunding`` with each ETH root and the code
pool is paid by ``CodeRegistry`` for approved contributions.
"""

from __future__ import annotations

import logging

from ledger.chain.client import LedgerChain
from protocol.types import TokenUnits

log = logging.getLogger(__name__)

BPS = 10_000


def ownership_split(chain: LedgerChain) -> tuple[int, int, int]:
    """(compute, code, capital) basis points in force; all compute on a deployment without it."""
    try:
        return chain.client.training_config.ownership_split()
    except (ValueError, AttributeError):  # an older TrainingConfig ABI without the split
        return BPS, 0, 0


def compute_reward(chain: LedgerChain, reward_per_round: int) -> TokenUnits:
    """The compute pool's share of one round's reward."""
    return TokenUnits(reward_per_round * ownership_split(chain)[0] // BPS)
