"""The timed hardware challenge: one exact integer matrix product per device, committed before a
deadline set by the claimed throughput, checked by Freivalds projections and spot rows.

Shared by the node (the prover: :class:`Prover`) and the ledger (the verifier: :func:`verify`).

**The product.** From the ledger's fresh ``seed`` and one ``nonce`` per device, a PCG64 stream
keyed by sha256 gives ``n*m`` bytes; byte ``k*n + i`` holds ``A[i, k]`` in its low nibble and
``B[k, i]`` in its high nibble, each minus 8 (entries in [-8, 7]). The prover computes
``C = A @ B`` (n x n, inner dimension m). Every product is at most 64 in magnitude and
``m <= MAX_INNER``, so every partial sum is an integer below 2^24: fp32 (and TF32, whose inputs
keep 10 mantissa bits) computes C exactly in any summation order, so the check is exact, with no
error bound to calibrate and no false positive from rounding.

**What the prover sends.** C is n^2 numbers, so it is committed, not sent: (1) before the
deadline, the Merkle root of C's rows (leaf = sha256(0x00 || row as fp32 little endian, every
value an integer, zero as +0.0), inner = sha256(0x01 || left || right), an odd node carried
up); (2) then the ledger reveals a probe key (sha256 of a secret it kept and the committed root,
so the probe cannot be known before the commitment) from which both sides derive ``R`` (n x t,
entries in [0, 2^b)) and ``SPOT_ROWS`` row indices; (3) the prover opens ``y = C @ R`` and the
spot rows with their Merkle proofs.
The verifier checks ``y == A @ (B @ R)`` exactly (Freivalds: O(nm t), not O(n^2 m)), and for
every spot row that its proof leads to the root and ``row @ R == y[row]``. A committed row that
is not the true row passes the last test with probability at most 2^-(b t) <= 2^-PROBE_BITS; a
prover that skipped a fraction f of the rows to meet the deadline passes with (1 - f)^SPOT_ROWS
(a 2x throughput claim under SLACK 1.5 needs f >= 1/4: 0.75^48 < 1e-6). ``y`` alone would be
forgeable without C (A @ (B @ R) is cheap), which is why the rows are committed first.

**Sizing.** Memory: the honest prover holds A and B in fp32 (8nm bytes) and C (4n^2): n is the
largest multiple of 64 with 4n^2 + 9nm <= MEMORY_FRACTION * claimed memory (the 9th byte per
(i, k) is the stream). A node claiming twice its memory needs 1.5x what it has. A product is
blockable, so a prover built to compute C in blocks, regenerating or streaming A and B, needs
less; what it pays for that (regeneration passes, host transfers) must fit in the slack.
Throughput: the deadline is ``SLACK * flops / claimed_flops + latency``, ``flops = 2 n^2 m`` per
device; a node's throughput is this challenge's end to end (generate, multiply, hash), measured
by running it (:func:`measure`), so the slack only absorbs noise: SLACK 1.5 was calibrated on
honest runs of 2 shared cores (bench.market_challenge), and a 2x claim needs the node to run
1.33x faster than it measured. Devices: one nonce per device, all run at once, each its own
deadline; nodes sharing cores (or a node claiming twice its cores) get half the throughput each.
"""

from __future__ import annotations

import hashlib
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
SPOT_ROWS: Final = 48
PROBE_BITS: Final = 40
"""A wrong committed row survives the projection check with probability at most 2^-PROBE_BITS."""
ROW_ALIGN: Final = 64
INNER: Final = {"cpu": 1024, "cuda": 16384}
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


def _key(*parts: bytes) -> bytes:
    h = hashlib.sha256(DOMAIN)
    for p in parts:
        h.update(len(p).to_bytes(4, "big") + p)
    return h.digest()


def _rng(key: bytes) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(int.from_bytes(key, "big")))


def stream(seed: bytes, nonce: bytes, shape: Shape) -> npt.NDArray[np.uint8]:
    """The ``n*m`` operand bytes of one device's challenge (see the module docstring)."""
    key = _key(b"operands", seed, nonce, shape.n.to_bytes(8, "big"), shape.m.to_bytes(8, "big"))
    words = -(-shape.n * shape.m // 8)
    raw = np.random.PCG64(int.from_bytes(key, "big")).random_raw(words)
    return raw.astype("<u8", copy=False).view(np.uint8)[: shape.n * shape.m]


def operands(
    seed: bytes, nonce: bytes, shape: Shape, dtype: Any = np.float32
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """(A^T, B), both m x n, in ``dtype``: A is the transpose of the first."""
    s = stream(seed, nonce, shape).reshape(shape.m, shape.n)
    a_t = (s & 15).astype(dtype)
    a_t -= 8
    b = (s >> 4).astype(dtype)
    b -= 8
    return a_t, b


@dataclass(frozen=True)
class Probe:
    r: npt.NDArray[np.float64]
    spots: tuple[int, ...]


def probe_bits(shape: Shape) -> int:
    """Bits per entry of R such that every sum in C @ R and A @ (B @ R) is exact in float64."""
    bound_bits = math.ceil(math.log2(64 * shape.n * shape.m))
    return max(1, min(20, 52 - bound_bits))


def probe(key: bytes, shape: Shape, spots: int = SPOT_ROWS) -> Probe:
    """R and the spot rows derived from the ledger's probe key (revealed after the commitment)."""
    bits = probe_bits(shape)
    t = -(-PROBE_BITS // bits)
    rng = _rng(_key(b"probe", key))
    r = rng.integers(0, 1 << bits, size=(shape.n, t), dtype=np.int64).astype(np.float64)
    count = min(spots, shape.n)
    rows = rng.choice(shape.n, size=count, replace=False)
    return Probe(r, tuple(sorted(int(i) for i in rows)))


def probe_key(secret: bytes, device: int, root: bytes) -> bytes:
    """The ledger's probe key for one device: its secret, bound to the committed root."""
    return _key(b"probe-key", secret, device.to_bytes(4, "big"), root)


# --- Merkle tree over rows ------------------------------------------------------------------------


def leaf(row: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + row).digest()


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
    """The prover's answer to a probe: y = C @ R and the spot rows with their proofs."""

    y: list[list[int]]
    rows: dict[int, bytes]
    proofs: dict[int, list[bytes]]

    def to_json(self) -> dict[str, Any]:
        return {
            "y": self.y,
            "rows": {str(i): r.hex() for i, r in self.rows.items()},
            "proofs": {str(i): ["0x" + s.hex() for s in p] for i, p in self.proofs.items()},
        }

    @classmethod
    def from_json(cls, data: Any) -> Opening:
        try:
            y = [[int(v) for v in row] for row in data["y"]]
            rows = {int(i): bytes.fromhex(r) for i, r in data["rows"].items()}
            proofs = {
                int(i): [bytes.fromhex(s.removeprefix("0x")) for s in p]
                for i, p in data["proofs"].items()
            }
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ChallengeError(
                f"opening: expected y (list of integer lists), rows (index -> hex fp32 LE row) "
                f"and proofs (index -> list of 0x hashes): {exc}"
            ) from None
        return cls(y, rows, proofs)

    def digest(self) -> bytes:
        """What the node signs for this opening."""
        h = hashlib.sha256(b"opening")
        h.update(np.asarray(self.y, dtype="<i8").tobytes())
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
        a_t, b = operands(self.seed, self.nonce, self.shape)
        ta = torch.from_numpy(a_t).to(self.device)
        tb = torch.from_numpy(b).to(self.device)
        del a_t, b
        self._c = ta.T @ tb
        self._c.add_(0.0)  # -0.0 -> +0.0: one byte string per value
        del ta, tb
        self._levels = tree(self._leaves(hash_threads))
        return self._levels[-1][0]

    def _row_blocks(self, block_bytes: int = 8 << 20) -> list[tuple[int, Any]]:
        n = self.shape.n
        step = max(1, block_bytes // (4 * n))  # a few MiB of rows at a time
        return [(i, self._c[i : i + step]) for i in range(0, n, step)]

    def _leaves(self, threads: int) -> list[bytes]:
        out: list[bytes] = []
        with ThreadPoolExecutor(max(1, threads)) as pool:
            for _, blk in self._row_blocks():
                host = blk.cpu().numpy().astype("<f4", copy=False)
                out.extend(pool.map(lambda r: leaf(r.tobytes()), host))
        return out

    def open(self, key: bytes) -> Opening:
        import torch

        if self._c is None:
            raise RuntimeError("run() the challenge before opening it")
        pr = probe(key, self.shape)
        r = torch.from_numpy(pr.r).to(self.device)
        ys = [(blk.to(torch.float64) @ r).cpu().numpy() for _, blk in self._row_blocks(1 << 20)]
        y = np.concatenate(ys).astype(np.int64)
        rows = {i: self._c[i].cpu().numpy().astype("<f4", copy=False).tobytes() for i in pr.spots}
        proofs = {i: proof(self._levels, i) for i in pr.spots}
        return Opening(y.tolist(), rows, proofs)


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

    Cost: regenerating A and B and two products with R (O(nm t)) and the spot rows (O(n t) and
    a Merkle path each), against the prover's 2 n^2 m.
    """
    pr = probe(key, shape)
    t = pr.r.shape[1]
    y = np.asarray(opening.y, dtype=np.float64) if opening.y else np.zeros((0, t))
    if y.shape != (shape.n, t):
        raise ChallengeError(f"y: expected {shape.n} rows of {t} integers, got shape {y.shape}")
    if set(opening.rows) != set(pr.spots) or set(opening.proofs) != set(pr.spots):
        raise ChallengeError(f"opening: expected exactly the spot rows {list(pr.spots)}")
    a_t, b = operands(seed, nonce, shape, np.float64)
    expect = a_t.T @ (b @ pr.r)
    bad = np.flatnonzero((expect != y).any(axis=1))
    if bad.size:
        raise ChallengeError(
            f"y = C @ R differs from A @ (B @ R) in {bad.size} row(s) (first: {int(bad[0])})"
        )
    for i in pr.spots:
        raw = opening.rows[i]
        if len(raw) != 4 * shape.n:
            raise ChallengeError(f"row {i}: expected {4 * shape.n} bytes, got {len(raw)}")
        if root_of(leaf(raw), i, shape.n, opening.proofs[i]) != root:
            raise ChallengeError(f"row {i}: its Merkle proof does not lead to the committed root")
        row = np.frombuffer(raw, dtype="<f4").astype(np.float64)
        if not np.array_equal(row, np.round(row)) or not np.array_equal(row @ pr.r, y[i]):
            raise ChallengeError(f"row {i}: the committed row is not row {i} of A @ B")
