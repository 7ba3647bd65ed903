"""The in-process red team's 21 cheating strategies (``tests/redteam/network.py``, ``sim.py``),
each a :class:`SimStrategy`: hooks at the decisions of the in-process node
(``tests/redteam/node.py``), which trains, averages and attests in the test's own process.

They are not the node's hooks: no :class:`trainer.round.node.NodeRunner` runs them. The red team of
real nodes overrides :class:`trainer.round.strategy.Strategy` instead (``bench/redteam/cheats.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
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


class SimStrategy:
    """Honest behaviour of an in-process node, hook by hook (``tests/redteam/node.py`` calls
    them; ``tests/redteam/network.py`` asks :meth:`in_allreduce`)."""

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

    def carried_moments(self, optimizer: torch.optim.Optimizer) -> None:
        """Change the inner AdamW the node carries into the round before its first step (honest:
        nothing; the round's boundary 0 commits what it holds)."""

    def withhold_boundaries(self) -> bool:
        """Never answer the ledger's requests for boundary states (the segment audit's)."""
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


PHANTOM = "0xABaBaBaBABabABabAbAbABAbABabababaBaBABaB"  # unregistered


def _noise_like(t: Tensors, seed: int) -> Tensors:
    g = torch.Generator().manual_seed(seed)
    return {
        n: torch.randn(x.shape, generator=g) * float(x.norm()) / max(x.numel(), 1) ** 0.5
        for n, x in t.items()
    }


def _scaled(t: Tensors, k: float) -> Tensors:
    return {n: x * k for n, x in t.items()}


def _norm(t: Tensors) -> float:
    return float(torch.cat([x.reshape(-1) for x in t.values()]).norm())


def _victim(view: RoundView) -> Tensors:
    return view.peers[sorted(view.peers)[0]]


class ZeroUpdate(SimStrategy):
    name = "zero_update"

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        return {n: torch.zeros_like(x) for n, x in own.items()}


class GaussianNoise(SimStrategy):
    name = "gaussian_noise"

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        return _noise_like(own, view.round)


class TinyJunk(SimStrategy):
    name = "tiny_junk"

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        return {"w": torch.tensor([1.0])}


class HugeScale(SimStrategy):
    name = "huge_scale"

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        return _scaled(own, 1e6)


class CopyExact(SimStrategy):
    name = "copy_exact"

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        return {n: x.clone() for n, x in _victim(view).items()}


class CopyNoise(SimStrategy):
    """Another node's update, rescaled by 1.3 and with 6% noise (of its norm) added."""

    name = "copy_with_noise"

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        victim = _victim(view)
        noise = _noise_like(victim, 99 + view.round)
        return {n: 1.3 * (x + 0.06 * noise[n]) for n, x in victim.items()}


class PreviousMean(SimStrategy):
    name = "previous_round_mean"

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        assert view.previous_mean is not None
        return {n: x.clone() for n, x in view.previous_mean.items()}


class ResendOwn(SimStrategy):
    name = "resend_own_update"
    warmup = True

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        return view.own_history[0] if view.own_history else own


class StaleBase(SimStrategy):
    name = "stale_base"

    def stale_base(self) -> bool:
        return True


class InflatedTokens(SimStrategy):
    name = "inflated_tokens"

    def attestations(self, fields: dict[str, Any], view: RoundView) -> list[dict[str, Any]]:
        return [fields | {"tokens": fields["tokens"] * 100}]


class FewerSteps(SimStrategy):
    name = "fewer_steps_than_claimed"

    def inner_steps(self, governed: int) -> int:
        return max(1, governed // 2)


class HalfStepsScaled(SimStrategy):
    name = "half_steps_scaled_up"

    def inner_steps(self, governed: int) -> int:
        return max(1, governed // 2)

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        target = view.honest_norm or _norm(own)
        return _scaled(own, target / max(_norm(own), 1e-12))


class OtherData(SimStrategy):
    name = "other_data"

    def train_on_other_data(self) -> bool:
        return True


class RoundTakeover(SimStrategy):
    """Posts first, alone, declaring itself the round's only member, without having joined."""

    name = "round_takeover"
    early = True

    def join_round(self, r: int) -> int | None:
        return None

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        return _noise_like(own, 7 + view.round)

    def round_members(self, members: list[str], view: RoundView) -> list[str]:
        return [view.address]


class JumpAhead(SimStrategy):
    """Attests round r+1 alone while round r is running (to commit it first)."""

    name = "jump_ahead"

    def join_round(self, r: int) -> int | None:
        return r + 1

    def attestations(self, fields: dict[str, Any], view: RoundView) -> list[dict[str, Any]]:
        return [fields | {"round": fields["round"] + 1}]

    def round_members(self, members: list[str], view: RoundView) -> list[str]:
        return [view.address]

    def in_allreduce(self) -> bool:
        return False


class PhantomMember(SimStrategy):
    """Declares an unregistered member, to hold the round open until its deadline."""

    name = "phantom_member"

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        return _noise_like(own, 11 + view.round)

    def round_members(self, members: list[str], view: RoundView) -> list[str]:
        return [*members, PHANTOM]


class CheckpointHijack(SimStrategy):
    name = "checkpoint_hijack"

    def attestations(self, fields: dict[str, Any], view: RoundView) -> list[dict[str, Any]]:
        return [fields | {"resultCheckpoint": "0x" + "0f" * 32}]


class ZeroCheckpoint(SimStrategy):
    name = "zero_checkpoint"

    def attestations(self, fields: dict[str, Any], view: RoundView) -> list[dict[str, Any]]:
        return [fields | {"resultCheckpoint": "0x" + "00" * 32}]


class ReplayAttestation(SimStrategy):
    """Re-posts its signed attestation of an earlier round instead of working."""

    name = "replay_old_attestation"
    warmup = True

    def join_round(self, r: int) -> int | None:
        return None

    def in_allreduce(self) -> bool:
        return False

    def attestations(self, fields: dict[str, Any], view: RoundView) -> list[dict[str, Any]]:
        signed = view.extra["signed"]
        first = min(signed)
        return [{"_body": dict(signed[first][0])}]


class SybilShared(SimStrategy):
    """A second identity that reports the primary identity's computation as its own."""

    name = "sybil_shared_computation"

    def __init__(self, primary: str = "") -> None:
        self.primary = primary

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        return {n: x.clone() for n, x in view.peers[self.primary].items()}


class Equivocation(SimStrategy):
    name = "equivocation"

    def attestations(self, fields: dict[str, Any], view: RoundView) -> list[dict[str, Any]]:
        return [fields, fields | {"resultCheckpoint": "0x" + "e1" * 32}]


ALL: list[type[SimStrategy]] = [
    ZeroUpdate,
    GaussianNoise,
    TinyJunk,
    HugeScale,
    CopyExact,
    CopyNoise,
    PreviousMean,
    ResendOwn,
    StaleBase,
    InflatedTokens,
    FewerSteps,
    HalfStepsScaled,
    OtherData,
    RoundTakeover,
    JumpAhead,
    PhantomMember,
    CheckpointHijack,
    ZeroCheckpoint,
    ReplayAttestation,
    SybilShared,
    Equivocation,
]
