"""`python -m bench.gpu_audit --smoke` (docs/ledger.md, "Segment audit"): the prepared GPU check
runs where CUDA is absent, says so, and runs its CPU-vs-CPU path: every honest segment and
one-step verdict passes, every cheat and bf16 segment fails; ``--recheck-all`` re-trains each
honest segment step by step and checks every step alone (the verdict a segment that fails the
screen gets), none penalised."""

from __future__ import annotations

from typing import Any

import torch

from bench.gpu_audit import BATCH, LR, _inner, main
from ledger.core.config import ONE_STEP_TOLERANCE, SEGMENT_TOLERANCE
from reference.inner import CARRY_STATE, InnerConfig


def test_the_gpu_check_runs_on_cpu_and_separates_honest_from_cheats() -> None:
    summary: dict[str, Any] = main(["--smoke", "--recheck-all"])
    assert summary["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert summary["honest_segments"] == 2 and summary["honest_failed_screen"] == 0
    # each segment re-trained one step at a time lands on its committed end; no step penalised
    assert summary["honest_rechecked"] == 2 and summary["honest_penalised"] == 0
    assert summary["recheck_end_gap"] < 1e-6, summary["recheck_end_gap"]
    assert summary["tolerance"] == SEGMENT_TOLERANCE and summary["cheats_passed"] == 0
    # bf16 autocast: on a GPU its segments fail the audit; on a CPU (autocast on fewer ops) it
    # lands at about the tolerance, still far from the pinned node's 0
    assert summary["bf16_segments"] == 2
    assert summary["bf16_smallest_error"] > 100 * summary["worst_honest_error"]
    if summary["device"] == "cuda":
        assert summary["bf16_failed"] == 2
    assert set(summary["smallest_by_cheat"]) == {"skip_one", "lr_x0.9"}
    assert summary["one_step_checks"] == 3 + 2 * 5 and summary["one_step_honest_penalised"] == 0
    assert summary["one_step_tolerance"] == ONE_STEP_TOLERANCE
    assert summary["one_step_smallest_cheat"] > 10 * ONE_STEP_TOLERANCE
    assert summary["one_step_top_confirmed_honest"] == 0
    assert summary["one_step_top_worst_honest"] < summary["one_step_top_threshold"] / 100


def test_the_gpu_check_trains_in_the_protocols_inner_mode() -> None:
    """The node and the replay use the protocol's AdamW (the carried constants when
    CARRY_STATE), not a bare InnerConfig's fresh ones."""
    assert _inner(5) == InnerConfig.protocol(5, LR, BATCH, carried=CARRY_STATE)
    if CARRY_STATE:
        assert _inner(1).betas != InnerConfig(steps=1, lr=LR, batch_size=BATCH).betas
