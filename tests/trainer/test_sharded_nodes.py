"""Nodes of several local ranks in real gloo processes (FSDP2 inside each node), checked
against single-process nodes replayed from the run's records (bench.fsdp)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from bench.fsdp import INNER_TOLERANCE, Spec, run_nodes

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "trainer.md"
MARKER = "<!-- sharded -->"


def _assert_exact(found: dict[str, object]) -> None:
    assert found["outer_equal"], "outer step or checkpoint differs from the single-process one"
    assert found["packets_equal"], "a packet differs from a single-process node's encoding"
    assert found["same_base"], "nodes ended a round on different bases (or lost a member)"
    assert found["trace_same"], "the trace's start state or boundary count differs"
    assert found["segments_pass"], f"segment audit error {found['segment_error']}"
    assert isinstance(found["inner_rel_err"], float)
    assert found["inner_rel_err"] <= INNER_TOLERANCE


def test_two_nodes_of_two_ranks_match_single_process_nodes_over_three_rounds() -> None:
    _assert_exact(run_nodes(Spec(rounds=3), [2, 2]))


@pytest.mark.slow
def test_nodes_of_one_two_and_four_ranks_train_one_run() -> None:
    _assert_exact(run_nodes(Spec(rounds=3), [1, 2, 4]))


def test_the_gpu_script_starts_and_ends_on_cpu() -> None:
    """bench.gpu_node's dry run (CPU/gloo, tiny shape, 2 ranks) in make test: the prepared GPU
    check is known to start, shard, train, step and report before a device is lent."""
    from bench.gpu_node import main

    out = main(["--dry-run"])
    assert out["device"] == "cpu" and out["ranks"] == 2
    assert [r["bf16"] for r in out["runs"]] == [False, True]
    for run in out["runs"]:
        assert "error" not in run, run
        assert run["tokens_per_s"] > 0 and run["outer_step_s"] > 0 and run["params"] > 0


def _docs_block() -> list[str]:
    text = DOC.read_text()
    after = text[text.index(MARKER) + len(MARKER) :]
    match = re.search(r"```bash\n(.*?)```", after, re.S)
    assert match, f"{DOC}: no ```bash block after {MARKER}"
    return [line for line in match.group(1).splitlines() if line.strip()]


@pytest.mark.slow
def test_the_docs_commands_run_as_written() -> None:
    """docs/trainer.md "Nodes of several ranks": a 1- and a 2-rank node agree with
    single-process nodes, and the GPU script's dry run starts and ends on CPU."""
    lines = _docs_block()
    assert [line.split()[:3] for line in lines] == [
        ["python", "-m", "bench.fsdp"],
        ["python", "-m", "bench.gpu_node"],
    ]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    outs = []
    for line in lines:
        argv = [sys.executable, *shlex.split(line)[1:]]
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=500, check=False)  # fmt: skip
        assert done.returncode == 0, f"{line}: {done.stderr[-2000:]}"
        outs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert outs[0]["ok"] is True and outs[0]["inner_rel_err"] <= INNER_TOLERANCE
    runs = outs[1]["runs"]
    assert [r["bf16"] for r in runs] == [False, True]
    assert all(r["tokens_per_s"] > 0 and r["outer_step_s"] > 0 for r in runs)
