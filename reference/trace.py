"""The committed trace of a round: hashes of the node's state every ``traceInterval`` inner steps.

Shared by the node (which builds the trace and signs its root as the attestation's ``traceRoot``)
and the ledger (which asks for one boundary and checks the served state against its leaf).

A **boundary state** is a flat dict of named tensors, each name under a known prefix
(:data:`PREFIXES`): ``weights/<param>``, ``adam/<param>/exp_avg``, ``adam/<param>/exp_avg_sq``,
``adam/step`` (present once the inner optimizer has stepped), and later ones such as
``residual/<param>`` (error feedback). Its hash is protocol.hashing's ``hash_state_dict``.

In the sparse wire format boundary 0 also commits the **error-feedback residual the round starts
from** (``residual/<param>``, the flat residual cut by parameter, zeros when the node carries
none: :func:`residual_entries`, read back by :func:`residual_of`). Compression is deterministic,
so the round's packet is a function of committed state alone: boundary 0's weights (the round's
origin), the last boundary's weights and boundary 0's residual (ledger.judge.sparse_check).

Boundaries of a round of ``steps`` inner steps with interval ``k`` (:func:`boundary_steps`):
boundary 0 is the round's start state, boundary i the state after ``i * k`` steps, and the last is
the state after the last step, even when ``k`` does not divide ``steps``.

Beside each state hash the leaf commits the hash of the state's **sketch** (reference.sketch: a
count-sketch of its pseudo-gradient so far and its AdamW moments, 3 x 1,024 float64 numbers,
seeded by the state's own hash), so an audit holds a segment's end to the tolerance from a few
KiB instead of the 12 B/param of weights plus AdamW state: it moves at most one full state.

``leaf = keccak256(keccak256(abi.encode(uint256 index, uint256 step, bytes32 stateHash,
bytes32 sketchHash)))``; the root is protocol.merkle's tree (OpenZeppelin's layout) over the
leaves in boundary order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from typing import Final

import torch
from torch import Tensor

from protocol.eip712 import encode_uint, keccak256
from protocol.errors import ProtocolError, TrainerError
from protocol.hashing import hash_state_dict
from protocol.merkle import HashTree, process_proof
from protocol.types import Bytes32
from reference.outer import FlatLayout
from reference.sketch import SketchError, make_sketch

log = logging.getLogger(__name__)

PREFIXES: Final = ("weights/", "adam/", "residual/")
"""The prefixes a boundary state's tensor names may start with (add one here to commit more)."""
WEIGHTS: Final = "weights/"
COMMITS_IN_FLIGHT: Final = 2
"""Boundary states a background :class:`TraceBuilder` holds while they are hashed."""
RESIDUAL: Final = "residual/"


class TraceError(TrainerError):
    """A trace that cannot be built, or a served boundary that does not match its commitment."""


def boundary_steps(steps: int, interval: int) -> list[int]:
    """The inner step after which each boundary is taken: ``[0, k, 2k, ..., steps]``."""
    if steps <= 0:
        raise TraceError(f"a trace needs at least one inner step, got {steps}")
    if interval <= 0:
        raise TraceError(f"traceInterval must be at least 1 inner step, got {interval}")
    marks = list(range(0, steps, interval))
    return [*marks, steps]


def is_boundary(step: int, steps: int, interval: int) -> bool:
    """Whether the state after ``step`` inner steps (of ``steps``) is a boundary."""
    return step == steps or step % interval == 0


def check_state(state: Mapping[str, Tensor]) -> None:
    """Refuse a boundary state with a tensor name outside :data:`PREFIXES` or no weights."""
    if not state:
        raise TraceError("a boundary state has no tensors")
    for name in state:
        if not name.startswith(PREFIXES):
            raise TraceError(
                f"boundary tensor {name!r} has no known prefix: name it under one of {PREFIXES}"
            )
    if not any(name.startswith(WEIGHTS) for name in state):
        raise TraceError("a boundary state needs its weights (names under 'weights/')")


def boundary_state(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    extra: Mapping[str, Tensor] | None = None,
) -> dict[str, Tensor]:
    """The state to commit: ``model``'s parameters, ``optimizer``'s Adam moments when it has
    stepped, and ``extra`` tensors (already named under a prefix). Copies, detached, on CPU."""
    names = {id(p): name for name, p in model.named_parameters()}
    state: dict[str, Tensor] = {
        WEIGHTS + name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters()
    }
    if optimizer is not None:
        step: Tensor | None = None
        for group in optimizer.param_groups:
            for p in group["params"]:
                held = optimizer.state.get(p)
                if not held:
                    continue
                name = names[id(p)]
                for moment in ("exp_avg", "exp_avg_sq"):
                    state[f"adam/{name}/{moment}"] = held[moment].detach().to("cpu", copy=True)
                step = torch.as_tensor(held["step"], dtype=torch.float32).detach().cpu().clone()
        if step is not None:
            state["adam/step"] = step.reshape(())
    if extra:
        state.update(extra)
    check_state(state)
    return state


def residual_entries(residual: Tensor | None, layout: FlatLayout) -> dict[str, Tensor]:
    """The flat residual a round starts from as boundary-0 tensors ``residual/<param>`` (the
    parameters' :class:`~reference.outer.FlatLayout` cut; zeros when ``residual`` is None)."""
    flat = torch.zeros(layout.numel) if residual is None else residual.detach().float().cpu()
    return {RESIDUAL + n: t.clone() for n, t in layout.unflatten(flat.reshape(-1)).items()}


def residual_of(state: Mapping[str, Tensor], layout: FlatLayout) -> Tensor | None:
    """The flat residual a boundary state commits (None: it commits none); a state that
    commits it for some parameters only, or in other shapes, is refused by name."""
    held = {n.removeprefix(RESIDUAL): t for n, t in state.items() if n.startswith(RESIDUAL)}
    if not held:
        return None
    if set(held) != set(layout.names):
        names = set(layout.names)
        missing, extra = sorted(names - set(held)), sorted(set(held) - names)
        raise TraceError(
            f"the committed residual does not fit the model: missing {missing[:4]}, unexpected "
            f"{extra[:4]} (boundary 0 commits residual/<param> for every parameter)"
        )
    for n in layout.names:
        if held[n].shape != layout.shapes[n] or held[n].dtype != torch.float32:
            raise TraceError(f"residual/{n} is {held[n].dtype} {tuple(held[n].shape)}, the "
                             f"model's {n} is fp32 {tuple(layout.shapes[n])}")  # fmt: skip
    return layout.flatten(held)


def state_hash(state: Mapping[str, Tensor]) -> Bytes32:
    """The hash committed for a boundary state (protocol.hashing over its named tensors)."""
    check_state(state)
    return hash_state_dict(state)


def leaf(index: int, step: int, state: bytes, sketch: bytes) -> Bytes32:
    """One boundary's leaf (module docstring): double keccak, as OpenZeppelin's leaves."""
    if len(state) != 32 or len(sketch) != 32:
        raise TraceError("a boundary leaf commits a 32-byte state hash and sketch hash")
    return Bytes32(
        keccak256(keccak256(encode_uint(index) + encode_uint(step) + bytes(state) + bytes(sketch)))
    )


@dataclass(frozen=True)
class Boundary:
    """One boundary's commitment: its number, the inner steps done, and the two hashes."""

    index: int
    step: int
    state_hash: Bytes32
    sketch_hash: Bytes32

    @property
    def leaf(self) -> Bytes32:
        return leaf(self.index, self.step, self.state_hash, self.sketch_hash)

    def to_json(self) -> dict[str, object]:
        return {
            "index": self.index,
            "step": self.step,
            "stateHash": "0x" + self.state_hash.hex(),
            "sketchHash": "0x" + self.sketch_hash.hex(),
        }


def commit_boundary(
    index: int, step: int, state: Mapping[str, Tensor], base: Mapping[str, Tensor]
) -> Boundary:
    """Hash ``state``, then its sketch against ``base`` (seeded by that hash)."""
    digest = state_hash(state)
    try:
        sketch = make_sketch(state, base, digest)
    except SketchError as exc:
        raise TraceError(f"boundary {index}: {exc}") from exc
    return Boundary(index, step, digest, hash_state_dict(sketch))


@dataclass(frozen=True)
class Trace:
    """A round's boundaries in order; :attr:`root` is the attestation's ``traceRoot``."""

    boundaries: tuple[Boundary, ...]

    def __post_init__(self) -> None:
        if not self.boundaries:
            raise TraceError("a trace needs at least one boundary")
        for i, b in enumerate(self.boundaries):
            if b.index != i:
                raise TraceError(f"boundary {i} is numbered {b.index}: boundaries go in order")

    @cached_property
    def tree(self) -> HashTree:
        return HashTree.build([b.leaf for b in self.boundaries])

    @property
    def root(self) -> Bytes32:
        return self.tree.root

    def proof(self, index: int) -> list[Bytes32]:
        """The Merkle proof of boundary ``index`` against :attr:`root`."""
        if not 0 <= index < len(self.boundaries):
            raise TraceError(f"the trace has boundaries 0..{len(self.boundaries) - 1}, not {index}")
        return self.tree.proof(index)


def verify_leaf(root: bytes, boundary: Boundary, proof: Sequence[bytes]) -> bool:
    """Whether ``boundary`` is a leaf of the trace whose root is ``root``."""
    return process_proof(boundary.leaf, proof) == bytes(root)


def check_served(  # noqa: PLR0917 - the leaf's fields, in the leaf's order
    root: bytes,
    index: int,
    step: int,
    state: Mapping[str, Tensor],
    sketch_hash: bytes,
    proof: Sequence[bytes],
) -> Boundary:
    """A served boundary state checked against the committed ``root``: its hash, with the
    claimed sketch hash, must make a leaf the proof leads to ``root`` from. Returns the
    boundary; raises TraceError naming what does not match."""
    try:
        served = Boundary(index, step, state_hash(state), Bytes32(bytes(sketch_hash)))
        ok = verify_leaf(root, served, proof)
    except (TraceError, ProtocolError, ValueError) as exc:
        raise TraceError(f"boundary {index}: {exc}") from exc
    if not ok:
        raise TraceError(
            f"boundary {index} (after {step} inner steps): the served state hashes to "
            f"0x{served.state_hash.hex()}, which with sketch 0x{bytes(sketch_hash).hex()} and "
            f"the proof does not lead to the committed traceRoot 0x{bytes(root).hex()}"
        )
    return served


class TraceBuilder:
    """The boundary hook of reference.inner's ``train(on_boundary=...)``: at each boundary it
    takes the model's (and the optimizer's) state, commits it, and hands the state to ``keep``
    (the node's BoundaryStore) when given. ``first``: tensors boundary 0 commits besides
    (the sparse format's starting residual, :func:`residual_entries`). ``background``: the
    inner steps' thread only copies the state; its hash, sketch and ``keep`` run in a thread of
    their own (at most :data:`COMMITS_IN_FLIGHT` states wait), the same commitments.

    ``base`` None: the base the sketches are taken from is not known yet (the bounded overlap,
    trainer.round.bounded: round r's average lands at round r+1's first boundary after step 0,
    and round r+1's sketches are taken from that new base). The states taken until then are
    held and committed once :meth:`rebase` gives it."""

    def __init__(
        self,
        model: torch.nn.Module,
        base: Mapping[str, Tensor] | None,
        *,
        optimizer: Callable[[], torch.optim.Optimizer | None] = lambda: None,
        keep: Callable[[Boundary, dict[str, Tensor]], None] | None = None,
        first: Mapping[str, Tensor] | None = None,
        background: bool = False,
    ) -> None:
        self.model = model
        self.first = first
        self.base: dict[str, Tensor] | None = None
        self.optimizer = optimizer
        self.keep = keep
        self._done: list[Boundary] = []
        self._steps: list[int] = []
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="trace") if background else None
        self._pending: list[Future[Boundary]] = []
        self._held: list[tuple[int, int, dict[str, Tensor]]] = []  # taken before the base is known
        if base is not None:
            self.rebase(base)

    def rebase(self, base: Mapping[str, Tensor]) -> None:
        """Take the sketches from ``base`` (copied); the states held until now are committed."""
        if self.base is not None:
            raise TraceError("the trace's base is set once, before its boundaries are committed")
        self.base = {name: t.detach().to("cpu", copy=True) for name, t in base.items()}
        held, self._held = self._held, []
        for index, step, state in held:
            self._submit(index, step, state)

    def __call__(self, step: int) -> None:
        if self._steps and step <= self._steps[-1]:
            raise TraceError(f"boundary after {step} inner steps comes after one at "
                             f"{self._steps[-1]}")  # fmt: skip
        extra = None if self._steps else self.first
        state = boundary_state(self.model, self.optimizer(), extra)
        index = len(self._steps)
        self._steps.append(step)
        if self.base is None:
            self._held.append((index, step, state))
            return
        self._submit(index, step, state)

    def _submit(self, index: int, step: int, state: dict[str, Tensor]) -> None:
        if self._pool is None:
            self._done.append(self._commit(index, step, state))
            return
        while len(self._pending) >= COMMITS_IN_FLIGHT:
            self._done.append(self._pending.pop(0).result())
        self._pending.append(self._pool.submit(self._commit, index, step, state))

    def _commit(self, index: int, step: int, state: dict[str, Tensor]) -> Boundary:
        assert self.base is not None
        boundary = commit_boundary(index, step, state, self.base)
        if self.keep is not None:
            self.keep(boundary, state)
        return boundary

    @property
    def boundaries(self) -> list[Boundary]:
        """The boundaries committed so far, in order (waits for those being committed)."""
        if self._held:
            raise TraceError(f"{len(self._held)} boundary states wait for the trace's base: "
                             "rebase() was never called")  # fmt: skip
        while self._pending:
            self._done.append(self._pending.pop(0).result())
        return self._done

    def trace(self) -> Trace:
        try:
            done = tuple(self.boundaries)
        finally:
            self.close()
        return Trace(done)

    def close(self) -> None:
        """Stop the background thread (once its commits are done); :meth:`trace` calls it, and
        an inner phase that is abandoned must (its round lost)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
