"""The GPU check (issue 26): a node trained on a GPU in pinned fp32, replayed by the ledger on CPU.

``python -m bench.gpu_audit`` is the one prepared script to run where a GPU is lent (under 10
minutes on one GPU; docs/ledger.md, "Segment audit"). For each governed preset (``tiny`` and
``cpu10m`` at H 50, lr 3e-3, batch 8) an honest node trains a few rounds on the GPU inside
``reference.inner.pinned`` (fp32, TF32 off, deterministic algorithms: what ``coloco node run
--device cuda`` does) with the protocol's AdamW (``InnerConfig.protocol``, carried when
``reference.inner.CARRY_STATE``: the node keeps its AdamW across its rounds, as bench.audit's
nodes do) and keeps its state every k = H/10 steps; the ledger's segment replay
(``reference.segment.replay_segment`` + ``segment_error``, what
``ledger.judge.replay.audit_segment`` runs) replays every segment on the CPU (one thread) from
the node's own start state. It reports:

- the worst honest segment error against ``SEGMENT_TOLERANCE`` and against the smallest cheat
  (one step skipped, lr x 0.9, trained on the same GPU in the same pinned mode);
- the same segments trained under bf16 autocast (``--bf16``): those rounds fail the audit;
- one-step verdicts (``reference.bisect.check_step``, what ``coloco audit`` re-checks): a GPU
  step replayed on the CPU against ``ONE_STEP_TOLERANCE``;
- the verdict that decides: the ledger's segment replay is a screen, and a segment that fails it
  is bisected to one step (ledger.judge.bisect). Here each honest segment that fails the screen
  is re-trained step by step on the device from its start (keeping each step's state: the bench
  has only boundary states) and every step is checked alone on the CPU (``check_step``;
  ``bench.audit.recheck_segment``, the one re-check both benches run):
  ``honest_failed_screen`` segments above ``SEGMENT_TOLERANCE``, ``honest_penalised`` those
  with a step above ``ONE_STEP_TOLERANCE`` (what the ledger would penalise), and
  ``one_step_worst_honest`` the worst honest step (these and the round's first steps);
  ``one_step_top_worst_honest`` the round's first steps read on their top (reference.confirm, which
  confirms a fraud verdict above ``one_step_top_threshold``: ``one_step_top_confirmed_honest``
  must be 0).
  ``--recheck-all`` re-checks every honest segment so (the smoke test's path on a CPU, where
  none fails the screen).

``--smoke``: the first 2 segments and 3 one-step verdicts of one tiny node's round; where
CUDA is absent it says so (``"device": "cpu"``) and runs the same path CPU-vs-CPU (the node
pinned, so on one thread like the replay). Prints one JSON object as its last line.
"""

from __future__ import annotations

import os

# torch.use_deterministic_algorithms needs this before cuBLAS starts (reference.inner.pinned
# sets it too; here it is set before torch loads)
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import argparse
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import torch

from bench import emit
from bench.audit import recheck_segment
from ledger.core.config import ONE_STEP_TOLERANCE, SEGMENT_TOLERANCE
from reference.bisect import check_step, schedule_step, step_config
from reference.confirm import CONFIRM_FACTOR, confirm_step
from reference.inner import CARRY_STATE, InnerConfig, InnerTrainer, pinned
from reference.model import GPT, GPTConfig
from reference.segment import (
    STEP,
    State,
    capture_state,
    fresh_state,
    load_state,
    replay_segment,
    segment_error,
    segment_rows,
)

log = logging.getLogger("bench.gpu_audit")
RUN = bytes(range(32))
H, LR, BATCH = 50, 3e-3, 8  # the governed settings (trainer.round.runconfig)
K = H // 10
LEDGER_THREADS = 1
ONE_STEP_CHECKS = 10


@dataclass(frozen=True)
class Preset:
    name: str
    rounds: int
    nodes: int
    segments: int = H // K  # of the round's H/k (the smoke trains and replays the first 2)
    one_step_checks: int = ONE_STEP_CHECKS


@dataclass
class Tally:
    honest: list[float] = field(default_factory=list)
    cheats: dict[str, list[float]] = field(default_factory=dict)
    bf16: list[float] = field(default_factory=list)
    one_step: list[float] = field(default_factory=list)
    one_step_cheat: list[float] = field(default_factory=list)
    one_step_top: list[float] = field(default_factory=list)  # honest steps on the step's top
    rechecked: list[float] = field(default_factory=list)  # worst step of each re-checked segment
    recheck_steps: list[float] = field(default_factory=list)  # every re-checked step's error
    failed_screen: int = 0
    recheck_end_gap: float = 0.0  # the step-by-step re-training against the committed end


def _inner(steps: int, lr: float = LR) -> InnerConfig:
    """The protocol's AdamW for ``steps`` steps in its mode (``CARRY_STATE``: the carried
    constants, the node keeping its AdamW across rounds; else the fresh state's)."""
    return InnerConfig.protocol(steps, lr, BATCH, carried=CARRY_STATE)


def _trainer(
    cfg: GPTConfig, device: torch.device, state: State, inner: InnerConfig
) -> InnerTrainer:
    """A node's trainer on ``device`` holding a boundary state (AdamW kept across calls)."""
    model = GPT(cfg).to(device)
    trainer = InnerTrainer(model, inner, keep_state=True)
    load_state(model, trainer.optimizer(), state)
    trainer.global_step = int(float(state[STEP]))
    return trainer


def _segment(
    cfg: GPTConfig,
    device: torch.device,
    start: State,
    rows: torch.Tensor,
    mode: Callable[[], AbstractContextManager[None]],
    *,
    lr: float = LR,
    skip: int | None = None,
) -> State:
    """The end state a node on ``device`` commits for k steps from ``start`` under ``mode``
    (``skip``: the step it leaves out but claims, the smallest cheat)."""
    batches = [rows[i * BATCH : (i + 1) * BATCH] for i in range(K)]
    if skip is not None:
        del batches[skip]
    trainer = _trainer(cfg, device, start, _inner(len(batches), lr))
    with mode():
        trainer.train(torch.cat(batches))
    end = capture_state(trainer.model, trainer.optimizer())
    end[STEP] = start[STEP] + K
    return end


def _bf16_segment(cfg: GPTConfig, device: torch.device, start: State, rows: torch.Tensor) -> State:
    """The k steps as ``--bf16`` trains them: InnerTrainer's step under bf16 autocast (on a CPU
    asked for explicitly: InnerTrainer autocasts on a GPU only)."""
    trainer = _trainer(cfg, device, start, _inner(K))
    model, opt = trainer.model, trainer.optimizer()
    for i in range(K):
        batch = rows[i * BATCH : (i + 1) * BATCH].to(device)
        with torch.autocast(device.type, torch.bfloat16):
            _, loss = model(batch[:, :-1], batch[:, 1:])
        assert loss is not None
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    end = capture_state(model, opt)
    end[STEP] = start[STEP] + K
    return end


def _recheck(  # noqa: PLR0917 - the failed segment and where it ran
    cfg: GPTConfig, device: torch.device, start: State, end: State, rows: torch.Tensor,
    tally: Tally,
) -> None:  # fmt: skip
    """The one-step verdict of a segment that failed the screen (bench.audit.recheck_segment):
    its k steps re-trained one at a time on ``device`` (pinned) from ``start``, each step checked
    alone on the CPU from the node's own state; the segment's worst step goes into
    ``tally.rechecked``."""
    trainer = _trainer(cfg, device, start, _inner(1))

    def step(batch: torch.Tensor) -> None:
        with pinned(device):
            trainer.train(batch)

    done = recheck_segment(trainer, start, rows, cfg, LEDGER_THREADS, step=step)
    tally.recheck_steps.extend(done.errors)
    tally.recheck_end_gap = max(tally.recheck_end_gap, done.end_gap(end))
    tally.rechecked.append(done.worst)


def run_preset(
    preset: Preset, device: torch.device, tally: Tally, recheck_all: bool = False
) -> None:
    from ledger.judge.usefulness import corpus_of
    from reference.data import ShardSpec
    from trainer.round.recovery import genesis_checkpoint

    cfg = GPTConfig.preset(preset.name)
    corpus = corpus_of(None)
    seg_cfg = _inner(K)
    base = {n: t.float() for n, t in genesis_checkpoint(cfg, 0).weights.items()}
    tokens = H * BATCH * cfg.seq_len
    honest_mode = lambda: pinned(device)  # noqa: E731
    carried: dict[int, State] = {}  # each node's last state (its AdamW kept: CARRY_STATE)
    for rnd in range(1, preset.rounds + 1):
        updates = []
        for i in range(preset.nodes):
            node = "0x" + f"{i + 1:040x}"
            rows = corpus.shard_rows(ShardSpec.for_node(RUN, rnd, node, tokens, (10_000,)),
                                     cfg.seq_len)  # fmt: skip
            start = fresh_state(base)
            if CARRY_STATE and i in carried:  # the moments and step of its previous round
                start = {**carried[i], **{n: v for n, v in start.items() if "weights/" in n}}
            boundaries = [start]
            for j in range(preset.segments):
                seg = segment_rows(rows, j * K, K, BATCH)
                boundaries.append(_segment(cfg, device, boundaries[-1], seg, honest_mode))
            carried[i] = boundaries[-1]
            updates.append({n: boundaries[-1][f"weights/{n}"] for n in base})
            for j in range(preset.segments):  # the ledger replays every segment on its CPU
                seg = segment_rows(rows, j * K, K, BATCH)
                start, end = boundaries[j], boundaries[j + 1]
                replayed = replay_segment(start, seg, seg_cfg, cfg,
                                          first_step=schedule_step(start),
                                          threads=LEDGER_THREADS)  # fmt: skip
                tally.honest.append(segment_error(end, replayed, start).value)
                if tally.honest[-1] > SEGMENT_TOLERANCE:
                    tally.failed_screen += 1
                if tally.honest[-1] > SEGMENT_TOLERANCE or recheck_all:  # the verdict decides
                    _recheck(cfg, device, start, end, seg, tally)
                if i == 0 and j in {0, preset.segments - 1}:  # the cheats and bf16, in two segments
                    claims = {
                        "skip_one": _segment(cfg, device, start, seg, honest_mode, skip=j % K),
                        "lr_x0.9": _segment(cfg, device, start, seg, honest_mode, lr=LR * 0.9),
                    }
                    for kind, claimed in claims.items():
                        err = segment_error(claimed, replayed, start).value
                        tally.cheats.setdefault(kind, []).append(err)
                    bf16 = _bf16_segment(cfg, device, start, seg)
                    tally.bf16.append(segment_error(bf16, replayed, start).value)
            log.info("%s round %d node %d: worst honest segment so far %.3g", preset.name, rnd,
                     i, max(tally.honest))  # fmt: skip
            if rnd == 1 and i == 0:
                _one_step(cfg, device, base, rows, tally, checks=preset.one_step_checks)
        base = {n: t - 0.9 * sum(t - u[n] for u in updates) / len(updates) for n, t in base.items()}


def _one_step(
    cfg: GPTConfig, device: torch.device, base: dict[str, torch.Tensor], rows: torch.Tensor,
    tally: Tally, *, checks: int,
) -> None:  # fmt: skip
    """One-step verdicts: the node's first steps on ``device`` (pinned), each re-checked on the
    CPU as ``coloco audit`` does; a step skipped but claimed is the cheat it must name."""
    inner = _inner(1)
    state = fresh_state(base)
    trainer = _trainer(cfg, device, state, inner)
    for s in range(checks):
        batch = segment_rows(rows, s, 1, BATCH)
        with pinned(device):
            trainer.train(batch)
        after = capture_state(trainer.model, trainer.optimizer())
        one = step_config(inner, schedule_step(state))
        check = check_step(state, after, batch, one, cfg, tolerance=ONE_STEP_TOLERANCE,
                           threads=LEDGER_THREADS)  # fmt: skip
        tally.one_step.append(check.error.value)
        top = confirm_step(state, after, batch, one, cfg, tolerance=ONE_STEP_TOLERANCE,
                           threads=LEDGER_THREADS)  # fmt: skip
        tally.one_step_top.append(top.error.value)
        skipped = {**state, STEP: state[STEP] + 1}
        tally.one_step_cheat.append(
            check_step(state, skipped, batch, one, cfg, tolerance=ONE_STEP_TOLERANCE).error.value
        )
        state = after


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--smoke", action="store_true", help="2 segments and 3 steps of one tiny node (tests)"
    )
    parser.add_argument(
        "--recheck-all", action="store_true",
        help="re-check every honest segment step by step, not only those that fail the screen",
    )  # fmt: skip
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    began = time.monotonic()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if not cuda:
        log.warning("CUDA is absent: running the CPU-vs-CPU path (no GPU measured)")
    presets = [Preset("tiny", rounds=3, nodes=2), Preset("cpu10m", rounds=2, nodes=1)]
    if args.smoke:
        presets = [Preset("tiny", rounds=1, nodes=1, segments=2, one_step_checks=3)]
    torch.manual_seed(0)
    tallies = {p.name: Tally() for p in presets}
    for p in presets:
        run_preset(p, device, tallies[p.name], recheck_all=args.recheck_all)
    honest = [e for t in tallies.values() for e in t.honest]
    cheats = [e for t in tallies.values() for v in t.cheats.values() for e in v]
    bf16 = [e for t in tallies.values() for e in t.bf16]
    rechecked = [e for t in tallies.values() for e in t.rechecked]
    one = [e for t in tallies.values() for e in t.one_step + t.recheck_steps]
    one_cheat = [e for t in tallies.values() for e in t.one_step_cheat]
    top = [e for t in tallies.values() for e in t.one_step_top]  # honest steps on their top
    top_threshold = CONFIRM_FACTOR * ONE_STEP_TOLERANCE
    worst, smallest = max(honest), min(cheats)
    summary: dict[str, object] = {
        "device": device.type,
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "presets": [p.name for p in presets],
        "segment_steps": K,
        "honest_segments": len(honest),
        "worst_honest_error": worst,
        "worst_honest_by_preset": {n: max(t.honest) for n, t in tallies.items()},
        "tolerance": SEGMENT_TOLERANCE,
        "honest_failed_screen": sum(t.failed_screen for t in tallies.values()),
        "failed_screen_by_preset": {n: t.failed_screen for n, t in tallies.items()},
        "honest_rechecked": len(rechecked),
        "honest_penalised": sum(e > ONE_STEP_TOLERANCE for e in rechecked),
        "recheck_end_gap": max(t.recheck_end_gap for t in tallies.values()),
        "smallest_cheat_error": smallest,
        "smallest_by_cheat": {
            kind: min(e for t in tallies.values() for e in t.cheats.get(kind, []))
            for kind in ("skip_one", "lr_x0.9")
        },
        "margin": smallest / worst if worst > 0 else None,
        "cheats_passed": sum(e <= SEGMENT_TOLERANCE for e in cheats),
        "bf16_segments": len(bf16),
        "bf16_smallest_error": min(bf16),
        "bf16_failed": sum(e > SEGMENT_TOLERANCE for e in bf16),
        "one_step_checks": len(one),
        "one_step_worst_honest": max(one),
        "one_step_tolerance": ONE_STEP_TOLERANCE,
        "one_step_honest_penalised": sum(e > ONE_STEP_TOLERANCE for e in one),
        "one_step_smallest_cheat": min(one_cheat),
        # a false fraud verdict against these honest GPU steps is never confirmed on the top
        "one_step_top_worst_honest": max(top),
        "one_step_top_threshold": top_threshold,
        "one_step_top_confirmed_honest": sum(e > top_threshold for e in top),
        "wall_s": round(time.monotonic() - began, 1),
    }
    emit("gpu_audit", summary)
    return summary


if __name__ == "__main__":
    main()
