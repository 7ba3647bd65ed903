"""bench.diloco_search's parts: an arm's settings reach the run (and a bad arm is refused with
what was wrong), and the diagnostic shared-mask wire keeps the same rotating positions on every
node, carries what it did not send, and restores the codec once its run is over."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import torch

from bench import diloco
from bench.diloco import Setup, Task
from bench.diloco_search import SPARSE_PATH, MaskCodec, parse_arm, parser, plan, run_arm
from bench.sparse_bits import TopkSpec, ratio_vs_sync
from reference.codec.sparse import SparseSpec
from reference.model import GPT, GPTConfig
from reference.outer import OuterConfig

SETUP = Setup(model=GPTConfig(n_layer=1, n_head=2, d_model=32, seq_len=32), workers=2, rounds=2,
              inner_steps=2, batch=2, inner_lr=3e-3, outer=OuterConfig(), eval_rows=16)  # fmt: skip
SPEC = SparseSpec(256, 16, 2)


def test_an_arm_sets_what_it_names_and_a_bad_one_is_refused() -> None:
    kind, s, period = parse_arm("carried:outer_lr=0.7,carried_eps=1e-6", SETUP)
    assert (kind, s.outer.lr, s.carried_eps, period) == ("carried", 0.7, 1e-6, 0)
    assert s.outer.momentum == SETUP.outer.momentum
    kind, s, period = parse_arm("mask_carried:mask_period=4,mask_rms=1,sparse_outer_lr=1.5", SETUP)
    assert (kind, s.sparse_outer.lr, period) == ("mask_carried", 1.5, -4)
    with pytest.raises(SystemExit, match="kind must be one of"):
        parse_arm("dense:outer_lr=1", SETUP)
    with pytest.raises(SystemExit, match="not key=value"):
        parse_arm("carried:outer=1", SETUP)
    with pytest.raises(SystemExit, match="mask_period"):
        parse_arm("mask", SETUP)
    with pytest.raises(Exception, match="sparse value bits"):
        parse_arm("sparse:sparse_bits=3", SETUP)


def test_a_topk_arm_gets_its_shape_and_fit_keeps_the_largest_k_at_the_arms_h() -> None:
    kind, s, wire = parse_arm("topk_carried:chunk=64,k=5,value_bits=1,coding=enum,sparse_beta=0.9",
                              SETUP)  # fmt: skip
    assert (kind, s.sparse_beta, wire) == ("topk_carried", 0.9, TopkSpec(64, 5, 1, "enum", 32))
    _, _, fit = parse_arm("topk:chunk=64,coding=enum,scale_bits=16,fit=40", SETUP)
    assert isinstance(fit, TopkSpec)
    numel = GPT(SETUP.model).num_params()
    assert ratio_vs_sync(fit, numel, SETUP.inner_steps, SETUP.workers) >= 40
    bigger = TopkSpec(64, fit.k + 1, 2, "enum", 16)
    assert ratio_vs_sync(bigger, numel, SETUP.inner_steps, SETUP.workers) < 40
    with pytest.raises(SystemExit, match="not key=value"):
        parse_arm("sparse:coding=enum", SETUP)  # a topk key on an arm of another kind


@pytest.mark.parametrize("rms", [False, True])
def test_the_mask_rotates_is_shared_and_carries_the_rest(rms: bool) -> None:
    torch.manual_seed(0)
    codec = MaskCodec(4, workers=2, rms=rms)
    updates = [torch.randn(1000), torch.randn(1000)]
    round1 = [codec.compress(u, None, SPEC, 0.95) for u in updates]
    sent = [p.values != 0 for p, _ in round1]
    assert torch.equal(sent[0], sent[1])  # every node the same positions: no offsets travel
    assert torch.equal(sent[0], torch.arange(1000) % 4 == 0)
    for u, (p, left) in zip(updates, round1, strict=True):
        assert torch.allclose(left + p.values, u, atol=1e-6)  # the rest is carried
        assert p.nbytes == 63 + 4 * 4  # 250 2-bit codes (63 B) + one fp32 step a chunk
    p2, _ = codec.compress(updates[0], round1[0][1], SPEC, 0.95)
    assert torch.equal(p2.values != 0, torch.arange(1000) % 4 == 3)  # round 2: the next share


def test_a_mask_run_patches_the_sparse_path_only_for_its_run() -> None:
    saved = [getattr(diloco, name) for name in SPARSE_PATH]
    task = Task("mask", "stdlib", "val", SETUP)
    masked = run_arm(task, 4)
    assert [getattr(diloco, name) for name in SPARSE_PATH] == saved
    sparse = run_arm(Task("sparse", "stdlib", "val", SETUP))
    assert masked[0] != sparse[0]
    assert masked[1] < sparse[1]  # fewer bytes: no offsets


def test_a_topk_run_patches_the_sparse_path_only_for_its_run() -> None:
    saved = [getattr(diloco, name) for name in SPARSE_PATH]
    shape = TopkSpec(chunk=256, k=16, value_bits=2, coding="fixed", scale_bits=32)
    same = run_arm(Task("topk", "stdlib", "val", SETUP), shape)
    assert [getattr(diloco, name) for name in SPARSE_PATH] == saved
    sparse = run_arm(Task("sparse", "stdlib", "val", SETUP))
    assert same[:2] == sparse[:2]  # today's shape: the codec's values and bytes
    one_bit = run_arm(Task("topk", "stdlib", "val", SETUP), TopkSpec(256, 16, 1, "enum", 16))
    assert one_bit[0] != sparse[0] and one_bit[1] < sparse[1]


def test_docs_cpu10m_runs_plan_the_tasks_they_name() -> None:
    """docs/trainer.md's cpu10m runs (the ``<!-- cpu10m-search -->`` block), planned as the
    command would (each line an hour on this machine: the plan is what a test can run)."""
    text = (Path(__file__).parents[2] / "docs" / "trainer.md").read_text()
    block = re.search(r"<!-- cpu10m-search -->\s*```bash\n(.*?)```", text, re.S)
    assert block, "docs/trainer.md: no ```bash block after <!-- cpu10m-search -->"
    corpora = []
    for line in block.group(1).strip().splitlines():
        words = shlex.split(line)
        assert words[:3] == ["python", "-m", "bench.diloco_search"], line
        _, _, tasks = plan(parser().parse_args(words[3:]))
        assert {t.setup.model for t, _ in tasks} == {GPTConfig.preset("cpu10m")}
        assert {t.kind for t, _ in tasks} == {"sync", "carried", "sparse_carried"}
        corpora += [t.corpus for t, _ in tasks]
    assert set(corpora) == {"stdlib", "code"}


def test_the_preset_and_the_corpus_reach_every_task() -> None:
    """``--preset`` is every task's model, ``--corpus`` its corpus; ``--sync-losses`` leaves
    the baseline's runs out, one loss a seed."""
    args = parser().parse_args(["--preset", "cpu10m", "--corpus", "code", "--sync-lr", "3e-3",
                                "--seeds", "0,2", "carried", "sparse_carried"])  # fmt: skip
    base, arms, tasks = plan(args)
    assert base.model == GPTConfig.preset("cpu10m") and base.sync_lr == 3e-3
    assert [(t.kind, t.setup.seed) for t, _ in tasks] == [
        ("sync", 0), ("sync", 2), ("carried", 0), ("carried", 2),
        ("sparse_carried", 0), ("sparse_carried", 2),
    ]  # fmt: skip
    assert {t.corpus for t, _ in tasks} == {"code"} and {t.split for t, _ in tasks} == {"val"}
    assert {t.setup.model for t, _ in tasks} == {GPTConfig.preset("cpu10m")}
    assert len(arms) == 2
    known = parser().parse_args(["--sync-losses", "2.4985", "carried"])
    assert [t.kind for t, _ in plan(known)[2]] == ["carried"]
    assert plan(known)[0].model == GPTConfig.preset("tiny")  # the default: --quick's model
    with pytest.raises(SystemExit, match="one loss per seed"):
        plan(parser().parse_args(["--sync-losses", "2.4", "--seeds", "0,1", "carried"]))
