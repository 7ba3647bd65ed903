"""`python -m bench.audit --smoke` (docs/ledger.md, "Segment audit"): the calibration bench runs,
prints the acceptance keys, passes every honest segment and fails every cheat, and draws its
histogram beside its JSON; with ``--recheck-all`` every honest segment gets the decision a segment
that fails the screen gets (re-checked step by step: none penalised) and every cheat segment is
bisected (each names a step above the one-step tolerance: none exonerated)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.audit import CHEATS
from ledger.core.config import ONE_STEP_TOLERANCE, SEGMENT_TOLERANCE


@pytest.mark.slow
def test_the_audit_bench_separates_honest_segments_from_cheats(tmp_path: Path) -> None:
    png = tmp_path / "audit.png"
    done = subprocess.run(
        [sys.executable, "-m", "bench.audit", "--smoke", "--recheck-all", "--png", str(png)],
        capture_output=True, text=True, timeout=900, check=True,
    )  # fmt: skip
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["honest_segments"] == 20 and summary["honest_failed_screen"] == 0
    assert summary["tolerance"] == SEGMENT_TOLERANCE and summary["cheats_passed"] == 0
    assert summary["margin"] >= 10 and summary["node_threads"] >= 1
    assert summary["skip_one_margin"] >= summary["margin"]
    # the decision: each segment re-trained step by step by its node (its re-training lands on
    # its committed end) and every step checked alone, none above the one-step tolerance; each
    # cheat's bisection names a step above it, far from the worst honest step
    assert summary["honest_rechecked"] == 20 and summary["honest_penalised"] == 0
    assert summary["recheck_end_gap"] < 1e-5, summary["recheck_end_gap"]
    assert summary["cheats_bisected"] == len(CHEATS) and summary["cheats_exonerated"] == 0
    assert set(summary["exonerated_by_cheat"]) == set(CHEATS)
    assert min(summary["decision_smallest_by_cheat"].values()) > 10 * ONE_STEP_TOLERANCE
    assert summary["decision_margin"] >= 10
    assert summary["skip_one_expected_net_gain"] < 0
    assert 0 < summary["audit_cpu_ratio"] < 0.05
    # the verdict is read on sketches; an audit moves at most one full state, and the last
    # boundary's sketch binds an fp32 pseudo-gradient exactly, an int8 one within its rounding
    assert summary["compared_on"].startswith("sketches") and summary["full_state_margin"] >= 10
    assert summary["full_states_moved_max"] == 1
    (state,) = summary["state_bytes_by_config"].values()
    assert 0.8 * state < summary["audit_bytes_moved"] < state + 100_000 < 3 * state  # mean: seg. 0
    assert summary["audit_bytes_before"] == 3 * state
    assert summary["last_binding_fp32_max"] == 0 and summary["last_binding_int8_ratio_max"] < 1
    # the bisection's unit: honest one-step errors far below the tolerance, both cheats above,
    # and one verdict re-checked costs about one of the round's H steps
    # the round's 50 steps and the 20 re-checked segments' 5 each
    assert summary["one_step_checks"] == 50 + 20 * 5
    assert summary["one_step_honest_penalised"] == 0
    assert summary["one_step_worst_honest"] < ONE_STEP_TOLERANCE / 10
    assert summary["one_step_smallest_cheat"] > 10 * summary["one_step_tolerance"]
    assert set(summary["one_step_smallest_by_cheat"]) == {"skip", "lr_x0.9"}
    assert 0 < summary["verdict_cost_ratio"] < 5 * summary["verdict_cost_ratio_model"]
    assert png.stat().st_size > 10_000
    kept = json.loads(png.with_suffix(".json").read_text())
    assert len(kept["honest_errors"]) == 20 and set(kept["cheat_errors"]) == set(
        summary["smallest_error_by_cheat"]
    )


@pytest.mark.slow
def test_the_verdict_part_measures_the_whole_coloco_audit_check() -> None:
    """`python -m bench.audit --verdict`: one tiny round's one-step checks, what the whole
    `coloco audit` check of a fraud verdict (on the step's top), of an honest step's and of a
    false verdict costs against the node's round (with its trace) and against the bare steps,
    and the step's replay alone (docs/ledger.md, "One-step verdicts")."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.audit", "--verdict", "--checks", "10"],
        capture_output=True, text=True, timeout=900, check=True,
    )  # fmt: skip
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["one_step_checks"] == 10 and summary["one_step_honest_penalised"] == 0
    assert summary["one_step_smallest_cheat"] > 10 * summary["one_step_tolerance"]
    model = summary["verdict_cost_ratio_model"]
    assert model == 1 / 50
    # the whole check of an honest step costs more than the step's replay alone (hashing,
    # building the model); a fraud verdict, confirmed on the step's top, less than that
    assert 0 < summary["verdict_step_ratio"] < summary["verdict_full_cost_ratio"] < 5 * model
    assert 0 < summary["verdict_cost_ratio"] < summary["verdict_full_cost_ratio"]
    assert 0 < summary["verdict_cost_ratio_bare_steps"] < 5 * model
    assert summary["verdict_refute_cost_ratio"] > 0
