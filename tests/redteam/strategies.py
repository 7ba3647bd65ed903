"""The red team: 21 cheating strategies, each a :class:`trainer.round.strategy.Strategy` (hooks
only)."""

from __future__ import annotations

from typing import Any

import torch

from trainer.round.strategy import RoundView, Strategy, Tensors

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


class ZeroUpdate(Strategy):
    name = "zero_update"

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        return {n: torch.zeros_like(x) for n, x in own.items()}


class GaussianNoise(Strategy):
    name = "gaussian_noise"

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        return _noise_like(own, view.round)


class TinyJunk(Strategy):
    name = "tiny_junk"

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        return {"w": torch.tensor([1.0])}


class HugeScale(Strategy):
    name = "huge_scale"

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        return _scaled(own, 1e6)


class CopyExact(Strategy):
    name = "copy_exact"

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        return {n: x.clone() for n, x in _victim(view).items()}


class CopyNoise(Strategy):
    """Another node's update, rescaled by 1.3 and with 6% noise (of its norm) added."""

    name = "copy_with_noise"

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        victim = _victim(view)
        noise = _noise_like(victim, 99 + view.round)
        return {n: 1.3 * (x + 0.06 * noise[n]) for n, x in victim.items()}


class PreviousMean(Strategy):
    name = "previous_round_mean"

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        assert view.previous_mean is not None
        return {n: x.clone() for n, x in view.previous_mean.items()}


class ResendOwn(Strategy):
    name = "resend_own_update"
    warmup = True

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        return view.own_history[0] if view.own_history else own


class StaleBase(Strategy):
    name = "stale_base"

    def stale_base(self) -> bool:
        return True


class InflatedTokens(Strategy):
    name = "inflated_tokens"

    def attestations(self, fields: dict[str, Any], view: RoundView) -> list[dict[str, Any]]:
        return [fields | {"tokens": fields["tokens"] * 100}]


class FewerSteps(Strategy):
    name = "fewer_steps_than_claimed"

    def inner_steps(self, governed: int) -> int:
        return max(1, governed // 2)


class HalfStepsScaled(Strategy):
    name = "half_steps_scaled_up"

    def inner_steps(self, governed: int) -> int:
        return max(1, governed // 2)

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        target = view.honest_norm or _norm(own)
        return _scaled(own, target / max(_norm(own), 1e-12))


class OtherData(Strategy):
    name = "other_data"

    def train_on_other_data(self) -> bool:
        return True


class RoundTakeover(Strategy):
    """Posts first, alone, declaring itself the round's only member, without having joined."""

    name = "round_takeover"
    early = True

    def join_round(self, r: int) -> int | None:
        return None

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        return _noise_like(own, 7 + view.round)

    def round_members(self, members: list[str], view: RoundView) -> list[str]:
        return [view.address]


class JumpAhead(Strategy):
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


class PhantomMember(Strategy):
    """Declares an unregistered member, to hold the round open until its deadline."""

    name = "phantom_member"

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        return _noise_like(own, 11 + view.round)

    def round_members(self, members: list[str], view: RoundView) -> list[str]:
        return [*members, PHANTOM]


class CheckpointHijack(Strategy):
    name = "checkpoint_hijack"

    def attestations(self, fields: dict[str, Any], view: RoundView) -> list[dict[str, Any]]:
        return [fields | {"resultCheckpoint": "0x" + "0f" * 32}]


class ZeroCheckpoint(Strategy):
    name = "zero_checkpoint"

    def attestations(self, fields: dict[str, Any], view: RoundView) -> list[dict[str, Any]]:
        return [fields | {"resultCheckpoint": "0x" + "00" * 32}]


class ReplayAttestation(Strategy):
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


class SybilShared(Strategy):
    """A second identity that reports the primary identity's computation as its own."""

    name = "sybil_shared_computation"

    def __init__(self, primary: str = "") -> None:
        self.primary = primary

    def pseudo_gradient(self, own: Tensors, view: RoundView) -> Tensors:
        return {n: x.clone() for n, x in view.peers[self.primary].items()}


class Equivocation(Strategy):
    name = "equivocation"

    def attestations(self, fields: dict[str, Any], view: RoundView) -> list[dict[str, Any]]:
        return [fields, fields | {"resultCheckpoint": "0x" + "e1" * 32}]


ALL: list[type[Strategy]] = [
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
