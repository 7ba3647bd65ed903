"""The challenge's math (reference/challenge.py) on its own: exact products, sizing to the
claimed memory, deadlines from the claimed throughput, the Merkle commitment, and every check of
the verifier seeing red when the answer is forged. The GPU form runs where CUDA is present (the
check to run when a device is lent): the same root as the CPU's, since the product is exact."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import torch

from reference import challenge as ch

SHAPE = ch.Shape(192, 1024)
SEED, NONCE = b"s" * 32, b"n" * 32


@pytest.fixture(scope="module")
def proved() -> tuple[ch.Prover, bytes]:
    prover = ch.Prover(SEED, NONCE, SHAPE)
    return prover, prover.run()


def test_the_product_is_exact_in_fp32_whatever_the_summation_order() -> None:
    a_t, b = ch.operands(SEED, NONCE, ch.Shape(64, ch.MAX_INNER // 64), np.float32)
    # the worst case the bound allows: every product 64, summed over the whole inner dimension
    worst = np.full((1, ch.MAX_INNER), -8, np.float32) @ np.full((ch.MAX_INNER, 1), -8, np.float32)
    assert float(worst[0, 0]) == 64 * ch.MAX_INNER == 1 << 24
    exact = a_t.astype(np.int64).T @ b.astype(np.int64)
    assert np.array_equal((a_t.T @ b).astype(np.int64), exact)
    assert a_t.min() == -8 and a_t.max() == 7


def test_operands_depend_on_seed_and_nonce() -> None:
    base = ch.stream(SEED, NONCE, SHAPE)
    assert np.array_equal(base, ch.stream(SEED, NONCE, SHAPE))
    assert not np.array_equal(base, ch.stream(SEED, b"m" * 32, SHAPE))
    assert not np.array_equal(base, ch.stream(b"t" * 32, NONCE, SHAPE))


def test_sizing_fills_the_claimed_memory_and_twice_the_claim_needs_more_than_it() -> None:
    for memory in (32 << 20, 1 << 30, 64 << 30):
        shape = ch.size(memory)
        assert shape.resident_bytes <= ch.MEMORY_FRACTION * memory
        bigger = ch.Shape(shape.n + ch.ROW_ALIGN, shape.m)
        assert bigger.resident_bytes > ch.MEMORY_FRACTION * memory  # the largest that fits
        assert ch.size(2 * memory).resident_bytes > memory  # a 2x claim does not fit in 1x
    with pytest.raises(ValueError, match="too small"):
        ch.size(512 << 10)
    with pytest.raises(ValueError, match="device kind"):
        ch.size(1 << 30, "tpu")


def test_the_deadline_follows_the_claimed_throughput() -> None:
    assert ch.deadline_s(SHAPE, SHAPE.flops) == pytest.approx(ch.SLACK)
    assert ch.deadline_s(SHAPE, 2 * SHAPE.flops) == pytest.approx(ch.SLACK / 2)
    with pytest.raises(ValueError, match="positive"):
        ch.deadline_s(SHAPE, 0)


def test_probe_sums_stay_exact_in_float64() -> None:
    for shape in (SHAPE, ch.size(64 << 30), ch.size(141 << 30, "cuda")):
        bits = ch.probe_bits(shape)
        assert 64 * shape.m * min(ch.SPOT_COLS, shape.n) * (1 << bits) < 1 << 53
        small = ch.Shape(min(shape.n, 256), shape.m)
        assert ch.probe(b"k", small).r.shape[1] * ch.probe_bits(small) >= ch.PROBE_BITS


def test_merkle_proofs_of_every_leaf_and_no_other() -> None:
    for count in (1, 2, 5, 8, 13):
        leaves = [ch.leaf(bytes([i])) for i in range(count)]
        levels = ch.tree(leaves)
        root = levels[-1][0]
        for i in range(count):
            assert ch.root_of(leaves[i], i, count, ch.proof(levels, i)) == root
            if count > 1:
                assert ch.root_of(leaves[(i + 1) % count], i, count, ch.proof(levels, i)) != root
    levels = ch.tree([ch.leaf(bytes([i])) for i in range(5)])
    with pytest.raises(ch.ChallengeError, match="too short"):
        ch.root_of(ch.leaf(b"\x00"), 0, 5, ch.proof(levels, 0)[:-1])
    with pytest.raises(ch.ChallengeError, match="too many"):
        ch.root_of(ch.leaf(b"\x00"), 0, 5, [*ch.proof(levels, 0), b"x" * 32])


def test_an_honest_opening_verifies(proved: tuple[ch.Prover, bytes]) -> None:
    prover, root = proved
    key = os.urandom(32)
    ch.verify(SEED, NONCE, SHAPE, root, key, prover.open(key))


def test_the_opening_round_trips_as_json(proved: tuple[ch.Prover, bytes]) -> None:
    prover, root = proved
    key = b"k" * 32
    opening = ch.Opening.from_json(prover.open(key).to_json())
    ch.verify(SEED, NONCE, SHAPE, root, key, opening)
    assert opening.digest() == prover.open(key).digest()
    with pytest.raises(ch.ChallengeError, match="opening"):
        ch.Opening.from_json({"rows": "x"})


def _forge(op: ch.Opening, **changes: object) -> ch.Opening:
    return ch.Opening(**{"rows": op.rows, "proofs": op.proofs, **changes})  # type: ignore[arg-type]


def _recommit(prover: ch.Prover) -> bytes:
    """The prover's tree rebuilt over its (tampered) C: what it commits."""
    prover._levels = ch.tree([ch.leaf(r.tobytes()) for r in prover._c.numpy()])
    return prover._levels[-1][0]


def test_each_forged_opening_is_refused(proved: tuple[ch.Prover, bytes]) -> None:
    prover, root = proved
    key = b"q" * 32
    op = prover.open(key)
    spot = next(iter(op.rows))
    row = bytearray(op.rows[spot])
    row[0:4] = np.float32(np.frombuffer(bytes(row[0:4]), "<f4")[0] + 1).tobytes()
    other = next(i for i in op.rows if i != spot)
    cases = {
        "Merkle proof does not lead": _forge(op, rows={**op.rows, spot: bytes(row)}),
        "expected exactly the spot rows": _forge(
            op, rows={k: v for k, v in op.rows.items() if k != spot}
        ),
        "expected 768 bytes": _forge(op, rows={**op.rows, spot: op.rows[spot][:-4]}),
        "does not lead": _forge(op, proofs={**op.proofs, spot: op.proofs[other]}),
    }
    for message, forged in cases.items():
        with pytest.raises(ch.ChallengeError, match=re.escape(message)):
            ch.verify(SEED, NONCE, SHAPE, root, key, forged)


def test_the_wrong_seed_or_nonce_is_refused(proved: tuple[ch.Prover, bytes]) -> None:
    prover, root = proved
    key = b"w" * 32
    op = prover.open(key)
    for seed, nonce in ((b"x" * 32, NONCE), (SEED, b"x" * 32)):
        with pytest.raises(ch.ChallengeError, match="is not that row of A @ B"):
            ch.verify(seed, nonce, SHAPE, root, key, op)


def test_one_wrong_entry_committed_before_the_probe_is_caught_when_probed() -> None:
    """One entry of C off by one: refused whenever the probe's sub-block holds it, and only
    then (the rest of C is right)."""
    prover = ch.Prover(SEED, NONCE, SHAPE)
    prover.run()
    i, j = 7, 3
    prover._c[i, j] += 1
    root = _recommit(prover)
    refused = 0
    for k in range(60):
        key = bytes([k]) * 32
        pr = ch.probe(key, SHAPE)
        op = prover.open(key)
        if i in pr.rows and j in pr.cols:
            refused += 1
            with pytest.raises(ch.ChallengeError, match="row 7: the committed row is not"):
                ch.verify(SEED, NONCE, SHAPE, root, key, op)
        else:
            ch.verify(SEED, NONCE, SHAPE, root, key, op)
    assert refused > 0


def test_a_product_never_computed_is_refused() -> None:
    prover = ch.Prover(SEED, NONCE, SHAPE)
    prover._c = torch.from_numpy(
        np.random.default_rng(1).integers(-50, 50, size=(SHAPE.n, SHAPE.n)).astype(np.float32)
    )
    root = _recommit(prover)
    key = os.urandom(32)
    with pytest.raises(ch.ChallengeError, match="is not that row of A @ B"):
        ch.verify(SEED, NONCE, SHAPE, root, key, prover.open(key))


def test_a_row_off_by_less_than_float64_resolves_is_refused() -> None:
    """2^-60 where C has a 0 vanishes from the float64 sums: only the integer check sees it."""
    shape = ch.Shape(192, 8)  # short products: zeros are common
    prover = ch.Prover(SEED, NONCE, shape)
    prover.run()
    key = b"z" * 32
    pr = ch.probe(key, shape)
    cols = list(pr.cols)
    i, j = next((i, j) for i in pr.rows for j in cols if prover._c[i, j] == 0)
    prover._c[i, j] = 2.0**-60
    root = _recommit(prover)
    with pytest.raises(ch.ChallengeError, match="integers only"):
        ch.verify(SEED, NONCE, shape, root, key, prover.open(key))


def test_the_verifier_reads_only_the_probed_rows_and_columns() -> None:
    """The sub-block's rows of A and columns of B come from the stream alone, without the rest."""
    shape = ch.Shape(256, 64)
    full = ch.stream(SEED, NONCE, shape)
    some = [0, 5, 255, 17]
    assert np.array_equal(ch.stream_rows(SEED, NONCE, shape, some), full[some])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (run where one is lent)")
def test_the_gpu_form_gives_the_cpu_root_and_verifies() -> None:
    shape = ch.Shape(512, 4096)
    cpu = ch.Prover(SEED, NONCE, shape)
    gpu = ch.Prover(SEED, NONCE, shape, "cuda")
    root = gpu.run()
    assert root == cpu.run()
    assert not torch.backends.cuda.matmul.allow_tf32  # pinned precision
    key = os.urandom(32)
    ch.verify(SEED, NONCE, shape, root, key, gpu.open(key))
