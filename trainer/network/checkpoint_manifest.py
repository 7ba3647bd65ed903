"""What a member signs about the checkpoint blob it serves: a :class:`Manifest` (weights hash,
size, chunk size and ``chunks_root``, the sha256 of the chunks' sha256 digests), and the bounds a
reader puts on it before it allocates or fetches anything (:mod:`trainer.network.peer_checkpoint`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from protocol.errors import CheckpointError

CHUNK_BYTES = 1 << 20
MIN_CHUNK_BYTES = 1 << 12
MAX_CHUNK_BYTES = 1 << 26
MAX_BLOB_BYTES = 8 * 1024**3


@dataclass(frozen=True)
class Manifest:
    """What a member signs about the checkpoint blob it serves."""

    weights_hash: bytes
    size: int
    chunk_bytes: int
    chunks_root: bytes

    @classmethod
    def of(
        cls, blob: bytes, weights_hash: bytes, chunk_bytes: int = CHUNK_BYTES
    ) -> tuple[Manifest, bytes]:
        """The manifest of ``blob`` and its concatenated chunk digests (32 bytes each)."""
        digests = b"".join(
            hashlib.sha256(blob[i : i + chunk_bytes]).digest()
            for i in range(0, len(blob), chunk_bytes)
        )
        root = hashlib.sha256(digests).digest()
        return cls(weights_hash, len(blob), chunk_bytes, root), digests

    @property
    def n_chunks(self) -> int:
        return -(-self.size // self.chunk_bytes)

    def span(self, i: int) -> tuple[int, int]:
        start = i * self.chunk_bytes
        return start, min(self.size, start + self.chunk_bytes)

    def body(self) -> dict[str, Any]:
        return {"hash": self.weights_hash.hex(), "size": self.size,
                "chunk_bytes": self.chunk_bytes, "chunks_root": self.chunks_root.hex()}  # fmt: skip

    @classmethod
    def from_body(cls, body: dict[str, Any], *, max_size: int = MAX_BLOB_BYTES) -> Manifest:
        """Parse a signed ``CHECKPOINT`` body; malformed or out-of-bounds values raise.

        ``max_size``: the largest blob the reader's model can have (a joiner allocates ``size``
        bytes and downloads them before the whole blob is hash-checked)."""
        try:
            weights_hash = bytes.fromhex(str(body["hash"]))
            root = bytes.fromhex(str(body["chunks_root"]))
            size, chunk = body["size"], body["chunk_bytes"]
        except (KeyError, ValueError) as exc:
            raise CheckpointError(f"checkpoint offer lacks a valid manifest: {exc}") from exc
        if len(weights_hash) != 32 or len(root) != 32:
            raise CheckpointError("checkpoint offer: hash and chunks_root must be 32 bytes")
        limit = min(max_size, MAX_BLOB_BYTES)
        if not isinstance(size, int) or not 0 < size <= limit:
            raise CheckpointError(f"checkpoint offer: size {size!r} outside 1..{limit}, the "
                                  "largest checkpoint of this run's model")  # fmt: skip
        if not isinstance(chunk, int) or not MIN_CHUNK_BYTES <= chunk <= MAX_CHUNK_BYTES:
            raise CheckpointError(f"checkpoint offer: chunk_bytes {chunk!r} outside "
                                  f"{MIN_CHUNK_BYTES}..{MAX_CHUNK_BYTES}")  # fmt: skip
        return cls(weights_hash, size, chunk, root)
