"""The segment audit, calibrated: nodes on torch's default threads against the smallest cheats.

Each configuration runs a few rounds of a small run. Every node trains its round as a node does
(``reference.inner.InnerTrainer``, H inner steps, on torch's default threads) and keeps its
state (weights + AdamW moments + step, ``reference.segment``) every k = H/10 steps; the ledger
replays *every* segment of every honest node-round from the node's own start state
(``reference.segment.replay_segment``, on its own thread count) and measures
``segment_error`` against the node's end state. The run moves on by the mean of the updates
(outer lr 0.9), so later rounds start from trained weights. Configurations (``--quick``):

- ``tiny-2t-ledger1t``: tiny model, node on the default threads, ledger on 1 thread;
- ``tiny-2t-microbatch-ledger2t``: the node splits each batch in two micro-batches (gradient
  accumulation: other reduction shapes), ledger on 2 threads;
- ``tiny-2t-fresh-adamw``: the node starts a fresh AdamW every round (the protocol's other mode,
  ``reference.inner.CARRY_STATE`` False), ledger on 1 thread;
- ``cpu10m-h50``: the cpu10m preset at the governed settings (H 50, lr 3e-3, batch 8), node on the
  default threads, ledger on 1 thread (fewer rounds: each step costs about 1 CPU s).

Cheats, each in one segment of a round (the segment an audit would have to draw): one step
skipped, a wrong shard, lr x 0.9, bf16 autocast for fp32, a stale base (the previous round's,
caught at the first segment, which starts at the public base), half the steps scaled up to the
segment's length. ``audit_cpu_ratio`` is the ledger's process CPU seconds for the audits at the
governed draw (``AUDIT_FRACTION`` x ``AUDIT_SEGMENTS`` segments of the measured replay cost per
node-round) over the nodes' process CPU seconds of training, the largest over the
configurations; ``audit_cpu_ratio_model`` is the same from step counts (p x s x k / H).

The judge compares a segment's end on **sketches** (reference.sketch: the count-sketch the
node's leaf commits, seeded by the end state's hash), so the screen's figures
(``worst_honest_error``, ``smallest_cheat_error``, ``margin``, ``honest_failed_screen``) are
read on sketches; the same errors on full states are ``full_state_*``. ``audit_bytes_moved`` is what
the ledger downloads per audited node-round (the blobs the node uploads for the plan of each
possible drawn segment, their encoded sizes, averaged; the largest configuration), beside one
full state (12 B/param) and the three the audit moved before sketches
(``audit_bytes_before``); ``full_states_moved_max`` counts the full states in any plan (<= 1).
``last_binding_int8_ratio_max``: the last boundary's sketch against an int8 packet of the
honest pseudo-gradient, as a share of what the packet's rounding allows (< 1 passes; fp32
binds exactly, ``last_binding_fp32_max`` 0).

The decision (docs/ledger.md, "one-step verdict"): the segment replay is a screen, and a segment
that fails it is bisected to one step, which decides. Each honest segment above
``SEGMENT_TOLERANCE`` (``honest_failed_screen``) is re-checked as the ledger would ask its node:
re-trained step by step from its start by the node (its threads, micro-batches), each step's state
kept and every step replayed alone on the ledger's threads (:func:`recheck_segment`, shared with
bench.gpu_audit; ``honest_rechecked``); ``honest_penalised`` counts the re-checked segments whose
worst step is above ``ONE_STEP_TOLERANCE`` (what the ledger penalises), and
``one_step_worst_honest`` / ``one_step_checks`` / ``one_step_honest_penalised`` include the
re-checked steps. Each cheat segment that fails the screen is bisected
(``reference.bisect.bisect_segment``, the ledger's, against the states the cheater claims inside
its segment: those its procedure passed through, its last one again for the steps it did not
take); ``cheats_exonerated`` counts the bisections whose named step holds (must be 0;
``exonerated_by_cheat``, ``decision_smallest_by_cheat`` the named steps' errors).
``worst_honest_error``, ``margin`` and the ``full_state_*`` keys stay the screen's figures.
``skip_one_margin``: the smallest skip_one segment error over the worst honest segment error (the
screen's margin against one skipped step of H 50, issue 26's definition). ``decision_margin``:
the smallest one-step cheat (the round's skipped and lr x 0.9 steps, and the steps the cheats'
bisections named) over the worst honest one-step error (re-checked steps included).
``--recheck-all`` re-checks every honest segment and bisects every cheat segment (the smoke
test's path, where none fails the screen).

Prints one JSON object as its last line and writes a PNG histogram (``--png``, default
``reports/bench-audit.png``) and the JSON (``--json``) beside it.
"""

from __future__ import annotations

import os

# the nodes' idle OpenMP threads sleep instead of spinning (libgomp's default is to spin): on
# cores shared with other jobs a spinning second thread costs 4x the CPU of a tiny model's step
# without changing a bit of its result; set before torch loads
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# --gpu: deterministic cuBLAS (torch.use_deterministic_algorithms needs it before CUDA starts)
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import argparse
import dataclasses
import json
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bench import emit
from ledger.core.config import (
    ONE_STEP_TOLERANCE,
    SEGMENT_TOLERANCE,
    STAKE_IN_ROUND_REWARDS,
    Settings,
)
from reference.audit_economics import (
    caught_per_audit,
    deterrence,
    skip_one_net_gain,
    slash_in_round_rewards,
)
from reference.bisect import bisect_segment, check_step, schedule_step, step_config
from reference.inner import CARRY_STATE, InnerConfig, InnerTrainer, lr_at
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
    sketch_error,
)
from reference.sketch import make_sketch

log = logging.getLogger("bench.audit")
RUN = bytes(range(32))
CHEATS = ("skip_one", "wrong_shard", "wrong_lr", "bf16", "stale_base", "half_scaled_up")


@dataclass(frozen=True)
class Setup:
    name: str
    preset: str
    rounds: int
    nodes: int
    inner_steps: int = 50
    lr: float = 3e-3
    batch: int = 8
    ledger_threads: int = 1
    micro_batches: int = 1
    device: str = "cpu"  # "cuda": the node trains on the GPU in pinned fp32 (--gpu)
    carried: bool = CARRY_STATE  # the node keeps its AdamW across rounds (the protocol's mode)
    cheat_rounds: tuple[int, ...] = ()  # rounds in which node 0 also tries every cheat


@dataclass
class Tally:
    honest: list[float] = field(default_factory=list)  # read on sketches, as the judge does
    cheats: dict[str, list[float]] = field(default_factory=dict)
    full_honest: list[float] = field(default_factory=list)  # the same on full states
    full_cheats: dict[str, list[float]] = field(default_factory=dict)
    train_cpu: float = 0.0
    node_rounds: int = 0
    replay_cpu: float = 0.0
    replayed: int = 0
    bytes_moved: list[int] = field(default_factory=list)  # per audited node-round's plan
    full_states: int = 0  # the most full states one plan moves
    state_bytes: int = 0  # one full state, encoded
    binding_int8: list[float] = field(default_factory=list)
    binding_fp32: list[float] = field(default_factory=list)
    failed_screen: int = 0  # honest segments above the screen's tolerance
    rechecked: list[float] = field(default_factory=list)  # worst step of each re-checked segment
    recheck_steps: list[float] = field(default_factory=list)  # every re-checked step's error
    recheck_end_gap: float = 0.0  # the step-by-step re-training against the committed end
    cheat_verdicts: dict[str, list[float]] = field(default_factory=dict)
    """Per cheat, the one-step error of the step its bisection named (segments failing the
    screen); above ONE_STEP_TOLERANCE: caught by the decision, else exonerated."""


@dataclass(frozen=True)
class Recheck:
    """A segment re-checked step by step: each step's one-step error and the state the
    step-by-step re-training ends at."""

    errors: tuple[float, ...]
    end: State

    @property
    def worst(self) -> float:
        return max(self.errors, default=0.0)

    def end_gap(self, committed: State) -> float:
        """The largest absolute difference from the node's committed end state."""
        return max(float((self.end[n].cpu() - committed[n].cpu()).abs().max())
                   for n in committed if n != STEP)  # fmt: skip


def recheck_segment(  # noqa: PLR0917 - the failed segment and how its node steps
    trainer: InnerTrainer,
    start: State,
    rows: torch.Tensor,
    model_cfg: GPTConfig,
    threads: int,
    step: Callable[[torch.Tensor], None] | None = None,
) -> Recheck:
    """The one-step verdict of a segment that failed the screen, as the ledger decides it
    (ledger.judge.bisect: the node's own states inside the segment, each step checked alone): the
    segment's steps re-trained one at a time from ``start`` by the node (``trainer`` holds
    ``start``, its config one step; ``step(batch)`` one step as the node takes it, default
    ``trainer.train``), keeping each step's state (the bench has only boundary states), and every
    step replayed alone from the node's state on the ledger's ``threads``
    (``reference.bisect.check_step``). Shared by bench.audit and bench.gpu_audit."""
    inner = trainer.cfg
    b = inner.batch_size

    def node_step(batch: torch.Tensor) -> None:
        trainer.train(batch)

    train = step or node_step
    state, errors = start, []
    for t in range(rows.shape[0] // b):
        batch = rows[t * b : (t + 1) * b]
        train(batch)
        after = capture_state(trainer.model, trainer.optimizer())
        one = step_config(inner, schedule_step(state))
        check = check_step(state, after, batch, one, model_cfg, tolerance=ONE_STEP_TOLERANCE,
                           threads=threads)  # fmt: skip
        errors.append(check.error.value)
        state = after
    return Recheck(tuple(errors), state)


def _hash(state: State) -> bytes:
    from reference.trace import state_hash

    return bytes(state_hash(state))


def _moved(setup: Setup, boundaries: list[State], sketches: list[int], tally: Tally) -> None:
    """The bytes the ledger downloads for the plan of each segment that could be drawn (one per
    audit): the full start state (none for segment 0 at the public base), the sketches of the
    end and of the last boundary (ledger.judge.segments.SegmentPlan); encoded blobs."""
    from ledger.judge.segments import SegmentPlan
    from protocol.blobs import encode_blob

    marks = tuple(range(len(boundaries)))
    for j in range(len(boundaries) - 1):
        plan = SegmentPlan((j,), marks, public_start=not setup.carried)
        full = sum(len(encode_blob(boundaries[b])) for b in plan.full)
        tally.bytes_moved.append(full + sum(sketches[b] for b in plan.sketches))
        tally.full_states = max(tally.full_states, len(plan.full))
    tally.state_bytes = max(tally.state_bytes, len(encode_blob(boundaries[-1])))


def _binding(base: dict[str, torch.Tensor], last: State, sketch: State, tally: Tally) -> None:
    """The last boundary's sketch against the submitted pseudo-gradient (ledger.judge.segments
    .last_gap): fp32 (exact) and an int8 packet (within its rounding bound)."""
    from ledger.judge.segments import last_gap
    from reference.codec import decode, quantize
    from reference.outer import FlatLayout
    from reference.settings import WireFormat

    g = {n: (base[n] - last[f"weights/{n}"]).contiguous() for n in base}
    gap, allowed = last_gap(sketch, g, None, _hash(last))
    tally.binding_fp32.append(gap)
    layout = FlatLayout({n: t.shape for n, t in g.items()})
    packet = quantize(layout.flatten(g), WireFormat.INT8)
    decoded = layout.unflatten(decode(packet))
    gap, allowed = last_gap(sketch, decoded, packet, _hash(last))
    tally.binding_int8.append(gap / allowed)


def _step(
    model: GPT,
    opt: torch.optim.Optimizer,
    batch: torch.Tensor,
    lr: float,
    *,
    micro: int = 1,
    bf16: bool = False,
) -> None:
    """One AdamW step as ``InnerTrainer`` takes it, with the node's own choices: micro-batches
    (gradient accumulation), bf16 autocast (the cheat), another lr (the cheat)."""
    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    batch = batch.to(next(model.parameters()).device)
    for part in batch.chunk(micro):
        with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
            _, loss = model(part[:, :-1], part[:, 1:])
        assert loss is not None
        (loss * (part.shape[0] / batch.shape[0])).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def _trainer_at(cfg: GPTConfig, setup: Setup, state: State, steps: int) -> InnerTrainer:
    """A node's trainer (AdamW kept across its calls) holding a boundary state."""
    model = GPT(cfg).to(setup.device)
    inner = InnerConfig.protocol(steps, setup.lr, setup.batch, carried=setup.carried)
    trainer = InnerTrainer(model, inner, keep_state=True)
    load_state(model, trainer.optimizer(), state)
    trainer.global_step = int(float(state[STEP]))
    return trainer


def _cheat(  # noqa: PLR0917
    kind: str,
    cfg: GPTConfig,
    setup: Setup,
    start: State,
    rows: torch.Tensor,
    other_rows: torch.Tensor,
    k: int,
    rng: random.Random,
) -> list[State]:
    """The states a cheater claims for one segment of k steps from ``start``: after each of the
    k steps (the last is the end it commits). Inside the segment it claims the states its own
    procedure passed through, one per batch it took, then its last one again until the end (the
    steps it did not take), each with the step count it claims."""
    trainer = _trainer_at(cfg, setup, start, k)
    model, opt = trainer.model, trainer.optimizer()
    b = setup.batch
    batches = [rows[i * b : (i + 1) * b] for i in range(k)]
    if kind == "skip_one":
        del batches[rng.randrange(k)]
    elif kind == "wrong_shard":
        batches = [other_rows[i * b : (i + 1) * b] for i in range(k)]
    elif kind == "half_scaled_up":
        batches = batches[: max(1, k // 2)]
    scale = 0.9 if kind == "wrong_lr" else 1.0
    states: list[State] = []
    for i, batch in enumerate(batches):  # the protocol's schedule (a fresh state's warmup)
        lr = scale * lr_at(trainer.cfg, trainer.global_step + i)
        _step(model, opt, batch, lr, bf16=kind == "bf16")
        states.append(capture_state(model, opt))
    states += [states[-1]] * (k - len(states))
    end = dict(states[-1])
    if kind == "half_scaled_up":
        scale = k / len(batches)
        for key, value in end.items():
            if key.startswith("weights/"):
                end[key] = start[key] + scale * (value - start[key])
    states[-1] = end
    # the cheater claims the steps it did not take
    return [{**state, STEP: start[STEP] + i + 1} for i, state in enumerate(states)]


def _node_step(trainer: InnerTrainer, setup: Setup, batch: torch.Tensor) -> None:
    """One of the node's steps as it trains them (re-checking a segment step by step)."""
    if setup.micro_batches == 1 and setup.device == "cpu":
        trainer.train(batch)
    else:
        lr = lr_at(trainer.cfg, trainer.global_step)  # the protocol's schedule, as train() does
        _step(trainer.model, trainer.optimizer(), batch, lr, micro=setup.micro_batches)
        trainer.global_step += 1


def run_setup(
    setup: Setup,
    node_threads: int,
    tally: Tally,
    rng: random.Random,
    one_step: OneStep,
    *,
    recheck_all: bool = False,
) -> None:
    """One configuration's rounds into ``tally`` (``recheck_all``: every honest segment
    re-checked step by step and every cheat segment bisected, not only those that fail the
    screen)."""
    from ledger.judge.usefulness import corpus_of
    from reference.data import ShardSpec
    from trainer.round.recovery import genesis_checkpoint

    cfg = GPTConfig.preset(setup.preset)
    corpus = corpus_of(None)
    if setup.device == "cuda":  # the pinned precision a GPU node must train in (issue 26)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.use_deterministic_algorithms(True, warn_only=True)
    h, b = setup.inner_steps, setup.batch
    k = max(1, h // 10)
    seg_cfg = InnerConfig.protocol(k, setup.lr, b, carried=setup.carried)  # the protocol's AdamW
    base = {n: t.float() for n, t in genesis_checkpoint(cfg, 0).weights.items()}
    previous_base = base
    carried: dict[int, State] = {}
    tokens = h * b * cfg.seq_len
    for rnd in range(1, setup.rounds + 1):
        updates = []
        for i in range(setup.nodes):
            node = "0x" + f"{i + 1:040x}"
            rows = corpus.shard_rows(
                ShardSpec.for_node(RUN, rnd, node, tokens, (10_000,)), cfg.seq_len
            )
            torch.set_num_threads(node_threads)
            start = fresh_state(base)
            if setup.carried and i in carried:  # the moments and step of its previous round
                start = {**carried[i], **{k_: v for k_, v in start.items() if "weights/" in k_}}
            trainer = _trainer_at(cfg, setup, start, k)  # the node's path: InnerTrainer
            model, opt = trainer.model, trainer.optimizer()
            first = trainer.global_step
            boundaries = [start]
            began = time.process_time()
            for j in range(h // k):
                seg = segment_rows(rows, j * k, k, b)
                if setup.micro_batches == 1 and setup.device == "cpu":
                    trainer.train(seg)
                else:
                    for s in range(k):  # the protocol's schedule (a fresh state's warmup)
                        lr = lr_at(trainer.cfg, trainer.global_step)
                        _step(model, opt, seg[s * b : (s + 1) * b], lr,
                              micro=setup.micro_batches)  # fmt: skip
                        trainer.global_step += 1
                boundaries.append(capture_state(model, opt))
            tally.train_cpu += time.process_time() - began
            tally.node_rounds += 1
            carried[i] = boundaries[-1]
            updates.append({n: boundaries[-1][f"weights/{n}"] for n in base})
            hashes = [_hash(state) for state in boundaries]  # the node's leaves
            sketches = [make_sketch(state, base, h_) for state, h_ in zip(boundaries, hashes,
                                                                          strict=True)]  # fmt: skip
            _moved(setup, boundaries, [len(_blob(sk)) for sk in sketches], tally)
            _binding(base, boundaries[-1], sketches[-1], tally)
            replays: list[State] = []
            for j in range(h // k):  # the ledger replays every segment (the draw picks s of them)
                began = time.process_time()
                replayed = replay_segment(
                    boundaries[j],
                    segment_rows(rows, j * k, k, b),
                    seg_cfg,
                    cfg,
                    first_step=first + j * k,
                    threads=setup.ledger_threads,
                )
                # the judge: the start's committed sketch checked, the end read on its sketch
                make_sketch(boundaries[j], base, hashes[j])
                err = sketch_error(sketches[j + 1], replayed, boundaries[j], base, hashes[j + 1])
                tally.replay_cpu += time.process_time() - began
                tally.replayed += 1
                replays.append(replayed)
                tally.honest.append(err.value)
                full = segment_error(boundaries[j + 1], replayed, boundaries[j]).value
                tally.full_honest.append(full)
                tally.failed_screen += int(err.value > SEGMENT_TOLERANCE)
                if err.value > SEGMENT_TOLERANCE or recheck_all:  # the one-step verdict decides
                    torch.set_num_threads(node_threads)
                    _recheck(cfg, setup, boundaries[j], boundaries[j + 1],
                             segment_rows(rows, j * k, k, b), tally)  # fmt: skip
            log.info("%s round %d node %d: worst honest segment so far %.3g", setup.name, rnd, i,
                     max(tally.honest))  # fmt: skip
            if i == 0 and rnd in setup.cheat_rounds:
                other = corpus.shard_rows(
                    ShardSpec.for_node(RUN, rnd, "0x" + "f" * 40, tokens, (10_000,)), cfg.seq_len
                )
                for kind in CHEATS:
                    j = 0 if kind == "stale_base" else rng.randrange(h // k)
                    seg = segment_rows(rows, j * k, k, b)
                    audited_start = boundaries[j]
                    node_start = audited_start
                    if kind == "stale_base":  # the node trained from the previous round's base
                        stale = {f"weights/{n}": t for n, t in previous_base.items()}
                        node_start = {**audited_start, **stale}
                    torch.set_num_threads(node_threads)
                    states = _cheat(kind, cfg, setup, node_start, seg, other[: k * b], k, rng)
                    claimed = states[-1]
                    # the replay from the audited start is the honest one computed above
                    end = _hash(claimed)
                    seen = sketch_error(make_sketch(claimed, base, end), replays[j],
                                        audited_start, base, end).value  # fmt: skip
                    tally.cheats.setdefault(kind, []).append(seen)
                    full = segment_error(claimed, replays[j], audited_start).value
                    tally.full_cheats.setdefault(kind, []).append(full)
                    log.info("%s round %d cheat %s in segment %d: %.3g", setup.name, rnd, kind, j,
                             seen)  # fmt: skip
                    if seen > SEGMENT_TOLERANCE or recheck_all:  # bisected, as the ledger does
                        verdict = bisect_segment(
                            lambda i: audited_start if i == 0 else states[i - 1],  # noqa: B023
                            seg, (0, k), seg_cfg, cfg, segment_tolerance=SEGMENT_TOLERANCE,
                            one_step_tolerance=ONE_STEP_TOLERANCE, threads=setup.ledger_threads,
                        )  # fmt: skip
                        tally.cheat_verdicts.setdefault(kind, []).append(verdict.check.error.value)
                        log.info("%s round %d cheat %s: bisection names step %d of segment %d, "
                                 "one-step error %.3g", setup.name, rnd, kind, verdict.step, j,
                                 verdict.check.error.value)  # fmt: skip
            if i == 0 and rnd == 1 and setup.name == "tiny-2t-ledger1t":
                _one_step_errors(cfg, setup, base, rows, node_threads, one_step)
        previous_base = base
        base = {n: t - 0.9 * sum(t - u[n] for u in updates) / len(updates) for n, t in base.items()}


def _recheck(  # noqa: PLR0917 - the failed segment and its node
    cfg: GPTConfig, setup: Setup, start: State, end: State, rows: torch.Tensor, tally: Tally
) -> None:
    """An honest segment that failed the screen, re-checked step by step by its node
    (:func:`recheck_segment`; the node's threads set by the caller)."""
    trainer = _trainer_at(cfg, setup, start, 1)
    done = recheck_segment(trainer, start, rows, cfg, setup.ledger_threads,
                           step=lambda batch: _node_step(trainer, setup, batch))  # fmt: skip
    tally.rechecked.append(done.worst)
    tally.recheck_steps.extend(done.errors)
    tally.recheck_end_gap = max(tally.recheck_end_gap, done.end_gap(end))


def _blob(tensors: State) -> bytes:
    from protocol.blobs import encode_blob

    return encode_blob(tensors)


@dataclass
class OneStep:
    """The bisection's unit (reference.bisect): honest one-step errors, the smallest cheats at
    one step, and what re-checking one step costs against the node's round."""

    honest: list[float] = field(default_factory=list)
    cheats: dict[str, list[float]] = field(default_factory=dict)
    check_cpu: list[float] = field(default_factory=list)
    """Process CPU of one whole ``coloco audit`` check of a fraud verdict (the step at lr x 0.9,
    the smallest cheat; the kind of verdict a fraud record publishes): the three blobs decoded,
    each hashed to its name, the step's top replayed and compared (reference.verdict.recheck,
    reference.confirm)."""
    full_cpu: list[float] = field(default_factory=list)
    """The same for an honest step's verdict that holds: the whole step replayed on a model
    built for it (a fresh process has none)."""
    refute_cpu: list[float] = field(default_factory=list)
    """The same for a false verdict against an honest step (a lying ledger's): the top, which
    does not confirm it, then the whole step."""
    step_cpu: list[float] = field(default_factory=list)
    """Of which ``reference.bisect.check_step`` alone (the model already built)."""
    round_cpu: list[float] = field(default_factory=list)
    """Process CPU of the node's round: H inner steps in one ``InnerTrainer.train`` with its
    trace (a boundary committed every k = H/10 steps, reference.trace.TraceBuilder, as
    ``DiLoCo.train_local`` runs it; without writing the states to disk)."""
    steps_cpu: list[float] = field(default_factory=list)
    """Process CPU of the H inner steps alone (no trace)."""


def _one_step_errors(  # noqa: PLR0917
    cfg: GPTConfig,
    setup: Setup,
    base: dict[str, torch.Tensor],
    rows: torch.Tensor,
    threads: int,
    out: OneStep,
    checks: int | None = None,
) -> None:
    """Honest one-step errors: a node's state after every step of a round (on ``threads``), each
    step replayed on its own (the ledger's threads); at every step the cheats a one-step verdict
    must name (the step skipped but claimed, the step at lr x 0.9) and the CPU of one whole
    check (what ``coloco audit`` runs: :func:`_whole_check`) against the node's round of H
    steps (one ``InnerTrainer.train`` call, as a node trains)."""
    from reference.bisect import check_step, step_config

    torch.set_num_threads(threads)
    out.steps_cpu.append(_node_round(cfg, setup, base, rows, traced=False))
    out.round_cpu.append(_node_round(cfg, setup, base, rows, traced=True))
    trainer = _trainer_at(cfg, setup, fresh_state(base), 1)
    model, opt = trainer.model, trainer.optimizer()
    step_cfg = trainer.cfg
    n = setup.inner_steps if checks is None else min(checks, setup.inner_steps)
    states = [fresh_state(base)]
    for s in range(n):
        trainer.train(segment_rows(rows, s, 1, setup.batch))
        states.append(capture_state(model, opt))
    for s in range(n):
        batch = segment_rows(rows, s, 1, setup.batch)
        one = step_config(step_cfg, s)
        for holds, spent in ((True, out.full_cpu), (False, out.refute_cpu)):
            spent.append(_whole_check(states[s], states[s + 1], batch, one, cfg, s,
                                      setup.ledger_threads, holds=holds))  # fmt: skip
        began = time.process_time()
        check = check_step(states[s], states[s + 1], batch, one, cfg,
                           tolerance=ONE_STEP_TOLERANCE, threads=setup.ledger_threads)  # fmt: skip
        out.step_cpu.append(time.process_time() - began)
        out.honest.append(check.error.value)
        skipped = {**states[s], STEP: states[s][STEP] + 1}
        rep = replay_segment(states[s], batch, one, cfg, threads=setup.ledger_threads)
        out.cheats.setdefault("skip", []).append(segment_error(skipped, rep, states[s]).value)
        slow = dataclasses.replace(one, lr=one.lr * 0.9)
        wrong = replay_segment(states[s], batch, slow, cfg, threads=threads)
        out.cheats.setdefault("lr_x0.9", []).append(segment_error(wrong, rep, states[s]).value)
        fraud = _whole_check(states[s], wrong, batch, one, cfg, s, setup.ledger_threads,
                             holds=False, cheat=True)  # fmt: skip
        out.check_cpu.append(fraud)


def _node_round(
    cfg: GPTConfig, setup: Setup, base: dict[str, torch.Tensor], rows: torch.Tensor, *,
    traced: bool,
) -> float:  # fmt: skip
    """Process CPU of a node's H inner steps from ``base``; ``traced``: with its trace, as
    ``DiLoCo.train_local`` runs them (a boundary committed every k = H/10 steps: its state
    taken, hashed and sketched in a background thread; not written to disk)."""
    from reference.trace import TraceBuilder

    h = setup.inner_steps
    trainer = _trainer_at(cfg, setup, fresh_state(base), h)
    began = time.process_time()
    if not traced:
        trainer.train(segment_rows(rows, 0, h, setup.batch))
        return time.process_time() - began
    opt = trainer.optimizer()
    builder = TraceBuilder(trainer.model, base, optimizer=lambda: opt, background=True)
    trainer.train(segment_rows(rows, 0, h, setup.batch), on_boundary=builder,
                  trace_interval=max(1, h // 10))  # fmt: skip
    builder.trace()
    return time.process_time() - began


def _whole_check(  # noqa: PLR0917
    before: State,
    after: State,
    batch: torch.Tensor,
    one: InnerConfig,
    cfg: GPTConfig,
    step: int,
    threads: int,
    *,
    holds: bool,
    cheat: bool = False,
) -> float:
    """Process CPU of ``coloco audit``'s check of one verdict from its three blobs' bytes (what
    it fetches): decoding them, :func:`reference.verdict.recheck` (each blob hashed to the name
    the evidence gives; a verdict that differs (``holds`` False) replayed first on the step's
    top, reference.confirm; the whole step replayed on a model built for it when the top does
    not confirm it: the thread's cached replay model is dropped first, as a fresh process has
    none; the error). The re-check must agree with the states: a ``cheat``'s verdict confirmed
    on the top, an honest step holding."""
    from protocol.blobs import encode_blob, tensors_of_buffer
    from protocol.hashing import hash_state_dict
    from reference import segment
    from reference.verdict import Evidence, batch_blob, recheck

    named = {"0x" + hash_state_dict(t).hex(): encode_blob(t)
             for t in (before, after, batch_blob(batch))}  # fmt: skip
    before_h, after_h, batch_h = named
    evidence = Evidence(
        run_id="0x" + RUN.hex(), round=1, node="0x" + "01" * 20, step=step, lr=one.lr,
        before=before_h, after=after_h, batch=batch_h, model=cfg.to_dict(),
        inner={"batch_size": one.batch_size, "betas": list(one.betas), "eps": one.eps,
               "weight_decay": one.weight_decay, "grad_clip": one.grad_clip},
        error={}, tolerance=ONE_STEP_TOLERANCE, holds=holds,
    )  # fmt: skip
    segment._MODELS.__dict__.clear()  # a fresh `coloco audit` process builds its model
    began = time.process_time()
    done = recheck(evidence,  # coloco_cli.verdict's fetch: views of the bytes fetched
                   lambda h: tensors_of_buffer(memoryview(named[h]), max_bytes=len(named[h])),
                   threads=threads)  # fmt: skip
    spent = time.process_time() - began
    assert (not done.holds and done.scope == "top") if cheat else done.holds, done.to_json()
    return spent


def _plot(path: Path, honest: list[float], cheats: dict[str, list[float]], tol: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def logs(values: list[float]) -> list[float]:
        return [math.log10(max(v, 1e-12)) for v in values if math.isfinite(v)]

    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.hist(logs(honest), bins=40, color="tab:gray", alpha=0.8, label=f"honest ({len(honest)})")
    cheat_logs = [(kind, logs(v)) for kind, v in cheats.items()]
    ax.hist([v for _, v in cheat_logs], bins=20, stacked=True,
            label=[f"{kind} ({len(v)})" for kind, v in cheat_logs])  # fmt: skip
    ax.axvline(math.log10(tol), color="black", linestyle="--", label=f"tolerance {tol:g}")
    ax.set_xlabel("log10 segment error on sketches (relative to the segment's displacement)")
    ax.set_ylabel("segments")
    ax.set_title("bench.audit: honest segments vs cheats (k = H/10)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def setups(quick: bool, gpu: bool = False) -> list[Setup]:
    scale = 1 if quick else 10
    on_gpu = [
        Setup("tiny-cuda-fp32-ledger1t", "tiny", rounds=3 * scale, nodes=3, device="cuda"),
        Setup("cpu10m-h50-cuda-fp32", "cpu10m", rounds=2 * scale, nodes=2, device="cuda"),
    ]
    return [
        Setup("tiny-2t-ledger1t", "tiny", rounds=4 * scale, nodes=3, cheat_rounds=(2, 4)),
        Setup(
            "tiny-2t-microbatch-ledger2t",
            "tiny",
            rounds=3 * scale,
            nodes=3,
            ledger_threads=2,
            micro_batches=2,
            cheat_rounds=(3,),
        ),
        Setup(
            "tiny-2t-fresh-adamw",
            "tiny",
            rounds=3 * scale,
            nodes=3,
            carried=False,
            cheat_rounds=(3,),
        ),
        Setup("cpu10m-h50", "cpu10m", rounds=2 * scale, nodes=1, cheat_rounds=(2,)),
    ] + (on_gpu if gpu else [])


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="the acceptance size: 320 honest segments"
    )
    parser.add_argument("--only", nargs="*", help="configuration names to run")
    parser.add_argument(
        "--smoke", action="store_true", help="2 rounds of one tiny node (tests: the bench runs)"
    )
    parser.add_argument("--png", type=Path, default=Path("reports/bench-audit.png"))
    parser.add_argument("--json", type=Path, default=None, help="default: the PNG's .json")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--verdict",
        action="store_true",
        help="only the one-step verdicts (tiny, H 50, one round; --only NAME: another "
        "configuration's model): their errors and what one `coloco audit` check costs against "
        "the node's round; prints the verdict keys",
    )
    parser.add_argument(
        "--checks", type=int, default=None, help="--verdict: check the first N steps (default H)"
    )
    parser.add_argument(
        "--gpu",
        action="store_true",
        help="also nodes that train on the GPU in pinned fp32 (TF32 off, deterministic "
        "algorithms), replayed on the CPU: the check to run where a GPU is lent",
    )
    parser.add_argument(
        "--recheck-all",
        action="store_true",
        help="re-check every honest segment step by step and bisect every cheat segment, not "
        "only those that fail the screen (tests: the decision's path where none fails it)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    began = time.monotonic()
    node_threads = torch.get_num_threads()  # torch's default: what a node runs without flags
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    if args.verdict:
        return _verdict_only(node_threads, args.seed, args.only, args.checks)
    chosen = [s for s in setups(args.quick, args.gpu) if not args.only or s.name in args.only]
    if args.smoke:
        chosen = [dataclasses.replace(chosen[0], rounds=2, nodes=1, cheat_rounds=(2,))]
    tallies: dict[str, Tally] = {}
    one_step = OneStep()
    for setup in chosen:
        tallies[setup.name] = Tally()
        run_setup(setup, node_threads, tallies[setup.name], rng, one_step,
                  recheck_all=args.recheck_all)  # fmt: skip
    torch.set_num_threads(node_threads)

    honest = [e for t in tallies.values() for e in t.honest]
    cheats: dict[str, list[float]] = {}
    full_cheats: dict[str, list[float]] = {}
    for t in tallies.values():
        for kind, values in t.cheats.items():
            cheats.setdefault(kind, []).extend(values)
        for kind, values in t.full_cheats.items():
            full_cheats.setdefault(kind, []).extend(values)
    worst = max(honest)
    smallest = min((min(v) for v in cheats.values()), default=math.inf)
    rechecked = [e for t in tallies.values() for e in t.rechecked]
    one_honest = one_step.honest + [e for t in tallies.values() for e in t.recheck_steps]
    verdicts: dict[str, list[float]] = {}
    for t in tallies.values():
        for kind, values in t.cheat_verdicts.items():
            verdicts.setdefault(kind, []).extend(values)
    one_cheats = [e for v in one_step.cheats.values() for e in v]
    one_cheats += [e for v in verdicts.values() for e in v]
    full_worst = max(e for t in tallies.values() for e in t.full_honest)
    full_smallest = min((min(v) for v in full_cheats.values()), default=math.inf)
    moved = {n: sum(t.bytes_moved) / len(t.bytes_moved) for n, t in tallies.items()}
    largest = max(moved, key=lambda n: moved[n])
    settings = Settings(environment="development", _env_file=None)  # type: ignore[call-arg]
    p, s = settings.audit_fraction, settings.audit_segments
    slash = slash_in_round_rewards(settings.slash_bps, settings.stake_in_round_rewards)
    h = 50
    k = h // 10
    on_cpu = {s_.name for s_ in chosen if s_.device == "cpu"}  # a GPU node's CPU time is not it
    ratios = {
        name: p * s * (t.replay_cpu / t.replayed) / (t.train_cpu / t.node_rounds)
        for name, t in tallies.items()
        if name in on_cpu
    }
    summary: dict[str, object] = {
        "honest_segments": len(honest),
        "honest_failed_screen": sum(t.failed_screen for t in tallies.values()),
        "failed_screen_by_config": {n: t.failed_screen for n, t in tallies.items()},
        "honest_rechecked": len(rechecked),
        "honest_penalised": sum(e > ONE_STEP_TOLERANCE for e in rechecked),
        "recheck_end_gap": max(t.recheck_end_gap for t in tallies.values()),
        "configs": [s_.name for s_ in chosen],
        "node_threads": node_threads,
        "segment_steps": "H/10",
        "worst_honest_error": worst,
        "honest_error_p99": sorted(honest)[int(0.99 * (len(honest) - 1))],
        "worst_honest_by_config": {n: max(t.honest) for n, t in tallies.items()},
        "tolerance": SEGMENT_TOLERANCE,
        "smallest_cheat_error": smallest,
        "smallest_error_by_cheat": {kind: min(v) for kind, v in sorted(cheats.items())},
        "cheat_segments": sum(len(v) for v in cheats.values()),
        "cheats_passed": sum(e <= SEGMENT_TOLERANCE for v in cheats.values() for e in v),
        "margin": smallest / worst if worst > 0 else math.inf,
        "skip_one_margin": (min(cheats["skip_one"]) / worst if worst > 0 else math.inf)
        if cheats.get("skip_one")
        else None,  # (a bit-exact replay, node and ledger on one thread: worst 0, as margin)
        "cheats_bisected": sum(len(v) for v in verdicts.values()),
        "cheats_exonerated": sum(e <= ONE_STEP_TOLERANCE for v in verdicts.values() for e in v),
        "exonerated_by_cheat": {
            kind: sum(e <= ONE_STEP_TOLERANCE for e in v) for kind, v in sorted(verdicts.items())
        },
        "decision_smallest_by_cheat": {kind: min(v) for kind, v in sorted(verdicts.items())},
        "decision_margin": min(one_cheats) / max(one_honest)
        if one_cheats and one_honest and max(one_honest) > 0
        else None,
        "compared_on": "sketches (reference.sketch: 3 x 1024 float64 per boundary)",
        "full_state_worst_honest_error": full_worst,
        "full_state_smallest_cheat_error": full_smallest,
        "full_state_margin": full_smallest / full_worst if full_worst > 0 else math.inf,
        "full_state_smallest_error_by_cheat": {
            kind: min(v) for kind, v in sorted(full_cheats.items())
        },
        "audit_bytes_moved": round(moved[largest]),
        "audit_bytes_moved_config": largest,
        "audit_bytes_moved_by_config": {n: round(v) for n, v in moved.items()},
        "full_states_moved_max": max(t.full_states for t in tallies.values()),
        "state_bytes_by_config": {n: t.state_bytes for n, t in tallies.items()},
        "audit_bytes_before": 3 * tallies[largest].state_bytes,
        "bytes_per_param_state": 12,
        "last_binding_fp32_max": max(g for t in tallies.values() for g in t.binding_fp32),
        "last_binding_int8_ratio_max": max(g for t in tallies.values() for g in t.binding_int8),
        "one_step_worst_honest": max(one_honest) if one_honest else None,
        "one_step_tolerance": ONE_STEP_TOLERANCE,
        "one_step_checks": len(one_honest),
        "one_step_honest_penalised": sum(e > ONE_STEP_TOLERANCE for e in one_honest),
        "one_step_smallest_cheat": min((min(v) for v in one_step.cheats.values()), default=None),
        "one_step_smallest_by_cheat": {k_: min(v) for k_, v in sorted(one_step.cheats.items())},
        "one_step_margin": (
            min(min(v) for v in one_step.cheats.values()) / max(one_honest)
            if one_honest and one_step.cheats and max(one_honest) > 0
            else None
        ),
        **_verdict_cost(one_step, h),
        "audit_cpu_ratio": max(ratios.values()) if ratios else None,
        "audit_cpu_ratio_by_config": ratios,
        "audit_cpu_ratio_model": p * s * k / h,
        "audit_fraction": p,
        "audit_segments": s,
        "slash_in_round_rewards": slash,
        "stake_in_round_rewards": STAKE_IN_ROUND_REWARDS,
        "deterrence": deterrence(p, slash),
        "skip_one_detection_per_audit": caught_per_audit(h, k, s),
        "skip_one_expected_net_gain": skip_one_net_gain(h, k, s, p, slash),
        "wall_s": round(time.monotonic() - began, 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    args.png.parent.mkdir(parents=True, exist_ok=True)
    try:
        _plot(args.png, honest, cheats, SEGMENT_TOLERANCE)  # the judge's errors: on sketches
        summary["png"] = str(args.png)
    except ImportError:  # matplotlib is a dependency; a trimmed install may lack it
        summary["png"] = None
    out = args.json or args.png.with_suffix(".json")
    errors = {
        "honest_errors": honest,
        "cheat_errors": cheats,
        "full_state_honest_errors": [e for t in tallies.values() for e in t.full_honest],
        "full_state_cheat_errors": full_cheats,
    }  # the file keeps the histogram's data
    out.write_text(json.dumps({**summary, **errors}, indent=1) + "\n", encoding="utf-8")
    emit("audit", summary)
    return summary


def _verdict_cost(one_step: OneStep, h: int) -> dict[str, float | None]:
    """One fraud verdict re-checked (`coloco audit`, the whole check: the step's top) over the
    node's round (H steps and its trace); the same over the H bare steps; an honest step's
    verdict (the whole step) and a false verdict refuted (the top, then the whole step) over
    the round; and the one-step replay alone (``check_step``, the model built) over it."""
    if not one_step.check_cpu:
        return {"verdict_cost_ratio": None, "verdict_cost_ratio_bare_steps": None,
                "verdict_full_cost_ratio": None, "verdict_refute_cost_ratio": None,
                "verdict_step_ratio": None, "verdict_cost_ratio_model": 1 / h}  # fmt: skip
    check, full, refute, step, round_cpu, steps_cpu = (
        sum(v) / len(v)  # means, as the round's is
        for v in (one_step.check_cpu, one_step.full_cpu, one_step.refute_cpu, one_step.step_cpu,
                  one_step.round_cpu, one_step.steps_cpu)
    )  # fmt: skip
    return {
        "verdict_cost_ratio": check / round_cpu,
        "verdict_cost_ratio_bare_steps": check / steps_cpu,
        "verdict_full_cost_ratio": full / round_cpu,
        "verdict_refute_cost_ratio": refute / round_cpu,
        "verdict_step_ratio": step / round_cpu,
        "verdict_cost_ratio_model": 1 / h,
    }


def _verdict_only(
    node_threads: int, seed: int, only: list[str] | None, checks: int | None
) -> dict[str, object]:
    """``--verdict``: the one-step part alone (one round of one node; tiny unless ``only``
    names another configuration; ``checks``: the first steps checked)."""
    from ledger.judge.usefulness import corpus_of
    from reference.data import ShardSpec
    from trainer.round.recovery import genesis_checkpoint

    began = time.monotonic()
    setup = next(s for s in setups(quick=True) if not only or s.name in only)
    cfg = GPTConfig.preset(setup.preset)
    base = {n: t.float() for n, t in genesis_checkpoint(cfg, 0).weights.items()}
    tokens = setup.inner_steps * setup.batch * cfg.seq_len
    rows = corpus_of(None).shard_rows(
        ShardSpec.for_node(RUN, 1, "0x" + f"{1:040x}", tokens, (10_000,)), cfg.seq_len
    )
    one_step = OneStep()
    torch.manual_seed(seed)
    _one_step_errors(cfg, setup, base, rows, node_threads, one_step, checks)
    torch.set_num_threads(node_threads)
    summary: dict[str, object] = {
        "config": setup.name,
        "node_threads": node_threads,
        "ledger_threads": setup.ledger_threads,
        "one_step_checks": len(one_step.honest),
        "one_step_worst_honest": max(one_step.honest),
        "one_step_tolerance": ONE_STEP_TOLERANCE,
        "one_step_honest_penalised": sum(e > ONE_STEP_TOLERANCE for e in one_step.honest),
        "one_step_smallest_cheat": min(min(v) for v in one_step.cheats.values()),
        "check_cpu_s_mean": sum(one_step.check_cpu) / len(one_step.check_cpu),
        "full_check_cpu_s_mean": sum(one_step.full_cpu) / len(one_step.full_cpu),
        "refute_cpu_s_mean": sum(one_step.refute_cpu) / len(one_step.refute_cpu),
        "round_cpu_s": sum(one_step.round_cpu) / len(one_step.round_cpu),
        "bare_steps_cpu_s": sum(one_step.steps_cpu) / len(one_step.steps_cpu),
        **_verdict_cost(one_step, setup.inner_steps),
        "wall_s": round(time.monotonic() - began, 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    emit("audit", summary)
    return summary


if __name__ == "__main__":
    main()
