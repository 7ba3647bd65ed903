"""A trace committed off the inner steps' thread (``TraceBuilder(background=True)``, the node's
path): the same boundaries, root and kept states as committed inline, each state a copy taken
when its boundary was reached, and a failure in the commit thread surfaces in the steps' thread
(at a later boundary or at ``trace()``)."""

from __future__ import annotations

import threading

import pytest
import torch

from reference.inner import InnerConfig, InnerTrainer
from reference.model import GPT, GPTConfig
from reference.trace import Boundary, TraceBuilder, TraceError, state_hash

SMALL = GPTConfig(n_layer=1, n_head=2, d_model=32, seq_len=16)
Kept = list[tuple[Boundary, dict[str, torch.Tensor], str]]


def _round(background: bool, keep_fails: bool = False) -> tuple[TraceBuilder, Kept]:
    model = GPT(SMALL, seed=3)
    inner = InnerTrainer(model, InnerConfig(steps=9, lr=3e-3, batch_size=2))
    kept: Kept = []

    def keep(b: Boundary, s: dict[str, torch.Tensor]) -> None:
        if keep_fails and b.index == 2:
            raise TraceError("disk full")
        kept.append((b, s, threading.current_thread().name))

    base = {name: p.detach().clone() for name, p in model.named_parameters()}
    builder = TraceBuilder(model, base, optimizer=lambda: inner._opt, keep=keep,
                           background=background)  # fmt: skip
    rows = torch.randint(
        0, 256, (18, SMALL.seq_len + 1), generator=torch.Generator().manual_seed(1)
    )
    inner.train(rows, on_boundary=builder, trace_interval=2)
    return builder, kept


def test_a_background_trace_commits_what_an_inline_one_does() -> None:
    inline, kept_inline = _round(background=False)
    behind, kept_behind = _round(background=True)
    assert behind.trace().root == inline.trace().root
    assert [b.step for b in behind.boundaries] == [0, 2, 4, 6, 8, 9]
    assert [b for b, _, _ in kept_behind] == [b for b, _, _ in kept_inline]
    for (b, state, _), (_, other, _) in zip(kept_behind, kept_inline, strict=True):
        assert state_hash(state) == b.state_hash == state_hash(other), b.index
    assert {name for _, _, name in kept_inline} == {threading.current_thread().name}
    assert all(name.startswith("trace") for _, _, name in kept_behind), "off the steps' thread"


def test_a_failed_background_commit_surfaces_in_the_steps_thread() -> None:
    with pytest.raises(TraceError, match="disk full"):  # at a later boundary, or the trace
        builder, _ = _round(background=True, keep_fails=True)
        builder.trace()
