"""The checked all-gather of sparse packets (``WireFormat.SPARSE``, reference.codec.sparse).

Every rank sends its whole packet (offsets + 2-bit codes, one fp32 step a chunk) to every peer
in two ``all_gather`` (payload, steps: every packet of a round has the same size, fixed by the
model and ``SPARSE_SPEC``). Before any value of the mean is used, every peer's packet is

1. parsed as a :class:`~reference.codec.sparse.SparsePacket`: offsets outside their chunk,
   duplicate or unordered offsets, a negative or non-finite step refuse it, naming the peer
   (a packet that is malformed *and* committed is still refused: its indices are wrong);
2. held to the commitment that peer signed (``check``: trainer.round.commits.PacketCheck).

Then every rank computes the mean itself with :func:`reference.mean.sparse_mean` (summed in the
order of the packets' digests, token-weighted, no re-encoding): the same bits on every rank and in
the ledger's replay, whatever order the packets arrived in. No rank reduces anything for another,
so the reducer lie of security review F6 has nothing to act on: a rank can only send a packet,
and a packet that is not the one it committed to is refused.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from functools import partial

import torch
import torch.distributed as dist

from protocol.errors import ForgedPacketError, TrainerError
from reference.codec import Packet
from reference.mean import sparse_mean
from trainer.network.collective import Check, Clock, run_collective

log = logging.getLogger(__name__)


def name_of(check: Check | None, src: int) -> str:
    """The peer's name as the check knows it (a node address), else ``rank N``."""
    names = getattr(check, "name_of", None)
    return str(names(src)) if callable(names) else f"rank {src}"


def gather_sparse(
    packet: Packet,
    group: dist.ProcessGroup | None,
    *,
    wait_for: timedelta,
    weights: list[int] | None,
    world: int,
    rank: int,
    clock: Clock,
    check: Check | None,
) -> tuple[torch.Tensor, int]:
    """(the mean, bytes of this rank's packet): every packet gathered, parsed, checked, averaged."""
    payload, steps = packet.payload.contiguous(), packet.scales
    if steps is None:
        raise TrainerError("a sparse packet carries one fp32 step per chunk")
    steps = steps.contiguous()
    n, m = payload.numel(), steps.numel()
    got = torch.empty(world * n, dtype=torch.uint8, device=payload.device)
    got_steps = torch.empty(world * m, dtype=torch.float32, device=payload.device)
    for what, out, mine in (("payload", got, payload), ("steps", got_steps, steps)):
        gather = partial(dist.all_gather_single, out, mine, group=group, async_op=True)
        run_collective(f"all_gather (sparse {what})", wait_for, gather)
    clock.mark("exchange")
    packets: list[Packet] = []
    for src in range(world):
        if src == rank:
            packets.append(packet)
            continue
        try:
            peer = Packet(packet.fmt, packet.shape, got[src * n : (src + 1) * n],
                          got_steps[src * m : (src + 1) * m], packet.block_size)  # fmt: skip
        except TrainerError as exc:
            who = name_of(check, src)
            raise ForgedPacketError(
                (who,),
                f"{who} sent a malformed sparse packet ({exc}): not used; the round "
                "re-forms without it",
            ) from exc
        if check is not None:
            check(src, peer, None if weights is None else weights[src])
        packets.append(peer)
    clock.mark("check")
    mean = sparse_mean(packets, weights)
    clock.mark("reduce")
    return mean, packet.nbytes
