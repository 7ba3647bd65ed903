"""The sparse wire format through the checked all-gather, over real gloo processes.

Every rank ends with the same bits, equal to the one-process reference (what the ledger replays);
a rank that sends a packet other than the one it committed to, or a packet with wrong indices,
is refused by name before anything of it is used (security review F6: no rank reduces for
another, so there is no reducer to lie).
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import torch
import torch.distributed as dist

from protocol.errors import ForgedPacketError
from protocol.hashing import hash_state_dict
from reference.codec import Packet
from reference.codec.sparse import SPARSE_SPEC, encode_feedback, sparse_wire_bytes
from reference.commitment import commitment_hash, tensors_of
from reference.mean import simulate_average
from tests.harness.distributed import run_workers
from trainer.network.allreduce import average

pytestmark = pytest.mark.distributed

N = 70_001  # not a multiple of the chunk
LIAR = 2


def _packet(rank: int) -> Packet:
    """Rank ``rank``'s second round: error feedback carried from its first."""
    gen = torch.Generator().manual_seed(500 + rank)
    base = torch.randn(N, generator=gen)
    residual = None
    for _ in range(2):
        local = base - torch.randn(N, generator=gen) * 1e-3
        packet, residual = encode_feedback(base, local, residual)
    return packet


def _tokens(rank: int) -> int:
    return 1000 + 7 * rank


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()


class _Check:
    """Each rank's packet against its commitment hash (as the signed COMMIT would carry it)."""

    def __init__(self, commitments: dict[int, bytes]) -> None:
        self.commitments = commitments

    def name_of(self, src: int) -> str:
        return f"rank{src}"

    def __call__(self, src: int, packet: Packet, weight: int | None) -> None:
        if commitment_hash(packet) != self.commitments[src] or weight != _tokens(src):
            raise ForgedPacketError((f"rank{src}",), f"rank {src}'s packet is not its commitment")


def _tamper_payload(how: str) -> None:
    """This process's uint8 payload goes out altered; what it holds (and committed) stays true."""
    gather = dist.all_gather_single
    kept: list[torch.Tensor] = []

    def lying(out: torch.Tensor, t: torch.Tensor, *a: Any, **kw: Any) -> Any:
        if t.dtype == torch.uint8:
            t = t.clone()
            if how == "codes":  # other values at the committed positions
                t[-50:] ^= 0xFF
            else:  # chunk 0's first two offsets swapped: unordered indices
                t[0], t[1] = int(t[1]), int(t[0])
            kept.append(t)
        return gather(out, t, *a, **kw)

    dist.all_gather_single = lying


def _worker(rank: int, world: int, lie: str | None) -> tuple[str, Any]:
    packets = {r: _packet(r) for r in range(world)}
    commitments = {r: commitment_hash(p) for r, p in packets.items()}
    if lie == "committed_bad_indices" and rank == LIAR:
        # the liar commits to the malformed bytes it sends (its signature holds them)
        tensors = tensors_of(packets[rank])
        tensors["payload"] = tensors["payload"].clone()
        t = tensors["payload"]
        t[0], t[1] = int(t[1]), int(t[0])
        commitments[rank] = bytes(hash_state_dict(tensors))
    if lie is not None and rank == LIAR:
        _tamper_payload("codes" if lie == "codes" else "indices")
    try:
        mean, sent = average(packets[rank], None, timeout=30.0, weight=_tokens(rank),
                             check=_Check(commitments))  # fmt: skip
    except ForgedPacketError as exc:
        return "refused", list(exc.offenders)
    return "mean", (_digest(mean), sent)


@pytest.mark.parametrize("world", [2, 3])
def test_sparse_mean_is_bit_identical_on_every_rank_and_the_reference(world: int) -> None:
    results = run_workers(_worker, world, None, timeout=120)
    truth = simulate_average([_packet(r) for r in range(world)], "sparse",
                             weights=[_tokens(r) for r in range(world)])  # fmt: skip
    assert {kind for kind, _ in results} == {"mean"}, results
    digests = {value[0] for _, value in results}
    assert digests == {_digest(truth)}, "a rank's mean differs from the committed packets' mean"
    packet_bytes = sparse_wire_bytes(N, SPARSE_SPEC)
    assert packet_bytes == _packet(0).nbytes
    for _, (_, sent) in results:  # each peer gets the packet once, plus the 8-byte weight
        assert sent == (world - 1) * (packet_bytes + 8)


@pytest.mark.parametrize("lie", ["codes", "indices", "committed_bad_indices"])
def test_a_rank_sending_another_packet_or_wrong_indices_is_refused_by_name(lie: str) -> None:
    results = run_workers(_worker, 3, lie, timeout=120)
    for rank, (kind, value) in enumerate(results):
        if rank == LIAR:
            continue
        assert (kind, value) == ("refused", [f"rank{LIAR}"]), (
            f"honest rank {rank} used the liar's packet ({lie}): {kind} {value}"
        )
