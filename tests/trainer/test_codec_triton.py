"""The Triton kernels against the torch reference, bit for bit, under TRITON_INTERPRET=1.

Triton decides at import time whether to interpret, so the comparison runs in a fresh Python
process with the variable set; it prints one JSON line that the test reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8)


def check() -> dict[str, object]:
    """Compare every format and a few block sizes; return counts and any mismatches."""
    assert os.environ.get("TRITON_INTERPRET") == "1"
    from protocol.errors import TrainerError
    from reference.codec import WireFormat, decode, decode_into, encode, quantize

    gen = torch.Generator().manual_seed(11)
    cases = {
        "one": torch.randn(1, generator=gen),
        "tail": torch.randn(1000, generator=gen),
        "student_t": torch.distributions.StudentT(3.0).sample((20_011,)),
        "tiny_and_huge": torch.cat([torch.full((256,), 1e-38), torch.randn(100) * 1e30]),
        "zeros": torch.zeros(300),
    }
    checked, mismatches = 0, []
    for name, x in cases.items():
        local = x * 0.75 - 0.5
        for fmt in WireFormat:
            for bs in (32, 256):
                ref = encode(x, local, fmt, block_size=bs, backend="torch")
                tri = encode(x, local, fmt, block_size=bs, backend="triton")
                same = torch.equal(_bits(ref.payload), _bits(tri.payload))
                if ref.scales is not None and tri.scales is not None:
                    same = same and torch.equal(ref.scales, tri.scales)
                back = decode(tri, backend="triton")
                same = same and torch.equal(back, decode(ref, backend="torch"))
                acc = torch.full_like(back, 0.5)
                decode_into(acc, tri, accumulate=True, backend="triton")
                same = same and torch.equal(acc, 0.5 + back)
                checked += 1
                if not same:
                    mismatches.append(f"{name}/{fmt.name}/{bs}")
    refused = 0
    for fmt in WireFormat:
        bad = torch.randn(600)
        bad[333] = float("nan")
        try:
            quantize(bad, fmt, backend="triton")
        except TrainerError:
            refused += 1
    return {"checked": checked, "mismatches": mismatches, "refused": refused,
            "expected": len(cases) * len(WireFormat) * 2, "formats": len(WireFormat)}  # fmt: skip


def test_triton_kernels_match_the_torch_reference_under_the_interpreter() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1", "COLOCO_CODEC": "triton"}
    code = (
        "import json; from tests.trainer.test_codec_triton import check; print(json.dumps(check()))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["formats"] >= 4, "every wire format, sparse included"
    assert result["checked"] == result["expected"]
    assert result["mismatches"] == []
    assert result["refused"] == result["formats"], "every format refuses a NaN"
