"""Content-addressed blob store: safetensors files named by the canonical hash of their tensors.

An upload streams into its own temporary file (a unique name per upload, so concurrent uploads
of one blob never share a file), counted against the size limit as it arrives and, when it comes
from outside (:meth:`BlobStore.receive`), against the sender's quota and upload slots
(:mod:`ledger.core.blob_holds`); the file is then hashed through an mmap (no copy of the tensors
in memory, at most ``verify_concurrency`` at once), fsynced, renamed into place and the directory
fsynced: a crash leaves either no blob or a whole one, and a full disk a clear ``blob_disk_full``
error and no partial file. Reads stream from disk. :meth:`BlobStore.collect_garbage` deletes
blobs no round needs any more.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import mmap
import os
import tempfile
import threading
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import BinaryIO

import torch
from sqlalchemy import Engine, and_, func
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from ledger.core.blob_holds import Hold, UploadHolds, UploadLimits
from ledger.core.models import (
    Attestation,
    Blob,
    ChainCommit,
    KeyValue,
    RoundState,
    Run,
    SegmentBisection,
)
from protocol.blobs import tensors_of_buffer
from protocol.errors import EncodingError, LedgerError
from protocol.hashing import hash_state_dict

log = logging.getLogger(__name__)

_DONE_STATES = ("scored", "committed", "final")
UNLIMITED = UploadLimits(
    quota_bytes=1 << 50, per_node=1 << 20, total=1 << 20, anonymous_bytes=1 << 50
)


def _disk_full(path: Path, exc: OSError | None = None) -> LedgerError:
    why = f" ({exc.strerror})" if exc is not None else ""
    return LedgerError(
        f"the ledger's blob disk is full{why}: the upload was discarded and nothing was stored; "
        f"retry later, and operators: free space under {path} or raise the volume",
        code="blob_disk_full",
    )


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _as_utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class Upload:
    """One upload in progress: ``write`` chunks, then ``finish`` (or ``abort``)."""

    def __init__(
        self, store: BlobStore, hash_hex: str, uploader: str | None, hold: Hold | None
    ) -> None:
        self.store = store
        self.hash = hash_hex.lower()
        self.uploader = uploader  # the blob is recorded as this node's (it pays the storage)
        self.hold = hold  # an upload from outside: its sender's slot and bytes in flight
        self.size = 0
        fd, name = tempfile.mkstemp(prefix=self.hash[2:18] + ".", suffix=".part", dir=store.tmp)
        self.path = Path(name)
        self.file: BinaryIO | None = os.fdopen(fd, "wb")

    def write(self, chunk: bytes) -> None:
        assert self.file is not None
        self.size += len(chunk)
        if self.size > self.store.max_bytes:
            self.abort()
            raise LedgerError(
                f"blob over the limit of {self.store.max_bytes} bytes", code="body_too_large"
            )
        if self.hold is not None:
            try:
                self.store.holds.grow(self.hold, self.size)
            except LedgerError:
                self.abort()
                raise
        try:
            self.file.write(chunk)
        except OSError as exc:
            self.abort()
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise _disk_full(self.store.root, exc) from None
            raise

    def abort(self) -> None:
        if self.file is not None:
            with contextlib.suppress(OSError):  # a failed flush on a full disk: the file goes
                self.file.close()
            self.file = None
        self.path.unlink(missing_ok=True)
        self._release()

    def _release(self, stored: int = 0) -> None:
        if self.hold is not None:
            self.store.holds.close(self.hold, stored=stored)

    def finish(self) -> int:
        """Verify the hash, make the file durable, move it into place, record it; its size."""
        assert self.file is not None
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            self.file = None
            with self.store.verifying:
                actual = self.store.hash_file(self.path)
        except OSError as exc:
            self.abort()
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise _disk_full(self.store.root, exc) from None
            raise
        except LedgerError:
            self.abort()
            raise
        if actual != self.hash:
            self.abort()
            raise LedgerError(
                f"blob hashes to {actual}, not {self.hash}: the id of a blob is the canonical "
                "hash of its tensors (protocol.hashing.hash_state_dict)",
                code="blob_hash_mismatch",
            )
        new = False
        try:
            self.path.replace(self.store.path(self.hash))  # same bytes if another upload won
            _fsync_dir(self.store.root)
            new = self.store.record(self.hash, self.size, self.uploader)
        finally:
            self._release(self.size if self.uploader is not None and new else 0)
        return self.size


def _bisection_blobs(session: Session) -> set[str]:
    """The blobs of the one-step verdicts (ledger.judge.bisect): the node's states a bisection
    holds (running: it replays them; done: its evidence names two of them) and each verdict's
    batch, which ``coloco audit`` fetches to re-check it."""
    out: set[str] = set()
    for states, evidence in session.exec(
        select(SegmentBisection.states, SegmentBisection.evidence)
    ).all():
        out.update(str(h) for h in json.loads(states).values())
        if evidence:
            out.add(str(json.loads(evidence).get("batch")))
    return out


class BlobStore:
    def __init__(
        self,
        root: Path,
        engine: Engine,
        *,
        max_bytes: int,
        limits: UploadLimits = UNLIMITED,
        upload_deadline_s: float = 600.0,
        min_free_bytes: int = 0,
        verify_concurrency: int = 2,
    ) -> None:
        self.root = root
        self.engine = engine
        self.max_bytes = max_bytes
        self.holds = UploadHolds(limits, self.usage)
        self.upload_deadline_s = upload_deadline_s  # the HTTP route's body-read deadline
        self.min_free_bytes = min_free_bytes
        self.verifying = threading.BoundedSemaphore(verify_concurrency)
        self.tmp = root / "tmp"
        self.tmp.mkdir(parents=True, exist_ok=True)
        for stale in self.tmp.glob("*.part"):  # uploads cut short by a crash
            stale.unlink(missing_ok=True)

    def path(self, hash_hex: str) -> Path:
        return self.root / f"{hash_hex.lower()}.safetensors"

    def exists(self, hash_hex: str) -> bool:
        return self.path(hash_hex).is_file()

    # --- upload -------------------------------------------------------------------------------

    def usage(self, uploader: str) -> int:
        with Session(self.engine) as session:
            total = session.exec(
                select(func.coalesce(func.sum(Blob.size), 0)).where(Blob.uploader == uploader)
            ).one()
        return int(total)

    def receive(
        self, hash_hex: str, *, sender: str | None, pays: bool, declared: int | None = None
    ) -> Upload:
        """Start an upload from outside: ``sender`` (None: unsigned) takes an upload slot and
        holds its bytes in flight against its quota (or the unsigned budget); ``pays``: the
        stored blob counts against the sender's quota too (not for a checkpoint a run names)."""
        hold = self.holds.open(sender, declared or 0)
        try:
            return self.begin(
                hash_hex, uploader=sender if pays else None, declared=declared, hold=hold
            )
        except BaseException:
            self.holds.close(hold)
            raise

    def begin(
        self,
        hash_hex: str,
        *,
        uploader: str | None,
        declared: int | None = None,
        hold: Hold | None = None,
    ) -> Upload:
        """Start an upload; refuse at once what free disk space cannot take."""
        stats = os.statvfs(self.root)
        if stats.f_bavail * stats.f_frsize - (declared or 0) < self.min_free_bytes:
            raise _disk_full(self.root)
        try:
            return Upload(self, hash_hex, uploader, hold)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise _disk_full(self.root, exc) from None
            raise

    def put_stream(
        self, hash_hex: str, chunks: Iterable[bytes], *, uploader: str | None = None
    ) -> int:
        upload = self.begin(hash_hex, uploader=uploader)
        try:
            for chunk in chunks:
                upload.write(chunk)
        except BaseException:
            upload.abort()
            raise
        return upload.finish()

    def put(self, hash_hex: str, data: bytes, *, uploader: str | None = None) -> int:
        """Store ``data`` if its canonical tensor hash is ``hash_hex``; return its size (the
        ledger's own writes: no upload slot or quota, see :meth:`receive`)."""
        step = 1 << 20
        return self.put_stream(
            hash_hex, (data[i : i + step] for i in range(0, len(data), step)), uploader=uploader
        )

    def hash_file(self, path: Path) -> str:
        """The canonical tensor hash of a blob file, read through an mmap (layout checked)."""
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise LedgerError("empty body: send the safetensors bytes", code="bad_blob")
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            tensors = tensors_of_buffer(memoryview(mm), max_bytes=self.max_bytes)
            digest = "0x" + hash_state_dict(tensors).hex()
            del tensors
        except EncodingError as exc:
            raise LedgerError(
                f"blob is not a valid safetensors file: {exc}", code="bad_blob"
            ) from None
        finally:
            with contextlib.suppress(BufferError):  # a view still alive: the collector closes it
                mm.close()
        return digest

    def record(self, hash_hex: str, size: int, uploader: str | None) -> bool:
        """Record a stored blob; False if it was recorded already (by this or another upload)."""
        with Session(self.engine) as session:
            if session.get(Blob, hash_hex) is not None:
                return False
            session.add(Blob(hash=hash_hex, size=size, uploader=uploader))
            try:
                session.commit()
            except IntegrityError:  # a concurrent upload of the same blob recorded it first
                session.rollback()
                return False
        return True

    def wanted(self, hash_hex: str) -> bool:
        """Whether a run or round already names this blob as a checkpoint (anyone may upload)."""
        h = hash_hex.lower()
        with Session(self.engine) as session:
            return any(
                session.exec(query).first() is not None
                for query in (
                    select(Run.run_id).where(Run.genesis_checkpoint == h),
                    select(RoundState.id).where(RoundState.checkpoint == h),
                    select(ChainCommit.id).where(ChainCommit.checkpoint == h),
                )
            )

    # --- read ---------------------------------------------------------------------------------

    def get_bytes(self, hash_hex: str) -> bytes | None:
        target = self.path(hash_hex)
        return target.read_bytes() if target.exists() else None

    def hidden(self, hash_hex: str) -> bool:
        """Is this the pseudo-gradient of an attestation whose round is open or closing?"""
        from sqlmodel import col, select

        from ledger.core.models import Attestation, RoundState

        with Session(self.engine) as session:
            rounds = session.exec(
                select(Attestation.run_id, Attestation.round).where(
                    Attestation.pseudo_gradient == hash_hex.lower()
                )
            ).all()
            for run, rnd in rounds:
                state = session.exec(
                    select(RoundState.state).where(
                        RoundState.run_id == run,
                        RoundState.round == rnd,
                        col(RoundState.state).in_(("open", "closing")),
                    )
                ).first()
                if state is not None:
                    return True
        return False

    def tensors(self, hash_hex: str) -> dict[str, torch.Tensor] | None:
        """The blob's tensors (read-only views of an mmap of the file), or None if absent."""
        target = self.path(hash_hex)
        try:
            f = target.open("rb")
        except FileNotFoundError:
            return None
        with f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            return tensors_of_buffer(memoryview(mm), max_bytes=self.max_bytes)
        except EncodingError as exc:
            raise LedgerError(f"stored blob {hash_hex} is corrupt: {exc}", code="bad_blob") from exc

    # --- garbage collection -------------------------------------------------------------------

    def collect_garbage(self, *, grace_s: float, now: datetime | None = None) -> list[str]:
        """Delete blobs older than ``grace_s`` that no round needs; return their hashes.

        Kept: every run's genesis, every round's checkpoint (on chain or not), and the
        pseudo-gradients of rounds not yet scored. A blob younger than the grace period is kept
        too: its attestation may still be on its way.
        """
        cutoff = (now or datetime.now(UTC)) - timedelta(seconds=grace_s)
        with Session(self.engine) as session:
            old = [
                b.hash for b in session.exec(select(Blob)).all() if _as_utc(b.created_at) < cutoff
            ]
            if not old:
                return []
            keep: set[str] = set()
            keep.update(session.exec(select(Run.genesis_checkpoint)).all())
            keep.update(
                c for c in session.exec(select(RoundState.checkpoint)).all() if c is not None
            )
            keep.update(session.exec(select(ChainCommit.checkpoint)).all())
            keep.update(  # the outer momentum the ledger keeps per round (ledger.judge.outer_step)
                kv.value
                for kv in session.exec(select(KeyValue)).all()
                if kv.key.startswith("outer:")
            )
            keep.update(_bisection_blobs(session))
            candidates = [h for h in old if h not in keep]
            for i in range(0, len(candidates), 500):
                chunk = candidates[i : i + 500]
                rows = session.exec(
                    select(Attestation.pseudo_gradient, RoundState.state)
                    .join(
                        RoundState,
                        and_(
                            col(RoundState.run_id) == col(Attestation.run_id),
                            col(RoundState.round) == col(Attestation.round),
                        ),
                        isouter=True,
                    )
                    .where(col(Attestation.pseudo_gradient).in_(chunk))
                ).all()
                keep.update(pg for pg, state in rows if state not in _DONE_STATES)
        gone = [h for h in candidates if h not in keep]
        for h in gone:
            self.path(h).unlink(missing_ok=True)
            with Session(self.engine) as session:
                row = session.get(Blob, h)
                if row is not None:
                    session.delete(row)
                    session.commit()
        if gone:
            log.info("blob garbage collection: %d blobs no round needs deleted", len(gone))
        return gone
