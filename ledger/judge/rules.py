"""Pure scoring rules: consensus checkpoint, token caps, reward split, attestations root.

Rewards per round = ``TrainingConfig.rewardPerRound`` split in proportion to
``verified_tokens x quality`` (quality in [0, 1], fixed-point millionths), rounded down; the dust
left over is not minted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from protocol.eip712 import keccak256

QUALITY_SCALE = 1_000_000


def majority_checkpoint(results: Sequence[str]) -> str | None:
    """The result checkpoint most nodes attested (ties: the smallest hash), or None if none."""
    if not results:
        return None
    counts = Counter(results)
    best = max(counts.values())
    return min(value for value, n in counts.items() if n == best)


def cap_tokens(claimed: int, seconds: float, max_tokens_per_s: float) -> int:
    """Tokens we credit: what was claimed, at most what the round's time allows."""
    limit = int(max(seconds, 1.0) * max_tokens_per_s)
    return min(claimed, limit)


def weight(verified_tokens: int, quality: float) -> int:
    q = min(max(quality, 0.0), 1.0)
    return verified_tokens * round(q * QUALITY_SCALE)


def split_rewards(total: int, weights: Mapping[int, int]) -> dict[int, int]:
    """Split ``total`` in proportion to ``weights`` (floor); zero weights get zero."""
    denominator = sum(w for w in weights.values() if w > 0)
    if total <= 0 or denominator == 0:
        return {key: 0 for key in weights}
    return {key: (total * w) // denominator if w > 0 else 0 for key, w in weights.items()}


def attestations_root(digests: Sequence[bytes]) -> bytes:
    """Merkle root (sorted-pair keccak, like OpenZeppelin) over the sorted attestation digests.

    Zero when there are none. Odd levels carry their last node up unchanged.
    """
    level = sorted(digests)
    if not level:
        return bytes(32)
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level) - 1, 2):
            a, b = level[i], level[i + 1]
            nxt.append(keccak256(a + b if a <= b else b + a))
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]
