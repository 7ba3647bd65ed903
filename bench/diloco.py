"""DiLoCo vs fully synchronous data parallel on the tiny model and the default corpus.

    python -m bench.diloco [--quick] [--rounds R] [--inner-steps H] [--workers K]

Both runs see the same tokens and do the same compute: DiLoCo's K workers each run H AdamW steps
of B rows per round on their own shard; the synchronous baseline runs H steps per round with one
AdamW over the union of those K batches (K*B rows per step), all-reducing gradients every step.
As in the DiLoCo paper, both continue from the same warm model (``--warm-start`` synchronous
steps on other data, default 200, not counted in either run's tokens or bytes); from a cold
genesis DiLoCo's first rounds are far behind (measured: loss ratio 1.12-1.21 at 8-16 rounds).
Defaults (the best of those tried on the validation half, docs/trainer.md "Benchmark"): DiLoCo's
inner AdamW lr 3e-3, outer Nesterov lr 0.9 and momentum 0.9 (trainer.round.runconfig's governed
defaults), H 50, K 4, B 8 rows of 64 bytes. Each worker runs the node's inner mode
(``reference.inner.CARRY_STATE``, True: each worker keeps its AdamW across rounds, the paper's
setting, with reference.inner's CARRIED_* betas (0.8, 0.95), eps 1e-4 and once-per-state warmup,
none); ``--no-keep-inner-state`` measures the fresh AdamW of every round instead (betas (0.7,
0.95), eps 1e-4 and no warmup: DEFAULT_BETAS, DEFAULT_EPS, DEFAULT_WARMUP_STEPS; ``--betas`` and
``--warmup`` set them for that mode only).
The baseline's AdamW runs the same betas, eps, clip and weight decay (shared settings), with its
lr tuned on the validation half; the warm start keeps (0.9, 0.95), eps 1e-8 and no warmup.
The workers are simulated in one process (the same math as the multi-process path, which
tests/trainer/test_diloco_distributed.py runs over real gloo processes); the JSON says so.

The sparse arm (``--skip-sparse`` leaves it out) runs the same DiLoCo with the sparse wire format
of reference.codec.sparse: each worker sends the top k of every chunk of (pseudo-gradient +
its error-feedback residual) at low bits and carries the rest to its next round; the packets are
averaged as every node would after the checked all-gather (``sparse_*`` keys: loss ratios on
both corpora, its settings, and its bytes beside int8's).

The carried arms (``--skip-carried`` leaves them out; run only when the main arms are fresh,
``--no-keep-inner-state``) run DiLoCo with each worker's AdamW kept across rounds
(``Setup.carried``) on the int8 wire (``carried_*`` keys) and on the sparse format
(``sparse_carried_*``), beside the fresh arms of the same run against the same baseline.

Bytes are what one rank puts on the wire: a ring all-reduce of fp32 sends 2(K-1)/K * 4 bytes per
value; a quantized round sends what trainer.network.comm.wire_bytes says for the format.
The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import logging
import math
import multiprocessing
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from bench import emit
from bench.muon import MUON_MOMENTUM, MuonConfig, inner_trainer
from reference.codec.sparse import (
    SparsePacket,
    SparseSpec,
    average_sparse,
    compress,
    sparse_wire_bytes,
)
from reference.data import Corpus, DataSource, ShardSpec
from reference.inner import (
    CARRIED_BETAS,
    CARRIED_EPS,
    CARRIED_WARMUP_STEPS,
    CARRY_STATE,
    DEFAULT_BETAS,
    DEFAULT_EPS,
    DEFAULT_WARMUP_STEPS,
    InnerConfig,
    InnerTrainer,
    StepInfo,
)
from reference.mean import simulate_average
from reference.model import GPT, GPTConfig, evaluate
from reference.outer import OuterConfig, OuterState
from trainer.network.comm import packet_bytes, wire_bytes
from trainer.round.runconfig import INNER_LR, INNER_STEPS, OUTER_LR, OUTER_MOMENTUM

log = logging.getLogger("bench.diloco")
RUN_ID = bytes.fromhex("c0" * 32)
WARM_LR = 3e-3  # the warm start is the same whatever lrs the two runs then use
WARM_BETAS = (0.9, 0.95)
WARM_EPS = 1e-8
# The sparse path's settings: the best of those tried on the validation half (docs/codec.md,
# "Loss: tuning the sparse path"): 6.25 % of each 256 values at 2 bits, 10.8x under int8's packet
SPARSE_SHAPE = SparseSpec(chunk=256, k=16, bits=2)
SPARSE_BETA = 0.95
SPARSE_OUTER_LR = 2.0
SPARSE_OUTER_MOMENTUM = 0.0


@dataclass(frozen=True)
class Setup:
    model: GPTConfig
    workers: int
    rounds: int
    inner_steps: int
    batch: int
    inner_lr: float
    outer: OuterConfig
    eval_rows: int
    seed: int = 0
    warmup: int = DEFAULT_WARMUP_STEPS  # DiLoCo's per-round warmup, as the node runs
    cosine: bool = False
    keep_inner_state: bool = False  # False: a fresh AdamW every round, as the node runs
    betas: tuple[float, float] = DEFAULT_BETAS
    eps: float = DEFAULT_EPS  # the node's
    min_lr_ratio: float = 0.1
    warm_start: int = 0
    sync_lr: float = 3e-3
    sync_cosine: bool = False  # the baseline's lr decays over the whole run (cosine to 10 %)
    sync_betas: tuple[float, float] = DEFAULT_BETAS  # the baseline's AdamW runs DiLoCo's betas
    grad_clip: float = 1.0  # both arms' inner clip (InnerConfig's default)
    weight_decay: float = 0.0  # both arms
    sync_eps: float = DEFAULT_EPS  # the baseline's AdamW runs DiLoCo's eps too
    run_decay: float = 1.0  # DiLoCo's inner lr of round r: cosine over the run's rounds to this
    outer_decay: float = 1.0  # DiLoCo's outer lr of round r: cosine over the run's rounds to this
    sparse: SparseSpec = SPARSE_SHAPE  # the sparse format's shape (frozen)
    sparse_beta: float = SPARSE_BETA  # its error-feedback decay
    sparse_outer: OuterConfig = field(
        default_factory=lambda: OuterConfig(lr=SPARSE_OUTER_LR, momentum=SPARSE_OUTER_MOMENTUM)
    )
    # the carried arms (carried(): each worker keeps its AdamW across rounds, with the protocol's
    # constants for that mode); the baseline keeps its own settings
    carried_betas: tuple[float, float] = CARRIED_BETAS
    carried_eps: float = CARRIED_EPS
    carried_warmup: int = CARRIED_WARMUP_STEPS
    overlap_steps: int = INNER_STEPS // 10  # the bounded overlap arms' tau (run_diloco)
    # the inner optimizer of the run (DiLoCo's workers, or the baseline's): adamw (the node's) or
    # muon (bench.muon: Muon for the blocks' matrices, AdamW for the rest); muon_lr 0: the AdamW
    # part's lr (inner_lr, or sync_lr for the baseline)
    inner_opt: str = "adamw"
    muon_lr: float = 0.0
    muon_momentum: float = MUON_MOMENTUM

    def muon(self, lr: float) -> MuonConfig:
        """Muon's settings for a run whose AdamW part runs at ``lr``."""
        return MuonConfig(lr_ratio=self.muon_lr / lr if self.muon_lr else 1.0,
                          momentum=self.muon_momentum)  # fmt: skip

    def carried(self) -> Setup:
        """This setup with each DiLoCo worker's AdamW carried across rounds (once-per-state
        warmup, the carried constants), as a node with ``RoundSettings.keep_inner_state`` runs."""
        return replace(self, keep_inner_state=True, betas=self.carried_betas,
                       eps=self.carried_eps, warmup=self.carried_warmup)  # fmt: skip


def run_factor(rnd: int, rounds: int, floor: float) -> float:
    """A cosine from 1 to ``floor`` over the run, at the middle of round ``rnd`` (1-based)."""
    progress = (rnd - 0.5) / rounds
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def run_id_of(seed: int) -> bytes:
    """Each seed draws its own shards (and genesis): seed 0 is the historical RUN_ID."""
    return RUN_ID if seed == 0 else seed.to_bytes(2, "big") * 16


def worker_address(k: int) -> str:
    return "0x" + (k + 1).to_bytes(20, "big").hex()


def shards(corpus: Corpus, s: Setup, rnd: int) -> list[torch.Tensor]:
    n_tokens = s.inner_steps * s.batch * s.model.seq_len
    return [
        corpus.shard_rows(
            ShardSpec.for_node(run_id_of(s.seed), rnd, worker_address(k), n_tokens, (7000, 3000)),
            s.model.seq_len,
        )
        for k in range(s.workers)
    ]


_WARM: dict[tuple[object, ...], dict[str, torch.Tensor]] = {}


def start_model(corpus: Corpus, s: Setup) -> GPT:
    """The shared starting point: genesis, plus ``warm_start`` synchronous steps if asked
    (as in the DiLoCo paper, both methods then continue from the same warm model). Computed once
    per corpus and seed and reused (deterministic: the same bits as recomputing it)."""
    key = (corpus.name, s.seed, s.model, s.warm_start, s.batch, s.workers)
    if key not in _WARM:
        model = GPT(s.model, seed=s.seed)
        if s.warm_start:
            rows = corpus.random_rows(
                s.model.seq_len, s.warm_start * s.batch * s.workers, seed=4242 + s.seed
            )
            cfg = InnerConfig(steps=s.warm_start, lr=WARM_LR, batch_size=s.batch * s.workers,
                              betas=WARM_BETAS, eps=WARM_EPS, warmup_steps=0)  # fmt: skip
            InnerTrainer(model, cfg).train(rows)
        _WARM[key] = {n: t.detach().clone() for n, t in model.state_dict().items()}
    model = GPT(s.model, seed=s.seed)
    model.load_state_dict(_WARM[key])
    return model


def run_sync(corpus: Corpus, s: Setup, eval_rows: torch.Tensor) -> tuple[float, int, list[float]]:
    """One AdamW for the whole run (a trainer that keeps its state and its schedule's step
    count across calls), fed round by round so its eval curve is taken where DiLoCo's is."""
    model = start_model(corpus, s)
    steps = s.inner_steps * s.rounds
    cfg = InnerConfig(
        steps=s.inner_steps,
        lr=s.sync_lr,
        batch_size=s.batch * s.workers,
        betas=s.sync_betas,
        eps=s.sync_eps,
        grad_clip=s.grad_clip,
        weight_decay=s.weight_decay,
        schedule_steps=steps if s.sync_cosine else 0,
    )
    trainer = inner_trainer(model, cfg, s.inner_opt, s.muon(s.sync_lr), keep_state=True)
    curve = []
    for rnd in range(1, s.rounds + 1):
        per_worker = shards(corpus, s, rnd)
        rows = [
            torch.cat([w[step * s.batch : (step + 1) * s.batch] for w in per_worker])
            for step in range(s.inner_steps)
        ]
        trainer.train(torch.cat(rows))
        if rnd % max(1, s.rounds // 5) == 0 or rnd == s.rounds:
            curve.append(round(evaluate(model, eval_rows), 4))
    sent = s.inner_steps * s.rounds * wire_bytes(model.num_params(), "fp32", s.workers)
    return evaluate(model, eval_rows), sent, curve


def run_diloco(
    corpus: Corpus,
    s: Setup,
    eval_rows: torch.Tensor,
    fmt: str,
    *,
    overlap: bool = False,
    overlap_steps: int = 0,
) -> tuple[float, int, list[float]]:
    """``overlap``: the one-round delayed outer step. Round r's average travels during round
    r+1's compute and is applied at the end of round r+1; meanwhile each worker trains round r+1
    from the newest global base plus its own not-yet-averaged progress of round r (an eager
    local update, corrected when the average lands), and its pseudo-gradient is measured from
    that start. The last average is applied after the final round; eval is on the global base.

    ``overlap_steps`` (tau > 0): the bounded overlap. Round r's average travels during the first
    tau inner steps of round r+1, which each worker trains on from its own end of round r; after
    step tau the average has landed, the outer step gives the new base, and the worker moves its
    weights by (new base - its end of round r): those tau steps' progress, rebased. Its
    pseudo-gradient is measured from the new base, as in lockstep (tau = 0)."""
    if overlap and overlap_steps:
        raise ValueError("overlap (one round) and overlap_steps (bounded) exclude each other")
    if not 0 <= overlap_steps <= s.inner_steps:
        raise ValueError(f"overlap_steps {overlap_steps} is outside 0..{s.inner_steps} (H)")
    model = start_model(corpus, s)
    outer = OuterState.from_model(model)
    # The schedule spans one round when the state is fresh (it restarts with the round), the run
    # when the AdamW state is kept.
    span = s.inner_steps * (s.rounds if s.keep_inner_state else 1)
    cfg = InnerConfig(steps=s.inner_steps, lr=s.inner_lr, batch_size=s.batch, betas=s.betas,
                      eps=s.eps, warmup_steps=s.warmup, schedule_steps=span if s.cosine else 0,
                      min_lr_ratio=s.min_lr_ratio, grad_clip=s.grad_clip,
                      weight_decay=s.weight_decay)  # fmt: skip
    # One inner trainer (its own AdamW state) per worker, all driving the same model in turn.
    trainers = [inner_trainer(model, cfg, s.inner_opt, s.muon(s.inner_lr),
                              keep_state=s.keep_inner_state) for _ in range(s.workers)]  # fmt: skip
    sent, curve = 0, []
    if fmt == "sparse" and overlap:
        raise ValueError("the sparse format has no one-round overlap path in this benchmark")
    residuals: list[torch.Tensor | None] = [None] * s.workers  # sparse: error feedback, per node
    pending: torch.Tensor | None = None
    starts: list[torch.Tensor | None] = [None] * s.workers  # overlap: each worker's start point
    for rnd in range(1, s.rounds + 1):
        pgs = []
        round_cfg = replace(cfg, lr=cfg.lr * run_factor(rnd, s.rounds, s.run_decay))
        base_outer = s.sparse_outer if fmt == "sparse" else s.outer
        outer_cfg = replace(base_outer, lr=base_outer.lr * run_factor(rnd, s.rounds, s.outer_decay))
        rebased = pending is not None and overlap_steps > 0
        if rebased:  # the last round's average lands tau steps into this one
            assert pending is not None
            outer.step(pending, outer_cfg)
            pending = None
        for k, (trainer, rows) in enumerate(zip(trainers, shards(corpus, s, rnd), strict=True)):
            own = starts[k]
            start = own if own is not None else outer.base
            _load_flat(model, outer, start)
            trainer.cfg = round_cfg
            shift = outer.base - start if rebased else None
            trainer.train(rows, on_step=_rebase(model, outer, overlap_steps, shift))
            origin = outer.base if rebased else start
            pgs.append(origin - outer.layout.flatten(dict(model.named_parameters())))
        if fmt == "sparse":
            packets: list[SparsePacket] = []
            for k, pg in enumerate(pgs):
                packet, residuals[k] = compress(pg, residuals[k], s.sparse, s.sparse_beta)
                packets.append(packet)
            avg = average_sparse(packets)
            sent += (s.workers - 1) * packets[0].nbytes  # the checked all-gather of packets
        else:
            avg = simulate_average(pgs, fmt)
            sent += wire_bytes(outer.base.numel(), fmt, s.workers)
        if overlap_steps and rnd < s.rounds:  # in flight: lands tau steps into the next round
            starts, pending = [outer.base - pg for pg in pgs], avg  # each worker's own end
        elif not overlap:
            outer.step(avg, outer_cfg)
        else:
            if pending is not None:
                outer.step(pending, outer_cfg)
            pending = avg
            if rnd == s.rounds:
                outer.step(pending, outer_cfg)
            else:
                starts = [outer.base - pg for pg in pgs]
        outer.load_into(model)
        if rnd % max(1, s.rounds // 5) == 0 or rnd == s.rounds:
            curve.append(round(evaluate(model, eval_rows), 4))
            log.info("%s round %d eval %.4f", fmt, rnd, curve[-1])
    return evaluate(model, eval_rows), sent, curve


def _rebase(
    model: GPT, outer: OuterState, steps: int, shift: torch.Tensor | None
) -> Callable[[StepInfo], None] | None:
    """The bounded overlap's move: after ``steps`` inner steps, ``shift`` (new base - the
    worker's own end of the last round) added to the weights."""
    if shift is None:
        return None
    views = outer.layout.unflatten(shift)

    @torch.no_grad()
    def on_step(info: StepInfo) -> None:
        if info.step == steps:
            for name, p in model.named_parameters():
                p.add_(views[name])

    return on_step


@torch.no_grad()
def _load_flat(model: GPT, outer: OuterState, flat: torch.Tensor) -> None:
    views = outer.layout.unflatten(flat)
    for name, p in model.named_parameters():
        p.copy_(views[name])


def codec_ns_per_param() -> float | None:
    try:
        from reference.codec.speed import measure_codec_ns_per_param
    except ImportError:
        log.warning("reference.codec.speed is missing: codec_ns_per_param not measured")
        return None
    return float(measure_codec_ns_per_param())


SYNC_LR_GRID = (3e-3, 6e-3, 1.2e-2)  # extended by x2 past an edge, so 1.5e-3 when 3e-3 wins


def split_eval(corpus: Corpus) -> tuple[Corpus, Corpus]:
    """(validation, test): the first and second halves of each source's held-out bytes, so the
    baseline's lr is chosen on text the reported loss never sees."""
    val, test = [], []
    for src in corpus.sources:
        half = src.eval.numel() // 2
        val.append(DataSource(src.name, src.train, src.eval[:half]))
        test.append(DataSource(src.name, src.train, src.eval[half:]))
    return Corpus(val, name=f"{corpus.name}:val"), Corpus(test, name=f"{corpus.name}:test")


def code_corpus(root: Path = Path("node_modules/@openzeppelin/contracts")) -> Corpus | None:
    """Another corpus of source code: OpenZeppelin's Solidity (npm ci installs it), two sources
    (``utils/`` and the rest), read through .txt files in a temporary folder that is removed once
    loaded; None if it is missing."""
    files = sorted(root.rglob("*.sol")) if root.is_dir() else []
    if len(files) < 20:
        return None
    with tempfile.TemporaryDirectory(prefix="coloco-code-corpus-") as tmp:
        folder = Path(tmp)
        for f in files:
            rel = f.relative_to(root)
            source = "b_utils" if rel.parts[0] == "utils" else "a_contracts"
            target = folder / source / (str(rel.with_suffix("")).replace("/", "__") + ".txt")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(f.read_bytes())
        loaded = Corpus.from_folder(folder)
    return Corpus(list(loaded.sources), name=f"solidity:{root}")


_CORPORA: dict[str, Corpus] = {}


def corpus_named(name: str) -> Corpus:
    """``stdlib`` (the default corpus) or ``code`` (OpenZeppelin's Solidity), loaded once per
    process."""
    if name not in _CORPORA:
        found = Corpus.stdlib() if name == "stdlib" else code_corpus()
        if found is None:
            raise SystemExit("node_modules/@openzeppelin/contracts missing: run npm ci")
        _CORPORA[name] = found
    return _CORPORA[name]


@dataclass(frozen=True)
class Task:
    """One independent run: ``kind`` sync, fp32, int8 or sparse (DiLoCo's wire; ``carried``: int8
    with the AdamW state carried, ``sparse_carried``: sparse with it), evaluated on the ``split``
    (val or test) half of ``corpus``'s held-out rows."""

    kind: str
    corpus: str
    split: str
    setup: Setup


def run_task(task: Task, threads: int = 1) -> tuple[float, int, list[float]]:
    """(eval loss, bytes one rank sends, eval curve): what a pool worker runs."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    torch.set_num_threads(threads)
    corpus = corpus_named(task.corpus)
    val, test = split_eval(corpus)
    s = task.setup
    rows = (val if task.split == "val" else test).eval_rows(s.model.seq_len, s.eval_rows, seed=1234)
    if task.kind == "sync":
        loss, sent, curve = run_sync(corpus, s, rows)
        log.info("%s seed %d sync lr %g on %s: %.4f", task.corpus, s.seed, s.sync_lr, task.split,
                 loss)  # fmt: skip
        return loss, sent, curve
    if task.kind in CARRIED:
        return run_diloco(corpus, s.carried(), rows, CARRIED[task.kind])
    if task.kind in OVERLAP:
        fmt, bounded = OVERLAP[task.kind]
        return run_diloco(corpus, s, rows, fmt, overlap=not bounded,
                          overlap_steps=s.overlap_steps if bounded else 0)  # fmt: skip
    return run_diloco(corpus, s, rows, task.kind)


CARRIED = {"carried": "int8", "sparse_carried": "sparse"}  # carried arm -> its wire format
DEFAULT_OVERLAP = "overlap_bounded"  # the node's default schedule (NodeSettings.bounded_overlap)
OVERLAP = {  # overlap arm -> (its wire format, bounded): each beside its lockstep arm
    "overlap_round": ("fp32", False),  # the one-round delayed outer step (--overlap today)
    "overlap_bounded": ("fp32", True),  # the average lands overlap_steps into the next round
    "sparse_overlap_bounded": ("sparse", True),
}


class Pool:
    """Runs tasks in ``jobs`` spawned processes (one thread each), or inline when ``jobs`` is 1.
    Every task is deterministic: the same bits in any process, in any order."""

    def __init__(self, jobs: int, threads: int = 1) -> None:
        self.threads = threads
        self._ex = (
            ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"))
            if jobs > 1
            else None
        )

    def map(self, tasks: list[Task]) -> list[tuple[float, int, list[float]]]:
        if self._ex is None:
            return [run_task(t, self.threads) for t in tasks]
        return list(self._ex.map(run_task, tasks, [self.threads] * len(tasks)))

    def close(self) -> None:
        if self._ex is not None:
            self._ex.shutdown()


def tune_sync_lr(
    pool: Pool, s: Setup, grid: tuple[float, ...], corpus: str = "stdlib"
) -> tuple[float, dict[str, float]]:
    """Best synchronous lr on the validation rows; a best at the grid's edge extends the grid
    by a factor 2 that way (twice at most), so the optimum is bracketed."""
    losses: dict[float, float] = {}
    lrs = list(grid)
    for _ in range(3):
        todo = [lr for lr in lrs if lr not in losses]
        results = pool.map([Task("sync", corpus, "val", replace(s, sync_lr=lr)) for lr in todo])
        for lr, (loss, _, _) in zip(todo, results, strict=True):
            losses[lr] = loss
            log.info("sync lr %g: validation loss %.4f", lr, loss)
        best = min(losses, key=losses.__getitem__)
        ordered = sorted(losses)
        if best == ordered[0]:
            lrs = [best / 2]
        elif best == ordered[-1] and best * 2 < 0.1:
            lrs = [best * 2]
        else:
            break
    return best, {f"{lr:g}": round(v, 4) for lr, v in sorted(losses.items())}


def comparisons(
    pool: Pool,
    items: list[tuple[str, Setup]],
    *,
    int8: tuple[str, int] | None = None,
    sparse: bool = False,
    carried: bool = False,
    overlap: bool = False,
) -> dict[tuple[str, int], dict[str, object]]:
    """Per (corpus, seed): the synchronous baseline and DiLoCo (fp32 wire; int8 too for the
    ``int8`` pair; the sparse format too with ``sparse``; with ``carried``, int8 and, with
    ``sparse``, the sparse format with the AdamW state carried across rounds), every run in the
    pool at once (DiLoCo's, the longest, first), each evaluated on the test half of its corpus."""
    tasks = [Task("fp32", c, "test", s) for c, s in items]
    tasks += [Task("sparse", c, "test", s) for c, s in items if sparse]
    tasks += [Task("carried", c, "test", s) for c, s in items if carried]
    tasks += [Task("sparse_carried", c, "test", s) for c, s in items if carried and sparse]
    tasks += [Task("int8", c, "test", s) for c, s in items if (c, s.seed) == int8]
    tasks += [Task(kind, c, "test", s) for c, s in items if overlap and c == "stdlib"
              for kind, (fmt, _) in OVERLAP.items() if sparse or fmt != "sparse"]  # fmt: skip
    tasks += [Task("sync", c, "test", s) for c, s in items]
    results = dict(zip([(t.kind, t.corpus, t.setup.seed) for t in tasks], pool.map(tasks),
                       strict=True))  # fmt: skip
    out = {}
    for c, s in items:
        sync_loss, sync_bytes, _ = results[("sync", c, s.seed)]
        d_loss, d_bytes, d_curve = results[("fp32", c, s.seed)]
        one: dict[str, object] = {
            "seed": s.seed,
            "diloco_eval_loss": round(d_loss, 4),
            "sync_eval_loss": round(sync_loss, 4),
            "loss_ratio": round(d_loss / sync_loss, 4),
            "bytes_ratio_vs_sync": round(sync_bytes / d_bytes, 2),
            "diloco_curve_fp32": d_curve,
        }
        if ("int8", c, s.seed) in results:
            q_loss, q_bytes, q_curve = results[("int8", c, s.seed)]
            one |= {
                "int8_eval_loss": round(q_loss, 4),
                "int8_loss_ratio": round(q_loss / sync_loss, 4),
                "int8_bytes_ratio_vs_fp32": round(d_bytes / q_bytes, 3),
                "int8_loss_ratio_vs_fp32": round(q_loss / d_loss, 5),
                "int8_bytes_ratio_vs_sync": round(sync_bytes / q_bytes, 2),
                "diloco_curve_int8": q_curve,
            }
        if ("sparse", c, s.seed) in results:
            sp_loss, sp_bytes, sp_curve = results[("sparse", c, s.seed)]
            one |= {
                "sparse_eval_loss": round(sp_loss, 4),
                "sparse_loss_ratio": round(sp_loss / sync_loss, 4),
                "sparse_loss_ratio_vs_fp32": round(sp_loss / d_loss, 5),
                "sparse_bytes_ratio_vs_sync": round(sync_bytes / sp_bytes, 1),
                "diloco_curve_sparse": sp_curve,
            }
        for kind in CARRIED:
            if (kind, c, s.seed) in results:
                k_loss, _, k_curve = results[(kind, c, s.seed)]
                one |= {
                    f"{kind}_eval_loss": round(k_loss, 4),
                    f"{kind}_loss_ratio": round(k_loss / sync_loss, 4),
                    f"diloco_curve_{kind}": k_curve,
                }
        for kind, (lockstep, _) in OVERLAP.items():  # its lockstep arm: its wire format's
            if (kind, c, s.seed) in results:
                o_loss, _, o_curve = results[(kind, c, s.seed)]
                l_loss = results[(lockstep, c, s.seed)][0]
                one |= {
                    f"{kind}_eval_loss": round(o_loss, 4),
                    f"{kind}_loss_ratio": round(o_loss / sync_loss, 4),
                    f"{kind}_cost": round(o_loss / l_loss, 4),  # over its lockstep arm
                    f"diloco_curve_{kind}": o_curve,
                }
        log.info("seed %d on %s: %s", s.seed, c, one)
        out[(c, s.seed)] = one
    return out


def _mean_sd(values: list[float]) -> tuple[float, float]:
    mean = statistics.mean(values)
    return round(mean, 4), round(statistics.stdev(values) if len(values) > 1 else 0.0, 4)


def sparse_figures(
    s: Setup, runs: list[dict[str, object]], other_runs: list[dict[str, object]]
) -> dict[str, object]:
    """The sparse format's JSON keys: its loss ratios (default corpus, the other corpus), its
    settings and its bytes beside dense int8's (one packet, and what one rank sends a round)."""
    numel = GPT(s.model).num_params()
    ratios = [float(r["sparse_loss_ratio"]) for r in runs]  # type: ignore[arg-type]
    mean, sd = _mean_sd(ratios)
    sparse_packet = sparse_wire_bytes(numel, s.sparse)
    int8_packet = packet_bytes(numel, "int8")
    out: dict[str, object] = {
        "sparse_loss_ratio_mean": mean,
        "sparse_loss_ratio_sd": sd,
        "sparse_loss_ratios": ratios,
        "sparse_chunk": s.sparse.chunk,
        "sparse_k": s.sparse.k,
        "sparse_density": round(s.sparse.density, 5),
        "sparse_value_bits": s.sparse.bits,
        "sparse_beta": s.sparse_beta,
        "sparse_outer_lr": s.sparse_outer.lr,
        "sparse_outer_momentum": s.sparse_outer.momentum,
        "int8_packet_bytes": int8_packet,
        "sparse_packet_bytes": sparse_packet,
        "sparse_packet_ratio_vs_int8": round(int8_packet / sparse_packet, 2),
        # what one rank sends a round: int8 as bench.diloco has always counted it (a ring), the
        # sparse packets through the checked all-gather ((K-1) packets; no ring can sum them)
        "int8_wire_bytes_per_round": wire_bytes(numel, "int8", s.workers),
        "sparse_wire_bytes_per_round": (s.workers - 1) * sparse_packet,
        "sparse_bytes_ratio_vs_sync": runs[0]["sparse_bytes_ratio_vs_sync"],
    }
    if other_runs:
        other = [float(r["sparse_loss_ratio"]) for r in other_runs]  # type: ignore[arg-type]
        out["sparse_other_loss_ratio_mean"] = _mean_sd(other)[0]
        out["sparse_other_loss_ratios"] = other
    return out


def overlap_figures(s: Setup, runs: list[dict[str, object]]) -> dict[str, object]:
    """The overlap arms' JSON keys: each arm's loss over the synchronous baseline's
    (``_loss_ratio``) and over its own lockstep arm's (``_cost``), mean and sd over the seeds;
    and ``overlap_loss_ratio`` / ``overlap_cost``: the node's default path's (the bounded
    overlap, trainer.round.bounded, at ``overlap_steps``), named by ``overlap_schedule``."""
    out: dict[str, object] = {"overlap_steps": s.overlap_steps}
    for kind in OVERLAP:
        for what in ("loss_ratio", "cost"):
            key = f"{kind}_{what}"
            if key in runs[0]:
                values = [float(r[key]) for r in runs]  # type: ignore[arg-type]
                out[f"{key}_mean"], out[f"{key}_sd"] = _mean_sd(values)
                out[f"{key}s"] = values
    if f"{DEFAULT_OVERLAP}_loss_ratio_mean" in out:
        out["overlap_schedule"] = DEFAULT_OVERLAP
        out["overlap_loss_ratio"] = out[f"{DEFAULT_OVERLAP}_loss_ratio_mean"]
        out["overlap_cost"] = out[f"{DEFAULT_OVERLAP}_cost_mean"]
    return out


def carried_figures(
    s: Setup, runs: list[dict[str, object]], other_runs: list[dict[str, object]]
) -> dict[str, object]:
    """The carried arms' JSON keys (int8 wire; the sparse format where it ran), beside the fresh
    arms of the same run: loss ratios on the default corpus (mean, sd) and on the other one."""
    out: dict[str, object] = {
        "carried_wire_format": CARRIED["carried"],
        "carried_betas": list(s.carried_betas),
        "carried_eps": s.carried_eps,
        "carried_warmup_steps": s.carried_warmup,
    }
    for kind in CARRIED:
        key = f"{kind}_loss_ratio"
        if key not in runs[0]:
            continue
        ratios = [float(r[key]) for r in runs]  # type: ignore[arg-type]
        out[f"{key}_mean"], out[f"{key}_sd"] = _mean_sd(ratios)
        out[f"{key}s"] = ratios
        if other_runs:
            other = [float(r[key]) for r in other_runs]  # type: ignore[arg-type]
            out[f"{kind}_other_loss_ratio_mean"] = _mean_sd(other)[0]
            out[f"{kind}_other_loss_ratios"] = other
    return out


def parser() -> argparse.ArgumentParser:
    """The benchmark's command line (its defaults: the node's settings and inner mode)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds (under 20 min on 2 cores)")
    p.add_argument("--rounds", type=int)
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (mean and sd reported)")
    p.add_argument("--inner-steps", type=int, default=INNER_STEPS)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--inner-lr", type=float, default=INNER_LR,
                   help="DiLoCo inner AdamW lr (the governed default)")  # fmt: skip
    p.add_argument("--sync-lr", type=float, help="the baseline's lr (default: tuned on validation)")
    p.add_argument("--outer-lr", type=float, default=OUTER_LR,
                   help="DiLoCo outer Nesterov lr (the governed default)")  # fmt: skip
    p.add_argument("--outer-momentum", type=float, default=OUTER_MOMENTUM)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                   help="independent runs in parallel processes (default: 2 cores)")  # fmt: skip
    p.add_argument("--skip-other-corpus", action="store_true")
    p.add_argument("--warmup", type=int, default=DEFAULT_WARMUP_STEPS,
                   help="DiLoCo's per-round lr warmup steps with a fresh AdamW "
                   "(--no-keep-inner-state; default: the node's)")  # fmt: skip
    p.add_argument("--cosine", action="store_true", help="DiLoCo cosine inner lr decay")
    p.add_argument("--betas", type=float, nargs=2, default=DEFAULT_BETAS,
                   help="DiLoCo's inner AdamW betas with a fresh AdamW (--no-keep-inner-state; "
                   "default: the node's; --carried-betas for the carried state)")  # fmt: skip
    p.add_argument("--keep-inner-state", action=argparse.BooleanOptionalAction,
                   default=CARRY_STATE,
                   help="each worker keeps its AdamW across rounds with the carried constants "
                   "(default: the node's mode, reference.inner.CARRY_STATE; "
                   "--no-keep-inner-state: a fresh AdamW every round)")  # fmt: skip
    p.add_argument("--skip-carried", action="store_true",
                   help="no runs of the carried AdamW arms (int8, sparse; left out anyway when "
                   "the main arms carry it)")  # fmt: skip
    p.add_argument("--carried-betas", type=float, nargs=2, default=CARRIED_BETAS)
    p.add_argument("--carried-eps", type=float, default=CARRIED_EPS)
    p.add_argument("--carried-warmup", type=int, default=CARRIED_WARMUP_STEPS,
                   help="warmup steps once per carried state")  # fmt: skip
    p.add_argument("--warm-start", type=int, default=200,
                   help="synchronous steps both runs start from (not counted)")  # fmt: skip
    p.add_argument("--skip-sparse", action="store_true", help="no runs of the sparse format")
    p.add_argument(
        "--skip-overlap",
        action="store_true",
        help="no runs of the overlap arms (one round; bounded: fp32 and sparse)",
    )
    p.add_argument("--overlap-steps", type=int, default=None,
                   help="the bounded overlap's tau: inner steps of round r+1 during which round "
                   "r's average travels (default H / 10, the trace interval)")  # fmt: skip
    p.add_argument("--sparse-chunk", type=int, default=SPARSE_SHAPE.chunk)
    p.add_argument("--sparse-k", type=int, default=SPARSE_SHAPE.k, help="values kept a chunk")
    p.add_argument("--sparse-bits", type=int, default=SPARSE_SHAPE.bits, help="bits a value")
    p.add_argument("--sparse-beta", type=float, default=SPARSE_BETA, help="error-feedback decay")
    p.add_argument("--sparse-outer-lr", type=float, default=SPARSE_OUTER_LR)
    p.add_argument("--sparse-outer-momentum", type=float, default=SPARSE_OUTER_MOMENTUM)
    return p


def main() -> None:
    args = parser().parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    torch.set_num_threads(args.threads)
    rounds = args.rounds or (16 if args.quick else 40)
    s = Setup(
        model=GPTConfig.preset("tiny"),
        workers=args.workers,
        rounds=rounds,
        inner_steps=args.inner_steps,
        batch=args.batch,
        inner_lr=args.inner_lr,
        outer=OuterConfig(lr=args.outer_lr, momentum=args.outer_momentum),
        eval_rows=256,
        warmup=args.warmup,
        cosine=args.cosine,
        betas=(args.betas[0], args.betas[1]),
        warm_start=args.warm_start,
        sparse=SparseSpec(args.sparse_chunk, args.sparse_k, args.sparse_bits),
        sparse_beta=args.sparse_beta,
        sparse_outer=OuterConfig(lr=args.sparse_outer_lr, momentum=args.sparse_outer_momentum),
        carried_betas=(args.carried_betas[0], args.carried_betas[1]),
        carried_eps=args.carried_eps,
        carried_warmup=args.carried_warmup,
    )
    if args.keep_inner_state:  # the node's mode: the main arms (fp32, int8, sparse) carry it
        s = s.carried()
    tau = args.overlap_steps if args.overlap_steps is not None else max(1, s.inner_steps // 10)
    s = replace(s, overlap_steps=tau)
    carried_arms = not (args.skip_carried or s.keep_inner_state)
    t0 = time.perf_counter()
    load = os.getloadavg()
    pool = Pool(args.jobs, args.threads)
    corpus = corpus_named("stdlib")
    eval_rows = split_eval(corpus)[1].eval_rows(s.model.seq_len, s.eval_rows, seed=1234)
    initial = evaluate(start_model(corpus, s), eval_rows)
    grid: dict[str, float] = {}
    if args.sync_lr is not None:
        sync_lr = args.sync_lr
    else:
        sync_lr, grid = tune_sync_lr(pool, s, SYNC_LR_GRID)
    s = replace(s, sync_lr=sync_lr)
    seeds = list(range(args.seeds))
    other = None if args.skip_other_corpus else code_corpus()
    other_seeds = seeds[:1] if args.quick else seeds  # --quick: one seed on the other corpus
    items = [("stdlib", replace(s, seed=k)) for k in seeds]
    items += [("code", replace(s, seed=k)) for k in other_seeds] if other is not None else []
    # --quick: int8's loss cost is measured in the full run (and on the wire by bench.network)
    done = comparisons(pool, items, int8=None if args.quick else ("stdlib", 0),
                       sparse=not args.skip_sparse, carried=carried_arms,
                       overlap=not args.skip_overlap)  # fmt: skip
    pool.close()
    runs = [done[("stdlib", k)] for k in seeds]
    ratios = [float(r["loss_ratio"]) for r in runs]  # type: ignore[arg-type]
    mean, sd = _mean_sd(ratios)
    first = runs[0]
    out: dict[str, object] = {
        "simulated_workers": True,
        "workers": s.workers,
        "inner_steps": s.inner_steps,
        "rounds": s.rounds,
        "batch_per_worker": s.batch,
        "seq_len": s.model.seq_len,
        "params": GPT(s.model).num_params(),
        "tokens": s.rounds * s.inner_steps * s.batch * s.workers * s.model.seq_len,
        "warm_start_steps": s.warm_start,
        "inner_lr": s.inner_lr,
        "inner_betas": list(s.betas),
        "inner_warmup_steps": s.warmup,
        "inner_eps": s.eps,
        "sync_eps": s.sync_eps,
        "keep_inner_state": s.keep_inner_state,
        "sync_lr": sync_lr,
        "sync_lr_validation_losses": grid,
        "outer_lr": s.outer.lr,
        "outer_momentum": s.outer.momentum,
        "seeds": seeds,
        "loss_ratio_mean": mean,
        "loss_ratio_sd": sd,
        "loss_ratios": ratios,
        "initial_eval_loss": round(initial, 4),
        **{k: v for k, v in first.items() if k != "seed"},
    }
    if not args.skip_sparse:
        code_runs = [done[("code", k)] for k in other_seeds] if other is not None else []
        out |= sparse_figures(s, [done[("stdlib", k)] for k in seeds], code_runs)
    if carried_arms:
        code_runs = [done[("code", k)] for k in other_seeds] if other is not None else []
        out |= carried_figures(s, runs, code_runs)
    if not args.skip_overlap:
        out |= overlap_figures(s, runs)
    if args.skip_other_corpus:
        pass
    elif other is None:
        out["other_corpus"] = "node_modules/@openzeppelin/contracts missing: run npm ci"
    else:
        other_runs = [done[("code", k)] for k in other_seeds]
        other_ratios = [float(r["loss_ratio"]) for r in other_runs]  # type: ignore[arg-type]
        o_mean, o_sd = _mean_sd(other_ratios)
        out |= {
            "other_corpus": "OpenZeppelin Solidity sources (settings tuned on stdlib)",
            "other_loss_ratio_mean": o_mean,
            "other_loss_ratio_sd": o_sd,
            "other_loss_ratios": other_ratios,
            "other_seeds": other_seeds,
        }
    out["codec_ns_per_param"] = codec_ns_per_param()
    out["jobs"] = args.jobs
    out["gpu"] = "none lent to this session: CPU only"
    out["load_avg_start"] = [round(x, 2) for x in load]
    out["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    emit("diloco", out)


if __name__ == "__main__":
    main()
