"""The committed trace of a round (reference/trace.py): boundaries where the inner loop says, a
root that moves with any boundary tensor, proofs that verify, and a served state refused unless it
hashes to its leaf."""

from __future__ import annotations

import pytest
import torch

from protocol.hashing import hash_state_dict
from protocol.merkle import process_proof
from reference.inner import InnerConfig, InnerTrainer
from reference.model import GPT, GPTConfig
from reference.sketch import (
    FRESH_ADAM,
    SketchError,
    adam_hash,
    check_sketch,
    committed_adam,
    make_sketch,
    sketch_seed,
)
from reference.trace import (
    Boundary,
    Trace,
    TraceBuilder,
    TraceError,
    boundary_state,
    boundary_steps,
    check_served,
    commit_boundary,
    state_hash,
)

SMALL = GPTConfig(n_layer=1, n_head=2, d_model=32, seq_len=16)


def _rows(seed: int, n: int = 14) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, SMALL.seq_len + 1), generator=g)


def _round(steps: int = 7, interval: int = 3) -> tuple[GPT, InnerTrainer, TraceBuilder, list]:
    model = GPT(SMALL, seed=3)
    inner = InnerTrainer(model, InnerConfig(steps=steps, lr=3e-3, batch_size=2))
    kept: list[tuple[Boundary, dict[str, torch.Tensor]]] = []
    base = {name: p.detach().clone() for name, p in model.named_parameters()}
    builder = TraceBuilder(
        model, base, optimizer=lambda: inner._opt, keep=lambda b, s: kept.append((b, s))
    )
    inner.train(_rows(1), on_boundary=builder, trace_interval=interval)
    return model, inner, builder, kept


def test_boundaries_are_every_k_steps_and_the_last_even_when_k_does_not_divide() -> None:
    assert boundary_steps(7, 3) == [0, 3, 6, 7]
    assert boundary_steps(6, 3) == [0, 3, 6]
    assert boundary_steps(50, 5) == list(range(0, 51, 5))
    with pytest.raises(TraceError, match="traceInterval must be at least 1"):
        boundary_steps(50, 0)
    _, _, builder, kept = _round()
    assert [b.step for b in builder.boundaries] == [0, 3, 6, 7]
    assert [b.index for b in builder.boundaries] == [0, 1, 2, 3]
    first, last = kept[0][1], kept[-1][1]
    assert not any(name.startswith("adam/") for name in first)  # fresh optimizer: weights only
    assert float(last["adam/step"]) == 7.0
    assert {n for n in last if n.startswith("adam/")} >= {"adam/step"}


def test_the_last_boundary_is_the_trained_model() -> None:
    model, inner, builder, kept = _round()
    final = boundary_state(model, inner._opt)
    assert state_hash(final) == builder.boundaries[-1].state_hash == state_hash(kept[-1][1])


def test_root_changes_when_any_boundary_tensor_changes() -> None:
    _, _, builder, kept = _round()
    trace = builder.trace()
    base = builder.base
    for i, (boundary, state) in enumerate(kept):
        names = [n for n in state if n.startswith("weights/")][:2]
        names += [n for n in state if n.startswith("adam/")][-3:]  # moments and the step
        assert len(names) == (2 if i == 0 else 5)
        for name in names:
            changed = dict(state)
            changed[name] = state[name].clone()
            changed[name].view(-1)[0] += 1e-3
            other = commit_boundary(i, boundary.step, changed, base)
            boundaries = list(trace.boundaries)
            boundaries[i] = other
            assert Trace(tuple(boundaries)).root != trace.root, (i, name)


def test_every_proof_verifies_and_a_served_state_is_checked_against_its_leaf() -> None:
    _, _, builder, kept = _round()
    trace = builder.trace()
    for (boundary, state), b in zip(kept, trace.boundaries, strict=True):
        proof = trace.proof(b.index)
        assert process_proof(b.leaf, proof) == trace.root
        served = check_served(trace.root, b.index, b.step, state, b.sketch_hash, proof)
        assert served == boundary
    boundary, state = kept[2]
    proof = trace.proof(2)
    wrong = dict(state)
    weight = next(n for n in state if n.startswith("weights/"))
    wrong[weight] = state[weight] + 1e-6
    with pytest.raises(TraceError, match="does not lead to the committed traceRoot"):
        check_served(trace.root, 2, boundary.step, wrong, boundary.sketch_hash, proof)
    with pytest.raises(TraceError, match="does not lead"):  # another boundary's state
        check_served(trace.root, 2, boundary.step, kept[1][1], boundary.sketch_hash, proof)
    with pytest.raises(TraceError, match="does not lead"):  # right state, claimed at another step
        check_served(trace.root, 2, boundary.step + 1, state, boundary.sketch_hash, proof)
    with pytest.raises(TraceError, match="no known prefix"):
        check_served(trace.root, 2, boundary.step, {"w": state[weight]},
                     boundary.sketch_hash, proof)  # fmt: skip


def test_the_sketch_is_a_seeded_count_sketch_that_keeps_distances() -> None:
    """The committed sketch (reference.sketch): a few KiB, the same on any thread count (its hash
    is in the leaf), seeded by the state's own hash, and distances between states read on it
    within a few percent of the true ones, in each part."""
    _, _, builder, kept = _round()
    (b1, s1), (b2, s2) = kept[1], kept[-1]
    sketch = make_sketch(s2, builder.base, b2.state_hash)
    check_sketch(sketch)
    assert hash_state_dict(sketch) == b2.sketch_hash
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert hash_state_dict(make_sketch(s2, builder.base, b2.state_hash)) == b2.sketch_hash
    finally:
        torch.set_num_threads(threads)
    weights = sum(t.numel() * 4 for n, t in s2.items() if n.startswith("weights/"))
    assert sum(t.numel() * t.element_size() for t in sketch.values()) == 3 * 1024 * 8 + 8 + 32
    # the AdamW entries' hash, exact: what a carried round's boundary 0 is matched with
    assert committed_adam(sketch) == adam_hash(s2) != FRESH_ADAM
    moved = {**s2, "adam/step": s2["adam/step"] + 1}
    assert committed_adam(make_sketch(moved, builder.base, b2.state_hash)) != adam_hash(s2)
    with pytest.raises(SketchError, match="uint8"):
        check_sketch({**sketch, "sketch/adam": sketch["sketch/adam"].double()})
    assert weights > 3 * 1024 * 8  # the small test model is still larger than its sketch
    # another state hash seeds another projection
    assert sketch_seed(b1.state_hash) != sketch_seed(b2.state_hash)
    other = make_sketch(s2, builder.base, b1.state_hash)
    assert not torch.equal(other["sketch/weights"], sketch["sketch/weights"])
    # distances kept: boundary 1 vs the last, in the last's projection
    first = make_sketch(s1, builder.base, b2.state_hash)
    for part, prefix in (("weights", "weights/"), ("exp_avg", "/exp_avg")):
        keys = sorted(n for n in s2 if (n.startswith(prefix) if part == "weights"
                                         else n.endswith(prefix)))  # fmt: skip
        true = float(torch.cat([(s2[n] - s1[n]).reshape(-1) for n in keys]).norm())
        read = float((sketch["sketch/" + part] - first["sketch/" + part]).norm())
        assert abs(read / true - 1) < 0.2, (part, read, true)
    assert float(sketch["sketch/step"]) == 7.0 and float(first["sketch/step"]) == 3.0
    with pytest.raises(SketchError, match="missing"):
        check_sketch({k: v for k, v in sketch.items() if k != "sketch/step"})
    with pytest.raises(SketchError, match="float64"):
        check_sketch({**sketch, "sketch/weights": sketch["sketch/weights"].float()})


def test_a_state_needs_known_prefixes_and_its_weights() -> None:
    w = torch.zeros(3)
    with pytest.raises(TraceError, match="no known prefix"):
        state_hash({"weights/a": w, "momentum/a": w})
    with pytest.raises(TraceError, match="needs its weights"):
        state_hash({"adam/step": torch.tensor(1.0)})
    assert state_hash({"weights/a": w, "residual/a": w}) != state_hash({"weights/a": w})
