"""Averaging the pseudo-gradient across the round's members: the one place DiLoCo talks to the
collective library. :class:`GroupAverager` uses the codec engineer's quantized all-reduce
(`trainer.network.allreduce.average`) when it is present and a plain fp32 ``dist.all_reduce``
otherwise; :func:`reference.mean.simulate_average` is the same math in one process (benchmark,
scoring).

Every collective failure becomes :class:`protocol.errors.CollectiveError`; nothing is swallowed.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Protocol

import torch
import torch.distributed as dist
from torch import Tensor

from protocol.errors import CollectiveError, ColocoError, ConfigError
from reference.codec import Packet
from reference.settings import WireFormat
from trainer.network.collective import Check

log = logging.getLogger(__name__)

FORMATS = WireFormat.labels()


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ConfigError(f"unknown wire format {fmt!r}: use one of {', '.join(FORMATS)}")
    return fmt


def packet_bytes(numel: int, fmt: str) -> int:
    """Bytes of one encoded vector of ``numel`` values (payload + scales)."""
    check_format(fmt)
    try:
        from reference.codec.formats import wire_bytes as codec_wire_bytes
    except ImportError:  # codec not in this checkout: fp32/bf16 sizes, int8 with fp32 scales/256
        return numel * {"fp32": 4, "bf16": 2, "int8": 1}[fmt] + (
            4 * -(-numel // 256) if fmt == "int8" else 0
        )
    return int(codec_wire_bytes(numel, fmt))


def wire_bytes(numel: int, fmt: str, world_size: int) -> int:
    """Bytes one rank sends to average ``numel`` values over ``world_size`` ranks.

    A ring all-reduce (reduce-scatter + all-gather: synchronous data-parallel training, and the
    fp32 fallback below) moves ``2 (K-1)/K`` encoded vectors per rank; the checked all-gather of
    :mod:`trainer.network.allreduce` moves ``K-1`` (it reports its own bytes).
    """
    if world_size <= 1:
        return 0
    return int(packet_bytes(numel, fmt) * 2 * (world_size - 1) / world_size)


def roundtrip(flat: Tensor, fmt: str) -> Tensor:
    """What the other ranks decode from this rank's encoded ``flat`` vector."""
    check_format(fmt)
    if fmt == "fp32":
        return flat.float()
    from reference.codec.dispatch import decode, quantize

    return decode(quantize(flat.float().contiguous(), fmt))


class Averager(Protocol):
    """Averages one flat fp32 vector over the round's members; returns (mean, bytes sent)."""

    world_size: int

    def average(
        self,
        flat: Tensor | Packet,
        fmt: str,
        weight: int | None = None,
        check: Check | None = None,
    ) -> tuple[Tensor, int]: ...


class SoloAverager:
    """A round with a single member: the average is the node's own vector."""

    world_size = 1

    def average(
        self,
        flat: Tensor | Packet,
        fmt: str,
        weight: int | None = None,
        check: Check | None = None,
    ) -> tuple[Tensor, int]:
        if isinstance(flat, Packet):
            from reference.codec import decode

            return decode(flat).cpu(), 0
        return roundtrip(flat, fmt), 0


class GroupAverager:
    """Averages over a torch.distributed process group (gloo on CPU, NCCL on GPU)."""

    def __init__(
        self,
        group: dist.ProcessGroup | None,
        timeout: timedelta,
        device: torch.device | None = None,
    ) -> None:
        """``device``: where the vector travels from (cuda with NCCL: the codec's Triton path);
        the mean always comes back as a CPU tensor for the outer step."""
        self.group = group
        self.timeout = timeout
        self.device = device or torch.device("cpu")
        self.world_size = dist.get_world_size(group)

    def average(
        self,
        flat: Tensor | Packet,
        fmt: str,
        weight: int | None = None,
        check: Check | None = None,
    ) -> tuple[Tensor, int]:
        """``flat`` as fp32 values or as the packet already encoded (the fused kernel's);
        ``weight``: this node's tokens, for a token-weighted mean; ``check``: every peer's packet
        is checked against its commitment before the mean uses it."""
        check_format(fmt)
        try:
            from trainer.network import allreduce
        except ImportError:
            allreduce = None  # type: ignore[assignment]
        try:
            if isinstance(flat, Packet):
                packet = Packet(
                    flat.fmt,
                    flat.shape,
                    flat.payload.to(self.device),
                    None if flat.scales is None else flat.scales.to(self.device),
                    flat.block_size,
                )
                mean, sent = allreduce.average(packet, self.group, None, self.timeout,
                                               weight=weight, check=check)  # fmt: skip
                return mean.cpu(), int(sent)
            if allreduce is not None and hasattr(allreduce, "average"):
                mean, sent = allreduce.average(
                    flat.to(self.device), self.group, fmt, self.timeout, weight=weight, check=check
                )
                return mean.cpu(), int(sent)
            if fmt != "fp32":
                raise ConfigError(
                    f"wire format {fmt} needs trainer/network/allreduce.py "
                    "(the quantized all-reduce), which this checkout lacks: use fp32"
                )
            total = flat.float().clone()
            work = dist.all_reduce(total, group=self.group, async_op=True)
            if not work.wait(self.timeout):
                raise CollectiveError(f"all_reduce did not finish within {self.timeout}")
            return total / self.world_size, wire_bytes(flat.numel(), fmt, self.world_size)
        except ColocoError:
            raise
        except (RuntimeError, dist.DistBackendError) as exc:
            raise CollectiveError(
                f"averaging the pseudo-gradient over {self.world_size} nodes failed: {exc}"
            ) from exc
