"""Replay one node's inner steps deterministically on CPU and compare with its pseudo-gradient.

The inputs are public: the committed base weights, the node's shard (rebuilt from run, round,
node, tokens and the governed data mixture: its id must be the attested ``dataShard``; the rows
come from the run's pinned data, ``TrainingConfig.dataRoot``, checked by the caller) and the
governed inner settings (steps, lr; batch = tokens / (steps x seq_len)). The inner optimizer starts
fresh (``InnerTrainer(keep_state=False)``): a round is a pure function of those inputs. The
verdict compares the relative L2 distance of the submitted pseudo-gradient to the replayed one
with a tolerance measured on honest nodes (docs/ledger.md, "Replay audit").
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from protocol.errors import ConfigError
from protocol.hashing import hash_state_dict

if TYPE_CHECKING:
    from reference.codec import Packet
    from reference.data import Corpus

Tensors = Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class ReplayInputs:
    run_id: bytes
    round: int
    node: str
    tokens: int
    inner_steps: int
    inner_lr: float
    mixture: tuple[int, ...]
    preset: str
    shard_tokens: int = 0  # the shard drawn (a time-boxed node's planned one); 0: ``tokens``
    data_root: bytes | None = None  # the run's pinned data (TrainingConfig.dataRoot) replayed on

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": "0x" + self.run_id.hex(),
            "round": self.round,
            "node": self.node,
            "tokens": self.tokens,
            "inner_steps": self.inner_steps,
            "inner_lr": self.inner_lr,
            "mixture": list(self.mixture),
            "model_preset": self.preset,
            "shard_tokens": self.shard_tokens or self.tokens,
            "data_root": None if self.data_root is None else "0x" + self.data_root.hex(),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ReplayInputs:
        """The inverse of :meth:`to_json` (a fraud record's or a bisection's stored inputs)."""
        try:
            root = doc.get("data_root")
            return cls(
                run_id=bytes.fromhex(str(doc["run_id"]).removeprefix("0x")),
                round=int(doc["round"]),
                node=str(doc["node"]),
                tokens=int(doc["tokens"]),
                inner_steps=int(doc["inner_steps"]),
                inner_lr=float(doc["inner_lr"]),
                mixture=tuple(int(m) for m in doc["mixture"]),
                preset=str(doc["model_preset"]),
                shard_tokens=int(doc.get("shard_tokens") or 0),
                data_root=None if root is None else bytes.fromhex(str(root).removeprefix("0x")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"replay inputs do not parse ({exc!r}): {dict(doc)}") from None


@dataclass(frozen=True)
class ReplayVerdict:
    passed: bool
    rel_error: float
    replayed_hash: str
    cpu_seconds: float
    reason: str


def round_rows(inputs: ReplayInputs, corpus: Corpus) -> tuple[torch.Tensor, int]:
    """The rows a node's inner steps read, in its order, and the batch (rows per step): the
    declared shard rebuilt from public inputs, batch = tokens / (steps x seq_len)."""
    from reference.data import ShardSpec
    from reference.model import GPTConfig

    cfg = GPTConfig.preset(inputs.preset)
    batch = inputs.tokens // (inputs.inner_steps * cfg.seq_len)
    shard = inputs.shard_tokens or inputs.tokens
    spec = ShardSpec.for_node(inputs.run_id, inputs.round, inputs.node, shard, inputs.mixture)
    used = inputs.inner_steps * batch or None  # the rows the node's inner steps read, no more
    return corpus.shard_rows(spec, cfg.seq_len, limit=used), batch


def replay_pseudo_gradient(
    base: Tensors, inputs: ReplayInputs, corpus: Corpus, *, carried: bool = False
) -> dict[str, torch.Tensor]:
    """``base - local`` after the node's inner steps, recomputed here, from a fresh AdamW with
    the constants of the protocol's inner mode (``carried``: a carried state's first round)."""
    from reference.checkpoint import load_weights_into
    from reference.inner import InnerConfig, InnerTrainer
    from reference.model import GPT, GPTConfig

    cfg = GPTConfig.preset(inputs.preset)
    rows, batch = round_rows(inputs, corpus)
    model = GPT(cfg)
    load_weights_into(model, {n: t.float() for n, t in base.items()})
    inner = InnerConfig.protocol(inputs.inner_steps, inputs.inner_lr, batch, carried=carried)
    InnerTrainer(model, inner, keep_state=False).train(rows)
    local = dict(model.named_parameters())
    return {n: (base[n].float() - local[n].detach()).contiguous() for n in base}


def audit(
    base: Tensors,
    submitted: Tensors,
    inputs: ReplayInputs,
    corpus: Corpus,
    *,
    tolerance: float,
    packet: Packet | None = None,
    carried: bool = False,
) -> ReplayVerdict:
    """Replay and compare; ``packet``: the node committed its all-reduce packet (int8 codes),
    so the replay is encoded the same way before comparing; ``carried``: the AdamW constants
    of the carried inner mode (:meth:`reference.inner.InnerConfig.protocol`)."""
    from reference.inner import one_thread

    start = time.process_time()
    with one_thread():  # the node's kernels, where it trained on one thread: bit for bit
        replayed = replay_pseudo_gradient(base, inputs, corpus, carried=carried)
    if packet is not None:
        from reference.codec import decode, quantize
        from reference.outer import FlatLayout

        layout = FlatLayout({n: t.shape for n, t in base.items()})
        coded = quantize(layout.flatten(replayed), packet.fmt, block_size=packet.block_size)
        replayed = layout.unflatten(decode(coded))
    seconds = time.process_time() - start
    names = sorted(replayed)
    if sorted(submitted) != names or any(submitted[n].shape != replayed[n].shape for n in names):
        return ReplayVerdict(
            False,
            float("inf"),
            "0x" + hash_state_dict(replayed).hex(),
            seconds,
            "tensors differ in names or shapes from the model",
        )
    sub = torch.cat([submitted[n].double().reshape(-1) for n in names])
    rep = torch.cat([replayed[n].double().reshape(-1) for n in names])
    denom = float(rep.norm()) or 1.0
    rel = float((sub - rep).norm()) / denom if torch.isfinite(sub).all() else float("inf")
    passed = rel <= tolerance
    why = (
        f"replay matches (relative L2 error {rel:.2e} <= {tolerance:g})"
        if passed
        else f"replay of {inputs.inner_steps} inner steps on the declared shard differs from the "
        f"submitted pseudo-gradient: relative L2 error {rel:.3g} > tolerance {tolerance:g}"
    )
    return ReplayVerdict(passed, rel, "0x" + hash_state_dict(replayed).hex(), seconds, why)


@dataclass(frozen=True)
class EndSketch:
    """A segment's end as the audit holds it without moving the state: the node's committed
    sketch of it (reference.sketch, hash-checked against its leaf at delivery), the state hash
    that seeds its projection, and the round's base the weights' sketch is taken from."""

    sketch: Tensors
    state_hash: bytes
    base: Tensors


@dataclass(frozen=True)
class SegmentVerdict:
    passed: bool
    error: float
    first_step: int
    steps: int
    cpu_seconds: float
    reason: str


def audit_segment(
    start: Tensors,
    claimed_end: Tensors,
    inputs: ReplayInputs,
    corpus: Corpus,
    *,
    segment: int,
    segment_steps: int,
    tolerance: float,
    threads: int | None = None,
) -> SegmentVerdict:
    """Replay segment ``segment`` (steps ``segment x segment_steps`` onward, ``segment_steps``
    of them) of a node's round from its committed ``start`` state (``reference.segment``'s
    format; for segment 0 the public base with the carried or fresh AdamW state) over the rows
    it read, and compare with its committed end state (``reference.segment.segment_error``
    against ``tolerance``, e.g. ``ledger.core.config.SEGMENT_TOLERANCE``). Runs on ``threads``
    torch threads (None: the process's): the segment's tolerance holds on any thread count."""
    first = segment * segment_steps
    if segment < 0 or segment_steps <= 0 or first + segment_steps > inputs.inner_steps:
        raise ValueError(
            f"segment {segment} of {segment_steps} steps is outside the round's "
            f"{inputs.inner_steps} inner steps"
        )
    return audit_span(start, claimed_end, inputs, corpus, first=first, steps=segment_steps,
                      tolerance=tolerance, threads=threads)  # fmt: skip


def audit_span(
    start: Tensors,
    claimed_end: Tensors | EndSketch,
    inputs: ReplayInputs,
    corpus: Corpus,
    *,
    first: int,
    steps: int,
    tolerance: float,
    threads: int | None = None,
    carried: bool | None = None,
    moved_to: Tensors | None = None,
) -> SegmentVerdict:
    """:func:`audit_segment` for the ``steps`` inner steps from step ``first`` (a trace's last
    segment is shorter when ``traceInterval`` does not divide H), with the AdamW constants of
    the protocol's inner mode (``carried``; None: ``reference.inner.CARRY_STATE``).
    ``claimed_end``: the node's end state, or its committed sketch (:class:`EndSketch`: the
    error is read on sketches, ``reference.segment.sketch_error``). ``moved_to``: the round's
    attested base (weights by name) when the segment ends with the bounded overlap's landing
    (segment 0 of a round that started from the node's own last end, ledger.judge.origin_check):
    the replayed weights move to it as the node's did (reference.outer.moved), and so does the
    start the error is scaled by (the segment's work, not the move, is the yardstick)."""
    from reference import inner as protocol_inner
    from reference.inner import InnerConfig
    from reference.model import GPTConfig
    from reference.segment import (
        STEP,
        moved_state,
        replay_segment,
        segment_error,
        segment_rows,
        sketch_error,
    )

    began = time.process_time()
    if first < 0 or steps <= 0 or first + steps > inputs.inner_steps:
        raise ValueError(
            f"steps {first}..{first + steps - 1} are outside the round's "
            f"{inputs.inner_steps} inner steps"
        )
    rows, batch = round_rows(inputs, corpus)
    mode = protocol_inner.CARRY_STATE if carried is None else carried
    inner = InnerConfig.protocol(steps, inputs.inner_lr, batch, carried=mode)
    step0 = int(float(start[STEP])) if STEP in start else 0
    span = f"steps {first}..{first + steps - 1}"
    try:
        replayed = replay_segment(
            start,
            segment_rows(rows, first, steps, batch),
            inner,
            GPTConfig.preset(inputs.preset),
            first_step=step0,
            threads=threads,
        )
        if moved_to is not None:  # the move of the node's landing, replayed and its scale
            replayed, start = (moved_state(replayed, start, moved_to),
                               moved_state(start, start, moved_to))  # fmt: skip
    except ConfigError as exc:  # the node's state is not of the run's model: not its work
        why = f"segment {span} cannot be replayed from the node's committed state: {exc}"
        return SegmentVerdict(False, math.inf, first, steps, time.process_time() - began, why)
    if isinstance(claimed_end, EndSketch):
        err = sketch_error(claimed_end.sketch, replayed, start, claimed_end.base,
                           claimed_end.state_hash)  # fmt: skip
        what = "committed sketch of its end state"
    else:
        err = segment_error(claimed_end, replayed, start)
        what = "committed end state"
    seconds = time.process_time() - began
    if err.value <= tolerance:
        why = f"segment replay matches ({span}: error {err.value:.2e} <= {tolerance:g})"
    else:
        why = (
            f"segment replay of {span} from the node's committed state differs from its "
            f"{what}: error {err.value:.3g} > tolerance {tolerance:g} (weights "
            f"{err.weights:.3g}, exp_avg {err.exp_avg:.3g}, exp_avg_sq {err.exp_avg_sq:.3g})"
            + (f": {err.reason}" if err.reason else "")
        )
    return SegmentVerdict(err.value <= tolerance, err.value, first, steps, seconds, why)


def relative_error(submitted: Tensors, replayed: Tensors) -> float:
    """``|submitted - replayed| / |replayed|`` over all tensors (float64); infinite when the names
    or shapes differ or a submitted value is not finite."""
    names = sorted(replayed)
    if sorted(submitted) != names or any(submitted[n].shape != replayed[n].shape for n in names):
        return float("inf")
    sub = torch.cat([submitted[n].double().reshape(-1) for n in names])
    rep = torch.cat([replayed[n].double().reshape(-1) for n in names])
    if not torch.isfinite(sub).all():
        return float("inf")
    return float((sub - rep).norm()) / (float(rep.norm()) or 1.0)


def encoded_as(packet: Packet | None, tensors: Tensors) -> dict[str, torch.Tensor]:
    """``tensors`` through the node's packet encoding (int8 codes), as its all-reduce sent them;
    unchanged without a packet."""
    if packet is None:
        return dict(tensors)
    from reference.codec import decode, quantize
    from reference.outer import FlatLayout

    layout = FlatLayout({n: t.shape for n, t in tensors.items()})
    coded = quantize(layout.flatten(tensors), packet.fmt, block_size=packet.block_size)
    return layout.unflatten(decode(coded))
