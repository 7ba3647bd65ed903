"""What a cheat that saves inner steps expects to earn against the audit, in rounds' rewards.

Units: one node's reward for one round is 1. A cheat that saves a fraction ``f`` of a round's
compute is valued at ``f`` rounds' rewards: the most a round's compute can be worth to a node
that still trains (an operator whose compute cost more than the reward would not train), so the
gain is an upper bound. A cheat that is caught loses the round's reward (withheld before the
rewards root) and the slash, ``S`` rounds' rewards (``SLASH_BPS`` x the stake, valued in rounds'
rewards: :func:`slash_in_round_rewards`).

The segment audit (docs/ledger.md, "Segment audit") draws a node-round with probability ``p``
(``AUDIT_FRACTION``) and replays ``s`` of its ``n = H / k`` segments, drawn after the round
closed; a segment containing a skipped step fails (``bench.audit``: every such segment, by a
margin of 10x and more). So:

- one step skipped: gain ``1/H``, caught with probability ``p x s k / H``: expected net gain
  ``1/H - p (s k / H) (1 + S)`` (:func:`skip_one_net_gain`);
- the cheat that hides best is all of a segment skipped (``k`` steps saved for the same chance
  of being caught), and skipping more segments never lowers the chance per step saved; the whole
  round skipped is caught whenever the round is audited. Cheating does not pay for any of them
  when ``p (1 + S) > 1`` (:func:`deterrence`; with ``s`` = 1 every case reduces to it, and more
  segments per audit only add to the chance). The ledger refuses settings where it fails
  (``ledger.core.config.Settings``).
"""

from __future__ import annotations

BPS = 10_000


def slash_in_round_rewards(slash_bps: int, stake_in_round_rewards: float) -> float:
    """The slash a fraud proposes, in one node's rounds' rewards."""
    return slash_bps / BPS * stake_in_round_rewards


def deterrence(audit_fraction: float, slash_rewards: float) -> float:
    """``p (1 + S)``: the expected loss of a cheat per round's reward it saves, for the cheat
    that hides best. Above 1, no cheat that saves steps pays."""
    return audit_fraction * (1.0 + slash_rewards)


def caught_per_audit(inner_steps: int, segment_steps: int, segments_per_audit: int) -> float:
    """The chance that an audit of the round draws the one segment holding a skipped step."""
    segments = max(1, inner_steps // segment_steps)
    return min(1.0, segments_per_audit / segments)


def skip_one_net_gain(
    inner_steps: int,
    segment_steps: int,
    segments_per_audit: int,
    audit_fraction: float,
    slash_rewards: float,
) -> float:
    """Expected net gain of skipping one inner step of H, in rounds' rewards (negative: it
    does not pay)."""
    caught = audit_fraction * caught_per_audit(inner_steps, segment_steps, segments_per_audit)
    return 1.0 / inner_steps - caught * (1.0 + slash_rewards)
