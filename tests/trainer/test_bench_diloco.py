"""bench.diloco's parts: validation and test splits are disjoint, the second corpus loads, the
overlap option changes the result (a one-round delayed outer step), the bounded overlap is
lockstep until an average is in flight, the seeds differ and the run-long lr schedules are off by
default."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from bench.diloco import Setup, code_corpus, run_diloco, split_eval
from reference.data import Corpus
from reference.model import GPT, GPTConfig
from reference.outer import OuterConfig

SETUP = Setup(model=GPTConfig(n_layer=1, n_head=2, d_model=32, seq_len=32), workers=2, rounds=3,
              inner_steps=2, batch=2, inner_lr=3e-3, outer=OuterConfig(), eval_rows=16)  # fmt: skip


def test_validation_and_test_halves_do_not_overlap(corpus_dir: Path) -> None:
    corpus = Corpus.from_folder(corpus_dir)
    val, test = split_eval(corpus)
    for whole, v, t in zip(corpus.sources, val.sources, test.sources, strict=True):
        assert torch.equal(torch.cat([v.eval, t.eval]), whole.eval)
        assert v.eval.numel() > 0 and t.eval.numel() > 0
        assert torch.equal(v.train, whole.train)


def test_the_other_corpus_is_solidity_source_in_two_sources() -> None:
    before = set(Path(tempfile.gettempdir()).glob("coloco-code-corpus-*"))
    other = code_corpus()
    assert other is not None, "node_modules/@openzeppelin/contracts is installed by npm ci"
    assert len(other.sources) == 2
    # loaded into memory: its temporary folder is gone (make test left three a run)
    assert set(Path(tempfile.gettempdir()).glob("coloco-code-corpus-*")) == before
    assert b"pragma solidity" in bytes(other.sources[0].train[:200_000].tolist())


def test_overlap_and_seed_change_the_run(corpus_dir: Path) -> None:
    corpus = Corpus.from_folder(corpus_dir)
    rows = corpus.eval_rows(32, 16, seed=1)
    plain, _, _ = run_diloco(corpus, SETUP, rows, "fp32")
    again, _, _ = run_diloco(corpus, SETUP, rows, "fp32")
    delayed, _, _ = run_diloco(corpus, SETUP, rows, "fp32", overlap=True)
    other_seed, _, _ = run_diloco(corpus, Setup(**{**SETUP.__dict__, "seed": 1}), rows, "fp32")
    assert plain == again
    assert delayed != plain
    assert other_seed != plain


def test_runs_in_a_process_pool_give_the_same_bits_as_inline() -> None:
    """bench.diloco runs its independent runs in 2 processes: the figures must not depend on it."""
    from bench.diloco import Pool, Task

    tasks = [Task("sync", "stdlib", "val", SETUP), Task("fp32", "stdlib", "test", SETUP),
             Task("int8", "code", "test", Setup(**{**SETUP.__dict__, "seed": 1})),
             Task("sparse_carried", "stdlib", "test", SETUP)]  # fmt: skip
    inline = Pool(1).map(tasks)
    pool = Pool(2)
    try:
        assert pool.map(tasks) == inline
    finally:
        pool.close()


def test_run_schedules_are_constant_by_default_and_decay_when_asked(corpus_dir: Path) -> None:
    """Setup.run_decay / outer_decay 1.0 (the default) keep every round's lr (the same bits as
    no schedule); a floor below 1 decays from about 1 to about the floor and changes the run."""
    from bench.diloco import run_factor

    assert all(run_factor(r, 16, 1.0) == 1.0 for r in range(1, 17))
    decayed = [run_factor(r, 16, 0.1) for r in range(1, 17)]
    assert decayed == sorted(decayed, reverse=True) and decayed[0] > 0.99 and decayed[-1] < 0.11
    corpus = Corpus.from_folder(corpus_dir)
    rows = corpus.eval_rows(32, 16, seed=1)
    plain, _, _ = run_diloco(corpus, SETUP, rows, "fp32")
    for field in ("run_decay", "outer_decay"):
        other, _, _ = run_diloco(corpus, Setup(**{**SETUP.__dict__, field: 0.1}), rows, "fp32")
        assert other != plain, field


def test_sparse_runs_carry_error_feedback_and_send_a_fraction_of_int8(corpus_dir: Path) -> None:
    """The sparse arm: deterministic, its bytes the checked all-gather of sparse packets, and the
    error-feedback residual matters (beta 0, no feedback, trains differently)."""
    from bench.diloco import sparse_figures
    from reference.codec.sparse import SparseSpec, sparse_wire_bytes

    corpus = Corpus.from_folder(corpus_dir)
    rows = corpus.eval_rows(32, 16, seed=1)
    s = Setup(**{**SETUP.__dict__, "sparse": SparseSpec(256, 8, 2)})
    loss, sent, _ = run_diloco(corpus, s, rows, "sparse")
    again, _, _ = run_diloco(corpus, s, rows, "sparse")
    no_feedback, _, _ = run_diloco(corpus, Setup(**{**s.__dict__, "sparse_beta": 0.0}), rows,
                                   "sparse")  # fmt: skip
    numel = sum(p.numel() for p in GPT(s.model).parameters())
    assert loss == again and no_feedback != loss
    assert sent == s.rounds * (s.workers - 1) * sparse_wire_bytes(numel, s.sparse)
    run: dict[str, object] = {"sparse_loss_ratio": 1.01, "sparse_bytes_ratio_vs_sync": 900.0}
    figures = sparse_figures(s, [run, run], [run])
    assert figures["sparse_loss_ratio_mean"] == 1.01 and figures["sparse_other_loss_ratio_mean"]
    assert float(figures["sparse_packet_ratio_vs_int8"]) > 10  # type: ignore[arg-type]


def test_the_carried_arms_keep_each_workers_adamw_and_report_beside_the_fresh(
    corpus_dir: Path,
) -> None:
    """The carried arm is the fresh one with every worker's AdamW kept across rounds (its own
    constants); deterministic, another result than the fresh run, and its keys per wire format."""
    from bench.diloco import carried_figures
    from reference.inner import CARRIED_BETAS, CARRIED_EPS

    corpus = Corpus.from_folder(corpus_dir)
    rows = corpus.eval_rows(32, 16, seed=1)
    carried = SETUP.carried()
    assert carried.keep_inner_state and not SETUP.keep_inner_state
    assert (carried.betas, carried.eps) == (CARRIED_BETAS, CARRIED_EPS)
    fresh, _, _ = run_diloco(corpus, SETUP, rows, "int8")
    kept, _, _ = run_diloco(corpus, carried, rows, "int8")
    again, _, _ = run_diloco(corpus, carried, rows, "int8")
    assert kept == again and kept != fresh
    run: dict[str, object] = {"carried_loss_ratio": 1.01, "sparse_carried_loss_ratio": 1.05}
    figures = carried_figures(SETUP, [run, {**run, "carried_loss_ratio": 1.03}], [run])
    assert figures["carried_loss_ratio_mean"] == 1.02
    assert figures["carried_loss_ratios"] == [1.01, 1.03] and figures["carried_loss_ratio_sd"]
    assert figures["sparse_carried_loss_ratio_mean"] == 1.05
    assert figures["sparse_carried_other_loss_ratio_mean"] == 1.05
    assert figures["carried_wire_format"] == "int8"


def test_the_bounded_overlap_is_lockstep_until_an_average_is_in_flight(corpus_dir: Path) -> None:
    """overlap_steps (tau): a one-round run has nothing in flight (the same bits as lockstep);
    over 3 rounds the first tau steps of rounds 2 and 3 train on from each worker's own end of
    the round before, so the run differs from lockstep and from the one-round delay, and is
    deterministic; tau above H, or both overlaps at once, is refused."""
    from bench.diloco import overlap_figures

    corpus = Corpus.from_folder(corpus_dir)
    rows = corpus.eval_rows(32, 16, seed=1)
    one = Setup(**{**SETUP.__dict__, "rounds": 1})
    assert run_diloco(corpus, one, rows, "fp32", overlap_steps=1) == run_diloco(
        corpus, one, rows, "fp32"
    )
    plain = run_diloco(corpus, SETUP, rows, "fp32")[0]
    bounded = run_diloco(corpus, SETUP, rows, "fp32", overlap_steps=1)[0]
    delayed = run_diloco(corpus, SETUP, rows, "fp32", overlap=True)[0]
    assert bounded == run_diloco(corpus, SETUP, rows, "fp32", overlap_steps=1)[0]
    assert len({plain, bounded, delayed}) == 3
    with pytest.raises(ValueError, match=r"outside 0\.\.2"):
        run_diloco(corpus, SETUP, rows, "fp32", overlap_steps=3)
    with pytest.raises(ValueError, match="exclude each other"):
        run_diloco(corpus, SETUP, rows, "fp32", overlap=True, overlap_steps=1)
    runs: list[dict[str, object]] = [
        {"overlap_bounded_loss_ratio": 1.03, "overlap_bounded_cost": 1.004},
        {"overlap_bounded_loss_ratio": 1.05, "overlap_bounded_cost": 1.006},
    ]
    figures = overlap_figures(SETUP, runs)
    assert figures["overlap_bounded_loss_ratio_mean"] == 1.04
    assert figures["overlap_bounded_cost_mean"] == 1.005
    # the node's default path (the bounded overlap) under the key
    assert (figures["overlap_loss_ratio"], figures["overlap_cost"]) == (1.04, 1.005)
    assert figures["overlap_schedule"] == "overlap_bounded"
    assert "overlap_round_cost_mean" not in figures
