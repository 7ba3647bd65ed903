"""`python -m bench.redteam_replay` (docs/ledger.md): the same honest round replayed under each
ATEN_CPU_CAPABILITY this CPU runs stays within the audit's tolerance, and the reference matches
itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def test_replay_across_cpu_capabilities_is_within_the_tolerance() -> None:
    cmd = [sys.executable, "-m", "bench.redteam_replay", "--rounds", "1", "--steps", "2"]
    done = subprocess.run(
        [*cmd, "--threads", "1"], check=False, cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    errors = out["rel_l2_error"]
    best = torch.backends.cpu.get_cpu_capability().lower()  # AVX2 on a CPU without AVX-512
    assert out["capabilities"][-1] == best and out["capabilities"][0] == "default", out
    assert set(errors) == {f"{cap}/1t" for cap in out["capabilities"]}, errors
    assert set(out["skipped"]) == {"default", "avx2", "avx512"} - set(out["capabilities"]), out
    assert errors["default/1t"] == 0.0
    assert out["max_rel_l2_error"] < out["tolerance"], out
