"""The prepared GPU check of a node of several ranks (issue 31): FSDP2 over NCCL, per shape
(the ``large`` preset and a ~1B shape) with and without CPU offload, bf16 and fp32 parameters:
peak GPU memory, inner tokens/s and MFU, and the outer step's seconds (gather the trained weights
to the host, the per-shard Nesterov step, the new base back into the shards).

    python -m bench.gpu_node                  # every GPU of the machine as one node (< 10 min)
    python -m bench.gpu_node --dry-run        # CPU/gloo, tiny shape: the script starts and ends

Last line JSON: ``{"runs": [{shape, offload, params, ranks, peak_gib, tokens_per_s, mfu,
outer_step_s, step_s}, ...], "device": ..., "seconds": ...}``. MFU counts 6 x parameters x tokens
against ``--peak-tflops`` per GPU (989: an H100/H200's dense bf16).
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from reference.inner import InnerConfig, InnerTrainer
from reference.model import GPT, GPTConfig
from reference.outer import FlatLayout, OuterConfig, OuterState
from trainer.round.sharded import ShardedDiLoCo, shard_model
from trainer.round.sharded_world import LocalRank, spawn_nodes

log = logging.getLogger(__name__)

SHAPES = {
    "large": GPTConfig.preset("large"),
    "1b": GPTConfig(n_layer=20, n_head=16, d_model=2048, seq_len=1024),  # ~1.0B parameters
    "tiny": GPTConfig.preset("tiny"),
}


@dataclass(frozen=True)
class Case:
    shape: str
    offload: bool
    bf16: bool
    steps: int
    batch: int  # rows per rank and step


def run_case(where: LocalRank, case: Case, device: str) -> dict[str, Any]:
    """One shape and policy on this node's ranks; every rank returns its figures."""
    cfg = SHAPES[case.shape]
    world = dist.get_world_size(where.group)
    rank = dist.get_rank(where.group)
    model = GPT(cfg, seed=0)
    params = model.num_params()
    layout = FlatLayout.of(model)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    shard_model(model, DeviceMesh.from_group(where.group, device), offload=case.offload,
                bf16=case.bf16)  # fmt: skip
    inner = InnerTrainer(model, InnerConfig.protocol(case.steps, 1e-4, case.batch, carried=False))
    gen = torch.Generator().manual_seed(rank)
    rows = torch.randint(0, 256, (case.steps * case.batch, cfg.seq_len + 1), generator=gen)
    warm = InnerTrainer(model, InnerConfig.protocol(1, 1e-4, case.batch, carried=False))
    warm.train(rows)
    del warm
    _sync(device, where)
    start = time.perf_counter()
    inner.train(rows)
    _sync(device, where)
    step_s = (time.perf_counter() - start) / case.steps
    probe = ShardedDiLoCo.__new__(ShardedDiLoCo)  # the gather helpers over the sharded model
    probe.model, probe.layout = model, layout
    start = time.perf_counter()
    node = ShardedDiLoCo(model, OuterState(layout, probe.flat_params()), where.group,
                         presharded=True)  # fmt: skip
    setup_s = time.perf_counter() - start
    _sync(device, where)
    start = time.perf_counter()
    flat_local = node.flat_params()
    base = node.base()
    mean = base - flat_local  # one node: the mean is its own pseudo-gradient
    del flat_local, base
    node.outer.step(mean, OuterConfig())
    node.load_flat(node.base())
    _sync(device, where)
    outer_s = time.perf_counter() - start
    tokens_per_s = world * case.batch * cfg.seq_len / step_s
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0
    del node, model, inner, mean
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"shape": case.shape, "offload": case.offload, "bf16": case.bf16, "params": params,
            "ranks": world, "peak_gib": round(peak, 2), "step_s": round(step_s, 4),
            "tokens_per_s": round(tokens_per_s, 1), "outer_step_s": round(outer_s, 3),
            "outer_setup_s": round(setup_s, 3),
            "flops_per_s": 6 * params * tokens_per_s}  # fmt: skip


def _sync(device: str, where: LocalRank) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
    dist.barrier(where.group)


def worker(where: LocalRank, cases: list[Case], device: str, out: str) -> None:
    if device == "cuda":
        torch.cuda.set_device(where.local_rank)
        torch.set_num_threads(8)
    results = []
    for case in cases:
        try:
            results.append(run_case(where, case, device))
        except torch.OutOfMemoryError as exc:  # a shape that does not fit is a figure too
            results.append({"shape": case.shape, "offload": case.offload, "bf16": case.bf16,
                            "error": f"out of memory: {str(exc)[:120]}"})  # fmt: skip
            torch.cuda.empty_cache()
    if where.local_rank == 0:
        (Path(out) / "runs.json").write_text(json.dumps(results))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="CPU/gloo, tiny shape, 1 step")
    ap.add_argument("--ranks", type=int, default=0, help="local ranks (default: every GPU)")
    ap.add_argument("--shapes", default="large,1b", help="comma-separated: large, 1b")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8, help="rows per rank and inner step")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="per GPU, dense bf16")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    if args.dry_run:
        device, backend, ranks = "cpu", "gloo", args.ranks or 2
        cases = [Case("tiny", False, bf16, 1, 2) for bf16 in (False, True)]
    else:
        if not torch.cuda.is_available():
            ap.error("no CUDA device: run with --dry-run on a CPU machine")
        device, backend = "cuda", "cpu:gloo,cuda:nccl"
        ranks = args.ranks or torch.cuda.device_count()
        cases = [Case(s, off, bf16, args.steps, args.batch) for s in args.shapes.split(",")
                 for off in (False, True) for bf16 in (True, False)]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="coloco-gpu-node-") as tmp:
        spawn_nodes(worker, [ranks], cases, device, tmp, backend=backend)
        runs = json.loads((Path(tmp) / "runs.json").read_text())
    for run in runs:
        if "flops_per_s" in run:
            run["mfu"] = round(run.pop("flops_per_s") / (ranks * args.peak_tflops * 1e12), 4)
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    out = {"device": name, "ranks": ranks, "runs": runs,
           "seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
