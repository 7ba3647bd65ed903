"""The fresh AdamW's fingerprints (ledger.judge.steps) on real training of the tiny model: an
honest round's largest coordinate is about lr x H and its most-moved coordinates carry the sign of
its shard's first batch; half the steps scaled up to the honest norm falls short of lr x H, and
training on other data loses the first batch's signature. Without the signals these two cheats
are caught only when the 10% audit sample happens to draw them."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from ledger.judge.steps import (
    FLOOR,
    LINF_BAND,
    MIN_DISAGREEING,
    MOST_MOVED,
    SATURATION,
    Agreement,
    FirstStepProbe,
    cut_of,
    linf,
    linf_ratio,
)
from reference.checkpoint import load_weights_into
from reference.data import Corpus, ShardSpec
from reference.inner import InnerConfig, InnerTrainer
from reference.model import GPT, GPTConfig
from trainer.round.recovery import genesis_checkpoint

TINY = GPTConfig.preset("tiny")
RUN = bytes.fromhex("1c" * 32)
NODE = "0x" + "ab" * 20
LR, STEPS, BATCH = 1e-3, 8, 4


@pytest.fixture(scope="module")
def base() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return dict(genesis_checkpoint(TINY, 0).weights)


def _spec(node: str) -> ShardSpec:
    return ShardSpec.for_node(RUN, 3, node, STEPS * BATCH * TINY.seq_len, (10_000,))


Tensors = dict[str, torch.Tensor]


def _train(base: Tensors, rows: torch.Tensor, steps: int) -> Tensors:
    torch.set_num_threads(1)
    model = GPT(TINY)
    load_weights_into(model, {n: t.clone() for n, t in base.items()})
    InnerTrainer(model, InnerConfig(steps=steps, lr=LR, batch_size=BATCH), keep_state=False).train(
        rows
    )
    local = dict(model.named_parameters())
    return {n: (base[n] - local[n].detach()).contiguous() for n in base}


def test_honest_steps_carry_the_first_batch_and_reach_lr_times_steps(
    base: dict[str, torch.Tensor],
) -> None:
    rows = Corpus.stdlib().shard_rows(_spec(NODE), TINY.seq_len)
    pg = _train(base, rows, STEPS)
    got = FirstStepProbe(base, "tiny").agreement(pg, rows[:BATCH], LR, STEPS)
    assert got.saturated >= 100 and got.disagreeing == 0, got
    assert not got.suspicious
    assert 0.95 <= linf_ratio(linf(pg), LR, STEPS) <= 1.1


def test_other_data_loses_the_first_batch_signature(base: dict[str, torch.Tensor]) -> None:
    corpus = Corpus.stdlib()
    declared = corpus.shard_rows(_spec(NODE), TINY.seq_len)
    other = corpus.shard_rows(dataclasses.replace(_spec(NODE), node="0x" + "5e" * 20), TINY.seq_len)
    pg = _train(base, other, STEPS)
    got = FirstStepProbe(base, "tiny").agreement(pg, declared[:BATCH], LR, STEPS)
    assert got.disagreeing >= MIN_DISAGREEING and got.suspicious, got
    # the same update probed with the batch it really trained on first agrees: the signal is
    # the declared shard, not the update's shape
    assert FirstStepProbe(base, "tiny").agreement(pg, other[:BATCH], LR, STEPS).disagreeing == 0


@pytest.mark.parametrize(
    ("saturated", "agreeing", "suspicious"),
    [
        (47, 43, True),  # other data on a trained base, from a red-team run that escaped at 5
        (78, 40, True),  # other data on the trained base below
        (88, 87, False),  # honest on a trained base: at most one flip measured
        (31_000, 30_999, False),  # honest at genesis
        (31_000, 30_960, False),  # 40 of 31,000: under the 0.2% share
        (3_921, 3_878, True),  # other data at genesis (a run): 43 of 3,921
    ],
)
def test_a_few_disagreeing_of_few_saturated_is_suspicious(
    saturated: int, agreeing: int, suspicious: bool
) -> None:
    assert Agreement(saturated, agreeing).suspicious is suspicious


def _moved(*values: float) -> dict[str, torch.Tensor]:
    """A pseudo-gradient whose coordinates moved these multiples of lr x H."""
    return {"w": torch.tensor(values) * (LR * STEPS)}


def test_the_cut_is_saturation_while_enough_saturate_and_then_the_most_moved() -> None:
    assert cut_of(_moved(*[0.9] * MOST_MOVED, 0.1), LR, STEPS) == SATURATION
    # fewer saturate: the MOST_MOVED-th largest, the sign of a moved coordinate not ignored
    few = _moved(*[0.9] * 10, *[-0.8] * (MOST_MOVED - 10), *[0.78] * 5)
    assert cut_of(few, LR, STEPS) == pytest.approx(0.8)
    # never under FLOOR, however few moved
    assert cut_of(_moved(*[0.9] * 10, *[0.6] * MOST_MOVED), LR, STEPS) == FLOOR
    assert cut_of(_moved(0.9, 0.8), LR, STEPS) == FLOOR


def test_half_the_steps_scaled_up_fall_short_of_lr_times_steps(
    base: dict[str, torch.Tensor],
) -> None:
    corpus = Corpus.stdlib()
    rows = corpus.shard_rows(_spec(NODE), TINY.seq_len)
    honest = _train(base, rows, STEPS)
    peer = _train(base, corpus.shard_rows(_spec("0x" + "cd" * 20), TINY.seq_len), STEPS)
    half = _train(base, rows, STEPS // 2)
    norm = lambda t: float(torch.cat([x.reshape(-1) for x in t.values()]).norm())  # noqa: E731
    scaled = {n: t * (norm(honest) / norm(half)) for n, t in half.items()}
    assert linf(scaled) < LINF_BAND[0] * linf(honest), (linf(scaled), linf(honest))
    # another honest node's update of the same round is within the band
    assert LINF_BAND[0] <= linf(peer) / linf(honest) <= LINF_BAND[1], (linf(peer), linf(honest))


@pytest.fixture(scope="module")
def trained_base(base: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A base 200 AdamW steps past genesis (as a later round's is): with eps 1e-4 far fewer
    coordinates saturate there than at genesis, so the signature has less to count."""
    torch.set_num_threads(1)
    model = GPT(TINY)
    load_weights_into(model, {n: t.clone() for n, t in base.items()})
    rows = Corpus.stdlib().random_rows(TINY.seq_len, 200 * 32, seed=4242)
    InnerTrainer(model, InnerConfig(steps=200, lr=3e-3, batch_size=32)).train(rows)
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_the_signals_hold_on_a_trained_base(trained_base: dict[str, torch.Tensor]) -> None:
    corpus = Corpus.stdlib()
    declared = corpus.shard_rows(_spec(NODE), TINY.seq_len)
    other = corpus.shard_rows(dataclasses.replace(_spec(NODE), node="0x" + "5e" * 20), TINY.seq_len)
    probe = FirstStepProbe(trained_base, "tiny")
    honest = _train(trained_base, declared, STEPS)
    got = probe.agreement(honest, declared[:BATCH], LR, STEPS)
    # fewer than MOST_MOVED reach SATURATION here: the cut drops to count MOST_MOVED of them
    assert FLOOR <= got.cut < SATURATION and got.saturated >= MOST_MOVED, got
    assert got.disagreeing <= 1 and not got.suspicious, got
    cheat = probe.agreement(_train(trained_base, other, STEPS), declared[:BATCH], LR, STEPS)
    assert cheat.suspicious and cheat.disagreeing >= 10 * MIN_DISAGREEING, cheat
    half = _train(trained_base, declared, STEPS // 2)
    norm = lambda t: float(torch.cat([x.reshape(-1) for x in t.values()]).norm())  # noqa: E731
    scaled = {n: t * (norm(honest) / norm(half)) for n, t in half.items()}
    assert linf(scaled) < LINF_BAND[0] * linf(honest), (linf(scaled), linf(honest))


def _entry(pg: Tensors, node: str, ident: int) -> SimpleNamespace:
    """A judge entry (ledger.judge.entries.Entry's fields the probe reads) of ``node``'s update,
    attested on the shard of :func:`_spec`."""
    spec = dataclasses.replace(_spec(NODE), node=node)
    att = SimpleNamespace(run_id="0x" + RUN.hex(), round=spec.round, node=node,
                          inner_steps=STEPS, tokens=STEPS * BATCH * TINY.seq_len,
                          data_shard="0x" + spec.id.hex())  # fmt: skip
    return SimpleNamespace(id=ident, ok=True, tensors=pg, att=att, suspicious=[], reason="")


@pytest.mark.parametrize("carried", [False, True], ids=["fresh", "carried"])
def test_the_fingerprints_run_in_both_inner_modes(
    base: dict[str, torch.Tensor], monkeypatch: pytest.MonkeyPatch, carried: bool
) -> None:
    """The judge's fingerprints (ledger.judge.scores.probe_inner_steps) in either inner mode:
    the first batch's sign flags a node that trained on other data, and the step-count relation
    a node that ran half the steps it declared; honest nodes are not flagged here."""
    import reference.inner
    from ledger.judge.scores import probe_inner_steps

    monkeypatch.setattr(reference.inner, "CARRY_STATE", carried)
    corpus = Corpus.stdlib()
    nodes = ["0x" + c * 20 for c in ("ab", "cd", "ef")]
    rows = [
        corpus.shard_rows(dataclasses.replace(_spec(NODE), node=n), TINY.seq_len) for n in nodes
    ]
    other = corpus.shard_rows(dataclasses.replace(_spec(NODE), node="0x" + "5e" * 20), TINY.seq_len)
    entries = [
        _entry(_train(base, r, STEPS), n, i)
        for i, (n, r) in enumerate(zip(nodes, rows, strict=True))
    ]
    entries.append(_entry(_train(base, other, STEPS), "0x" + "77" * 20, 3))  # other data
    half = _train(base, rows[0], STEPS // 2)  # declares STEPS on node 0's shard
    entries.append(_entry(half, nodes[0], 4))
    ctx = SimpleNamespace(
        settings=SimpleNamespace(
            audit_fraction=0.1, usefulness_model="tiny", usefulness_corpus=None
        ),
        config=SimpleNamespace(inner_lr=LR, data_mixture_bps=(10_000,), inner_steps=STEPS),
    )
    cpu = probe_inner_steps(entries, ctx, base)  # type: ignore[arg-type]
    flagged = [bool(e.suspicious) for e in entries]
    why = [e.suspicious for e in entries]
    assert flagged[:3] == [False] * 3 and flagged[4], why
    assert "largest coordinate" in why[4][0], why
    assert cpu > 0.0 and flagged[3] and "first batch" in why[3][-1], why
