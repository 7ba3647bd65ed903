"""DiLoCo vs fully synchronous data parallel on the tiny model and the default corpus.

    python -m bench.diloco [--quick] [--rounds R] [--inner-steps H] [--workers K]

Both runs see the same tokens and do the same compute: DiLoCo's K workers each run H AdamW steps
of B rows per round on their own shard; the synchronous baseline runs H steps per round with one
AdamW over the union of those K batches (K*B rows per step), all-reducing gradients every step.
As in the DiLoCo paper, both continue from the same warm model (``--warm-start`` synchronous
steps on other data, default 200, not counted in either run's tokens or bytes); from a cold
genesis DiLoCo's first rounds are far behind (measured: loss ratio 1.12-1.21 at 8-16 rounds).
Defaults (measured best of those tried, the same for both runs): AdamW lr 3e-3, outer Nesterov lr
0.7, momentum 0.9, H 50, K 4, B 8 rows of 64 bytes; each worker keeps its AdamW state across rounds.
The workers are simulated in one process (the same math as the multi-process path, which
tests/trainer/test_diloco_distributed.py runs over real gloo processes); the JSON says so.

Bytes are what one rank puts on the wire: a ring all-reduce of fp32 sends 2(K-1)/K * 4 bytes per
value; a quantized round sends what trainer.comm.wire_bytes says for the format.
The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import dataclass

import torch

from trainer.comm import simulate_average, wire_bytes
from trainer.data import Corpus, ShardSpec
from trainer.inner import InnerConfig, InnerTrainer
from trainer.model import GPT, GPTConfig, evaluate
from trainer.outer import OuterConfig, OuterState

log = logging.getLogger("bench.diloco")
RUN_ID = bytes.fromhex("c0" * 32)
WARM_LR = 3e-3  # the warm start is the same whatever lrs the two runs then use


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
    warmup: int = 0
    cosine: bool = False
    fresh_adam: bool = False
    warm_start: int = 0
    sync_lr: float = 3e-3


def worker_address(k: int) -> str:
    return "0x" + (k + 1).to_bytes(20, "big").hex()


def shards(corpus: Corpus, s: Setup, rnd: int) -> list[torch.Tensor]:
    n_tokens = s.inner_steps * s.batch * s.model.seq_len
    return [
        corpus.shard_rows(
            ShardSpec.for_node(RUN_ID, rnd, worker_address(k), n_tokens, (7000, 3000)),
            s.model.seq_len,
        )
        for k in range(s.workers)
    ]


def start_model(corpus: Corpus, s: Setup) -> GPT:
    """The shared starting point: genesis, plus ``warm_start`` synchronous steps if asked
    (as in the DiLoCo paper, both methods then continue from the same warm model)."""
    model = GPT(s.model, seed=s.seed)
    if s.warm_start:
        rows = corpus.random_rows(s.model.seq_len, s.warm_start * s.batch * s.workers, seed=4242)
        cfg = InnerConfig(steps=s.warm_start, lr=WARM_LR, batch_size=s.batch * s.workers)
        InnerTrainer(model, cfg).train(rows)
    return model


def run_sync(corpus: Corpus, s: Setup, eval_rows: torch.Tensor) -> tuple[float, int]:
    model = start_model(corpus, s)
    # One AdamW for the whole run (train() starts a fresh one): feed all rounds in one call.
    rows = []
    for rnd in range(1, s.rounds + 1):
        per_worker = shards(corpus, s, rnd)
        for step in range(s.inner_steps):
            sl = slice(step * s.batch, (step + 1) * s.batch)
            rows.append(torch.cat([w[sl] for w in per_worker]))
    steps = s.inner_steps * s.rounds
    cfg = InnerConfig(steps=steps, lr=s.sync_lr, batch_size=s.batch * s.workers,
                      warmup_steps=s.warmup, schedule_steps=steps if s.cosine else 0)  # fmt: skip
    InnerTrainer(model, cfg).train(torch.cat(rows))
    n_params = model.num_params()
    sent = s.inner_steps * s.rounds * wire_bytes(n_params, "fp32", s.workers)
    return evaluate(model, eval_rows), sent


def run_diloco(
    corpus: Corpus, s: Setup, eval_rows: torch.Tensor, fmt: str
) -> tuple[float, int, list[float]]:
    model = start_model(corpus, s)
    outer = OuterState.from_model(model)
    cfg = InnerConfig(steps=s.inner_steps, lr=s.inner_lr, batch_size=s.batch, warmup_steps=s.warmup,
                      schedule_steps=s.inner_steps * s.rounds if s.cosine else 0)  # fmt: skip
    # One inner trainer (its own AdamW state) per worker, all driving the same model in turn.
    trainers = [InnerTrainer(model, cfg, keep_state=not s.fresh_adam) for _ in range(s.workers)]
    sent, curve = 0, []
    for rnd in range(1, s.rounds + 1):
        pgs = []
        for trainer, rows in zip(trainers, shards(corpus, s, rnd), strict=True):
            outer.load_into(model)
            trainer.train(rows)
            pgs.append(outer.pseudo_gradient(model))
        avg = simulate_average(pgs, fmt)
        sent += wire_bytes(outer.base.numel(), fmt, s.workers)
        outer.step(avg, s.outer)
        outer.load_into(model)
        if rnd % max(1, s.rounds // 5) == 0 or rnd == s.rounds:
            curve.append(round(evaluate(model, eval_rows), 4))
            log.info("%s round %d eval %.4f", fmt, rnd, curve[-1])
    return evaluate(model, eval_rows), sent, curve


def codec_ns_per_param() -> float | None:
    try:
        from trainer.codec.speed import measure_codec_ns_per_param
    except ImportError:
        log.warning("trainer.codec.speed is missing: codec_ns_per_param not measured")
        return None
    return float(measure_codec_ns_per_param())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds (under 10 min on 2 cores)")
    p.add_argument("--rounds", type=int)
    p.add_argument("--inner-steps", type=int, default=50)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--inner-lr", type=float, default=3e-3, help="DiLoCo inner AdamW lr")
    p.add_argument("--sync-lr", type=float, default=3e-3, help="the synchronous baseline's lr")
    p.add_argument("--outer-lr", type=float, default=0.7)
    p.add_argument("--outer-momentum", type=float, default=0.9)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--skip-int8", action="store_true")
    p.add_argument("--skip-sync", action="store_true")
    p.add_argument("--warmup", type=int, default=0, help="inner lr warmup steps (both runs)")
    p.add_argument("--cosine", action="store_true", help="cosine inner lr decay (both runs)")
    p.add_argument("--fresh-adam", action="store_true", help="new AdamW state every round")
    p.add_argument("--warm-start", type=int, default=200,
                   help="synchronous steps both runs start from (not counted)")  # fmt: skip
    args = p.parse_args()
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
        fresh_adam=args.fresh_adam,
        warm_start=args.warm_start,
        sync_lr=args.sync_lr,
    )
    t0 = time.perf_counter()
    corpus = Corpus.stdlib()
    eval_rows = corpus.eval_rows(s.model.seq_len, s.eval_rows, seed=1234)
    initial = evaluate(start_model(corpus, s), eval_rows)
    if args.skip_sync:
        sync_loss = float("nan")
        sync_bytes = (
            s.inner_steps * s.rounds * wire_bytes(GPT(s.model).num_params(), "fp32", s.workers)
        )
    else:
        sync_loss, sync_bytes = run_sync(corpus, s, eval_rows)
    log.info("sync eval %.4f (%.0fs)", sync_loss, time.perf_counter() - t0)
    d_loss, d_bytes, d_curve = run_diloco(corpus, s, eval_rows, "fp32")
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
        "sync_lr": s.sync_lr,
        "outer_lr": s.outer.lr,
        "outer_momentum": s.outer.momentum,
        "initial_eval_loss": round(initial, 4),
        "diloco_eval_loss": round(d_loss, 4),
        "sync_eval_loss": round(sync_loss, 4),
        "loss_ratio": round(d_loss / sync_loss, 4),
        "bytes_ratio_vs_sync": round(sync_bytes / d_bytes, 2),
        "diloco_curve_fp32": d_curve,
    }
    if not args.skip_int8:
        q_loss, q_bytes, q_curve = run_diloco(corpus, s, eval_rows, "int8")
        out |= {
            "int8_eval_loss": round(q_loss, 4),
            "int8_bytes_ratio_vs_fp32": round(d_bytes / q_bytes, 3),
            "int8_loss_ratio_vs_fp32": round(q_loss / d_loss, 5),
            "int8_bytes_ratio_vs_sync": round(sync_bytes / q_bytes, 2),
            "diloco_curve_int8": q_curve,
        }
    out["codec_ns_per_param"] = codec_ns_per_param()
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
