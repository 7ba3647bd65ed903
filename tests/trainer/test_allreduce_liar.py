"""Security review F6: a member that lies in the all-reduce cannot move the honest members' mean.

The reduce-scatter let rank r reduce chunk r for everybody: a rank that sent its peers a wrong mean
piece and kept the true one for itself moved every honest member off the ledger's result while
its own matched it (19,552 of 60,000 coordinates wrong on the honest ranks). The exchange is now a
checked all-gather: each rank receives every peer's whole packet, holds it to the commitment hash
that peer signed before the exchange (here: computed from the seeds, as the board's signed
``COMMIT`` would carry it) and computes the mean itself.

The liar below tampers with every byte it puts on the wire, whatever the exchange sends (a mean
piece in the old reduce-scatter, its packet now), and keeps its own copy intact. The bound: an
honest rank either holds exactly the mean of the committed packets, or refuses, naming the liar;
never a mean the ledger will not recompute.
"""

from __future__ import annotations

import hashlib
import inspect
from typing import Any

import pytest
import torch
import torch.distributed as dist

from protocol.errors import ForgedPacketError
from reference.codec import Packet, quantize
from reference.commitment import commitment_hash
from reference.mean import simulate_average
from tests.harness.distributed import run_workers
from trainer.network import allreduce
from trainer.network.allreduce import average

pytestmark = pytest.mark.distributed

N = 60_000
WORLD = 3
LIAR = 2


def _packet(rank: int) -> Packet:
    v = torch.randn(N, generator=torch.Generator().manual_seed(300 + rank)) * 1e-3
    return quantize(v, "int8")


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()


def _lie_on_the_wire() -> None:
    """Every tensor this process sends goes out altered; its own buffers stay true."""
    kept: list[torch.Tensor] = []  # the altered copies live until their sends complete

    def altered(t: torch.Tensor) -> torch.Tensor:
        out = t.clone()
        flat = out.view(-1)
        if out.dtype in (torch.int8, torch.int64):  # codes, and the all-reduce weights
            flat[::3] = torch.where(flat[::3] > 0, flat[::3] - 1, flat[::3] + 1)
        else:
            flat[::3] *= 1.5
        kept.append(out)
        return out

    isend, gather = dist.isend, dist.all_gather_into_tensor

    def lying_isend(t: torch.Tensor, *a: Any, **kw: Any) -> Any:
        return isend(altered(t), *a, **kw)

    def lying_gather(out: torch.Tensor, t: torch.Tensor, *a: Any, **kw: Any) -> Any:
        return gather(out, altered(t), *a, **kw)

    dist.isend = lying_isend  # type: ignore[assignment]
    dist.all_gather_into_tensor = lying_gather


def _worker(rank: int, world: int, pipelined: bool) -> tuple[str, Any]:
    commitments = {r: commitment_hash(_packet(r)) for r in range(world)}

    def check(src: int, packet: Packet, weight: int | None) -> None:
        if commitment_hash(packet) != commitments[src] or weight != 1000 + src:
            raise ForgedPacketError((f"rank{src}",), f"rank {src}'s packet is not its commitment")

    if rank == LIAR:
        _lie_on_the_wire()
    kw: dict[str, Any] = {"pipelined": pipelined, "weight": 1000 + rank}
    if "check" in inspect.signature(average).parameters:
        kw["check"] = check
    allreduce.PIECE_BYTES = 4096  # many pieces: the lie lands in every one
    try:
        mean, _ = average(_packet(rank), None, timeout=30.0, **kw)
    except ForgedPacketError as exc:
        return "refused", list(exc.offenders)
    return "mean", _digest(mean)


@pytest.mark.parametrize("pipelined", [True, False], ids=["pieces", "collectives"])
def test_a_member_lying_in_the_all_reduce_is_named_and_moves_no_honest_mean(
    pipelined: bool,
) -> None:
    results = run_workers(_worker, WORLD, pipelined, timeout=120)
    truth = _digest(
        simulate_average(
            [_packet(r) for r in range(WORLD)], "int8", weights=[1000 + r for r in range(WORLD)]
        )
    )
    for rank, (kind, value) in enumerate(results):
        if rank == LIAR:
            continue
        assert kind == "refused" or value == truth, (
            f"honest rank {rank} holds a mean that is not the committed packets' mean: the liar "
            "moved it (F6)"
        )
        assert kind == "refused" and value == [f"rank{LIAR}"], (rank, kind, value)
