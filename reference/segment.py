"""One segment of a round's inner steps, replayed from a committed boundary state.

A round of H inner steps is cut into segments of k steps (the boundaries every k steps). A
*state* at a boundary is what the next steps depend on, as named float32 tensors
(``dict[str, Tensor]``, the format :mod:`reference.trace` hashes):

- ``weights/<param>``: the model's parameters;
- ``adam/<param>/exp_avg``, ``adam/<param>/exp_avg_sq``: AdamW's moments (zeros for a fresh
  AdamW, which is exactly how torch starts one);
- ``adam/step``: AdamW's step count (a 0-d tensor; torch keeps one per parameter, all equal).

:func:`replay_segment` runs the k steps from such a state over the segment's rows on any number
of threads (the ledger may use all its cores), with the learning rate the node's schedule gives
at those steps (``first_step``: the segment's first step index in the round, or across rounds
when the optimizer state is carried). :func:`segment_error` compares a node's claimed end state
with the replayed one; the verdict is that error against a tolerance calibrated for k steps
(``ledger.core.config.SEGMENT_TOLERANCE``, measured by ``python -m bench.audit``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from protocol.errors import ConfigError
from reference.inner import InnerConfig, InnerTrainer, torch_threads
from reference.model import GPT, GPTConfig
from reference.sketch import PREFIX as SKETCH_PREFIX
from reference.sketch import STEP as SKETCH_STEP
from reference.sketch import Projection, SketchError, check_sketch, make_sketch
from reference.trace import RESIDUAL

State = dict[str, Tensor]
STEP = "adam/step"
_MODELS = threading.local()
"""Each thread's last replay model (``.cfg``, ``.model``): a replay overwrites every parameter
from its start state, so the model is built once per shape, without an init."""


def _replay_model(model_cfg: GPTConfig) -> GPT:
    """This thread's model of shape ``model_cfg`` for a replay; its parameters are then loaded
    from a state (:func:`load_state`), so the init it was built with does not matter."""
    if getattr(_MODELS, "cfg", None) != model_cfg:
        _MODELS.model = GPT(model_cfg, init=False)  # every parameter is loaded before a step
        _MODELS.cfg = model_cfg
    model: GPT = _MODELS.model
    return model


def _adam_key(name: str, moment: str) -> str:
    return f"adam/{name}/{moment}"


def fresh_state(weights: Mapping[str, Tensor]) -> State:
    """The state a fresh AdamW starts a round in: the weights, zero moments, step 0."""
    state: State = {f"weights/{n}": t.detach().float().clone() for n, t in weights.items()}
    for n, t in weights.items():
        state[_adam_key(n, "exp_avg")] = torch.zeros_like(t, dtype=torch.float32)
        state[_adam_key(n, "exp_avg_sq")] = torch.zeros_like(t, dtype=torch.float32)
    state[STEP] = torch.tensor(0.0)
    return state


def capture_state(
    model: torch.nn.Module, opt: torch.optim.Optimizer, *, own_moments: bool = False
) -> State:
    """The boundary state of ``model`` trained by the AdamW ``opt`` (copies, on CPU, float32);
    a parameter AdamW has not stepped yet has zero moments, as torch would start it.
    ``own_moments``: the moments are AdamW's own CPU float32 tensors, not copies (for an ``opt``
    its caller discards, as :func:`replay_segment` does)."""
    state: State = {}
    steps: set[float] = set()
    for name, p in model.named_parameters():
        state[f"weights/{name}"] = p.detach().float().cpu().clone()
        s = opt.state.get(p, {})
        for moment in ("exp_avg", "exp_avg_sq"):
            value = s.get(moment)
            if value is None:
                kept = torch.zeros_like(state[f"weights/{name}"])
            elif own_moments and value.dtype == torch.float32 and value.device.type == "cpu":
                kept = value.detach()
            else:
                kept = value.detach().float().cpu().clone()
            state[_adam_key(name, moment)] = kept
        steps.add(float(s["step"]) if "step" in s else 0.0)
    if len(steps) > 1:
        raise ConfigError(f"AdamW's parameters are at different steps {sorted(steps)}")
    state[STEP] = torch.tensor(steps.pop() if steps else 0.0)
    return state


def load_state(
    model: torch.nn.Module, opt: torch.optim.Optimizer, state: Mapping[str, Tensor]
) -> None:
    """Put a boundary state into ``model`` and the AdamW ``opt`` (its moments and step);
    a state missing a parameter's tensors, or with other shapes, is refused by name."""
    params = dict(model.named_parameters())
    # boundary 0's error-feedback residual (sparse format) is not training state: not loaded
    state = {k: v for k, v in state.items() if not k.startswith(RESIDUAL)}
    expected = {f"weights/{n}" for n in params} | {STEP}
    expected |= {_adam_key(n, m) for n in params for m in ("exp_avg", "exp_avg_sq")}
    if set(state) != expected:
        missing, extra = sorted(expected - set(state)), sorted(set(state) - expected)
        raise ConfigError(
            f"boundary state does not fit the model: missing {missing[:4]}, unexpected "
            f"{extra[:4]} (a state names weights/<param>, adam/<param>/exp_avg, "
            "adam/<param>/exp_avg_sq and adam/step)"
        )
    step = float(state[STEP])
    if step < 0 or step != int(step):
        raise ConfigError(f"adam/step must be a whole number >= 0, got {step}")
    with torch.no_grad():
        for name, p in params.items():
            keys = (f"weights/{name}", _adam_key(name, "exp_avg"), _adam_key(name, "exp_avg_sq"))
            for key in keys:
                if state[key].shape != p.shape:
                    raise ConfigError(
                        f"{key} has shape {tuple(state[key].shape)}, the model's {name} "
                        f"{tuple(p.shape)}"
                    )
            p.copy_(state[f"weights/{name}"])
            opt.state[p] = {
                "step": torch.tensor(step),
                "exp_avg": state[_adam_key(name, "exp_avg")].float().clone().to(p.device),
                "exp_avg_sq": state[_adam_key(name, "exp_avg_sq")].float().clone().to(p.device),
            }


def replay_segment(
    start_state: Mapping[str, Tensor],
    rows: Tensor,
    cfg: InnerConfig,
    model_cfg: GPTConfig,
    *,
    first_step: int = 0,
    threads: int | None = None,
) -> State:
    """Run ``cfg.steps`` AdamW steps (``cfg.batch_size`` rows each, in order) from
    ``start_state`` over ``rows`` and return the end state. ``first_step`` is the segment's
    first step index on the node's lr schedule; ``threads``: torch threads for the replay
    (None: the process's setting)."""
    if first_step < 0:
        raise ConfigError(f"first_step must be >= 0, got {first_step}")
    with torch_threads(threads):
        model = _replay_model(model_cfg)
        trainer = InnerTrainer(model, cfg, keep_state=True)
        opt = trainer.optimizer()
        load_state(model, opt, start_state)
        trainer.global_step = first_step
        trainer.train(rows)
        # the weights copied (the model is this thread's next replay's), the moments handed
        # over (load_state gave this AdamW its own copies, and it is discarded here)
        return capture_state(model, opt, own_moments=True)


@dataclass(frozen=True)
class SegmentError:
    """How far a claimed end state is from the replayed one, part by part (see
    :func:`segment_error`); ``value`` is the largest, what the tolerance is applied to."""

    weights: float
    exp_avg: float
    exp_avg_sq: float
    reason: str = ""

    @property
    def value(self) -> float:
        return max(self.weights, self.exp_avg, self.exp_avg_sq)


def _norm(pairs: Iterable[tuple[Tensor, Tensor | None]]) -> float:
    """The L2 norm of the differences ``a - b`` of ``pairs`` (of ``a`` where ``b`` is None)
    taken together: each difference in the tensors' own dtype, its squares summed in float64.
    CPU fp32 pairs run the native kernel (reference.codec.native.sq_diff: one pass, no
    temporary; the same sum up to its order) unless ``COLOCO_CODEC`` asks for torch."""
    from reference.codec import native
    from reference.codec.backend import resolve_backend

    total, native_ok = 0.0, None
    for a, b in pairs:
        if native_ok is None:  # the backend is chosen once, on the first tensor's device
            native_ok = a.device.type == "cpu" and resolve_backend(a.device) == "native"
        if native_ok and _plain(a) and (b is None or (_plain(b) and b.shape == a.shape)):
            total += native.sq_diff(a, b)
        else:
            d = a.detach() if b is None else a.detach() - b.detach()
            total += float(torch.linalg.vector_norm(d, dtype=torch.float64)) ** 2
    return math.sqrt(total)


def _plain(t: Tensor) -> bool:
    return t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous()


def _rel(state: Mapping[str, Tensor], other: Mapping[str, Tensor], keys: list[str],
         scale: float) -> float:  # fmt: skip
    """``|state - other| / scale`` over ``keys``: each difference taken in the tensors' own
    dtype (float32: the subtraction is exact, then rounded to within 6e-8 of itself), its
    squares summed in float64, so the error reads the same as a float64 difference would, at a
    quarter of the memory traffic and no concatenated copy. A NaN or an infinity anywhere (a
    difference that overflows float32 included) makes it infinite."""
    moved = _norm((state[k], other[k]) for k in keys)
    if not math.isfinite(moved):
        return math.inf
    return moved / scale if scale > 0 else (0.0 if moved == 0 else math.inf)


def _ratio(diff: Tensor, scale: Tensor) -> float:
    """``|diff| / |scale|`` of two sketch vectors (float64 norms); infinite where not finite."""
    num, den = _norm([(diff, None)]), _norm([(scale, None)])
    if not math.isfinite(num):
        return math.inf
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


def segment_error(
    claimed_end: Mapping[str, Tensor],
    replayed_end: Mapping[str, Tensor],
    start: Mapping[str, Tensor],
) -> SegmentError:
    """The distance of a node's claimed end state from the replay of its segment.

    The metric, part by part (float64, over all parameters at once):

    - weights: ``|claimed - replayed| / |replayed - start|``, relative to what the segment
      moved the weights, not to the weights themselves. The error then reads as a share of the
      segment's work whatever the lr, k, model size or weight norm (which grows as a model
      trains while a segment's displacement, about ``lr x k`` a coordinate, does not): one of k
      steps skipped is about 1/k, the kernels' noise over k steps a small fraction that grows
      with k (replaying a few steps amplifies last-bit differences little, which is why the
      segment is short), so one tolerance serves every run.
    - ``exp_avg`` and ``exp_avg_sq``: ``|claimed - replayed| / |replayed|``. The moments are
      checked because the next segment is replayed from the node's own committed state: a lie
      about them at a boundary would steer the steps that follow and never be compared. Their
      own norm is the scale (with betas (0.7, 0.95) a few steps renew most of them).
    - ``adam/step`` must be equal; names, shapes or a non-finite value that differ are infinite.

    The verdict uses the largest of the three (:attr:`SegmentError.value`).
    """
    if set(claimed_end) != set(replayed_end) or any(
        claimed_end[k].shape != replayed_end[k].shape for k in replayed_end
    ):
        return SegmentError(math.inf, math.inf, math.inf, "tensors differ in names or shapes")
    if float(claimed_end[STEP]) != float(replayed_end[STEP]):
        return SegmentError(
            math.inf,
            math.inf,
            math.inf,
            f"adam/step {float(claimed_end[STEP]):g} != replayed {float(replayed_end[STEP]):g}",
        )
    weights = sorted(k for k in replayed_end if k.startswith("weights/"))
    parts: dict[str, float] = {}
    moved = _norm((replayed_end[k], start[k]) for k in weights)
    parts["weights"] = _rel(claimed_end, replayed_end, weights, moved)
    for moment in ("exp_avg", "exp_avg_sq"):
        keys = sorted(k for k in replayed_end if k.startswith("adam/") and k.endswith("/" + moment))
        scale = _norm((replayed_end[k], None) for k in keys)
        parts[moment] = _rel(claimed_end, replayed_end, keys, scale)
    return SegmentError(parts["weights"], parts["exp_avg"], parts["exp_avg_sq"])


def sketch_error(
    claimed: Mapping[str, Tensor],
    replayed_end: Mapping[str, Tensor],
    start: Mapping[str, Tensor],
    base: Mapping[str, Tensor],
    end_hash: bytes,
) -> SegmentError:
    """:func:`segment_error` read on sketches (reference.sketch): the node's committed sketch
    of its end state (``claimed``, under the projection its ``end_hash`` seeds) against the
    sketches of the replayed end and of the start state, under the same projection. The same
    three parts and scales: weights ``|S(claimed) - S(replayed)| / |S(replayed) - S(start)|``
    (the sketch is linear: the segment's displacement, read in its buckets), each moment
    ``|S(claimed) - S(replayed)| / |S(replayed)|``, the step equal."""
    try:
        check_sketch(claimed)
    except SketchError as exc:
        return SegmentError(math.inf, math.inf, math.inf, f"the committed sketch: {exc}")
    shapes = {k.removeprefix("weights/"): t.shape for k, t in replayed_end.items()
              if k.startswith("weights/")}  # fmt: skip
    proj = Projection.of(end_hash, shapes)
    replayed = make_sketch(replayed_end, base, end_hash, proj, commit=False)
    if float(claimed[SKETCH_STEP]) != float(replayed[SKETCH_STEP]):
        return SegmentError(math.inf, math.inf, math.inf,
                            f"adam/step {float(claimed[SKETCH_STEP]):g} != replayed "
                            f"{float(replayed[SKETCH_STEP]):g}")  # fmt: skip
    begun = make_sketch(start, base, end_hash, proj, commit=False)
    w = SKETCH_PREFIX + "weights"
    parts = {"weights": _ratio(claimed[w] - replayed[w], replayed[w] - begun[w])}
    for moment in ("exp_avg", "exp_avg_sq"):
        key = SKETCH_PREFIX + moment
        parts[moment] = _ratio(claimed[key] - replayed[key], replayed[key])
    return SegmentError(parts["weights"], parts["exp_avg"], parts["exp_avg_sq"])


def moved_state(state: Mapping[str, Tensor], origin: Mapping[str, Tensor],
                to: Mapping[str, Tensor]) -> dict[str, Tensor]:  # fmt: skip
    """``state`` (a segment state, ``weights/<param>``) with each weight moved by ``to -
    origin`` as the bounded overlap's landing moves the node's (reference.outer.moved);
    ``origin``: a state or weights by name (the round's boundary 0), ``to`` weights by name
    (its attested base). The rest (AdamW moments, step) stays. A base that lacks one of the
    state's weights is refused: that weight would stay unmoved, and the replay would differ
    from an honest node's moved state by the move itself."""
    from reference.outer import moved

    unmoved = sorted(
        k for k in state if k.startswith("weights/") and k.removeprefix("weights/") not in to
    )
    if unmoved:
        raise ConfigError(f"the base has no {unmoved[:3]} to move the state's weights by")
    out = dict(state)
    for name, t in to.items():
        key = "weights/" + name
        start = origin.get(key, origin.get(name))
        if key not in state or start is None or state[key].shape != t.shape:
            raise ConfigError(f"the state has no weights {key!r} of the base's shape to move")
        out[key] = moved(state[key].float(), t.float(), start.float())
    return out


def segment_rows(all_rows: Tensor, first_step: int, steps: int, batch_size: int) -> Tensor:
    """The rows the steps ``first_step .. first_step + steps - 1`` of a round read, from the rows
    of its shard in the order the node reads them (step i reads ``batch_size`` rows from
    ``i x batch_size``: :class:`reference.inner.InnerTrainer`)."""
    lo, hi = first_step * batch_size, (first_step + steps) * batch_size
    if all_rows.shape[0] < hi:
        raise ConfigError(
            f"the shard has {all_rows.shape[0]} rows; steps {first_step}..{first_step + steps - 1}"
            f" of {batch_size} rows need {hi}"
        )
    return all_rows[lo:hi]
