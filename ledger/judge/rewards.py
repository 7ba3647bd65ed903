"""The reward split of a round: verified work only, in proportion to verified tokens x quality
(:func:`ledger.judge.rules.split_rewards`). What a fraud would have earned is recorded on its
fraud record as withheld: it never enters the rewards tree.
"""

from __future__ import annotations

from ledger.judge.entries import Context, Entry
from ledger.judge.rules import split_rewards, weight


def share_rewards(entries: list[Entry], ctx: Context) -> None:
    """Rewards in proportion to verified tokens x quality; what a fraud would have earned is
    recorded as withheld (it never enters the rewards tree)."""
    honest = {e.id: weight(e.tokens, e.quality) if e.ok else 0 for e in entries}
    with_fraud = dict(honest)
    for e in entries:
        if e.fraud is not None:
            with_fraud[e.id] = weight(e.att.tokens, e.quality)
    rewards = split_rewards(ctx.config.reward_per_round, honest)
    would = split_rewards(ctx.config.reward_per_round, with_fraud)
    for e in entries:
        e.reward = rewards.get(e.id, 0)
        if e.fraud is not None:
            e.fraud.withheld = str(would.get(e.id, 0))
