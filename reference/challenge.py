"""The timed hardware challenge: one exact integer matrix product per device, committed before a
deadline set by the claimed throughput, checked by a Freivalds projection of a random sub-block.

Shared by the node (the prover: :class:`Prover`) and the ledger (the verifier: :func:`verify`).

**The product.** From the ledger's fresh ``seed`` and one ``nonce`` per device, a PCG64 stream
keyed by sha256 gives ``n*m`` bytes; byte ``i*m + k`` holds ``A[i, k]`` in its low nibble and
``B[k, i]`` in its high nibble, each minus 8 (entries in [-8, 7]): row i of A and column i of B
are m contiguous bytes, which anyone can generate alone (PCG64 jumps ahead in O(log n)). The
prover computes ``C = A @ B`` (n x n, inner dimension m). Every product is at most 64 in
magnitude and ``m <= MAX_INNER``, so every partial sum is an integer below 2^24: fp32 (and TF32,
whose inputs keep 10 mantissa bits) computes C exactly in any summation order, so the check is
exact, with no error bound to calibrate and no false positive from rounding.

**What the prover sends.** C is n^2 numbers, so it is committed, not sent: (1) before the
deadline, the Merkle root of C's rows (leaf = sha256(0x00 || row as fp32 little endian, every
value an integer, zero as +0.0), inner = sha256(0x01 || left || right), an odd node carried
up); (2) then the ledger reveals a probe key (sha256 of a secret it kept and the committed root,
so the probe cannot be known before the commitment) from which both sides derive ``SPOT_ROWS``
rows S, ``SPOT_COLS`` columns J and ``R`` (|J| x t integers in [0, 2^b)); (3) the prover opens
the rows S with their Merkle proofs. The verifier checks every proof against the root, that the
rows hold integers, and Freivalds on the sub-block: ``C[S, J] @ R == A[S] @ (B[:, J] @ R)``,
exactly in float64 (b is chosen so every sum stays below 2^53). Freivalds compresses the
|S| x |J| entries into |S| x t numbers: O((|S| + |J|) m) work, against O(|S| |J| m) to check
each entry and the prover's 2 n^2 m; it needs only |S| rows of A and |J| columns of B, never the
whole operands (a GPU prover's n^2 m at tens of TFLOP/s would otherwise cost the verifier more
than the prover). A wrong entry in the sub-block survives with probability at most 2^-(b t) <=
2^-PROBE_BITS; a prover that skipped a fraction f of C (rows, columns or entries) to meet the
deadline is missed with probability (1 - f)^48 at most (a 2x claim under SLACK 1.5 needs f >=
1/4: below 1e-6). Committing before the probe is what makes this sound: the sub-block, once
known, is cheap to compute alone.

**Sizing.** Memory: the honest prover holds A and B in fp32 (8nm bytes) and C (4n^2): n is the
largest multiple of 64 with 4n^2 + 9nm <= MEMORY_FRACTION * claimed memory (the 9th byte per
(i, k) is the stream). A node claiming twice its memory needs 1.5x what it has. A product is
blockable, so a prover built to compute C in blocks needs less; what it pays for that (streaming
or regenerating A and B) must fit in the slack. Throughput: the deadline is
``SLACK * flops / claimed_flops + latency``, ``flops = 2 n^2 m`` per device; a node's throughput
is this challenge's end to end (generate, multiply, hash), measured by running it
(:func:`measure`), so the slack only absorbs noise (SLACK 1.5, calibrated on honest runs in
bench.market_challenge). Devices: one nonce per device, all run at once, each its own deadline;
nodes sharing cores (or a node claiming twice its devices) get half the throughput each.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

log = logging.getLogger(__name__)

DOMAIN: Final = b"coloco.challenge.v1"
EXACT_FP32: Final = 1 << 24
MAX_INNER: Final = EXACT_FP32 // 64
"""Largest inner dimension whose sums of products of entries in [-8, 7] stay exact in fp32."""
MEMORY_FRACTION: Final = 0.75
SLACK: Final = 1.5
VERDICT_TRIALS: Final = 3
"""Challenges per verdict on a claim: a claim is refused when a majority of them is refused
(:func:`majority_refused`). A timed run on a shared machine is late now and then (the load
drifts by 2x within a minute), a misclaim is late every time (or most)."""
SPOT_ROWS: Final = 48
SPOT_COLS: Final = 64
PROBE_BITS: Final = 40
"""A wrong committed row survives the projection check with probability at most 2^-PROBE_BITS."""
ROW_ALIGN: Final = 64
INNER: Final = {"cpu": 2048, "cuda": 16384}
"""Inner dimension per device kind: on a GPU, 16384 keeps the product (2m flops per entry of C)
ahead of hashing C's 4 bytes per entry on the host."""


class ChallengeError(ValueError):
    """An answer that does not check (the message names what and why)."""


@dataclass(frozen=True)
class Shape:
    n: int
    m: int

    def __post_init__(self) -> None:
        if self.n < 1 or not 1 <= self.m <= MAX_INNER:
            raise ValueError(
                f"challenge shape {self.n}x{self.m}: need n >= 1, 1 <= m <= {MAX_INNER}"
            )

    @property
    def flops(self) -> int:
        return 2 * self.n * self.n * self.m

    @property
    def resident_bytes(self) -> int:
        """What the honest prover holds at once: C and A, B in fp32 and the stream."""
        return 4 * self.n * self.n + 9 * self.n * self.m


def size(memory_bytes: int, kind: str = "cpu") -> Shape:
    """The shape whose resident set fills MEMORY_FRACTION of ``memory_bytes`` (one device)."""
    if kind not in INNER:
        raise ValueError(f"device kind {kind!r}: expected one of {sorted(INNER)}")
    m = INNER[kind]
    budget = MEMORY_FRACTION * memory_bytes
    n = int((-9 * m + math.sqrt(81 * m * m + 16 * budget)) / 8)
    n -= n % ROW_ALIGN
    if n < ROW_ALIGN:
        raise ValueError(
            f"claimed memory {memory_bytes} bytes is too small for a {kind} challenge "
            f"(need at least {Shape(ROW_ALIGN, m).resident_bytes / MEMORY_FRACTION:.0f})"
        )
    return Shape(n, m)


def deadline_s(
    shape: Shape, claimed_flops: float, *, slack: float = SLACK, latency_s: float = 0.0
) -> float:
    """Seconds from issue to the commitment's arrival for one device claiming ``claimed_flops``."""
    if claimed_flops <= 0:
        raise ValueError(f"claimed throughput {claimed_flops} FLOP/s: must be positive")
    return slack * shape.flops / claimed_flops + latency_s


def majority_refused(refused: Sequence[bool]) -> bool:
    """A claim's verdict over its challenges: refused when more than half of them were (a
    wrong answer is refused whatever the others: the caller fails it on its own)."""
    if not refused:
        raise ValueError("a verdict needs at least one challenge")
    return 2 * sum(refused) > len(refused)


def _key(*parts: bytes) -> bytes:
    h = hashlib.sha256(DOMAIN)
    for p in parts:
        h.update(len(p).to_bytes(4, "big") + p)
    return h.digest()


def _rng(key: bytes) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(int.from_bytes(key, "big")))


def _generator(seed: bytes, nonce: bytes, shape: Shape) -> np.random.PCG64:
    key = _key(b"operands", seed, nonce, shape.n.to_bytes(8, "big"), shape.m.to_bytes(8, "big"))
    return np.random.PCG64(int.from_bytes(key, "big"))


def stream(seed: bytes, nonce: bytes, shape: Shape) -> npt.NDArray[np.uint8]:
    """The ``n*m`` operand bytes of one device's challenge, as n x m (see the module docstring)."""
    raw = _generator(seed, nonce, shape).random_raw(shape.n * shape.m // 8)
    return raw.astype("<u8", copy=False).view(np.uint8).reshape(shape.n, shape.m)


def stream_rows(
    seed: bytes, nonce: bytes, shape: Shape, rows: Sequence[int]
) -> npt.NDArray[np.uint8]:
    """Rows ``rows`` of :func:`stream` without the others (a jump ahead for each)."""
    out = np.empty((len(rows), shape.m), np.uint8)
    words = shape.m // 8
    for r, i in enumerate(rows):
        gen = _generator(seed, nonce, shape)
        gen.advance(i * words)
        out[r] = gen.random_raw(words).astype("<u8", copy=False).view(np.uint8)
    return out


def _nibbles(s: npt.NDArray[np.uint8], dtype: Any) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    lo = (s & 15).astype(dtype)
    lo -= 8
    hi = (s >> 4).astype(dtype)
    hi -= 8
    return lo, hi


def operands(
    seed: bytes, nonce: bytes, shape: Shape, dtype: Any = np.float32
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """(A, B^T), both n x m, in ``dtype``."""
    return _nibbles(stream(seed, nonce, shape), dtype)


@dataclass(frozen=True)
class Probe:
    rows: tuple[int, ...]
    cols: tuple[int, ...]
    r: npt.NDArray[np.float64]


def probe_bits(shape: Shape) -> int:
    """Bits per entry of R such that every sum of the sub-block check is exact in float64."""
    bound_bits = math.ceil(math.log2(64 * shape.m * min(SPOT_COLS, shape.n)))
    return max(1, min(20, 52 - bound_bits))


def probe(key: bytes, shape: Shape) -> Probe:
    """The spot rows, columns and R, derived from the ledger's probe key (revealed after the
    commitment)."""
    bits = probe_bits(shape)
    t = -(-PROBE_BITS // bits)
    rng = _rng(_key(b"probe", key))
    rows = rng.choice(shape.n, size=min(SPOT_ROWS, shape.n), replace=False)
    cols = rng.choice(shape.n, size=min(SPOT_COLS, shape.n), replace=False)
    r = rng.integers(0, 1 << bits, size=(len(cols), t), dtype=np.int64).astype(np.float64)
    return Probe(tuple(sorted(int(i) for i in rows)), tuple(int(j) for j in cols), r)


def probe_key(secret: bytes, device: int, root: bytes) -> bytes:
    """The ledger's probe key for one device: its secret, bound to the committed root."""
    return _key(b"probe-key", secret, device.to_bytes(4, "big"), root)


# --- Merkle tree over rows ------------------------------------------------------------------------


def leaf(row: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + row).digest()


def _row_leaves(rows: npt.NDArray[Any]) -> list[bytes]:
    """:func:`leaf` of each row of a C-contiguous little-endian fp32 block, without copying it."""
    out = []
    for row in rows:
        h = hashlib.sha256(b"\x00")
        h.update(memoryview(row))
        out.append(h.digest())
    return out


def _parent(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def tree(leaves: Sequence[bytes]) -> list[list[bytes]]:
    """Every level, leaves first; an odd last node is carried up unchanged."""
    levels = [list(leaves)]
    while len(levels[-1]) > 1:
        cur = levels[-1]
        nxt = [_parent(cur[i], cur[i + 1]) for i in range(0, len(cur) - 1, 2)]
        if len(cur) % 2:
            nxt.append(cur[-1])
        levels.append(nxt)
    return levels


def proof(levels: list[list[bytes]], index: int) -> list[bytes]:
    """Siblings from the leaf up (a carried-up node has none at that level: skipped)."""
    out = []
    for level in levels[:-1]:
        sib = index ^ 1
        if sib < len(level):
            out.append(level[sib])
        index //= 2
    return out


def root_of(leaf_hash: bytes, index: int, count: int, siblings: Sequence[bytes]) -> bytes:
    """The root that ``siblings`` lead to from leaf ``index`` of ``count``."""
    node, width, used = leaf_hash, count, 0
    while width > 1:
        sib = index ^ 1
        if sib < width:
            if used >= len(siblings):
                raise ChallengeError(f"row {index}: Merkle proof too short")
            s = siblings[used]
            used += 1
            node = _parent(s, node) if index & 1 else _parent(node, s)
        index //= 2
        width = (width + 1) // 2
    if used != len(siblings):
        raise ChallengeError(f"Merkle proof has {len(siblings) - used} sibling(s) too many")
    return node


# --- the prover -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Opening:
    """The prover's answer to a probe: the spot rows of C with their Merkle proofs."""

    rows: dict[int, bytes]
    proofs: dict[int, list[bytes]]

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": {str(i): r.hex() for i, r in self.rows.items()},
            "proofs": {str(i): ["0x" + s.hex() for s in p] for i, p in self.proofs.items()},
        }

    @classmethod
    def from_json(cls, data: Any) -> Opening:
        try:
            rows = {int(i): bytes.fromhex(r) for i, r in data["rows"].items()}
            proofs = {
                int(i): [bytes.fromhex(s.removeprefix("0x")) for s in p]
                for i, p in data["proofs"].items()
            }
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ChallengeError(
                f"opening: expected rows (index -> hex fp32 LE row) and proofs (index -> list "
                f"of 0x hashes): {exc}"
            ) from None
        return cls(rows, proofs)

    def digest(self) -> bytes:
        """What the node signs for this opening."""
        h = hashlib.sha256(b"opening")
        for i in sorted(self.rows):
            h.update(i.to_bytes(8, "big") + self.rows[i] + b"".join(self.proofs.get(i, [])))
        return h.digest()


class Prover:
    """One device's side: :meth:`run` computes C and its root, :meth:`open` answers the probe.

    CPU: torch on the threads it is given. CUDA: operands copied to the device, fp32 with TF32
    off (pinned precision), C hashed in row blocks copied back to the host.
    """

    def __init__(self, seed: bytes, nonce: bytes, shape: Shape, device: str = "cpu") -> None:
        self.seed, self.nonce, self.shape, self.device = seed, nonce, shape, device
        self._c: Any = None
        self._levels: list[list[bytes]] = []

    def run(self, *, hash_threads: int = 2) -> bytes:
        import torch

        if self.device.startswith("cuda"):
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        a, b_t = operands(self.seed, self.nonce, self.shape)
        ta = torch.from_numpy(a).to(self.device)
        tb = torch.from_numpy(b_t).to(self.device)
        del a, b_t
        self._c = ta @ tb.T
        self._c.add_(0.0)  # -0.0 -> +0.0: one byte string per value
        del ta, tb
        self._levels = tree(self._leaves(hash_threads))
        return self._levels[-1][0]

    def _row_blocks(self, block_bytes: int = 8 << 20) -> list[tuple[int, Any]]:
        n = self.shape.n
        step = max(1, block_bytes // (4 * n))  # a few MiB of rows at a time
        return [(i, self._c[i : i + step]) for i in range(0, n, step)]

    def _leaves(self, threads: int) -> list[bytes]:
        """Every row's leaf, a few contiguous runs of rows per thread (hashlib releases the GIL;
        a task per row cost more in the pool than the hashing itself, and did not scale)."""
        out: list[bytes] = []
        with ThreadPoolExecutor(max(1, threads)) as pool:
            for _, blk in self._row_blocks():
                host = blk.cpu().numpy().astype("<f4", copy=False)
                runs = max(1, threads) * 4
                cuts = [len(host) * i // runs for i in range(runs + 1)]
                parts = pool.map(_row_leaves, (host[lo:hi] for lo, hi in itertools.pairwise(cuts)))
                out.extend(leaf_ for part in parts for leaf_ in part)
        return out

    def open(self, key: bytes) -> Opening:
        if self._c is None:
            raise RuntimeError("run() the challenge before opening it")
        spots = probe(key, self.shape).rows
        rows = {i: self._c[i].cpu().numpy().astype("<f4", copy=False).tobytes() for i in spots}
        return Opening(rows, {i: proof(self._levels, i) for i in spots})


def measure(shape: Shape, device: str = "cpu", *, repeats: int = 2) -> float:
    """This machine's challenge throughput (FLOP/s, end to end) at ``shape``: best of
    ``repeats`` honest runs, what an honest node claims."""

    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        p = Prover(os.urandom(32), os.urandom(32), shape, device)
        p.run()
        best = min(best, time.perf_counter() - t0)
    return shape.flops / best


# --- the verifier ---------------------------------------------------------------------------------


def verify(  # noqa: PLR0917 - the verifier's inputs, in the protocol's order
    seed: bytes, nonce: bytes, shape: Shape, root: bytes, key: bytes, opening: Opening
) -> None:
    """Check one device's opening against its committed root; ChallengeError says what failed.

    Cost: hashing |S| rows and their Merkle paths, generating |S| rows of A and |J| columns of
    B, and two small products: O((|S| + |J|) m + |S| n), against the prover's 2 n^2 m.
    """
    pr = probe(key, shape)
    if set(opening.rows) != set(pr.rows) or set(opening.proofs) != set(pr.rows):
        raise ChallengeError(f"opening: expected exactly the spot rows {list(pr.rows)}")
    block = np.empty((len(pr.rows), len(pr.cols)))
    for r, i in enumerate(pr.rows):
        raw = opening.rows[i]
        if len(raw) != 4 * shape.n:
            raise ChallengeError(f"row {i}: expected {4 * shape.n} bytes, got {len(raw)}")
        if root_of(leaf(raw), i, shape.n, opening.proofs[i]) != root:
            raise ChallengeError(f"row {i}: its Merkle proof does not lead to the committed root")
        row = np.frombuffer(raw, dtype="<f4").astype(np.float64)
        if not np.array_equal(row, np.round(row)):
            raise ChallengeError(f"row {i}: C holds integers only")
        block[r] = row[list(pr.cols)]
    a, _ = _nibbles(stream_rows(seed, nonce, shape, pr.rows), np.float64)
    _, b_t = _nibbles(stream_rows(seed, nonce, shape, pr.cols), np.float64)
    bad = np.flatnonzero((block @ pr.r != a @ (b_t.T @ pr.r)).any(axis=1))
    if bad.size:
        raise ChallengeError(
            f"row {pr.rows[int(bad[0])]}: the committed row is not that row of A @ B "
            f"({bad.size} of {len(pr.rows)} spot rows wrong)"
        )
