"""A boundary's sketch: what an audit compares instead of moving the state (issue 26).

A boundary state is 12 B/param (weights + AdamW's two moments). Its leaf commits, beside the
state's hash, the hash of a **count-sketch** of it: ``SKETCH_BUCKETS`` float64 numbers per part,

- ``sketch/weights``: the sketch of ``base - weights`` (the state's pseudo-gradient so far: the
  float32 subtraction the node's packet encodes, so the last boundary's sketch is the sketch of
  the submitted pseudo-gradient, bit for bit in fp32);
- ``sketch/exp_avg``, ``sketch/exp_avg_sq``: the sketches of AdamW's moments (zeros when the
  state commits none: a fresh AdamW);
- ``sketch/step``: AdamW's step count (0 when none);
- ``sketch/adam``: the 32 bytes (uint8) of the hash of the state's AdamW entries (``adam/*``,
  protocol.hashing; :func:`adam_hash`): what a carried AdamW hands from one round to the next,
  committed exactly. Boundary 0 of round r must hold the AdamW state the node's round r-1 ended
  with, or a fresh one (:data:`FRESH_ADAM`, no entries): the ledger compares the two rounds'
  committed hashes (ledger.judge.continuity), so moments the node made up, which a segment replay
  from them would confirm, fail the audit.

A count-sketch adds each coordinate, times a sign of +-1, into one of the buckets; bucket and sign
come from a hash of the coordinate's index (its offset in the parameters taken in name order)
with constants drawn from a seed. It is linear, and it keeps distances: ``|S(x) - S(y)|`` is
``|x - y|`` within a few percent (spread about ``sqrt(2 / SKETCH_BUCKETS)``) whatever the scale,
so a relative error read on sketches is the error on the states, in exact float64: no
quantiser's noise (an int8 code of the delta, tried first, adds about 1/127 of a block's largest
value to every coordinate, which for a 5-step segment is most of what one skipped step moves).

**The seed is the boundary's own state hash** (:func:`sketch_seed`, Fiat-Shamir): the projection
is fixed only once the state is, so a node cannot hide a change of its state in the projection's
null space (a known projection of k numbers loses all but k directions of the state: any change
orthogonal to them would pass). The node computes the sketch when it commits the boundary; the
ledger recomputes the sketch of any state it replays under the same seed.

Deterministic to the bit: the hash is integer arithmetic in int64 (no overflow), the sums are
``torch.bincount`` (a serial loop) in float64, parameters in name order. The same state gives
the same sketch, and so the same ``sketchHash``, on any thread count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from protocol.eip712 import keccak256
from protocol.hashing import hash_state_dict

SKETCH_BUCKETS = 1024
"""Numbers per part: 3 x 8 KiB per boundary. Distances kept within ~4% (sqrt(2/1024))."""
PREFIX = "sketch/"
PARTS = ("weights", "exp_avg", "exp_avg_sq")
STEP = "sketch/step"
ADAM = "sketch/adam"
KEYS = (*(PREFIX + p for p in PARTS), STEP, ADAM)
ADAM_PREFIX = "adam/"
_M32 = 0xFFFFFFFF
_MAX_INDEX = 1 << 31
_MIX = ((16, 0x7FEB352D), (15, 0x2C1B3C6D))  # xor-shift, then an odd multiplier below 2^31


class SketchError(ValueError):
    """A sketch that is not one: names, shapes, dtype or a non-finite value."""


Seed = tuple[int, int]
"""``(a, b)``: the affine step of the coordinate hash (:func:`slots`)."""


def sketch_seed(state_hash: bytes) -> Seed:
    """The projection's constants, from keccak of the boundary's state hash: ``a`` odd, both
    below 2^31 (so ``a x + b`` stays below 2^63 for any index ``x`` < 2^31)."""
    if len(state_hash) != 32:
        raise SketchError(f"a sketch is seeded by a 32-byte state hash, got {len(state_hash)}")
    digest = keccak256(b"coloco-sketch" + bytes(state_hash))
    a, b = (int.from_bytes(digest[4 * i : 4 * i + 4], "big") >> 1 for i in range(2))
    return a | 1, b


def slots(seed: Seed, start: int, count: int, buckets: int = SKETCH_BUCKETS) -> Tensor:
    """Where coordinates ``start .. start + count - 1`` go: ``2 x bucket + (sign is +1)`` (int64),
    from ``h = mix((a x + b) mod 2^32)``, a 32-bit integer mixer (xor-shifts and odd multipliers
    below 2^31, so every product stays below 2^63: exact in int64, in place); the bucket is
    ``h``'s low bits, the sign its top bit (1: +1, 0: -1)."""
    if buckets <= 1 or buckets & (buckets - 1) or buckets > 1 << 16:
        raise SketchError(f"the sketch's buckets must be a power of two up to 2^16, got {buckets}")
    if start < 0 or start + count > _MAX_INDEX:
        raise SketchError(f"a sketch covers coordinates 0 .. {_MAX_INDEX - 1}")
    a, b = seed
    h = torch.arange(start, start + count, dtype=torch.int64)
    h.mul_(a).add_(b).bitwise_and_(_M32)
    for shift, mul in _MIX:
        h.bitwise_xor_(h >> shift)
        h.mul_(mul).bitwise_and_(_M32)
    h.bitwise_xor_(h >> 16)
    return (h & (buckets - 1)).mul_(2).add_(h >> 31)


class Projection:
    """The count-sketch of one seed over a model's parameters (``shapes``, taken in name order);
    each parameter's buckets and signs are computed once and reused for every vector."""

    def __init__(
        self, seed: Seed, shapes: Mapping[str, torch.Size],
        buckets: int = SKETCH_BUCKETS,
    ) -> None:  # fmt: skip
        self.seed, self.buckets = seed, buckets
        self.names = sorted(shapes)
        self.shapes = {n: torch.Size(shapes[n]) for n in self.names}
        self._cache: dict[str, Tensor] = {}
        offset = 0
        self.offsets: dict[str, int] = {}
        for n in self.names:
            self.offsets[n] = offset
            offset += self.shapes[n].numel()

    @classmethod
    def of(cls, state_hash: bytes, shapes: Mapping[str, torch.Size]) -> Projection:
        return cls(sketch_seed(state_hash), shapes)

    def _of(self, name: str) -> Tensor:
        if name not in self._cache:
            self._cache[name] = slots(
                self.seed, self.offsets[name], self.shapes[name].numel(), self.buckets
            )
        return self._cache[name]

    def apply(
        self, tensors: Mapping[str, Tensor], base: Mapping[str, Tensor] | None = None
    ) -> Tensor:
        """The sketch (float64, ``buckets`` numbers) of ``tensors`` (by parameter name; a name
        missing is zeros), or with ``base`` of ``base - tensors`` by name (the float32
        subtraction the node's packet encodes)."""
        return self.apply_parts([tensors], base)[0]

    def apply_parts(
        self, parts: Sequence[Mapping[str, Tensor]], base: Mapping[str, Tensor] | None = None
    ) -> list[Tensor]:
        """:meth:`apply` of each of ``parts`` (``base``, when given, for the first), one pass
        over each parameter for all of them."""
        out = [torch.zeros(self.buckets, dtype=torch.float64) for _ in parts]
        for n in self.names:
            held = [part.get(n) for part in parts]
            for t in held:
                if t is not None and t.shape != self.shapes[n]:
                    raise SketchError(
                        f"{n} has shape {tuple(t.shape)}, the model's {tuple(self.shapes[n])}"
                    )
            start = None if base is None or held[0] is None else _base_of(base, n, held[0])
            for i, sums in enumerate(self._sums(n, held, start)):
                if sums is not None:  # the +1 slots less the -1 slots, bucket by bucket
                    out[i] += sums[1::2] - sums[0::2]
        return out

    def _sums(
        self, name: str, held: list[Tensor | None], start: Tensor | None
    ) -> list[Tensor | None]:
        """The ``2 x buckets`` slot sums of parameter ``name``'s values in each part (None where
        a part lacks it; the first ``start - t`` when ``start`` is given): the native kernel's
        on CPU fp32 tensors (one pass), else torch's ``bincount`` (a serial loop in index
        order, float64: the same bits)."""
        flat = [None if t is None else t.detach().reshape(-1) for t in held]
        sub = None if start is None else start.detach().reshape(-1)
        if _native_ok([*flat, sub]):
            from reference.codec import native

            sums = native.count_sketch(
                [None if t is None else t.contiguous() for t in flat],
                None if sub is None else sub.contiguous(), self.offsets[name], self.seed,
                self.buckets,
            )  # fmt: skip
            return [None if t is None else sums[i] for i, t in enumerate(flat)]
        out: list[Tensor | None] = []
        for i, t in enumerate(flat):
            if t is None:
                out.append(None)
                continue
            delta = t if i or sub is None else sub.float().cpu() - t.float().cpu()
            values = delta.to("cpu", torch.float64)
            out.append(torch.bincount(self._of(name), weights=values, minlength=2 * self.buckets))
        return out


def _native_ok(tensors: Sequence[Tensor | None]) -> bool:
    """Whether the native count-sketch runs on these (CPU fp32, at most its parts, the C kernels
    built, and ``COLOCO_CODEC`` not asking for the torch reference)."""
    from reference.codec import native
    from reference.codec.backend import resolve_backend

    given = [t for t in tensors if t is not None]
    if len(tensors) > native.MAX_SKETCH_PARTS + 1 or not given:
        return False
    if any(t.device.type != "cpu" or t.dtype != torch.float32 for t in given):
        return False
    return resolve_backend(given[0].device) == "native"


def _base_of(base: Mapping[str, Tensor], name: str, w: Tensor) -> Tensor:
    """Parameter ``name`` of the round's ``base`` (by name or ``weights/<name>``), checked."""
    start = base.get(name, base.get("weights/" + name))
    if start is None:
        raise SketchError(f"the round's base has no weight {name!r} to sketch the delta from")
    if start.shape != w.shape:
        raise SketchError(
            f"weight {name!r}: base shape {tuple(start.shape)} != state {tuple(w.shape)}"
        )
    return start


def _weights(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    return {k.removeprefix("weights/"): t for k, t in state.items() if k.startswith("weights/")}


def make_sketch(
    state: Mapping[str, Tensor],
    base: Mapping[str, Tensor],
    state_hash: bytes,
    projection: Projection | None = None,
    *,
    commit: bool = True,
) -> dict[str, Tensor]:
    """The sketch of a boundary ``state`` (module docstring) whose hash is ``state_hash``, against
    the round's ``base``; ``projection``: one already made for that hash (reused).
    ``commit`` False: the float parts only, without the AdamW hash (what a replay compares with a
    committed sketch; not a sketch to commit)."""
    shapes = {n: t.shape for n, t in _weights(state).items()}
    if not shapes:
        raise SketchError("a boundary state needs its weights (names under 'weights/')")
    proj = projection or Projection.of(state_hash, shapes)
    weights = _weights(state)
    moments = [
        {n: state[f"adam/{n}/{m}"] for n in shapes if f"adam/{n}/{m}" in state} for m in PARTS[1:]
    ]
    sketched = proj.apply_parts([weights, *moments], base)
    sketch = {PREFIX + part: s for part, s in zip(PARTS, sketched, strict=True)}
    step = state.get("adam/step")
    sketch[STEP] = torch.tensor(0.0 if step is None else float(step), dtype=torch.float64)
    if commit:
        sketch[ADAM] = torch.frombuffer(bytearray(adam_hash(state)), dtype=torch.uint8)
    return sketch


def adam_hash(state: Mapping[str, Tensor]) -> bytes:
    """The hash of a boundary state's AdamW entries (``adam/*``; none: :data:`FRESH_ADAM`)."""
    return bytes(hash_state_dict({k: t for k, t in state.items() if k.startswith(ADAM_PREFIX)}))


FRESH_ADAM = bytes(hash_state_dict({}))
"""The AdamW hash of a state before the optimizer's first step (a fresh AdamW commits none)."""


def committed_adam(sketch: Mapping[str, Tensor]) -> bytes:
    """The AdamW hash a sketch commits (``sketch/adam``; a checked sketch)."""
    return bytes(sketch[ADAM].to(torch.uint8).tolist())


def check_sketch(sketch: Mapping[str, Tensor], buckets: int = SKETCH_BUCKETS) -> None:
    """Refuse, naming what is wrong, anything but a sketch: its four float64 tensors, finite,
    and the 32 bytes of its AdamW hash."""
    if set(sketch) != set(KEYS):
        missing, extra = sorted(set(KEYS) - set(sketch)), sorted(set(sketch) - set(KEYS))
        raise SketchError(f"a sketch holds {list(KEYS)}: missing {missing}, unexpected {extra[:4]}")
    adam = sketch[ADAM]
    if adam.dtype != torch.uint8 or tuple(adam.shape) != (32,):
        raise SketchError(f"{ADAM} is {adam.dtype} {tuple(adam.shape)}, a sketch's is uint8 (32,)")
    for key, t in sketch.items():
        if key == ADAM:
            continue
        shape = () if key == STEP else (buckets,)
        if t.dtype != torch.float64 or tuple(t.shape) != shape:
            raise SketchError(f"{key} is {t.dtype} {tuple(t.shape)}, a sketch's is float64 {shape}")
        if not bool(torch.isfinite(t).all()):
            raise SketchError(f"{key} holds a value that is not finite")


def distance(a: Tensor, b: Tensor) -> float:
    """``|a - b|`` in float64 (infinite when not finite)."""
    d = float((a.double() - b.double()).norm())
    return d if math.isfinite(d) else math.inf
