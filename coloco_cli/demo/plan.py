"""What a demo run will do, decided up front and checked: rounds, churn, when to vote."""

from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import ConfigError
from reference.settings import WireFormat

MIN_ROUNDS = 3
"""Round 1 settles (rewards to vote with), the vote lands in round 2, round 3 trains with it."""
FORMAT_VOTE_MIN_ROUNDS = 5
"""A vote that switches the wire format needs rounds after it: the sparse format's eval loss
rose for the round after the switch and took 3 more to fall below round 1's (session 42)."""


@dataclass(frozen=True)
class DemoPlan:
    """The schedule of one demo run (rounds are outer DiLoCo rounds, 1-based)."""

    nodes: int
    rounds: int
    inner_steps: int
    new_inner_steps: int
    govern_after: int
    """Claims and the governance vote start once this round is committed on chain."""
    join_after: int | None
    """A new node starts once this round is committed (it joins at the next round boundary)."""
    leave_after: int | None
    """The leaving node's last round."""
    round_timeout_s: float = 240.0
    new_wire_format: str | None = None
    """The wire format the vote also switches to (``--vote-wire-format``, e.g. the sparse format
    with error feedback, docs/codec.md); None: the vote sets H alone."""

    @classmethod
    def make(
        cls, *, nodes: int, rounds: int, inner_steps: int, churn: bool = True,
        wire_format: str | None = None,
    ) -> DemoPlan:  # fmt: skip
        if nodes < 1:
            raise ConfigError(f"--nodes {nodes}: the demo needs at least 1 node")
        if nodes > 7:
            raise ConfigError(f"--nodes {nodes}: the devnet funds at most 7 operators (+1 joiner)")
        if rounds < MIN_ROUNDS:
            raise ConfigError(
                f"--rounds {rounds}: the demo needs at least {MIN_ROUNDS} (round 1 pays the "
                "rewards the holders vote with; the vote lands during round 2; round 3 trains "
                "with the new config)"
            )
        if not 2 <= inner_steps <= 10_000:
            raise ConfigError(f"--inner-steps {inner_steps}: choose 2..10000")
        if wire_format is not None:
            if wire_format not in WireFormat.labels():
                raise ConfigError(f"--vote-wire-format {wire_format!r}: choose one of "
                                  f"{', '.join(WireFormat.labels())}")  # fmt: skip
            if rounds < FORMAT_VOTE_MIN_ROUNDS:
                raise ConfigError(
                    f"--vote-wire-format with --rounds {rounds}: a format vote needs at least "
                    f"{FORMAT_VOTE_MIN_ROUNDS} rounds (the loss check compares the last round "
                    "with the first, and a new format's first rounds can be worse)"
                )
        # churn needs: a leaver that is not the only node, and rounds after the join
        churn = churn and nodes >= 2 and rounds >= 5
        return cls(
            nodes=nodes,
            rounds=rounds,
            inner_steps=inner_steps,
            new_inner_steps=inner_steps + max(inner_steps // 2, 1),
            govern_after=1,
            join_after=2 if churn else None,
            leave_after=rounds - 2 if churn else None,
            new_wire_format=wire_format,
        )

    def describe(self) -> str:
        parts = [
            f"{self.nodes} nodes x {self.rounds} rounds, H={self.inner_steps}",
            f"vote after round {self.govern_after}: inner steps {self.inner_steps} -> "
            f"{self.new_inner_steps}"
            + (f", wire format -> {self.new_wire_format}" if self.new_wire_format else ""),
        ]
        if self.join_after is not None:
            parts.append(f"a node joins after round {self.join_after}")
        if self.leave_after is not None:
            parts.append(f"one leaves after round {self.leave_after}")
        return "; ".join(parts)
