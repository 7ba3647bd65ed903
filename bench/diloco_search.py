"""A small search over bench.diloco's settings, on the validation half only.

    python -m bench.diloco_search [--seeds 0,1,2] [--jobs 2] [--preset cpu10m] [--corpus code]
        ARM [ARM ...]

Each ARM is ``kind`` or ``kind:key=value,key=value`` with ``kind`` one of bench.diloco's task
kinds (fp32, int8, sparse, carried, sparse_carried) and keys from :data:`KEYS` (for example
``carried:outer_lr=0.7,carried_eps=1e-5`` or ``sparse_carried:sparse_outer_lr=1.5``). The
``topk``/``topk_carried`` kinds run bench.sparse_bits' diagnostic top-k wire (keys of
:data:`TOPK_KEYS`: ``topk_carried:chunk=1024,value_bits=1,coding=enum,fit=1000`` keeps the
largest k whose packets are 1,000x fewer bytes than synchronous training at this H). The
``inner_opt=muon`` key runs an arm's inner steps with bench.muon's Muon (``muon_lr``, 0: the
AdamW part's lr; ``muon_momentum``); the ``sync`` kind is the baseline itself as an arm
(``sync:inner_opt=muon,sync_lr=6e-3``: a Muon baseline, its ratio over the AdamW one). Every arm
runs on every seed beside the synchronous baseline at ``--sync-lr`` (bench.diloco's tuned 6e-3),
all on the validation half (``Task(..., "val", ...)``) of ``--corpus`` with the ``--preset``
model (bench.diloco --quick's tiny by default): nothing here reads the test half, so
the settings it picks are not tuned on the reported loss. Each arm's line gives its validation
losses, its ratios over the baseline (mean and sd) and, for the sparse kinds, its packet bytes
(``sparse_wire_bytes``, the codec's own size function). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace

import torch

from bench import diloco, emit
from bench.diloco import CARRIED, Setup, Task, _mean_sd
from bench.muon import INNER_OPTS
from bench.sparse_bits import TopkCodec, TopkSpec, fit_k
from reference.codec.sparse import SparseSpec, sparse_wire_bytes
from reference.model import GPT, PRESETS, GPTConfig
from reference.outer import OuterConfig
from trainer.network.comm import wire_bytes
from trainer.round.runconfig import INNER_LR, INNER_STEPS, OUTER_LR, OUTER_MOMENTUM

log = logging.getLogger("bench.diloco_search")
KINDS = ("fp32", "int8", "sparse", *CARRIED, "mask", "mask_carried", "topk", "topk_carried",
         "sync")  # fmt: skip
Wire = int | TopkSpec  # an arm's diagnostic wire: a mask period (0: none) or a top-k shape


@dataclass
class MaskCodec:
    """A diagnostic wire format, not the codec's: every node keeps the same rotating share of
    the values (position p in round r when ``(p + r) % period == 0``), so no offsets travel and
    the K packets of a round cover the same positions (no dilution in the mean); values at the
    codec's quantizer (per chunk of ``spec.chunk``: ``bits`` bits, step amax / (L - 0.5), codes
    ``floor(x / step) + L``; with ``rms`` the step is the kept values' RMS, near the 2-bit
    Lloyd-Max quantizer of a Gaussian), with the same error feedback. Bytes: the codes plus one
    fp32 step a chunk. Patched into bench.diloco's sparse path for ``mask`` arms (a search,
    never the node)."""

    period: int
    workers: int
    rms: bool = False
    calls: int = 0

    def compress(
        self, update: torch.Tensor, residual: torch.Tensor | None, spec: SparseSpec, beta: float
    ) -> tuple[MaskPacket, torch.Tensor]:
        rnd = self.calls // self.workers
        self.calls += 1
        acc = update.detach().float().reshape(-1).clone()
        if residual is not None:
            acc = residual * beta + acc
        n, c = acc.numel(), spec.chunk
        chunks = -(-n // c)
        rows = torch.zeros(chunks * c)
        rows[:n] = acc
        rows = rows.view(chunks, c)
        pos = torch.arange(chunks * c).view(chunks, c)
        keep = ((pos + rnd) % self.period == 0) & (pos < n)
        kept = torch.where(keep, rows, torch.zeros_like(rows))
        levels = 1 << (spec.bits - 1)
        if self.rms:  # step = the kept values' RMS: at 2 bits, levels +-0.5 and +-1.5 RMS
            count = keep.sum(dim=1).clamp(min=1)
            step = (kept.square().sum(dim=1) / count).sqrt()
        else:
            step = kept.abs().amax(dim=1) / (levels - 0.5)
        div = torch.where(step > 0, step, torch.ones_like(step))[:, None]
        q = (torch.floor(rows / div) + levels).clamp(0, 2 * levels - 1)
        dec = torch.where(keep & (step[:, None] > 0), (q - levels + 0.5) * step[:, None], 0.0)
        sent = dec.view(-1)[:n].clone()
        nbytes = -(-int(keep.sum()) * spec.bits // 8) + 4 * chunks
        return MaskPacket(sent, nbytes), acc - sent

    @staticmethod
    def average(packets: list[MaskPacket]) -> torch.Tensor:
        return torch.stack([p.values for p in packets]).mean(dim=0)


@dataclass
class MaskPacket:
    values: torch.Tensor
    nbytes: int


def run_arm(task: Task, wire: Wire = 0) -> tuple[float, int, list[float]]:
    """bench.diloco.run_task, with a ``mask`` arm's codec (``wire`` its period, negative: the
    RMS step) or a ``topk`` arm's (``wire`` its shape) patched into its sparse path."""
    codec: MaskCodec | TopkCodec
    if isinstance(wire, TopkSpec) and task.kind.startswith("topk"):
        codec = TopkCodec(wire)
    elif isinstance(wire, int) and task.kind.startswith("mask"):
        codec = MaskCodec(abs(wire), task.setup.workers, rms=wire < 0)
    else:
        return diloco.run_task(task)
    saved = [getattr(diloco, name) for name in SPARSE_PATH]
    for name, fn in zip(SPARSE_PATH, (codec.compress, codec.average), strict=True):
        setattr(diloco, name, fn)
    try:
        kind = "sparse_carried" if task.kind.endswith("_carried") else "sparse"
        return diloco.run_task(replace(task, kind=kind))
    finally:
        for name, fn in zip(SPARSE_PATH, saved, strict=True):
            setattr(diloco, name, fn)


SPARSE_PATH = ("compress", "average_sparse")  # what bench.diloco's sparse path calls


def _pair(v: str) -> tuple[float, float]:
    a, b = v.split("/")
    return float(a), float(b)


KEYS: dict[str, Callable[[Setup, str], Setup]] = {
    "outer_lr": lambda s, v: replace(s, outer=replace(s.outer, lr=float(v))),
    "outer_momentum": lambda s, v: replace(s, outer=replace(s.outer, momentum=float(v))),
    "inner_lr": lambda s, v: replace(s, inner_lr=float(v)),
    "betas": lambda s, v: replace(s, betas=_pair(v)),
    "eps": lambda s, v: replace(s, eps=float(v)),
    "warmup": lambda s, v: replace(s, warmup=int(v)),
    "grad_clip": lambda s, v: replace(s, grad_clip=float(v)),
    "run_decay": lambda s, v: replace(s, run_decay=float(v)),
    "outer_decay": lambda s, v: replace(s, outer_decay=float(v)),
    "carried_betas": lambda s, v: replace(s, carried_betas=_pair(v)),
    "carried_eps": lambda s, v: replace(s, carried_eps=float(v)),
    "carried_warmup": lambda s, v: replace(s, carried_warmup=int(v)),
    "sparse_chunk": lambda s, v: replace(s, sparse=replace(s.sparse, chunk=int(v))),
    "sparse_k": lambda s, v: replace(s, sparse=replace(s.sparse, k=int(v))),
    "sparse_bits": lambda s, v: replace(s, sparse=replace(s.sparse, bits=int(v))),
    "sparse_beta": lambda s, v: replace(s, sparse_beta=float(v)),
    "sparse_outer_lr": lambda s, v: replace(s, sparse_outer=replace(s.sparse_outer, lr=float(v))),
    "inner_opt": lambda s, v: replace(s, inner_opt=v),
    "muon_lr": lambda s, v: replace(s, muon_lr=float(v)),
    "muon_momentum": lambda s, v: replace(s, muon_momentum=float(v)),
    "sync_lr": lambda s, v: replace(s, sync_lr=float(v)),
    "mask_period": lambda s, v: s,  # mask arms: read by parse_arm
    "mask_rms": lambda s, v: s,
    "sparse_outer_momentum": lambda s, v: replace(
        s, sparse_outer=replace(s.sparse_outer, momentum=float(v))
    ),
}


TOPK_KEYS = ("chunk", "k", "value_bits", "coding", "scale_bits", "mean", "fit")  # topk arms only


def parse_arm(text: str, base: Setup) -> tuple[str, Setup, Wire]:
    """(kind, setup, wire) of one ``kind:key=value,...`` argument (wire: a mask arm's period, a
    topk arm's shape, else 0); a clear error for a bad one."""
    kind, _, rest = text.partition(":")
    if kind not in KINDS:
        raise SystemExit(f"arm {text!r}: kind must be one of {', '.join(KINDS)}")
    s, period, rms = base, 0, False
    topk: dict[str, str] = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if eq and key in TOPK_KEYS and kind.startswith("topk"):
            topk[key] = value
            continue
        if not eq or key not in KEYS:
            raise SystemExit(
                f"arm {text!r}: {item!r} is not key=value with a key of {sorted(KEYS)} "
                f"(topk arms also {list(TOPK_KEYS)})"
            )
        s = KEYS[key](s, value)
        period = int(value) if key == "mask_period" else period
        rms = rms or (key == "mask_rms" and value == "1")
    if s.inner_opt not in INNER_OPTS:
        raise SystemExit(f"arm {text!r}: inner_opt must be one of {', '.join(INNER_OPTS)}")
    if kind.startswith("sparse"):
        SparseSpec(s.sparse.chunk, s.sparse.k, s.sparse.bits)  # refuses a bad shape now
    if kind.startswith("mask") and period < 1:
        raise SystemExit(f"arm {text!r}: a mask arm needs mask_period=N (N >= 1)")
    if kind.startswith("topk"):
        return kind, s, topk_spec(topk, s)
    return kind, s, -period if rms else period


def topk_spec(keys: dict[str, str], s: Setup) -> TopkSpec:
    """A topk arm's shape; ``fit=R``: the largest k at R x fewer bytes than sync at the arm's H."""
    spec = TopkSpec(
        chunk=int(keys.get("chunk", 256)), k=int(keys.get("k", 16)),
        value_bits=int(keys.get("value_bits", 2)), coding=keys.get("coding", "fixed"),
        scale_bits=int(keys.get("scale_bits", 32)), mean=keys.get("mean", "all"),
    )  # fmt: skip
    if "fit" in keys:
        numel = GPT(s.model).num_params()
        spec = fit_k(spec, numel, s.inner_steps, s.workers, float(keys["fit"]))
    return spec


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("arms", nargs="+", help="kind or kind:key=value,... (see the module doc)")
    p.add_argument("--seeds", type=lambda v: [int(x) for x in v.split(",")], default=[0],
                   help="comma-separated, e.g. 0,1,2")  # fmt: skip
    p.add_argument("--rounds", type=int, default=16, help="bench.diloco --quick's 16")
    p.add_argument("--inner-steps", type=int, default=INNER_STEPS, help="H, both arms")
    p.add_argument("--sync-lr", type=float, default=6e-3, help="bench.diloco's tuned lr")
    p.add_argument("--sync-losses", type=lambda v: [float(x) for x in v.split(",")],
                   help="the baseline's validation losses per seed from an earlier run "
                   "(skips its runs), e.g. 1.7540")  # fmt: skip
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument(
        "--preset",
        default="tiny",
        choices=sorted(PRESETS),
        help="the model (bench.diloco --quick's tiny; the node's governed cpu10m)",
    )
    p.add_argument(
        "--corpus",
        default="stdlib",
        choices=("stdlib", "code"),
        help="stdlib (the default corpus) or code (OpenZeppelin's Solidity)",
    )
    return p


def plan(
    args: argparse.Namespace,
) -> tuple[Setup, list[tuple[str, Setup, Wire]], list[tuple[Task, Wire]]]:
    """The baseline's setup, the arms parsed from it, and the tasks to run (each arm on each
    seed, after the baseline's runs unless ``--sync-losses`` gives them), all on the validation
    half of ``--corpus`` with the ``--preset`` model."""
    base = Setup(
        model=GPTConfig.preset(args.preset), workers=4, rounds=args.rounds,
        inner_steps=args.inner_steps, batch=8, inner_lr=INNER_LR,
        outer=OuterConfig(lr=OUTER_LR, momentum=OUTER_MOMENTUM),
        eval_rows=256, warm_start=200, sync_lr=args.sync_lr,
    )  # fmt: skip
    arms = [parse_arm(a, base) for a in args.arms]
    known = args.sync_losses
    if known is not None and len(known) != len(args.seeds):
        raise SystemExit(f"--sync-losses needs one loss per seed {args.seeds}, got {known}")
    tasks: list[tuple[Task, Wire]] = []
    if known is None:
        tasks += [(Task("sync", args.corpus, "val", replace(base, seed=k)), 0) for k in args.seeds]
    for kind, s, wire in arms:
        tasks += [(Task(kind, args.corpus, "val", replace(s, seed=k)), wire) for k in args.seeds]
    return base, arms, tasks


def main() -> None:
    args = parser().parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    base, arms, tasks = plan(args)
    known = args.sync_losses
    t0 = time.perf_counter()
    if args.jobs > 1:
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(args.jobs, mp_context=ctx) as ex:
            out = list(ex.map(run_arm, *zip(*tasks, strict=True)))
    else:
        out = [run_arm(t, period) for t, period in tasks]
    if known is not None:  # the baseline's losses as given; its bytes are the model's
        sync_sent = (
            base.inner_steps
            * args.rounds
            * wire_bytes(GPT(base.model).num_params(), "fp32", base.workers)
        )
        out = [(x, sync_sent, []) for x in known] + out
    results = [loss for loss, _, _ in out]
    sent = [b for _, b, _ in out]
    n = len(args.seeds)
    sync = results[:n]
    numel = GPT(base.model).num_params()
    rows: list[dict[str, object]] = []
    for i, (text, (kind, s, wire)) in enumerate(zip(args.arms, arms, strict=True)):
        losses = results[n * (i + 1) : n * (i + 2)]
        bytes_per_round = sent[n * (i + 1)] // args.rounds
        mean, sd = _mean_sd([a / b for a, b in zip(losses, sync, strict=True)])
        row: dict[str, object] = {"arm": text, "val_losses": [round(x, 4) for x in losses],
                                  "ratio_mean": mean, "ratio_sd": sd}  # fmt: skip
        if kind.startswith("sparse"):
            row["sparse_packet_bytes"] = sparse_wire_bytes(numel, s.sparse)
        if isinstance(wire, TopkSpec) and kind.startswith("topk"):
            row["topk"] = asdict(wire) | {"density": round(wire.k / wire.chunk, 5)}
            packet = bytes_per_round / (s.workers - 1)  # measured: rice sizes vary
            row["packet_bytes"] = round(packet, 1)
            row["bits_per_param"] = round(8 * packet / numel, 4)
        row["bytes_per_round_per_rank"] = bytes_per_round
        row["bytes_ratio_vs_sync"] = round(sent[0] / args.rounds / bytes_per_round, 1)
        log.info("%s", row)
        rows.append(row)
    emit("diloco_search", {
        "split": "val", "preset": args.preset, "corpus": args.corpus, "seeds": args.seeds,
        "rounds": args.rounds,
        "inner_steps": args.inner_steps, "sync_lr": args.sync_lr,
        "sync_val_losses": [round(x, 4) for x in sync], "arms": rows,
        "sync_bytes_per_round_per_rank": sent[0] // args.rounds,
        "wall_s": round(time.perf_counter() - t0, 1),
    })  # fmt: skip


if __name__ == "__main__":
    main()
