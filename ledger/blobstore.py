"""Content-addressed blob store: safetensors files named by the canonical hash of their tensors."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from sqlalchemy import Engine
from sqlmodel import Session

from ledger.models import Blob
from protocol.blobs import blob_id, decode_blob
from protocol.errors import EncodingError, LedgerError

log = logging.getLogger(__name__)


class BlobStore:
    def __init__(self, root: Path, engine: Engine, *, max_bytes: int) -> None:
        self.root = root
        self.engine = engine
        self.max_bytes = max_bytes
        root.mkdir(parents=True, exist_ok=True)

    def path(self, hash_hex: str) -> Path:
        return self.root / f"{hash_hex.lower()}.safetensors"

    def put(self, hash_hex: str, data: bytes) -> int:
        """Store ``data`` if its canonical tensor hash is ``hash_hex``; return its size."""
        try:
            actual = "0x" + blob_id(data, max_bytes=self.max_bytes).hex()
        except EncodingError as exc:
            raise LedgerError(
                f"blob is not a valid safetensors file: {exc}", code="bad_blob"
            ) from None
        if actual != hash_hex.lower():
            raise LedgerError(
                f"blob hashes to {actual}, not {hash_hex}: the id of a blob is the canonical "
                "hash of its tensors (protocol.hashing.hash_state_dict)",
                code="blob_hash_mismatch",
            )
        target = self.path(actual)
        if not target.exists():
            tmp = target.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(data)
            tmp.replace(target)
        with Session(self.engine) as session:
            if session.get(Blob, actual) is None:
                session.add(Blob(hash=actual, size=len(data)))
                session.commit()
        return len(data)

    def get_bytes(self, hash_hex: str) -> bytes | None:
        target = self.path(hash_hex)
        return target.read_bytes() if target.exists() else None

    def tensors(self, hash_hex: str) -> dict[str, torch.Tensor] | None:
        data = self.get_bytes(hash_hex)
        if data is None:
            return None
        return decode_blob(data, max_bytes=self.max_bytes)
