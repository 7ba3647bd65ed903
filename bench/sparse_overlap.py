"""Copy detection on sparse packets: how many kept positions honest nodes share, and copiers.

    python -m bench.sparse_overlap [--quick] [--rounds R] [--workers W]

Honest workers: bench.diloco's DiLoCo on the tiny model (warm start, different shards a round,
the node's inner settings), each worker's packet in the sparse wire format with its own
error-feedback residual (reference.codec.sparse.encode_feedback, the node's path); every pair's
:func:`~reference.codec.sparse.index_overlap` every round. Copiers, against worker 0's packet of
each round: its update plus Gaussian noise of 0.5x and 1x its norm, its update rescaled, and its
update through a fresh residual (a copier has none of its own). Random choice shares
``k / chunk`` (6.25 %). The threshold the ledger uses (``ledger.core.config``
``copy_index_overlap``) sits between the honest maximum and the copiers' minimum.
The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import statistics
from dataclasses import replace

import torch

from bench import emit
from bench.diloco import Setup, run_factor, shards, start_model
from reference.codec.sparse import SPARSE_SPEC, encode_feedback, index_overlap
from reference.data import Corpus
from reference.inner import InnerConfig, InnerTrainer
from reference.mean import sparse_mean
from reference.model import GPTConfig
from reference.outer import OuterConfig, OuterState
from trainer.round.runconfig import INNER_LR, OUTER_LR, OUTER_MOMENTUM

log = logging.getLogger("bench.sparse_overlap")


def measure(s: Setup) -> dict[str, object]:
    corpus = Corpus.stdlib()
    model = start_model(corpus, s)
    outer = OuterState.from_model(model)
    cfg = InnerConfig(steps=s.inner_steps, lr=s.inner_lr, batch_size=s.batch)
    trainers = [InnerTrainer(model, cfg) for _ in range(s.workers)]
    residuals: list[torch.Tensor | None] = [None] * s.workers
    honest: list[float] = []
    copies: dict[str, list[float]] = {"noise_0.5": [], "noise_1.0": [], "rescaled": [],
                                      "fresh_residual": []}  # fmt: skip
    gen = torch.Generator().manual_seed(7)
    for rnd in range(1, s.rounds + 1):
        locals_, wire, packets = [], [], []
        base = outer.base.clone()
        for k, rows in enumerate(shards(corpus, s, rnd)):
            outer.load_into(model)
            trainers[k].cfg = replace(cfg, lr=cfg.lr * run_factor(rnd, s.rounds, s.run_decay))
            trainers[k].train(rows)
            local = outer.layout.flatten(dict(model.named_parameters()))
            packet, residuals[k] = encode_feedback(base, local, residuals[k])
            locals_.append(local)
            wire.append(packet)
            packets.append(packet.sparse())
        pairs = [index_overlap(a, b) for a, b in itertools.combinations(packets, 2)]
        honest += pairs
        update = base - locals_[0]
        noise = torch.randn(update.shape, generator=gen)
        noise *= update.norm() / noise.norm()
        fakes = {"noise_0.5": update + 0.5 * noise, "noise_1.0": update + noise,
                 "rescaled": update * 1.7, "fresh_residual": update}  # fmt: skip
        for name, fake in fakes.items():
            copied, _ = encode_feedback(fake, torch.zeros_like(fake), None)
            copies[name].append(index_overlap(packets[0], copied.sparse()))
        outer.step(sparse_mean(wire, None), s.outer)
        log.info("round %d: honest overlap %.3f..%.3f", rnd, min(pairs), max(pairs))
    return {
        "workers": s.workers,
        "rounds": s.rounds,
        "inner_steps": s.inner_steps,
        "chunk": SPARSE_SPEC.chunk,
        "k": SPARSE_SPEC.k,
        "random_overlap": SPARSE_SPEC.density,
        "honest_overlap_mean": round(statistics.mean(honest), 4),
        "honest_overlap_max": round(max(honest), 4),
        "honest_overlap_min": round(min(honest), 4),
        "copy_overlap_min": {k: round(min(v), 4) for k, v in copies.items()},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="4 rounds of 20 steps (a few minutes)")
    p.add_argument("--rounds", type=int)
    p.add_argument("--workers", type=int, default=4)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    torch.set_num_threads(1)
    s = Setup(model=GPTConfig.preset("tiny"), workers=args.workers,
              rounds=args.rounds or (4 if args.quick else 8),
              inner_steps=20 if args.quick else 50, batch=8, inner_lr=INNER_LR,
              outer=OuterConfig(lr=OUTER_LR, momentum=OUTER_MOMENTUM), eval_rows=0,
              warm_start=200)  # fmt: skip
    emit("sparse_overlap", measure(s))


if __name__ == "__main__":
    main()
