"""Nodes of several local ranks (FSDP2 inside a node on CPU/gloo, DiLoCo across nodes).

``python -m bench.fsdp --quick`` prints, last line JSON:

- ``exact_equal``: 2 nodes x 2 local ranks, 3 rounds: every round's outer step and checkpoint
  bit-equal to the single-process outer step on the same mean pseudo-gradient, every packet
  byte-equal to a single-process node's encoding of the same weights, and the inner steps within
  1e-5 relative of a single-process node's from the same base and rows (``inner_rel_err``);
- ``heterogeneous_ok``: nodes of 1, 2 and 4 ranks, 3 rounds, one run: every node's packet in the
  leaders' average, every node ends each round on the same base, equal to the single-process outer
  step (no ledger: crediting is not exercised here);
- ``host_bytes_per_param``: measured RSS of a 2-rank node's processes after its outer state and
  one round, minus before (the model, its gradients and AdamW state), per parameter;
- ``bf16_momentum_loss_ratio``: validation loss with bf16 outer momentum / with fp32 (2 simulated
  nodes, real corpus);
- ``two_rank_speedup``: inner tokens/s of the ``small`` preset, a 2-rank node over a 1-rank node,
  one thread per rank (the machine is shared: nice 0, figures vary with the other load).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import json
import logging
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from bench.harness import forked
from ledger.core.config import SEGMENT_TOLERANCE
from reference.checkpoint import RoundCheckpoint
from reference.codec import Packet, encode
from reference.inner import CARRY_STATE, InnerConfig, InnerTrainer
from reference.model import GPT, GPTConfig, evaluate
from reference.outer import FlatLayout, OuterConfig, OuterState
from reference.segment import STEP, fresh_state, replay_segment, segment_error, segment_rows
from reference.trace import WEIGHTS, Boundary, TraceBuilder, state_hash
from trainer.network.comm import GroupAverager
from trainer.round.diloco import RoundSettings
from trainer.round.ranks import RESHARD
from trainer.round.sharded import ShardedDiLoCo, local_rows, shard_model
from trainer.round.sharded_state import ShardOuterState
from trainer.round.sharded_world import LocalRank, spawn_nodes

log = logging.getLogger(__name__)
INNER_TOLERANCE = 1e-5
EXACT = ("outer_equal", "packets_equal", "same_base", "trace_same", "segments_pass")


@dataclass(frozen=True)
class Spec:
    """One run of sharded nodes."""

    preset: str = "tiny"
    rounds: int = 3
    steps: int = 4
    batch: int = 8
    lr: float = 1e-3
    fmt: str = "fp32"
    seed: int = 0
    carried: bool = CARRY_STATE  # the protocol's inner mode: AdamW kept across rounds

    def settings(self) -> RoundSettings:
        """The round's settings in the spec's inner mode, with that mode's AdamW constants."""
        inner = InnerConfig.protocol(self.steps, self.lr, self.batch, carried=self.carried)
        return RoundSettings(inner, OuterConfig(), wire_format=self.fmt, trace_interval=2,
                             keep_inner_state=self.carried)  # fmt: skip

    def model(self) -> GPT:
        return GPT(GPTConfig.preset(self.preset), seed=self.seed)

    def rows(self, node: int, rnd: int) -> torch.Tensor:
        """Node ``node``'s rows for round ``rnd`` (random tokens: the exactness checks)."""
        gen = torch.Generator().manual_seed(1000 * rnd + node)
        seq = GPTConfig.preset(self.preset).seq_len
        return torch.randint(0, 256, (self.steps * self.batch, seq + 1), generator=gen)


def _forked() -> str:
    """The forkserver start method, its server preloading torch, the node and this bench."""
    forked.context("bench.fsdp", "trainer.round.sharded")
    return "forkserver"


class _Recorder:
    """The leaders' averager, keeping the mean it returned."""

    def __init__(self, inner: GroupAverager) -> None:
        self.inner = inner
        self.world_size = inner.world_size
        self.mean: torch.Tensor | None = None

    def average(self, flat: Any, fmt: str, weight: int | None = None, check: Any = None) -> Any:
        mean, sent = self.inner.average(flat, fmt, weight=weight, check=check)
        self.mean = mean.clone()
        return mean, sent


def train_nodes(where: LocalRank, spec: Spec, out: str) -> None:
    """One process of a run: ``spec.rounds`` rounds; the leaders write what they did."""
    from datetime import timedelta

    settings = spec.settings()
    model = spec.model()
    node = ShardedDiLoCo(model, OuterState.from_model(model), where.group)
    averager = None
    if where.leaders is not None:
        averager = _Recorder(GroupAverager(where.leaders, timedelta(seconds=120)))
    for rnd in range(1, spec.rounds + 1):
        kept: list[tuple[int, dict[str, torch.Tensor]]] = []

        def keep(b: Boundary, state: dict[str, torch.Tensor], kept: list[Any] = kept) -> None:
            kept.append((b.step, state))  # the boundary states the ledger may ask for

        local = node.train_local(spec.rows(where.node, rnd), settings, keep=keep)
        outcome = node.finish_round(local, averager, settings)
        ckpt = node.checkpoint(rnd)
        if ckpt is None or averager is None or local.packet is None:
            continue
        torch.save({
            "packet": asdict_packet(local.packet),
            "pseudo_gradient": local.pseudo_gradient,
            "mean": averager.mean,
            "checkpoint": ckpt.to_bytes(),
            "result_hash": outcome.result_hash,
            "base_hash": local.base_hash,
            "trace_root": local.trace_root,
            "boundaries": [bytes(b.state_hash) for b in local.trace.boundaries]
            if local.trace is not None else [],
            "tokens": local.inner.tokens,
            "states": kept,
            "world": outcome.world_size,
        },
            Path(out) / f"node{where.node}_round{rnd}.pt")  # fmt: skip


def asdict_packet(p: Packet) -> dict[str, Any]:
    return {"fmt": str(p.fmt), "payload": p.payload, "scales": p.scales}


def _opt_of(trainer: InnerTrainer) -> Callable[[], torch.optim.Optimizer | None]:
    """The trainer's optimizer as it is at each call (``InnerTrainer.optimizer()`` would make a
    fresh one)."""
    return lambda: trainer._opt


def segment_audit(spec: Spec, rec: dict[str, Any], rows: torch.Tensor) -> float:
    """The ledger's segment audit of every segment of a sharded node's round: each served
    boundary state must hash to its committed leaf, and the replay of the segment from it must
    land within reference.segment's error of the next one. Returns the largest error (inf when a
    served state does not match its commitment)."""
    settings = spec.settings()
    states: list[tuple[int, dict[str, torch.Tensor]]] = rec["states"]
    if [bytes(state_hash(s)) for _, s in states] != rec["boundaries"]:
        return math.inf
    worst = 0.0
    for (first, served), (last, end) in itertools.pairwise(states):
        start = served
        if STEP not in served:  # the round's start: a fresh AdamW's state
            start = fresh_state({k.removeprefix(WEIGHTS): v for k, v in served.items()})
        cfg = replace(settings.inner, steps=last - first)
        part = segment_rows(rows, first, last - first, settings.inner.batch_size)
        # the lr schedule's step: the state's own count (a carried one counts across rounds),
        # as the ledger's audit_span reads it
        replayed = replay_segment(start, part, cfg, GPTConfig.preset(spec.preset),
                                  first_step=int(float(start[STEP])), threads=1)  # fmt: skip
        worst = max(worst, segment_error(end, replayed, start).value)
    return worst


def trace_start(node: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> tuple[bool, float]:
    """Boundary 0 of a sharded node's round against a single-process node's: whether the
    weights (the round's base) and AdamW's step are the same bits under the same names, and the
    error of the AdamW moments it carried into the round, in the segment audit's own metric
    (``reference.segment.segment_error``'s moment parts, ``ref`` as the replayed end and the
    start, so any weight difference reads infinite); 0.0 when neither carries any: a fresh
    state, whose boundary hashes the same. The moments are statistics of the gradients, which a
    node of several ranks sums in another order: a one-rank node's up to the inner tolerance,
    like its weights after a step, not bit for bit (so from the second carried round on the
    boundary's hash is not a one-rank node's)."""
    if set(node) != set(ref):
        return False, math.inf
    if STEP not in ref:  # a fresh state: its weights only
        return all(torch.equal(node[k], ref[k]) for k in ref), 0.0
    err = segment_error(node, ref, ref)
    return err.weights == 0.0 and not err.reason, max(err.exp_avg, err.exp_avg_sq)


def check_run(spec: Spec, sizes: list[int], out: Path) -> dict[str, Any]:
    """Replay the run single-process from its records; what matched. Each replayed node runs
    the spec's inner mode: with the carried state, one trainer per node kept across the rounds
    (its moments the node's within the inner tolerance: ``inner_rel_err`` covers them)."""
    settings = spec.settings()
    model = spec.model()
    state = OuterState.from_model(model)
    layout = state.layout
    outer_equal = packets_equal = same_base = trace_same = True
    audit = 0.0
    worst = 0.0
    refs = [spec.model() for _ in sizes]  # the single-process nodes, each with its trainer
    trainers = [InnerTrainer(m, settings.inner, keep_state=spec.carried) for m in refs]
    for rnd in range(1, spec.rounds + 1):
        recs = [torch.load(out / f"node{n}_round{rnd}.pt") for n in range(len(sizes))]
        base = state.base.clone()
        for n, rec in enumerate(recs):
            flat_local = base - rec["pseudo_gradient"]
            ref = encode(base, flat_local, spec.fmt)
            packets_equal &= torch.equal(ref.payload, rec["packet"]["payload"])
            ref_model, trainer = refs[n], trainers[n]
            with torch.no_grad():
                OuterState(layout, base).load_into(ref_model)
            starts: list[dict[str, torch.Tensor]] = []

            def start(b: Boundary, s: dict[str, torch.Tensor], starts: list[Any] = starts) -> None:
                starts.append(s)

            builder = TraceBuilder(ref_model, layout.unflatten(base), optimizer=_opt_of(trainer),
                                   keep=start)  # fmt: skip
            trainer.train(spec.rows(n, rnd), on_boundary=builder,
                          trace_interval=settings.trace_interval)  # fmt: skip
            # the start state's weights are the same bits (a fresh state's boundary hashes the
            # same); the later boundaries and the carried moments differ within the inner
            # tolerance (the batch split changes fp32 sums)
            ref_trace = [bytes(b.state_hash) for b in builder.trace().boundaries]
            trace_same &= len(ref_trace) == len(rec["boundaries"])
            same, moments = trace_start(rec["states"][0][1], starts[0])
            trace_same &= same and (moments > 0.0 or ref_trace[0] == rec["boundaries"][0])
            worst = max(worst, moments)
            audit = max(audit, segment_audit(spec, rec, spec.rows(n, rnd)))
            ref_local = layout.flatten(dict(ref_model.named_parameters()))
            err = float((ref_local - flat_local).norm() / ref_local.norm())
            worst = max(worst, err)
            same_base &= rec["world"] == len(sizes) and rec["tokens"] == spec.steps * spec.batch \
                * GPTConfig.preset(spec.preset).seq_len  # fmt: skip
        state.step(recs[0]["mean"], settings.outer)
        want = RoundCheckpoint.of(state, rnd).to_bytes()
        for rec in recs:
            outer_equal &= rec["checkpoint"] == want
            same_base &= rec["result_hash"] == recs[0]["result_hash"]
            same_base &= torch.equal(rec["mean"], recs[0]["mean"])
    return {"outer_equal": outer_equal, "packets_equal": packets_equal, "same_base": same_base,
            "trace_same": trace_same, "inner_rel_err": worst,
            "segment_error": audit, "segments_pass": audit <= SEGMENT_TOLERANCE}  # fmt: skip


def run_nodes(spec: Spec, sizes: list[int]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="coloco-fsdp-") as tmp:
        spawn_nodes(train_nodes, sizes, spec, tmp, start_method=_forked())
        return check_run(spec, sizes, Path(tmp))


def _rss() -> int:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    import resource

    return pages * resource.getpagesize()


def host_bytes(where: LocalRank, spec: Spec, out: str, bf16: bool) -> None:
    """RSS after the outer state and one round, minus RSS with the model trained alone."""
    from torch.distributed.device_mesh import DeviceMesh

    settings = spec.settings()
    model = spec.model()
    layout = FlatLayout.of(model)
    shard_model(model, DeviceMesh.from_group(where.group, "cpu"))
    probe = ShardedDiLoCo.__new__(ShardedDiLoCo)  # the gather helpers, before any outer state
    world = torch.distributed.get_world_size(where.group)
    rank = torch.distributed.get_rank(where.group)
    probe.model, probe.layout, probe.world, probe.rank = model, layout, world, rank
    rows = spec.rows(where.node, 0)
    per = InnerConfig.protocol(spec.steps, spec.lr, spec.batch // world, carried=False)
    warm = InnerTrainer(model, per)  # the model's own: its gradients and one AdamW state
    warm.train(local_rows(rows, spec.batch, spec.steps, rank, world))
    gc.collect()
    before = _rss()
    state = OuterState(layout, probe.flat_params())
    node = ShardedDiLoCo(model, state, where.group, presharded=True, bf16_momentum=bf16)
    del state
    gc.collect()
    local = node.train_local(rows, settings)
    node.finish_round(local, _Solo(), settings)
    del local
    node.inner = None  # the round's AdamW state: the model's own, counted once (in ``warm``)
    gc.collect()
    after = _rss()
    del warm
    found = {"delta": after - before, "numel": layout.numel, "outer": node.outer.nbytes()}
    (Path(out) / f"rss{rank}.json").write_text(json.dumps(found))


class _Solo:
    world_size = 1

    def average(self, flat: Any, fmt: str, weight: int | None = None, check: Any = None) -> Any:
        from trainer.network.comm import SoloAverager

        return SoloAverager().average(flat, fmt)


def measure_host_bytes(spec: Spec, ranks: int = 2) -> dict[str, float]:
    """``host_bytes_per_param`` (fp32 momentum) and ``host_bytes_per_param_bf16``."""
    out: dict[str, float] = {}
    for bf16, key in ((False, "host_bytes_per_param"), (True, "host_bytes_per_param_bf16")):
        with tempfile.TemporaryDirectory(prefix="coloco-fsdp-") as tmp:
            spawn_nodes(host_bytes, [ranks], spec, tmp, bf16, start_method=_forked())
            recs = [json.loads((Path(tmp) / f"rss{r}.json").read_text()) for r in range(ranks)]
        numel = recs[0]["numel"]
        out[key] = round(sum(r["delta"] for r in recs) / numel, 2)
        out[key.replace("host", "outer")] = round(sum(r["outer"] for r in recs) / numel, 2)
    return out


def speed(where: LocalRank, spec: Spec, out: str, profile: bool = False) -> None:
    """Inner tokens/s of one node (every rank times the same steps after one warm-up step);
    ``profile``: the timed steps under torch's profiler, the ops taking most of this rank's own
    CPU time written beside (``--profile``)."""
    from torch.distributed.device_mesh import DeviceMesh

    model = spec.model()
    world = torch.distributed.get_world_size(where.group)
    if world > 1:
        shard_model(model, DeviceMesh.from_group(where.group, "cpu"), reshard=RESHARD)
    rank = torch.distributed.get_rank(where.group)
    rows = local_rows(spec.rows(0, 0), spec.batch, spec.steps, rank, world)
    per = InnerConfig.protocol(spec.steps, spec.lr, spec.batch // world, carried=False)
    trainer = InnerTrainer(model, per)
    warm = InnerConfig.protocol(1, spec.lr, spec.batch // world, carried=False)
    InnerTrainer(model, warm).train(rows)
    torch.distributed.barrier(where.group)
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    with prof if profile else contextlib.nullcontext():
        start, cpu = time.perf_counter(), time.process_time()
        trainer.train(rows)
        seconds, cpu_s = time.perf_counter() - start, time.process_time() - cpu
    tokens = spec.steps * spec.batch * GPTConfig.preset(spec.preset).seq_len
    found: dict[str, Any] = {"tokens_per_s": tokens / seconds, "tokens": tokens, "cpu_s": cpu_s,
                             "seconds": seconds}  # fmt: skip
    if profile:
        ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:15]
        found["ops_self_cpu_s"] = {e.key: round(e.self_cpu_time_total / 1e6, 3) for e in ops}
    (Path(out) / f"speed{world}_{rank}.json").write_text(json.dumps(found))


def measure_speedup(spec: Spec, profile: bool = False) -> dict[str, Any]:
    """Wall-clock tokens/s of a 2-rank node over a 1-rank node, and the same ratio per CPU
    second (``two_rank_cpu_efficiency``: 1.0 when sharding costs no compute; what a 2-rank node
    gains on two idle cores is about twice it, the wall-clock figure depends on the other load)."""
    wall, per_cpu, profiles = {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="coloco-fsdp-") as tmp:
        for ranks in (1, 2):
            spawn_nodes(speed, [ranks], spec, tmp, profile, start_method=_forked())
            recs = [json.loads((Path(tmp) / f"speed{ranks}_{r}.json").read_text())
                    for r in range(ranks)]  # fmt: skip
            wall[ranks] = min(r["tokens_per_s"] for r in recs)
            per_cpu[ranks] = recs[0]["tokens"] / sum(r["cpu_s"] for r in recs)
            profiles[f"{ranks}_ranks"] = [{k: r[k] for k in ("seconds", "cpu_s", "ops_self_cpu_s")
                                           if k in r} for r in recs]  # fmt: skip
    found: dict[str, Any] = {
        "tokens_per_s_1": round(wall[1], 1), "tokens_per_s_2": round(wall[2], 1),
        "two_rank_speedup": round(wall[2] / wall[1], 3),
        "two_rank_cpu_efficiency": round(per_cpu[2] / per_cpu[1], 3),
    }  # fmt: skip
    if profile:
        found["profile"] = profiles
    return found


def bf16_momentum_loss(rounds: int, steps: int, nodes: int = 2, seed: int = 0) -> dict[str, float]:
    """Simulated DiLoCo (``nodes`` workers, real corpus): validation loss with bf16 outer
    momentum over the loss with fp32 momentum, the same inner steps otherwise."""
    from reference.data import Corpus

    corpus = Corpus.stdlib()
    cfg = GPTConfig.preset("tiny")
    val = corpus.eval_rows(cfg.seq_len, 256, seed=1234)
    inner = InnerConfig.protocol(steps, 3e-3, 8, carried=False)
    losses = {}
    for bf16 in (False, True):
        model = GPT(cfg, seed=seed)
        full = OuterState.from_model(model)
        outer = ShardOuterState.of(full, 0, 1, bf16_momentum=bf16)
        for rnd in range(rounds):
            total = torch.zeros_like(outer.base)
            for k in range(nodes):
                OuterState(full.layout, outer.base).load_into(model)
                rows = corpus.random_rows(cfg.seq_len, steps * 8, seed=100 * rnd + k)
                InnerTrainer(model, inner, keep_state=False).train(rows)
                total += outer.base - full.layout.flatten(dict(model.named_parameters()))
            outer.step(total / nodes, OuterConfig())
        OuterState(full.layout, outer.base).load_into(model)
        losses[bf16] = evaluate(model, val)
    return {"loss_fp32_momentum": round(losses[False], 5),
            "loss_bf16_momentum": round(losses[True], 5),
            "bf16_momentum_loss_ratio": round(losses[True] / losses[False], 5)}  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small shapes (minutes on 2 cores)")
    ap.add_argument("--nodes", help="one run only: the nodes' local rank counts, e.g. 1,2,4")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the --nodes run")
    ap.add_argument(
        "--speed",
        action="store_true",
        help="only two_rank_speedup (the small preset, 1 rank then 2)",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="with --speed: each rank's top ops by its own CPU time",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    if args.nodes:
        try:
            sizes = [int(n) for n in args.nodes.split(",")]
        except ValueError:
            ap.error(
                f"--nodes {args.nodes!r}: give local rank counts separated by commas, e.g. 1,2,4"
            )
        found = run_nodes(Spec(rounds=args.rounds), sizes)
        found["ok"] = all(found[k] for k in EXACT) and found["inner_rel_err"] <= INNER_TOLERANCE
        found["seconds"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(found))
        return found
    speed_spec = Spec(preset="small", steps=3 if args.quick else 8, batch=8)
    if args.speed:
        found = measure_speedup(speed_spec, profile=args.profile)
        found["seconds"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(found))
        return found
    spec = Spec()
    exact = run_nodes(spec, [2, 2])
    hetero = run_nodes(spec, [1, 2, 4])
    out: dict[str, Any] = {
        "exact_equal": all(exact[k] for k in EXACT) and exact["inner_rel_err"] <= INNER_TOLERANCE,
        "inner_rel_err": exact["inner_rel_err"],
        "segment_error": max(exact["segment_error"], hetero["segment_error"]),
        "heterogeneous_ok": all(hetero[k] for k in EXACT)
        and hetero["inner_rel_err"] <= INNER_TOLERANCE,
        "heterogeneous_inner_rel_err": hetero["inner_rel_err"],
    }
    out |= measure_host_bytes(Spec(preset="cpu10m", rounds=1, steps=2, batch=4))
    out |= bf16_momentum_loss(rounds=6 if args.quick else 20, steps=10 if args.quick else 25)
    out |= measure_speedup(speed_spec)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
