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
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from protocol.errors import ForgedPacketError
from protocol.keys import NodeKey
from reference.codec import Packet, quantize
from reference.commitment import commitment_hash
from reference.mean import simulate_average
from tests.harness.distributed import run_workers
from tests.trainer.nodes import DEV_KEYS, RUN_ID, Plan, collect, start_nodes
from trainer.network import allreduce
from trainer.network.allreduce import average
from trainer.network.coordination.registry import StaticRegistry
from trainer.network.membership import MembershipConfig, Rendezvous
from trainer.round.node import offline_domain

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

    isend, gather = dist.isend, dist.all_gather_single

    def lying_isend(t: torch.Tensor, *a: Any, **kw: Any) -> Any:
        return isend(altered(t), *a, **kw)

    def lying_gather(out: torch.Tensor, t: torch.Tensor, *a: Any, **kw: Any) -> Any:
        return gather(out, altered(t), *a, **kw)

    dist.isend = lying_isend  # type: ignore[assignment]
    dist.all_gather_single = lying_gather


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


def test_real_nodes_leave_a_forging_member_out_of_the_round_and_train_on(
    corpus_dir: Path, store_port: int
) -> None:
    """Three real NodeRunner processes; in round 1 node 2 commits to its packet and sends its peers
    another. Both honest nodes name it (``forged``), refuse every member list of the round that
    lists it (``forged_packet``; the liar rejoins the next attempt on its own, and the ledger-less
    rendezvous would otherwise take it back every time) and finish rounds 1 and 2 together, with
    the same weights."""
    plans = [Plan(key=k, rounds=2, min_nodes=3 if k < 2 else 1, collective_timeout_s=8.0,
                  forge_in_round=1 if k == 2 else None) for k in range(3)]  # fmt: skip
    out = collect(*start_nodes(plans, store_port, corpus_dir), timeout=240)
    res = out["results"]
    liar = str(NodeKey.from_private_key(bytes.fromhex(DEV_KEYS[2][2:])).address)
    for k in (0, 1):
        assert out["exit_codes"][k] == 0, out["exit_codes"]
        assert out["forged"][k] == [(1, [liar])], out["forged"]
        rounds = {rec["round"]: rec for rec in res[k]}
        assert sorted(rounds) == [1, 2], rounds
        assert liar not in rounds[1]["members"], rounds[1]
    hashes = {r: {res[k][i]["result_checkpoint"] for k in (0, 1)} for i, r in enumerate((1, 2))}
    assert all(len(h) == 1 for h in hashes.values()), hashes


def test_a_member_list_naming_a_caught_forger_is_refused_and_replaced(store_port: int) -> None:
    """After a member's packet failed its check, this node opens and accepts no attempt of the
    round with it: the forger, rejoining like everybody, closed the next attempt first with the
    honest joins and its own (a valid list; with a ledger its join is accepted there, so waiting
    for the honest alone never kept it out). The honest node refuses that list (``forged_packet``)
    and replaces it with one without the forger."""
    keys = [NodeKey.from_private_key(bytes([0x61 + i]) * 32) for i in range(3)]
    registry = StaticRegistry({str(k.address) for k in keys})
    cfg = MembershipConfig(rendezvous_timeout_s=5.0, join_window_s=0.0)
    a, b, liar = (
        Rendezvous(
            "127.0.0.1",
            store_port,
            key=k,
            domain=offline_domain(RUN_ID),
            run_id=RUN_ID,
            registry=registry,
            cfg=cfg,
        )
        for k in keys
    )
    honest = {a.address, b.address}
    a.exclude(1, (liar.address,))
    b._post_join(1, 1)  # the honest joins of attempt 1 are on the board
    a._post_join(1, 1)
    first = liar.join(1, 1, window_s=0.0, timeout_s=5.0, expect=honest | {liar.address})
    assert set(first.addresses) == honest | {liar.address}, "the forger closed attempt 1 first"
    members = a.join(1, 1, window_s=0.0, timeout_s=5.0, expect=honest)
    assert set(members.addresses) == honest, members
    assert "forged_packet" in {r.check for r in a.refusals}
