"""The sparse format's Triton kernel against the torch reference, bit for bit, under
TRITON_INTERPRET=1 (in a fresh process: Triton reads the variable at import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def check() -> dict[str, object]:
    """Encode each case with both backends; return the count and the mismatches."""
    assert os.environ.get("TRITON_INTERPRET") == "1"
    from reference.codec.sparse import SparseSpec, encode_sparse

    gen = torch.Generator().manual_seed(4)
    cases = {
        "tail": torch.randn(1000, generator=gen),
        "heavy": torch.distributions.StudentT(3.0).sample((700,)),
        "ties": torch.ones(300),
        "zeros_and_tiny": torch.cat([torch.zeros(64), torch.full((64,), 1e-38), torch.randn(70)]),
        "one": torch.randn(1, generator=gen),
    }
    specs = (SparseSpec(64, 4, 2), SparseSpec(256, 16, 4), SparseSpec(128, 128, 8))
    checked, mismatches = 0, []
    for name, x in cases.items():
        for spec in specs:
            ref = encode_sparse(x, spec, backend="torch")
            tri = encode_sparse(x, spec, backend="triton")
            checked += 1
            if not (
                torch.equal(ref.payload, tri.payload)
                and torch.equal(ref.scales.view(torch.int32), tri.scales.view(torch.int32))
            ):
                mismatches.append(f"{name}/{spec}")
    return {"checked": checked, "mismatches": mismatches}


def test_sparse_triton_kernel_matches_the_torch_reference_under_the_interpreter() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1", "COLOCO_CODEC": "triton"}
    code = (
        "import json; from tests.trainer.test_codec_sparse_triton import check; "
        "print(json.dumps(check()))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"checked": 15, "mismatches": []}
