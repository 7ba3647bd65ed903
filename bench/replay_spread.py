"""How far an honest node's commitment lands from the ledger's replay when their kernels differ,
beside the smallest cheat, over the rounds of a run (what the replay tolerance must sit between).

Each node-round is trained as a node trains it (a fresh AdamW over its shard, on ``--node-threads``
torch threads, the pseudo-gradient encoded in int8 as the all-reduce packet it commits) and
replayed as the ledger replays it (``ledger.judge.replay.replay_pseudo_gradient`` on
``--ledger-threads`` threads, quantized the same way); the relative L2 error is the audit's. The
cheat beside it skips the last inner step. Both sides run AdamW's protocol eps
(``reference.inner.DEFAULT_EPS``). The run moves on by the mean of the honest updates
(outer lr 0.9), so later rounds start from trained weights, where the spread is largest.

Prints one JSON object as its last line: the honest errors' largest, 90th percentile and count
above the ledger's default tolerance, the cheats' smallest, and the settings.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time

import torch

from ledger.core.config import AUDIT_TOLERANCE

log = logging.getLogger("bench.replay_spread")
RUN = bytes(range(32))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def main(argv: list[str] | None = None) -> dict[str, object]:
    from ledger.judge.replay import ReplayInputs, replay_pseudo_gradient
    from ledger.judge.usefulness import corpus_of
    from reference.codec import decode, encode, quantize
    from reference.data import ShardSpec
    from reference.inner import DEFAULT_EPS, InnerConfig, InnerTrainer
    from reference.model import GPT, GPTConfig
    from reference.outer import FlatLayout
    from trainer.round.recovery import genesis_checkpoint

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--steps", type=int, nargs="+", default=[8, 12])
    parser.add_argument("--node-threads", type=int, default=1)
    parser.add_argument("--ledger-threads", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--preset", default="tiny", help="model preset (reference.model.PRESETS)")
    parser.add_argument("--quick", action="store_true", help="3 rounds, 2 nodes")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.nodes = 3, 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    began = time.monotonic()
    cfg = GPTConfig.preset(args.preset)
    base = {n: t.float() for n, t in genesis_checkpoint(cfg, 0).weights.items()}
    corpus = corpus_of(None)
    layout = FlatLayout({n: t.shape for n, t in base.items()})

    def node_train(rows: torch.Tensor, steps: int) -> dict[str, torch.Tensor]:
        torch.set_num_threads(args.node_threads)
        model = GPT(cfg)
        model.load_state_dict(base, strict=False)
        inner = InnerConfig(steps=steps, lr=args.lr, batch_size=args.batch)
        InnerTrainer(model, inner, keep_state=False).train(rows)
        return {n: p.detach().clone() for n, p in model.named_parameters()}

    honest: list[float] = []
    cheats: list[float] = []
    for rnd in range(1, args.rounds + 1):
        updates = []
        origin = layout.flatten(base)
        for steps in args.steps:
            for i in range(args.nodes):
                node = "0x" + f"{i + 1:040x}"
                tokens = args.batch * steps * cfg.seq_len
                spec = ShardSpec.for_node(RUN, rnd, node, tokens, (10_000,))
                rows = corpus.shard_rows(spec, cfg.seq_len)
                local = node_train(rows, steps)
                packet = encode(origin, layout.flatten(local), "int8")
                torch.set_num_threads(args.ledger_threads)
                inputs = ReplayInputs(
                    RUN, rnd, node, tokens, steps, args.lr, (10_000,), args.preset
                )
                replayed = replay_pseudo_gradient(base, inputs, corpus)
                coded = quantize(layout.flatten(replayed), packet.fmt, block_size=packet.block_size)
                reference = decode(coded)
                honest.append(_rel(decode(packet), reference))
                skipped = node_train(rows[: args.batch * (steps - 1)], steps - 1)
                cheat = encode(origin, layout.flatten(skipped), "int8")
                cheats.append(_rel(decode(cheat), reference))
                log.info("round %d H %d node %d: honest %.3g, one step skipped %.3g",
                         rnd, steps, i, honest[-1], cheats[-1])  # fmt: skip
                updates.append(local)
        base = {
            n: t - 0.9 * sum(t - u[n] for u in updates) / len(updates) if n in updates[0] else t
            for n, t in base.items()
        }
    ordered = sorted(honest)
    summary: dict[str, object] = {
        "node_rounds": len(honest),
        "honest_rel_error_max": ordered[-1],
        "honest_rel_error_p90": ordered[int(0.9 * (len(ordered) - 1))],
        "honest_above_tolerance": sum(e > AUDIT_TOLERANCE for e in honest),
        "skip_one_step_rel_error_min": min(cheats),
        "tolerance": AUDIT_TOLERANCE,
        "eps": DEFAULT_EPS,
        "node_threads": args.node_threads,
        "ledger_threads": args.ledger_threads,
        "steps": args.steps,
        "preset": args.preset,
        "wall_s": round(time.monotonic() - began, 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
