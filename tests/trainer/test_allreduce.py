"""The quantized all-reduce over real gloo processes: identical results, honest bytes, errors."""

from __future__ import annotations

import hashlib
import itertools
import time

import pytest
import torch
import torch.distributed as dist

from protocol.errors import CollectiveError, TrainerError
from reference.codec import WireFormat, encode_flat, unflatten, wire_bytes
from reference.mean import simulate_average
from reference.outer import FlatLayout, OuterConfig, OuterState
from tests.harness.distributed import run_workers
from trainer.network import allreduce
from trainer.network.allreduce import average
from trainer.network.coordination.heartbeat import StalledError, watching

pytestmark = pytest.mark.distributed

N = 50_003  # not a multiple of the block size or the world size
WORLD = 4
FORMATS = ["fp32", "bf16", "int8"]


def _vector(rank: int, n: int = N) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(1000 + rank))


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()


def _average_worker(rank: int, world: int, fmt: str) -> tuple[str, int, list[float]]:
    mean, sent = average(_vector(rank), None, fmt, 30.0)
    return _digest(mean), sent, mean[:4].tolist()


def _packet_worker(rank: int, world: int) -> tuple[str, int, list[list[int]]]:
    gen = torch.Generator().manual_seed(rank)
    shapes = [(17, 33), (5,), (64, 64), (1,)]
    base = [torch.randn(s, generator=torch.Generator().manual_seed(7)) for s in shapes]
    local = [b - 0.01 * torch.randn(b.shape, generator=gen) for b in base]
    packet = encode_flat(base, local, WireFormat.INT8)
    mean, sent = average(packet, None, timeout=30.0)
    views = unflatten(mean, base)
    return _digest(mean), sent, [list(v.shape) for v in views]


def _stall_worker(rank: int, world: int) -> str:
    if rank == 1:
        time.sleep(6.0)  # never joins the collective; stays alive past rank 0's timeout
        return "stalled"
    started = time.monotonic()
    try:
        average(_vector(rank), None, "int8", 2.0)
    except CollectiveError as exc:
        return f"CollectiveError after {time.monotonic() - started:.1f}s: {exc.code}"
    return "no error"


def _watched_stall_worker(rank: int, world: int) -> str:
    """Rank 1 stalls (never joins); rank 0's heartbeat watch gives up on it after 1 s, long
    before the 20 s collective timeout, in the middle of the pipelined exchange."""
    if rank == 1:
        time.sleep(8.0)
        return "stalled"
    started = time.monotonic()

    def check() -> None:
        if time.monotonic() - started > 1.0:
            raise StalledError(("0xpeer",), 1.0)

    try:
        with watching(check):
            average(_vector(rank), None, "int8", 20.0)
    except StalledError:
        return f"StalledError after {time.monotonic() - started:.1f}s"
    return "no error"


def _paths_worker(rank: int, world: int, fmt: str) -> dict[str, object]:
    """The pipelined exchange in many small pieces, and gloo's three collectives in a row."""
    out: dict[str, object] = {}
    saved = allreduce.PIECE_BYTES
    allreduce.PIECE_BYTES = 1024  # int8: 4 blocks a piece, so ~13 pieces per chunk here
    try:
        timings: dict[str, float] = {}
        mean, sent = average(_vector(rank), None, fmt, 30.0, weight=rank + 1, timings=timings)
        out["pieces"] = (_digest(mean), sent, sorted(timings))
        polls: list[int] = []
        timings = {}
        with watching(lambda: polls.append(1)):  # the heartbeat watch of the operator's node
            mean, sent = average(_vector(rank), None, fmt, 30.0, weight=rank + 1, timings=timings)
        out["watched"] = (_digest(mean), sent, sorted(timings))
        # the outer step taken piece by piece as the mean lands, against the whole step after
        base = torch.randn(N, generator=torch.Generator().manual_seed(5))
        moment = torch.randn(N, generator=torch.Generator().manual_seed(6))
        pieced = OuterState(FlatLayout({"w": torch.Size([N])}), base, moment)
        ranges: list[tuple[int, int]] = []

        def step(a: int, b: int, values: torch.Tensor) -> None:
            ranges.append((a, b))
            pieced.step_range(a, b, values, OuterConfig())

        mean, _ = average(_vector(rank), None, fmt, 30.0, weight=rank + 1, on_piece=step)
        whole = OuterState(FlatLayout({"w": torch.Size([N])}), base, moment)
        whole.step(mean, OuterConfig())
        covered = sorted(ranges)
        out["on_piece"] = (
            _digest(pieced.base) == _digest(whole.base),
            _digest(pieced.momentum) == _digest(whole.momentum),
            len(ranges),
            all(x[1] == y[0] for x, y in itertools.pairwise(covered))
            and covered[0][0] == 0
            and covered[-1][1] == N,
        )
    finally:
        allreduce.PIECE_BYTES = saved
    mean, sent = average(_vector(rank), None, fmt, 30.0, weight=rank + 1, pipelined=False)
    out["collectives"] = (_digest(mean), sent)
    return out


def _all_formats_worker(rank: int, world: int) -> dict[str, object]:
    out: dict[str, object] = {fmt: _average_worker(rank, world, fmt) for fmt in FORMATS}
    out["packet"] = _packet_worker(rank, world)
    out |= {f"paths_{fmt}": _paths_worker(rank, world, fmt) for fmt in FORMATS}
    return out


@pytest.fixture(scope="module")
def four_ranks() -> list[dict[str, object]]:
    """One spawn of 4 real gloo processes runs every format (process start-up dominates)."""
    return run_workers(_all_formats_worker, WORLD, timeout=240)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_rank_gets_the_same_bits_as_the_simulation(
    four_ranks: list[dict[str, object]], fmt: str
) -> None:
    results = [r[fmt] for r in four_ranks]
    digests = {r[0] for r in results}  # type: ignore[index]
    assert len(digests) == 1, f"ranks disagree: {results}"
    simulated = simulate_average([_vector(r) for r in range(WORLD)], fmt)
    assert _digest(simulated) == results[0][0]  # type: ignore[index]
    exact = torch.stack([_vector(r) for r in range(WORLD)]).mean(dim=0)
    rel = float((simulated - exact).norm() / exact.norm())
    bound = {"fp32": 1e-6, "bf16": 0.01, "int8": 0.02}[fmt]
    assert rel <= bound, f"{fmt}: relative error {rel:.4f} > {bound}"


@pytest.mark.parametrize("fmt", FORMATS)
def test_bytes_sent_is_the_packet_once_to_each_peer(
    four_ranks: list[dict[str, object]], fmt: str
) -> None:
    expected = (WORLD - 1) * wire_bytes(N, fmt)
    assert [r[fmt][1] for r in four_ranks] == [expected] * WORLD  # type: ignore[index]
    if fmt == "int8":
        fp32_sent = four_ranks[0]["fp32"][1]  # type: ignore[index]
        assert fp32_sent / expected >= 3.85  # 3.94 asymptotically; N is small here


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_pipelined_pieces_give_the_bits_of_the_collectives_and_the_replay(
    four_ranks: list[dict[str, object]], fmt: str
) -> None:
    """Gloo's default path exchanges block-aligned pieces point to point (the wire and the CPU
    overlap); the weighted mean must still be the bits of the three collectives and of the
    one-process replay the ledger's audit runs."""
    paths = [r[f"paths_{fmt}"] for r in four_ranks]
    replay = simulate_average([_vector(r) for r in range(WORLD)], fmt, weights=[1, 2, 3, 4])
    for p in paths:
        assert p["pieces"][0] == p["collectives"][0] == _digest(replay)  # type: ignore[index]
        assert p["pieces"][1] == p["collectives"][1]  # type: ignore[index]
        assert p["pieces"][2] == ["check", "exchange", "weights"]  # type: ignore[index]


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_heartbeat_watched_all_reduce_takes_the_pipelined_path(
    four_ranks: list[dict[str, object]], fmt: str
) -> None:
    """The operator's node averages with the heartbeat watch on (it polls): gloo's point-to-point
    pieces report completion only from wait(), so they are waited for in a thread the watch can
    poll; the watched exchange is the pipelined one, with the same bits and bytes."""
    for p in (r[f"paths_{fmt}"] for r in four_ranks):
        assert p["watched"][:2] == p["pieces"][:2]  # type: ignore[index]
        assert p["watched"][2] == ["check", "exchange", "weights"]  # type: ignore[index]


def test_a_flat_packet_of_many_parameters_averages_to_identical_views(
    four_ranks: list[dict[str, object]],
) -> None:
    results = [r["packet"] for r in four_ranks]
    assert len({r[0] for r in results}) == 1  # type: ignore[index]
    assert results[0][2] == [[17, 33], [5], [64, 64], [1]]  # type: ignore[index]
    assert results[0][1] > 0  # type: ignore[index]


def _leaving_worker(rank: int, world: int) -> str:
    if rank == 1:
        dist.destroy_process_group()  # its sockets close, as when the process dies mid-round
        return "left"
    time.sleep(1.0)
    started = time.monotonic()
    try:
        average(_vector(rank), None, "int8", 20.0)
    except CollectiveError:
        return f"CollectiveError after {time.monotonic() - started:.1f}s"
    return "no error"


def test_a_peer_that_goes_away_mid_round_raises_collective_error() -> None:
    results = run_workers(_leaving_worker, 2, timeout=120)
    assert results[1] == "left"
    assert results[0].startswith("CollectiveError after"), results[0]
    assert float(results[0].split("after ")[1].rstrip("s")) < 19.0  # failed fast, not by timeout


def test_a_stalled_peer_raises_collective_error_within_the_timeout() -> None:
    results = run_workers(_stall_worker, 2, timeout=120)
    assert results[1] == "stalled"
    assert results[0].startswith("CollectiveError after"), results[0]
    assert results[0].endswith("collective_error")
    waited = float(results[0].split("after ")[1].split("s:")[0])
    assert waited < 5.0


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_outer_step_piece_by_piece_as_the_mean_lands_gives_the_whole_steps_bits(
    four_ranks: list[dict[str, object]], fmt: str
) -> None:
    """``on_piece`` hands over every value of the mean exactly once, in many pieces while the
    rest is on the wire; the outer step taken on each piece gives the bits of the whole step."""
    for p in (r[f"paths_{fmt}"] for r in four_ranks):
        same_base, same_momentum, pieces, tiled = p["on_piece"]  # type: ignore[index]
        assert same_base and same_momentum and tiled
        assert pieces > WORLD  # many ranges, handed over as they land


def test_a_stalled_peer_ends_the_watched_pipelined_all_reduce_at_the_heartbeat() -> None:
    results = run_workers(_watched_stall_worker, 2, timeout=120)
    assert results[1] == "stalled"
    assert results[0].startswith("StalledError after"), results[0]
    assert float(results[0].split("after ")[1].rstrip("s")) < 10.0  # not the 20 s timeout


def test_average_refuses_to_run_without_a_process_group() -> None:
    with pytest.raises(TrainerError, match="init_process_group"):
        average(torch.zeros(4), None, "int8", 1.0)
