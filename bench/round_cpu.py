"""The CPU a round costs outside the inner steps, per wire format: encode, the checked
all-gather's local work (parse, mean), the outer step and the hashes.

    python -m bench.round_cpu [--numel N] [--world W] [--repeats R]

One thread (the node's), a flat vector of the ``cpu10m`` preset's size by default. For each
format: ``encode_s`` (int8: the fused subtract-and-quantize; sparse: the node's ``compress``
with a carried residual, its selection on the torch reference and on the native kernel),
``mean_s`` (the mean of ``world`` packets as each rank computes it: int8 ``simulate_average``,
sparse ``sparse_mean`` after parsing each peer's packet), ``outer_s`` (``OuterState.step``),
``hash_s`` (the commitment hash of the packet and the weights hash). And the node's committed
trace (reference.trace, issue 26), per boundary: ``copy_s`` (the state taken off the model),
``state_hash_s``, ``sketch_s`` on the torch reference and on the native kernel, ``store_s`` (the
boundary store's write: protocol.files.DirectWriter, its CPU time; ``blob_s``, encode_blob, what
the store made before it), and ``per_round_s`` at ``--boundaries`` a round (11: H 50,
k 5). Best of ``repeats``. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from bench import emit
from protocol.blobs import encode_blob
from protocol.files import DirectWriter
from protocol.hashing import hash_state_dict
from reference.codec import Packet, encode
from reference.codec.sparse import SPARSE_SPEC, compress, to_packet
from reference.commitment import commitment_hash
from reference.mean import simulate_average, sparse_mean
from reference.outer import FlatLayout, OuterConfig, OuterState
from reference.sketch import make_sketch
from reference.trace import boundary_steps, state_hash

CPU10M = 10_663_296


def best(
    f: Callable[[], Any], repeats: int, clock: Callable[[], float] = time.perf_counter
) -> float:
    """The least of ``repeats`` timings of ``f`` on ``clock`` (wall by default; the process's
    CPU for work whose wall time is a device's, as a write with O_DIRECT)."""
    out = []
    for _ in range(repeats):
        t = clock()
        f()
        out.append(clock() - t)
    return min(out)


def parsed_mean(packets: list[Packet]) -> torch.Tensor:
    """Every packet parsed as a peer's would be (a fresh Packet checks its offsets), then the
    digest-ordered mean."""
    peers = [Packet(p.fmt, p.shape, p.payload.clone(), p.scales, p.block_size) for p in packets]
    return sparse_mean(peers, None)


def trace_costs(
    base: torch.Tensor, local: torch.Tensor, r: int, boundaries: int
) -> dict[str, float]:
    """One boundary's work (weights and AdamW's two moments, the state of a carried round) and
    the round's at ``boundaries`` boundaries, with either sketch backend."""
    g = torch.Generator().manual_seed(7)
    state = {"weights/w": local, "adam/w/exp_avg": torch.randn(local.numel(), generator=g) * 1e-4,
             "adam/w/exp_avg_sq": torch.rand(local.numel(), generator=g) * 1e-8,
             "adam/step": torch.tensor(25.0)}  # fmt: skip
    digest = state_hash(state)
    costs = {
        "copy_s": best(lambda: {k: t.clone() for k, t in state.items()}, r),
        "state_hash_s": best(lambda: state_hash(state), r),
        "blob_s": best(lambda: encode_blob(state), r),
    }
    writer = DirectWriter()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "0000.safetensors"
        store = partial(writer.write_tensors, path, state)
        costs["store_s"] = best(store, r, clock=time.process_time)
    for backend in ("torch", "native"):
        os.environ["COLOCO_CODEC"] = backend
        costs[f"sketch_{backend}_s"] = best(lambda: make_sketch(state, {"w": base}, digest), r)
    fixed = costs["copy_s"] + costs["state_hash_s"] + costs["store_s"]
    for backend in ("torch", "native"):
        costs[f"per_round_{backend}_s"] = boundaries * (fixed + costs[f"sketch_{backend}_s"])
    return costs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--numel", type=int, default=CPU10M)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--boundaries", type=int, default=len(boundary_steps(50, 5)))
    args = p.parse_args()
    torch.set_num_threads(1)
    n, w, r = args.numel, args.world, args.repeats
    gens = [torch.Generator().manual_seed(s) for s in range(w + 1)]
    base = torch.randn(n, generator=gens[w])
    locals_ = [base - torch.randn(n, generator=g) * 1e-3 for g in gens[:w]]
    layout = FlatLayout({"w": torch.Size([n])})
    state = OuterState(layout, base.clone(), None)
    cfg = OuterConfig(lr=0.7, momentum=0.9)
    mean_holder: dict[str, torch.Tensor] = {}
    out: dict[str, Any] = {"numel": n, "world": w, "threads": 1}

    def common(packets: list[Packet], mean: Callable[[], torch.Tensor]) -> dict[str, float]:
        mean_holder["m"] = mean()
        return {
            "mean_s": best(mean, r),
            "outer_s": best(lambda: state.step(mean_holder["m"], cfg), r),
            "hash_s": best(lambda: (commitment_hash(packets[0]),
                                    hash_state_dict(layout.unflatten(state.base))), r),
        }  # fmt: skip

    int8 = [encode(base, loc, "int8") for loc in locals_]
    out["int8"] = {"encode_s": best(lambda: encode(base, locals_[0], "int8"), r),
                   **common(int8, lambda: simulate_average(int8, "int8"))}  # fmt: skip
    residual = torch.randn(n, generator=gens[0]) * 1e-4
    for backend in ("torch", "native"):

        def enc(backend: str = backend) -> Packet:
            os.environ["COLOCO_CODEC"] = backend  # the codec's dispatch reads it at each call
            packet, _ = compress(base - locals_[0], residual, SPARSE_SPEC, 0.95)
            return to_packet(packet)

        sparse = [to_packet(compress(base - loc, None, SPARSE_SPEC, 0.95)[0]) for loc in locals_]
        out[f"sparse_{backend}"] = {
            "encode_s": best(enc, r),
            **common(sparse, partial(parsed_mean, sparse)),
        }  # fmt: skip
    out["boundary"] = trace_costs(base, locals_[0], r, args.boundaries)
    os.environ.pop("COLOCO_CODEC", None)
    for k, v in list(out.items()):
        if isinstance(v, dict):
            if k != "boundary":
                v["total_s"] = round(sum(v.values()), 4)
            out[k] = {a: round(b, 4) for a, b in v.items()}
    emit("round_cpu", out)


if __name__ == "__main__":
    main()
