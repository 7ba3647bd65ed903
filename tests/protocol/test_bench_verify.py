"""bench.verify runs and reports the documented keys (figures are not asserted: it is a bench)."""

from __future__ import annotations

from bench.verify import bench_hash, bench_verify, make_state_dict


def test_bench_pieces_report_the_documented_keys() -> None:
    verify = bench_verify(4, 0.05)
    assert {"fast_per_s", "reference_per_s", "speedup", "fast_with_parse_per_s"} <= set(verify)
    assert verify["fast_per_s"] > 0 and verify["reference_per_s"] > 0
    hashing = bench_hash(2, 1)
    assert hashing["hash_ratio_vs_blake3"] > 0 and hashing["hash_ratio_vs_sha256"] > 0
    assert 1.5 < hashing["hash_mb"] <= 2.0
    assert len(make_state_dict(2)) == 36
