"""The code and capital pools in the rewards tree: TrainingConfig's ownership split per round.

Each round's newly issued ownership (``rewardPerRound``) is shared between the compute, code and
capital pools in basis points that governance sets (``TrainingConfig.ownershipSplit``). Compute
rewards split the compute share among the round's nodes (``compute_reward``); the code and capital
shares go into the same cumulative rewards tree as two more accounts, the ``CodeRegistry`` and
``RunFunding`` escrows (``pool_amounts``), so every pool is paid through the same budgeted,
dispute-windowed roots and anyone can claim a pool into its escrow with the RewardDistributor.
"""

from __future__ import annotations

import json
import logging

from sqlmodel import Session, col, select

from ledger.chain import LedgerChain
from ledger.models import RoundState, Settlement

log = logging.getLogger(__name__)

BPS = 10_000
POOLS = (("CodeRegistry", 1), ("RunFunding", 2))  # contract, index in ownershipSplit()


def ownership_split(chain: LedgerChain) -> tuple[int, int, int]:
    """(compute, code, capital) basis points in force; all compute on a deployment without it."""
    try:
        c, code, cap = chain.client.call("TrainingConfig", "ownershipSplit")
    except (ValueError, AttributeError):  # an older TrainingConfig ABI without the split
        return BPS, 0, 0
    return int(c), int(code), int(cap)


def compute_reward(chain: LedgerChain, reward_per_round: int) -> int:
    """The compute pool's share of one round's reward."""
    return reward_per_round * ownership_split(chain)[0] // BPS


def pool_amounts(session: Session, chain: LedgerChain, round_row: RoundState) -> dict[str, int]:
    """Cumulative pool leaves after ``round_row``: the previous settlement's, plus this round's
    code and capital shares (never decreasing, whatever later split governance sets)."""
    split = ownership_split(chain)
    previous = session.exec(select(Settlement).order_by(col(Settlement.id).desc())).first()
    before = {a: int(v) for a, v in json.loads(previous.tree)} if previous is not None else {}
    per_round = int(round_row.reward_per_round or 0)
    out: dict[str, int] = {}
    for name, index in POOLS:
        if name not in chain.deployment.contracts:
            continue
        address = str(chain.deployment.address(name))
        amount = before.get(address, 0) + per_round * split[index] // BPS
        if amount > 0:
            out[address] = amount
    return out
