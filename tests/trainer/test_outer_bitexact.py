"""The outer step gives the same bits on every CPU vector unit (and matches a numpy reference).

Each capability runs in its own subprocess (ATEN_CPU_CAPABILITY is read once, at import), on
inputs written by this process, so nothing but the outer step can differ between them.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from protocol.errors import ConfigError
from reference.outer import outer_step

REPO = Path(__file__).resolve().parents[2]
N = 1_000_007  # odd size: vector bodies and scalar tails both run
STEPS = 3
LR, MU = 0.7, 0.9

CHILD = r"""
import hashlib, sys, torch
from reference.outer import outer_step, outer_step_
d = torch.load(sys.argv[1])
mode = sys.argv[2]
base, m = d["base"].clone(), torch.zeros_like(d["base"])
for g in d["gs"]:
    if mode == "fused":  # the pre-fix formula: add/sub with alpha (an FMA on AVX2/AVX-512)
        m.mul_(0.9).add_(g)
        base.sub_(g.add(m, alpha=0.9), alpha=0.7)
    else:
        b2, m2 = base.clone(), m.clone()
        base, m = outer_step(base, m, g, 0.7, 0.9)
        outer_step_(b2, m2, g, 0.7, 0.9)  # the in-place form OuterState.step uses
        assert torch.equal(b2, base) and torch.equal(m2, m), "in-place bits differ"
h = hashlib.sha256(base.numpy().tobytes() + m.numpy().tobytes()).hexdigest()
print(torch.backends.cpu.get_cpu_capability(), h)
"""


def _digest(base: np.ndarray, m: np.ndarray) -> str:
    return hashlib.sha256(base.tobytes() + m.tobytes()).hexdigest()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    g = torch.Generator().manual_seed(0)
    path = tmp_path_factory.mktemp("outer") / "inputs.pt"
    base = torch.randn(N, generator=g)
    gs = [torch.randn(N, generator=g) * 0.01 for _ in range(STEPS)]
    torch.save({"base": base, "gs": gs}, path)
    return path


def _run(inputs: Path, capability: str, mode: str) -> str:
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(inputs), mode],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    got_cap, digest = out.stdout.split()
    if got_cap.lower() != capability:
        pytest.skip(f"this CPU lacks {capability} (torch ran {got_cap}): nothing to compare there")
    return digest


def _numpy_reference(inputs: Path) -> str:
    """The same sequence of single fp32 operations in numpy (a second implementation)."""
    d = torch.load(inputs)
    base = d["base"].numpy().copy()
    m = np.zeros_like(base)
    mu, lr = np.float32(MU), np.float32(LR)
    for g_t in d["gs"]:
        g = g_t.numpy()
        m = np.add(np.multiply(m, mu), g)
        base = np.subtract(base, np.multiply(np.add(g, np.multiply(m, mu)), lr))
    assert base.dtype == np.float32
    return _digest(base, m)


@pytest.mark.parametrize("capability", ["default", "avx2", "avx512"])
def test_outer_step_bits_equal_the_reference_under_every_capability(
    inputs: Path, capability: str
) -> None:
    assert _run(inputs, capability, "exact") == _numpy_reference(inputs)


@pytest.mark.slow
def test_the_fused_formula_differs_between_capabilities(inputs: Path) -> None:
    """What the test above guards against: torch's add-with-alpha is an FMA on AVX2 only."""
    default = _run(inputs, "default", "fused")
    avx2 = _run(inputs, "avx2", "fused")
    assert default != avx2
    assert default == _numpy_reference(inputs)  # no FMA under default: the plain sequence


def test_outer_step_is_torch_nesterov_and_leaves_inputs_alone() -> None:
    g = torch.Generator().manual_seed(1)
    base, m = torch.randn(1000, generator=g), torch.randn(1000, generator=g)
    avg = torch.randn(1000, generator=g)
    before = (base.clone(), m.clone(), avg.clone())
    new_base, new_m = outer_step(base, m, avg, LR, MU)
    assert all(torch.equal(a, b) for a, b in zip(before, (base, m, avg), strict=True))
    p = base.clone().requires_grad_(True)
    opt = torch.optim.SGD([p], lr=LR, momentum=MU, nesterov=True)
    opt.state[p]["momentum_buffer"] = m.clone()
    p.grad = avg.clone()
    opt.step()
    torch.testing.assert_close(new_base, p.detach())
    torch.testing.assert_close(new_m, opt.state[p]["momentum_buffer"])


def test_outer_step_refuses_mismatched_inputs() -> None:
    x = torch.zeros(4)
    with pytest.raises(ConfigError, match="shapes differ"):
        outer_step(x, x, torch.zeros(5), LR, MU)
    with pytest.raises(ConfigError, match="float32"):
        outer_step(x.double(), x, x, LR, MU)
